"""Writes model.json: the OFFICIAL MiniCPM-V-2 code's outputs on the embedded tiny checkpoint
(graphsurgeon/models/minicpm_v2/tiny), for tests/test_minicpm_v2_reference.py. It never imports
graphsurgeon: the tiny folder is read as files.

Official code: ``configuration_minicpm.py``, ``modeling_minicpm.py``, ``modeling_minicpmv.py`` and
``resampler.py`` of github:HwwwwwwwH/MiniCPM-V-2 at commit 187851962daa9b63072d40ec802f597b71bff532, read
from a git mirror with ``git show`` and copied, unchanged, next to the tiny checkpoint's files in a scratch
folder, which is then loaded as transformers loads any ``trust_remote_code`` model:
``AutoModel.from_pretrained(folder, trust_remote_code=True, torch_dtype=float32, attn_implementation=...)``
and ``AutoTokenizer.from_pretrained(folder, trust_remote_code=True)`` (the official
``LlamaTokenizerWrapper`` on the tiny ``tokenizer.model``). The loader's missing / unexpected key lists
must be empty.

The tiny config's ``vision_encoder`` names a timm model that timm does not have,
``gsurg_tiny_patch14_siglip_56``; it is registered here with ``timm.models.register_model`` as timm 0.9.10
defines ``vit_so400m_patch14_siglip_384`` (``_create_vision_transformer`` with ``class_token=False,
global_pool='map'``), at tiny sizes: ``patch_size=14, embed_dim=32, depth=3, num_heads=2,
mlp_ratio=3.7362, img_size=56``. The official ``init_vision_module`` then builds it with its own kwargs,
replaces ``attn_pool`` and drops the last block.

Recorded, fp32 (the checkpoint is bf16, widened exactly), under ``attn_implementation="eager"`` (fp32
RoPE tables) and, as a cross-check, the default SDPA:

* ``llm_logits``: ``model.llm(input_ids=ids)`` for fixed ids (every position's logits);
* per chat image: the official prompt (``chat`` with ``sampling=False, num_beams=1,
  repetition_penalty=1.0``: plain greedy), its ids from the official tokenizer, each slice image's
  ``transform`` output (sha256 of the float32 bytes), ``vpm.forward_features`` (norms and a head) and the
  resampler output (every value), the fused embeddings ``get_vllm_embedding`` gives (row norms, a head),
  the logits of the last prompt position, the greedy ids ``llm.generate`` returns and the answer text.

Run it in a scratch venv of the official era, outside the project (commands and versions in
graphsurgeon/models/minicpm_v2/README.md, "Checked against the official code")::

    cd /work/mcpm-wt && /work/scratch-mcpm-model-venv/bin/python \\
        -m tests.goldens.minicpm_v2.make_model_goldens \\
        --official /work/.mirror/HwwwwwwwH+MiniCPM-V-2/repo --scratch /work/scratch-mcpm-model
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from tests.goldens.minicpm_v2.images import make_image, specs

COMMIT = "187851962daa9b63072d40ec802f597b71bff532"
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
TINY = REPO / "graphsurgeon" / "models" / "minicpm_v2" / "tiny"
OFFICIAL_FILES = ["configuration_minicpm.py", "modeling_minicpm.py", "modeling_minicpmv.py", "resampler.py"]
TINY_ENCODER = "gsurg_tiny_patch14_siglip_56"
#: the images chatted about: one sliced (an overview and 2x2 slices), one not
CHAT_IMAGES = ["medium_800x600", "small_100x100"]
QUESTION = "What is in the image?"
NEW_TOKENS = 12
LLM_IDS = [1, 317, 281, 284, 278, 323, 329, 15, 3, 0, 0, 4, 16]


def register_tiny_encoder() -> None:
    import timm  # type: ignore[import-not-found,unused-ignore]
    from timm.models import register_model  # type: ignore[import-not-found,unused-ignore]
    from timm.models.vision_transformer import _create_vision_transformer  # type: ignore[import-not-found,unused-ignore]

    if timm.models.is_model(TINY_ENCODER):
        return

    def gsurg_tiny_patch14_siglip_56(pretrained: bool = False, **kwargs: Any) -> Any:
        model_args = dict(
            patch_size=14,
            embed_dim=32,
            depth=3,
            num_heads=2,
            mlp_ratio=3.7362,
            class_token=False,
            global_pool="map",
            img_size=56,
        )
        return _create_vision_transformer(TINY_ENCODER, pretrained=pretrained, **dict(model_args, **kwargs))

    gsurg_tiny_patch14_siglip_56.__module__ = __name__
    register_model(gsurg_tiny_patch14_siglip_56)


def scratch_folder(official: Path, scratch: Path) -> Path:
    folder = scratch / "tiny_official"
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(TINY, folder)
    for name in OFFICIAL_FILES:
        text = subprocess.run(
            ["git", "-C", str(official), "show", f"{COMMIT}:{name}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def f32_sha(t: Any) -> str:
    return hashlib.sha256(t.detach().to("cpu").float().contiguous().numpy().tobytes()).hexdigest()


def stats(t: Any) -> dict[str, Any]:
    a = t.detach().float().numpy().astype(np.float64)
    return {"shape": list(a.shape), "norm": float(np.linalg.norm(a)), "sum": float(a.sum())}


def values(t: Any) -> list[float]:
    return [float(v) for v in t.detach().float().reshape(-1).tolist()]


def run(folder: Path, attn: str) -> dict[str, Any]:
    import torch
    from transformers import AutoModel, AutoTokenizer

    model, info = AutoModel.from_pretrained(
        str(folder),
        trust_remote_code=True,
        torch_dtype=torch.float32,
        attn_implementation=attn,
        output_loading_info=True,
    )
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise SystemExit(f"the official loader reports {problems}")
    model = model.eval()
    tok = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=True)
    out: dict[str, Any] = {
        "attn_implementation": model.config._attn_implementation,
        "tokenizer_class": type(tok).__name__,
        "special_ids": {"im_start": tok.im_start_id, "im_end": tok.im_end_id, "eos": tok.eos_id},
    }
    with torch.inference_mode():
        ids = torch.tensor([LLM_IDS])
        out["llm"] = {"input_ids": LLM_IDS, "logits": [values(r) for r in model.llm(input_ids=ids).logits[0]]}

    chats = []
    by_name = {s["name"]: s for s in specs()}
    for name in CHAT_IMAGES:
        image = make_image(by_name[name]).convert("RGB")
        rec: dict[str, Any] = {"image": name}
        seen: dict[str, Any] = {}
        orig_embed, orig_gen = model.get_vllm_embedding, model.llm.generate

        def embed(data: dict[str, Any], _orig: Any = orig_embed, _seen: dict[str, Any] = seen) -> Any:
            _seen["input_ids"] = data["input_ids"][0].tolist()
            emb, vis = _orig(data)
            _seen["embeds"] = emb[0].clone()
            return emb, vis

        def generate(*args: Any, _orig: Any = orig_gen, _seen: dict[str, Any] = seen, **kw: Any) -> Any:
            _seen["generate_kwargs"] = sorted(k for k in kw if k != "inputs_embeds")
            result = _orig(*args, **kw)
            _seen["tokens"] = result[0].tolist()
            return result

        model.get_vllm_embedding, model.llm.generate = embed, generate
        try:
            msgs = [{"role": "user", "content": QUESTION}]
            answer, _, _ = model.chat(
                image,
                msgs,
                None,
                tok,
                sampling=False,
                num_beams=1,
                repetition_penalty=1.0,
                max_new_tokens=NEW_TOKENS,
            )
        finally:
            del model.get_vllm_embedding, model.llm.generate
        images, placeholder = model.get_slice_image_placeholder(image, tok)
        rec["prompt"] = "<用户>" + placeholder + "\n" + QUESTION + "<AI>"
        rec["input_ids"] = seen["input_ids"]
        rec["tokens"] = seen["tokens"]
        rec["answer"] = answer
        rec["generate_kwargs"] = seen["generate_kwargs"]
        emb = seen["embeds"]
        rec["embeddings"] = {**stats(emb), "row_norms": values(emb.norm(dim=-1)), "head": values(emb[:, :4])}
        with torch.inference_mode():
            logits = model.llm(inputs_embeds=emb[None]).logits[0, -1]
            rec["last_logits"] = values(logits)
            rec["images"] = []
            for img in images:
                x = model.transform(img)
                vis = model.vpm.forward_features(x[None])
                grid = (x.shape[1] // 14, x.shape[2] // 14)
                res = model.resampler(vis, grid)[0]
                rec["images"].append(
                    {
                        "size": [img.width, img.height],
                        "pixels_sha256": f32_sha(x),
                        "grid": list(grid),
                        "vision": {**stats(vis[0]), "head": values(vis[0, :2])},
                        "resampler": values(res),
                    }
                )
        chats.append(rec)
    out["chats"] = chats
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--official", type=Path, required=True, help="a git mirror of HwwwwwwwH/MiniCPM-V-2")
    parser.add_argument("--scratch", type=Path, required=True, help="a scratch folder outside the project")
    parser.add_argument("--out", type=Path, default=HERE / "model.json")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import PIL
    import sentencepiece  # type: ignore[import-not-found,unused-ignore]
    import timm
    import torch
    import transformers

    torch.manual_seed(0)
    register_tiny_encoder()
    folder = scratch_folder(args.official, args.scratch)
    eager = run(folder, "eager")
    sdpa = run(folder, "sdpa")
    golden = {
        "about": "the official MiniCPM-V-2 code on minicpm_v2/tiny; see make_model_goldens.py",
        "commit": COMMIT,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "timm": timm.__version__,
            "Pillow": PIL.__version__,
            "sentencepiece": sentencepiece.__version__,
            "numpy": np.__version__,
        },
        "tiny_sha256": {
            p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(TINY.iterdir()) if p.is_file()
        },
        "eager": eager,
        "sdpa_vs_eager": sdpa_diffs(eager, sdpa),
    }
    args.out.write_text(json.dumps(golden, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(golden["sdpa_vs_eager"], indent=1), file=sys.stderr)


def sdpa_diffs(eager: dict[str, Any], sdpa: dict[str, Any]) -> dict[str, Any]:
    """max |eager - sdpa| of the logits, and whether the greedy ids agree."""
    llm = float(np.abs(np.array(eager["llm"]["logits"]) - np.array(sdpa["llm"]["logits"])).max())
    chats = [
        {
            "image": e["image"],
            "last_logits_max_abs": float(
                np.abs(np.array(e["last_logits"]) - np.array(s["last_logits"])).max()
            ),
            "tokens_equal": e["tokens"] == s["tokens"],
        }
        for e, s in zip(eager["chats"], sdpa["chats"], strict=True)
    ]
    return {"llm_logits_max_abs": llm, "chats": chats}


if __name__ == "__main__":
    main()
