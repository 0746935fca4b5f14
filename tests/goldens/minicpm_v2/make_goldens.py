"""Writes processor.json: the official MiniCPM-V-2 image preprocessing and prompt text, run from the official
remote code itself, for the test images of ``images.py``. It never imports graphsurgeon.

Official code: ``modeling_minicpmv.py`` of github:HwwwwwwwH/MiniCPM-V-2 at commit
187851962daa9b63072d40ec802f597b71bff532 ("Update README.md", 2024-07-02; the last openbmb commit before the
fork's own, see docs/minicpm-v-2.md §0), read from a git mirror with ``git show``. The module imports torch,
torchvision, timm and transformers at its top, so it is not imported: its slicing functions
(``slice_image``, ``ensure_divide``, ``find_best_resize``, ``get_refine_size``, ``split_to_patches``,
``get_grid_placeholder``), the ``MiniCPMV`` methods ``get_slice_image_placeholder`` and ``chat`` and the
body of ``LlamaTokenizerWrapper.__init__`` (without its ``super().__init__`` call) are cut out of the file
with ``ast`` and executed unchanged, with ``PIL.Image``, ``math`` and ``json``. ``chat`` runs with
``torch.inference_mode`` as a null context and ``generate`` replaced by a recorder of the prompt it is
given; the config is the commit's ``config.json``, the unk token its ``special_tokens_map.json``'s.

One step is reproduced, not run: ``init_transform``, torchvision's ``ToTensor`` then ``Normalize`` with
timm's IMAGENET_INCEPTION_MEAN/STD (0.5, 0.5, 0.5), which would need torchvision (a CUDA wheel on PyPI). Its
arithmetic, from torchvision 0.16.2's ``to_tensor`` (``img.to(float32).div(255)``) and ``normalize``
(``sub_(mean).div_(std)``) and torch's CPU ``div_true_kernel`` (a true float32 division, also by a scalar),
is ``(float32(u8) / 255 - 0.5) / 0.5``, each operation rounded to float32, here in numpy.

Run it in a scratch venv with the official environment's Pillow (the README at that commit pins
Pillow==10.1.0; numpy 1.26.4 is of that era), outside the project::

    python3 -m venv /work/scratch-mcpm-venv
    /work/scratch-mcpm-venv/bin/pip install Pillow==10.1.0 numpy==1.26.4
    cd /work/mcpm-wt && /work/scratch-mcpm-venv/bin/python -m tests.goldens.minicpm_v2.make_goldens \\
        --official /work/.mirror/HwwwwwwwH+MiniCPM-V-2/repo

It refuses another Pillow unless ``--any-pillow`` (to see what the official code does under another
Pillow, written to ``--out``). Hashes: sha256 of the bytes of each image (``tobytes()``, HWC uint8 RGB) and
of each normalised float32 ``[3, H, W]`` C-order little-endian array.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import json
import math
import platform
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import PIL
from PIL import Image

from tests.goldens.minicpm_v2.images import CORPUS_FILES, make_image, open_corpus, specs

COMMIT = "187851962daa9b63072d40ec802f597b71bff532"
OFFICIAL_PILLOW = "10.1.0"
HERE = Path(__file__).resolve().parent
FUNCTIONS = [
    "slice_image",
    "ensure_divide",
    "find_best_resize",
    "get_refine_size",
    "split_to_patches",
    "get_grid_placeholder",
]
METHODS = ["get_slice_image_placeholder", "chat"]
#: the chats run through the official ``chat`` for each image named in PROMPT_IMAGES (and without an image)
CHATS: list[list[dict[str, str]]] = [
    [{"role": "user", "content": "What is in the image?"}],
    [
        {"role": "user", "content": "Describe it."},
        {"role": "assistant", "content": "A picture."},
        {"role": "user", "content": "  And the colours?\n"},
    ],
]
PROMPT_IMAGES = ["small_100x100", "medium_800x600", "medium_1000x3000", "mode_grey_640x480"]


def git_show(mirror: Path, path: str) -> str:
    out = subprocess.run(
        ["git", "-C", str(mirror), "show", f"{COMMIT}:{path}"], check=True, capture_output=True, text=True
    )
    return out.stdout


def blob_id(mirror: Path, path: str) -> str:
    out = subprocess.run(
        ["git", "-C", str(mirror), "rev-parse", f"{COMMIT}:{path}"],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


class Recorder:
    """Stands in for ``MiniCPMV.generate``: keeps what ``chat`` hands it."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.images: list[Any] = []

    def __call__(self, data_list: list[str], img_list: list[Any], **kwargs: Any) -> tuple[list[str], None]:
        self.prompts.append(data_list[0])
        self.images.append(img_list[0])
        return ["(answer)"], None


def load_official(mirror: Path) -> tuple[types.SimpleNamespace, dict[str, Any], Recorder]:
    """The official functions and a model/tokenizer pair to call its methods on."""
    source = git_show(mirror, "modeling_minicpmv.py")
    tree = ast.parse(source)
    body: list[ast.stmt] = []
    methods: list[ast.stmt] = []
    tok_init: ast.FunctionDef | None = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in FUNCTIONS:
            body.append(node)
        elif isinstance(node, ast.ClassDef) and node.name == "MiniCPMV":
            methods += [n for n in node.body if isinstance(n, ast.FunctionDef) and n.name in METHODS]
        elif isinstance(node, ast.ClassDef) and node.name == "LlamaTokenizerWrapper":
            tok_init = next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    if tok_init is None or len(methods) != len(METHODS) or len(body) != len(FUNCTIONS):
        raise SystemExit("modeling_minicpmv.py: the expected functions were not all found")
    tok_init.body = [s for s in tok_init.body if "super()" not in ast.unparse(s)]
    model_class, tokenizer_class = ast.parse("class Model: pass\nclass Tokenizer: pass").body
    assert isinstance(model_class, ast.ClassDef) and isinstance(tokenizer_class, ast.ClassDef)
    model_class.body, tokenizer_class.body = methods, [tok_init]
    module = ast.Module(body=[*body, model_class, tokenizer_class], type_ignores=[])
    ast.fix_missing_locations(module)
    torch_stub = types.SimpleNamespace(inference_mode=contextlib.nullcontext)
    ns: dict[str, Any] = {"math": math, "json": json, "Image": Image, "torch": torch_stub, "Optional": Any}
    exec(compile(module, f"modeling_minicpmv.py@{COMMIT[:7]}", "exec"), ns)

    recorder = Recorder()
    config = json.loads(git_show(mirror, "config.json"))
    model = ns["Model"]()
    model.config = types.SimpleNamespace(**config)
    model.generate = recorder
    tokenizer = ns["Tokenizer"]()
    tokenizer.unk_token = json.loads(git_show(mirror, "special_tokens_map.json"))["unk_token"]["content"]
    return types.SimpleNamespace(model=model, tokenizer=tokenizer), ns, recorder


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def to_tensor_normalize(img: Image.Image) -> np.ndarray:
    """torchvision ToTensor + Normalize(0.5, 0.5), in numpy float32 (see the module docstring)."""
    chw = np.asarray(img, dtype=np.uint8).transpose(2, 0, 1).astype(np.float32)
    x = chw / np.float32(255.0)
    return np.ascontiguousarray((x - np.float32(0.5)) / np.float32(0.5))


def run_one(official: types.SimpleNamespace, ns: dict[str, Any], image: Image.Image) -> dict[str, Any]:
    calls: list[Any] = []
    slice_image = ns["slice_image"]

    def recording_slice_image(*args: Any, **kwargs: Any) -> Any:
        calls.append(slice_image(*args, **kwargs))
        return calls[-1]

    ns["slice_image"] = recording_slice_image
    try:
        images, placeholder = official.model.get_slice_image_placeholder(image, official.tokenizer)
    finally:
        ns["slice_image"] = slice_image
    _, patches, grid = calls[0]
    outputs = []
    for img in images:
        w, h = img.size
        x = to_tensor_normalize(img)
        assert x.dtype == np.float32 and x.shape == (3, h, w)
        outputs.append(
            {
                "size": [w, h],
                "tgt_size": [math.ceil(h / 14), math.ceil(w / 14)],  # get_vision_embedding's formula
                "u8": sha(img.tobytes()),
                "f32": sha(x.astype("<f4").tobytes()),
            }
        )
    refine = None
    if patches:
        refine = [sum(p.size[0] for p in patches[0]), sum(row[0].size[1] for row in patches)]
    return {
        "grid": grid,
        "refine": refine,
        "placeholder_sha256": sha(placeholder.encode()),
        "placeholder_chars": len(placeholder),
        "outputs": outputs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--official", type=Path, default=Path("/work/.mirror/HwwwwwwwH+MiniCPM-V-2/repo"))
    parser.add_argument(
        "--corpus", type=Path, default=HERE.parents[2].parent / "shared" / "corpus" / "images"
    )
    parser.add_argument("--out", type=Path, default=HERE / "processor.json")
    parser.add_argument("--any-pillow", action="store_true")
    args = parser.parse_args(argv)
    if PIL.__version__ != OFFICIAL_PILLOW and not args.any_pillow:
        raise SystemExit(
            f"Pillow {PIL.__version__} is not the official {OFFICIAL_PILLOW} (--any-pillow to run)"
        )
    official, ns, recorder = load_official(args.official)

    entries: list[dict[str, Any]] = []
    for spec in specs():
        entries.append(run_image(official, ns, spec, make_image(spec)))
    for file in CORPUS_FILES:
        path = args.corpus / file
        if path.is_file():
            spec = {"name": f"corpus_{file}", "file": file}
            entries.append(run_image(official, ns, spec, open_corpus(args.corpus, file)))
        else:
            print(f"corpus image {path} missing: left out", file=sys.stderr)

    prompts = []
    by_name = {s["name"]: s for s in specs()}
    names: list[str | None] = [None, *PROMPT_IMAGES]
    for name in names:
        image = None if name is None else make_image(by_name[name]).convert("RGB")
        for msgs in CHATS:
            official.model.chat(image, msgs, None, official.tokenizer)
            text = recorder.prompts[-1]
            prompts.append(
                {"image": name, "messages": msgs, "prompt_sha256": sha(text.encode()), "chars": len(text)}
            )

    golden = {
        "provenance": {
            "official": f"github:HwwwwwwwH/MiniCPM-V-2@{COMMIT} modeling_minicpmv.py "
            f"(blob {blob_id(args.official, 'modeling_minicpmv.py')}), config.json, special_tokens_map.json",
            "run": "slice_image, get_slice_image_placeholder and chat executed from the official source; "
            "ToTensor+Normalize reproduced in numpy float32",
            "python": platform.python_version(),
            "Pillow": PIL.__version__,
            "numpy": np.__version__,
            "command": "python -m tests.goldens.minicpm_v2.make_goldens (see its docstring)",
        },
        "chats": prompts,
        "images": entries,
    }
    lines = [json.dumps(e, separators=(",", ":")) for e in entries]
    head = json.dumps({k: v for k, v in golden.items() if k != "images"}, indent=1, ensure_ascii=False)
    args.out.write_text(
        head[:-2] + ',\n "images": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n", encoding="utf-8"
    )
    print(f"{args.out}: {len(entries)} images, {len(prompts)} chats (Pillow {PIL.__version__})")
    return 0


def run_image(
    official: types.SimpleNamespace, ns: dict[str, Any], spec: dict[str, Any], image: Image.Image
) -> dict[str, Any]:
    """One input as the official README feeds it (``convert('RGB')``), through the official slicing."""
    entry: dict[str, Any] = {"spec": spec, "input_mode": image.mode, "input_sha256": sha(image.tobytes())}
    rgb = image.convert("RGB")
    entry["size"] = list(rgb.size)
    entry.update(run_one(official, ns, rgb))
    print(f"{spec['name']}: grid {entry['grid']}, {len(entry['outputs'])} images", file=sys.stderr)
    return entry


if __name__ == "__main__":
    sys.exit(main())
