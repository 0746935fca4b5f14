"""Qwen3-VL's processor as transformers 5.24 defines it, assembled without torchvision: the reference's inputs
(``input_ids`` with every ``<|image_pad|>`` expanded to ``grid.prod() / merge²`` copies, ``attention_mask``,
``mm_token_type_ids``, ``pixel_values`` ``[N, 3 * temporal * patch²]`` in merge-block order and
``image_grid_thw``) come from HF's own code, never from this project's.

``transformers.Qwen3VLProcessor`` needs a video processor, and every video processor of 5.24 imports
torchvision (whose wheel here is a CUDA build that does not load beside the CPU torch). ``ImageTextProcessor``
is the same class without that part: ``Qwen3VLProcessor``'s own ``__init__``, token lookup, placeholder
expansion (``replace_image_token``) and ``ProcessorMixin.__call__`` / ``apply_chat_template``, with the
image processor and the tokenizer only. A video input is refused (``VideoInputError``) instead of being
silently dropped while its ``<|video_pad|>`` stays in the text.

``load_processor(DIR)`` reads, from a checkpoint folder:

* the image processor: ``Qwen2VLImageProcessorPil.from_pretrained`` on ``preprocessor_config.json``
  (the class ``models/auto/image_processing_auto.py`` maps ``qwen3_vl`` to when torchvision is absent;
  whatever ``image_processor_type`` the file names, since the torchvision class computes the same
  arithmetic with another resize backend);
* the tokenizer: ``AutoTokenizer.from_pretrained`` (``tokenizer.json`` + ``tokenizer_config.json``);
* the chat template: the tokenizer's (``chat_template.jinja`` as transformers 5 saves it, or
  ``tokenizer_config.json``'s ``chat_template``), else ``chat_template.json``'s ``chat_template`` (the
  processor-level file transformers 4.x releases ship).

``chat_inputs(processor, images, prompt)`` renders one user turn (the images, then the text) with the
generation prompt and returns the tensors ``Qwen3VLForConditionalGeneration.generate`` takes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import AutoTokenizer, Qwen2VLImageProcessorPil, Qwen3VLProcessor

from graphsurgeon.errors import GsurgError
from graphsurgeon.formats.safetensors import CheckpointError
from graphsurgeon.models.common.hf_config import read_json

if TYPE_CHECKING:
    from PIL import Image as PILImage

PREPROCESSOR = "preprocessor_config.json"
CHAT_TEMPLATE_JSON = "chat_template.json"


class VideoInputError(GsurgError):
    """A video given to the image-only processor (exit 2)."""


class ImageTextProcessor(Qwen3VLProcessor):
    """``transformers.Qwen3VLProcessor`` with an image processor and a tokenizer, and no video processor."""

    def __init__(
        self, image_processor: Any = None, tokenizer: Any = None, chat_template: Any = None, **kw: Any
    ):
        # ProcessorMixin pairs the positional parts with this signature's (image_processor, tokenizer): the
        # video processor Qwen3VLProcessor passes on as None has no slot and is dropped
        super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kw)

    def __call__(self, images: Any = None, text: Any = None, videos: Any = None, **kwargs: Any) -> Any:
        if videos is not None:
            raise VideoInputError(
                "video input is not supported: transformers 5.24's video processors need torchvision"
            )
        return super().__call__(images=images, text=text, **kwargs)


def _chat_template(folder: Path, tokenizer: Any) -> str:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, str) and template:
        return template
    path = folder / CHAT_TEMPLATE_JSON
    raw = read_json(path, required=False)
    if raw is not None:
        value = raw.get("chat_template")
        if not isinstance(value, str) or not value:
            raise CheckpointError(f"{path}: chat_template must be a non-empty string, not {value!r}")
        return value
    raise CheckpointError(
        f"{folder}: no chat template (chat_template.jinja, tokenizer_config.json chat_template or "
        f"{CHAT_TEMPLATE_JSON})"
    )


def load_processor(folder: Path | str) -> ImageTextProcessor:
    """The processor of the checkpoint ``folder`` (see the module docstring for what is read)."""
    folder = Path(folder)
    if not (folder / PREPROCESSOR).is_file():
        raise CheckpointError(f"{folder / PREPROCESSOR}: no such file (the image processor's settings)")
    image_processor = Qwen2VLImageProcessorPil.from_pretrained(str(folder))
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    return ImageTextProcessor(image_processor, tokenizer, chat_template=_chat_template(folder, tokenizer))


def user_turn(images: int, prompt: str) -> list[dict[str, Any]]:
    """The conversation of one user turn: ``images`` image parts, then the text."""
    parts: list[dict[str, Any]] = [{"type": "image"} for _ in range(images)]
    return [{"role": "user", "content": [*parts, {"type": "text", "text": prompt}]}]


def chat_inputs(
    processor: ImageTextProcessor, images: Sequence[PILImage.Image | str | Path], prompt: str
) -> Any:
    """``processor``'s PyTorch inputs for one user turn (the images in order, then ``prompt``) followed by
    the assistant's generation prompt; paths are opened with Pillow (``convert("RGB")`` is the image
    processor's own ``do_convert_rgb``)."""
    from PIL import Image

    opened = [Image.open(im) if isinstance(im, str | Path) else im for im in images]
    text = processor.apply_chat_template(user_turn(len(opened), prompt), add_generation_prompt=True)
    return processor(text=[text], images=opened or None, return_tensors="pt")
