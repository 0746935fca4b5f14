"""MiniCPM-V-2's side of runtime_cpp/tests/check_precision.py: its prompts and its ncnn chain
(``graphsurgeon/models/minicpm_v2/ncnn_chain.py`` ``MiniCPMV2Ncnn``, the converted nets in the ``ncnn``
wheel). Ids from the checkpoint's tokenizer.json over ``prompt.chat_prompt``'s text, pixels from the Python
processor; the image is one the official slicing leaves whole (300x200), so that its ``--pixel-values``
file (one grid) is the whole image. A case's ``images`` entry holds that image's ``[3, H, W]`` pixels (the
chain's input), not patch rows; its dump holds the patch rows the runner reads."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from check_minicpm_v2 import CONVERSION_INPUTS, test_images, write_pixels
from runner_harness import CheckFailed

from graphsurgeon.formats.model_json import read_model_json
from graphsurgeon.verify.ncnn_fp32 import Precision

__all__ = ["CONVERSION_INPUTS", "MiniCPMV2Side"]


class MiniCPMV2Side:
    program = "minicpm_v2_run"
    family = "minicpm_v2"
    rules = "rules/minicpm_v2.yaml"

    def __init__(self, model: Path) -> None:
        from tokenizers import Tokenizer

        from graphsurgeon.models.minicpm_v2.config import load_config

        checkpoint = Path(read_model_json(model, (self.family,))["verifier"]["checkpoint"])
        self.config = load_config(checkpoint)
        self.tokenizer = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))

    def cases(self, work: Path) -> list[Any]:
        from check_precision import Case

        from graphsurgeon.models.minicpm_v2.processor import load_and_preprocess
        from graphsurgeon.models.minicpm_v2.prompt import chat_prompt

        name, path = test_images(work)[0]
        image = load_and_preprocess(path, self.config.slicing, self.config.resampler.query_num)
        if len(image.pixel_values) != 1:
            raise CheckFailed(f"{path}: sliced, so it has no --pixel-values form")
        pixels = image.pixel_values[0]
        dump = work / "minicpm_v2.pvlpix"
        write_pixels(pixels, self.config.slicing.patch_size, dump)

        def ids(text: str, placeholder: str | None) -> list[int]:
            return [int(t) for t in self.tokenizer.encode(chat_prompt([("user", text)], placeholder)).ids]

        return [
            Case("text-only", ids("这是什么颜色？Réponds en une phrase 🙂", None), [], []),
            Case(
                f"+ {name}",
                ids("Describe the image.", image.placeholder),
                [(pixels, image.tgt_sizes[0])],
                [dump],
            ),
        ]

    def chain(self, model: Path, precision: Precision) -> Any:
        from graphsurgeon.models.minicpm_v2.ncnn_chain import MiniCPMV2Ncnn

        doc = read_model_json(model, (self.family,))
        return MiniCPMV2Ncnn(model, doc, num_threads=1, precision=precision)

    def greedy(self, chain: Any, case: Any, new_tokens: int, forced: Sequence[int] | None = None) -> Any:
        features = []
        for pixels, _ in case.images:
            vision = chain.encode_image(pixels)
            if vision.error:
                raise CheckFailed(f"{case.label}: the chain's vision nets failed: {vision.error}")
            features.append(vision.features)
        chain.eos_ids = set()  # free-running past any EOS, as --ignore-eos
        return chain.generate(chain.fuse(case.ids, features), new_tokens, forced)
