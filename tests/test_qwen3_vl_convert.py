"""rules/qwen3_vl.yaml end to end (issue 16, items 3 and 8): the embedded tiny Qwen3-VL -> pnnx exports ->
the ncnn nets + model.json + weight maps, from the rule file alone, checked against independent sources:
HF transformers 5.24's own ``Qwen3VLForConditionalGeneration`` (loaded from the same folder at test time,
its intermediate values read with forward hooks on its modules), the checkpoint's bytes (``gsurg
diff-bin`` with the written maps) and the ncnn wheel (every net loads and runs there).

One module-scoped apply of the tiny model serves the slow tests; the 4.57-style config and the broken
inputs get their own runs.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import ncnn
import torch
import transformers
from safetensors.numpy import load_file, save_file

from graphsurgeon.cli import main
from graphsurgeon.formats.json_schema import load_schema
from graphsurgeon.formats.model_json import read_model_json
from graphsurgeon.formats.param_text import read_param_text
from graphsurgeon.models.common.qwen3_layers import causal_mask
from graphsurgeon.models.qwen3_vl.make_tiny import write_transformers_4_style
from graphsurgeon.rewrite.loader import open_rule_file
from graphsurgeon.verify.ncnn_fp32 import fp32_net
from tests.conftest import REPO

RULES = REPO / "rules" / "qwen3_vl.yaml"
TINY = REPO / "graphsurgeon" / "models" / "qwen3_vl" / "tiny"
SCHEMA = REPO / "graphsurgeon" / "models" / "qwen3_vl" / "qwen3_vl.v1.schema.json"
TAPS = 3
NETS = (
    "patch_embed",
    "pos_embed",
    "vision",
    "merger",
    *(f"deepstack_merger{k}" for k in range(TAPS)),
    "embed",
    "decoder",
    "lm_head",
)
GRID = (6, 10)  # 60 patches: not the traced 4 x 6, larger than the 4 x 4 position table, not square
COSINE = 0.99999

pytestmark = pytest.mark.usefixtures("shared_exports")


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``gsurg apply rules/qwen3_vl.yaml`` with no other argument than ``--out``."""
    out = tmp_path_factory.mktemp("qwen3_vl") / "out"
    assert main(["apply", str(RULES), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def model_json(converted: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((converted / "model.json").read_text(encoding="utf-8"))
    return doc


@pytest.fixture(scope="module")
def hf() -> Any:
    model = transformers.Qwen3VLForConditionalGeneration.from_pretrained(str(TINY), dtype=torch.float32)
    return model.eval()


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    raw: dict[str, Any] = json.loads((TINY / "config.json").read_text(encoding="utf-8"))
    return raw


def close(got: np.ndarray, want: torch.Tensor | np.ndarray, what: str) -> None:
    """Same values at the shape of ``want``: cosine >= 0.99999 and max|diff| <= 1e-4 of the scale."""
    ref = np.asarray(want.detach().numpy() if isinstance(want, torch.Tensor) else want, dtype=np.float64)
    out = np.asarray(got, dtype=np.float64).reshape(ref.shape)
    cos = float((out * ref).sum() / (np.linalg.norm(out) * np.linalg.norm(ref)))
    err, scale = float(np.abs(out - ref).max()), float(np.abs(ref).max())
    assert scale > 0 and cos >= COSINE and err <= 1e-4 * scale, (
        f"{what}: cosine {cos}, max|d| {err} / {scale}"
    )


def test_with_no_arguments_it_converts_the_tiny_model_into_out_qwen3_vl() -> None:
    program = open_rule_file(str(RULES))
    outputs = program.sections.outputs
    assert outputs is not None and outputs.dir == str(REPO / "out" / "qwen3_vl")
    assert program.sections.source is not None and program.sections.source.checkpoint == str(TINY)


# ---- what apply writes ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_apply_writes_every_net_its_weight_map_model_json_and_the_tokenizer_files(converted: Path) -> None:
    names = {p.name for p in converted.iterdir() if not p.name.endswith(".gsurg.json")}
    nets = {f"{n}{ext}" for n in NETS for ext in (".ncnn.param", ".ncnn.bin", ".weights.yaml")}
    side = {"model.json", "tokenizer.json", "tokenizer_config.json", "preprocessor_config.json"}
    assert names == nets | side | {"chat_template.jinja"}
    for name in ("tokenizer.json", "chat_template.jinja"):
        assert (converted / name).read_bytes() == (TINY / name).read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize("name", NETS)
def test_every_net_loads_in_the_ncnn_wheel_and_lints_clean(
    converted: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    param, bin_ = converted / f"{name}.ncnn.param", converted / f"{name}.ncnn.bin"
    fp32_net(param, bin_).clear()
    assert main(["lint", str(param), "--bin", str(bin_)]) == 0
    assert capsys.readouterr().out.strip().endswith("PASSED")


@pytest.mark.slow
@pytest.mark.parametrize("name", NETS)
def test_each_weight_map_proves_every_weight_equal_to_the_checkpoint(
    converted: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = TINY / "model.safetensors"
    bin_, weights = converted / f"{name}.ncnn.bin", converted / f"{name}.weights.yaml"
    argv = ["diff-bin", str(bin_), str(ckpt), "--map", str(weights), "--atol", "0", "--rtol", "0"]
    assert main([*argv, "--fail-on-diff"]) == 0
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.slow
def test_the_graphs_have_the_declared_interfaces_and_layers(converted: Path, config: dict[str, Any]) -> None:
    vcfg, tcfg = config["vision_config"], config["text_config"]
    depth, layers = vcfg["depth"], tcfg["num_hidden_layers"]

    def graph(name: str) -> Any:
        return read_param_text(converted / f"{name}.ncnn.param")

    def types(name: str) -> list[str]:
        return [x.type for x in graph(name).layers]

    assert types("patch_embed") == ["Input", "Gemm"]  # linear-on-rows: no 3-D Reshape pair left
    assert types("lm_head") == ["Input", "Gemm"]
    assert types("pos_embed") == ["Input", "Embed"]
    vit = graph("vision")
    gelu = [x.get("fast_gelu") for x in vit.layers if x.type == "GELU"]
    assert gelu == [1] * depth  # gelu_pytorch_tanh
    norms = [x for x in vit.layers if x.type == "LayerNorm"]
    assert len(norms) == 2 * depth and {x.get("affine_size") for x in norms} == {vcfg["hidden_size"]}
    assert {b.name for b in vit.output_blobs()} == {f"out{i}" for i in range(1 + TAPS)}
    for name in ("merger", *(f"deepstack_merger{k}" for k in range(TAPS))):
        g = graph(name)
        assert [x.get("fast_gelu") for x in g.layers if x.type == "GELU"] == [0], name  # nn.GELU()
        width = vcfg["hidden_size"] * (1 if name == "merger" else 4)
        assert [x.get("affine_size") for x in g.layers if x.type == "LayerNorm"] == [width], name
    dec = graph("decoder")
    sdpa = [x for x in dec.layers if x.type == "SDPA"]
    assert len(sdpa) == layers and all(x.get("kv_cache") == 1 for x in sdpa)
    assert not any(x.type in ("Tile", "ExpandDims") for x in dec.layers)  # native GQA
    for k in range(TAPS):
        (reader,) = dec.blob(f"in{4 + k}").consumers
        assert reader.type == "BinaryOp" and reader.get("op_type") == 0


@pytest.mark.slow
def test_model_json_is_what_the_schema_accepts_and_says_what_the_checkpoint_says(
    converted: Path, model_json: dict[str, Any], config: dict[str, Any]
) -> None:
    assert load_schema(SCHEMA).violation(model_json) is None
    assert read_model_json(converted, {"qwen3_vl"}) == model_json  # the reader every tool uses
    doc, vcfg, tcfg = model_json, config["vision_config"], config["text_config"]
    assert (doc["format"], doc["family"], doc["version"]) == ("gsurg-model", "qwen3_vl", 1)
    assert set(doc["nets"]) == set(NETS)
    for name, net in doc["nets"].items():
        assert (converted / net["param"]).is_file() and (converted / net["bin"]).is_file(), name
    rope = doc["decoder"]["rope"]
    assert rope["mrope_section"] == tcfg["rope_parameters"]["mrope_section"]
    assert rope["theta"] == tcfg["rope_parameters"]["rope_theta"] and rope["layout"] == "interleaved"
    assert rope["head_dim"] == tcfg["head_dim"] and doc["vision"]["merge_size"] == vcfg["spatial_merge_size"]
    assert [d["block"] for d in doc["vision"]["deepstack"]] == vcfg["deepstack_visual_indexes"]
    assert doc["decoder"]["deepstack"] == [d["decoder_input"] for d in doc["vision"]["deepstack"]]
    assert [d["after_layer"] for d in doc["vision"]["deepstack"]] == list(range(TAPS))
    tokens = doc["tokens"]
    assert [tokens[k] for k in ("image_pad", "video_pad", "vision_start", "vision_end")] == [
        config[k]
        for k in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
    ]
    generation = json.loads((TINY / "generation_config.json").read_text())
    assert tokens["eos"] == generation["eos_token_id"]
    pre = json.loads((TINY / "preprocessor_config.json").read_text())
    assert doc["image_processor"]["min_pixels"] == pre["size"]["shortest_edge"]
    assert doc["image_processor"]["max_pixels"] == pre["size"]["longest_edge"]
    assert doc["image_processor"]["image_mean"] == pre["image_mean"]


@pytest.mark.slow
def test_the_position_table_and_the_embedding_matrix_are_where_model_json_says(
    converted: Path, model_json: dict[str, Any]
) -> None:
    """A runtime reads both straight from the .bin: the bytes at the offsets are the checkpoint tensors."""
    tensors = load_file(str(TINY / "model.safetensors"))
    for entry, tensor in (
        (model_json["vision"]["position_embedding"], "model.visual.pos_embed.weight"),
        (model_json["embedding_matrix"], "model.language_model.embed_tokens.weight"),
    ):
        want = tensors[tensor]
        assert entry["storage"] == "fp32" and list(entry["shape"]) == list(want.shape)
        raw = (converted / entry["bin"]).read_bytes()
        got = np.frombuffer(raw, np.float32, count=want.size, offset=entry["offset"]).reshape(want.shape)
        assert np.array_equal(got, want), tensor


@pytest.mark.slow
def test_gsurg_rope_reads_the_converted_model_json(
    converted: Path, capsys: pytest.CaptureFixture[str], config: dict[str, Any]
) -> None:
    """The MRoPE settings a runtime needs, as ``gsurg rope`` reads them: interleaved, the checkpoint's
    section, and a portrait image advancing the next text position by max(h', w')."""
    layout = "text:2,image:1x8x4,text:1"
    assert main(["rope", str(converted / "model.json"), "--layout", layout, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rope = config["text_config"]["rope_parameters"]
    settings = doc["settings"]
    assert settings["model_layout"] == "interleaved" and settings["mrope_section"] == rope["mrope_section"]
    assert settings["theta"] == rope["rope_theta"] and settings["merge"] == 2
    # 2 text tokens, 4 x 2 merged tokens at p = 2, then p = 2 + max(4, 2) = 6
    assert doc["prompt"]["tokens"] == 11 and doc["tokens"][-1]["position"] == [6, 6, 6]


# ---- the ncnn nets against HF's modules -------------------------------------------------------------------


class Hooks:
    """Forward hooks on HF modules: each one's latest output (or, for ``inputs``, its args and kwargs)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self._handles: list[Any] = []

    def output(self, key: str, module: torch.nn.Module) -> None:
        def hook(_m: torch.nn.Module, _a: Any, out: Any) -> None:
            self.values[key] = out

        self._handles.append(module.register_forward_hook(hook))

    def inputs(self, key: str, module: torch.nn.Module) -> None:
        def hook(_m: torch.nn.Module, args: Any, kwargs: Any) -> None:
            self.values[key] = (args, kwargs)

        self._handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()


@pytest.fixture
def hooks() -> Iterator[Hooks]:
    h = Hooks()
    yield h
    h.close()


class Nets:
    """The converted nets in the ncnn wheel (exact fp32), run by the names model.json gives."""

    def __init__(self, folder: Path, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.nets = {n: fp32_net(folder / e["param"], folder / e["bin"]) for n, e in doc["nets"].items()}

    def run(
        self, name: str, feeds: dict[str, np.ndarray | ncnn.Mat], outs: list[str]
    ) -> dict[str, np.ndarray]:
        return self.run_with_caches(name, feeds, outs, [])[0]

    def run_with_caches(
        self, name: str, feeds: dict[str, np.ndarray | ncnn.Mat], outs: list[str], caches: list[str]
    ) -> tuple[dict[str, np.ndarray], dict[str, ncnn.Mat]]:
        """``outs`` as arrays; ``caches`` as Mats extracted with type 1 (ncnn's opaque KV-cache layout,
        which a decode step is fed back as it is)."""
        results, kept = {}, {}
        with self.nets[name].create_extractor() as ex:
            for blob, value in feeds.items():
                mat = value if isinstance(value, ncnn.Mat) else _mat(value)
                assert ex.input(blob, mat) == 0, blob
            for blob in outs:
                ret, mat = ex.extract(blob)
                assert ret == 0, blob
                results[blob] = np.array(mat)
            for blob in caches:
                ret, mat = ex.extract(blob, 1)
                assert ret == 0, blob
                kept[blob] = mat
        return results, kept

    def close(self) -> None:
        for net in self.nets.values():
            net.clear()


@pytest.fixture(scope="module")
def nets(converted: Path, model_json: dict[str, Any]) -> Iterator[Nets]:
    n = Nets(converted, model_json)
    yield n
    n.close()


def _mat(values: np.ndarray) -> ncnn.Mat:
    """A Mat holding a copy of ``values`` (an ncnn.Mat wraps numpy memory without keeping the array
    alive, so the array is held here until the clone is made)."""
    held = np.ascontiguousarray(values)
    return ncnn.Mat(held).clone()


def _ids(ids: torch.Tensor) -> ncnn.Mat:
    """Token or table ids as ncnn's Embed reads them: int32 in a 1-D Mat."""
    return _mat(ids.reshape(-1).to(torch.int32).numpy())


def _f32(t: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.detach().to(torch.float32).numpy())


def _prompt(hf: Any, grid: tuple[int, int]) -> torch.Tensor:
    c = hf.config
    pads = [c.image_token_id] * (grid[0] * grid[1] // 4)
    return torch.tensor([[5, 17, 101, c.vision_start_token_id, *pads, c.vision_end_token_id, 33, 40, 41]])


@pytest.mark.slow
def test_the_ncnn_nets_equal_hfs_modules_from_pixels_to_a_cached_decode_step(
    hf: Any, hooks: Hooks, nets: Nets, model_json: dict[str, Any]
) -> None:
    """One HF forward over a prompt with a 6 x 10 patch image, then one cached decode step, recorded with
    hooks; each net is fed what the previous ncnn net computed (the HF helpers give the grid tables) and
    compared with the HF module it stands for: patch embed, patch + interpolated position embedding, every
    DeepStack tap and the ViT output, the merger, each DeepStack merger, the prefill hidden state (with the
    DeepStack features), its logits, and the decode step's hidden state and logits."""
    from transformers.vision_utils import (
        get_vision_interpolation_indices_and_weights,
        get_vision_position_ids,
    )

    visual, lm = hf.model.visual, hf.model.language_model
    vdoc, ddoc = model_json["vision"], model_json["decoder"]
    hooks.output("patch", visual.patch_embed)
    hooks.inputs("vit_in", visual.blocks[0])
    for i, block in enumerate(visual.blocks):
        hooks.output(f"block{i}", block)
    hooks.output("merger", visual.merger)
    for k, merger in enumerate(visual.deepstack_merger_list):
        hooks.output(f"ds{k}", merger)
    hooks.inputs("lm", lm)
    hooks.output("rotary", lm.rotary_emb)
    hooks.output("lm_out", lm)

    gh, gw = GRID
    grid = torch.tensor([[1, gh, gw]])
    pixels = torch.randn(gh * gw, vdoc["patch_dim"], generator=torch.Generator().manual_seed(3))
    ids = _prompt(hf, GRID)
    image_rows = ids[0] == hf.config.image_token_id
    hf.model.rope_deltas = None
    with torch.no_grad():
        out = hf(
            input_ids=ids,
            pixel_values=pixels,
            image_grid_thw=grid,
            mm_token_type_ids=image_rows.to(torch.int32)[None],
            use_cache=True,
        )
    rec = hooks.values

    # vision
    patch = nets.run("patch_embed", {"in0": _f32(pixels)}, ["out0"])["out0"]
    close(patch, rec["patch"], "patch embed")
    side = vdoc["position_embedding"]["grid_side"]
    taps_idx, taps_w = get_vision_interpolation_indices_and_weights(
        grid, side, mode="bilinear", align_corners=True, spatial_merge_size=vdoc["merge_size"]
    )
    rows = nets.run("pos_embed", {"in0": _ids(taps_idx)}, ["out0"])
    pos = (rows["out0"].reshape(*taps_idx.shape, -1) * taps_w.numpy()[..., None]).sum(1).astype(np.float32)
    close(patch + pos, rec["vit_in"][0][0], "patch + position embedding")
    cos, sin = visual.rotary_pos_emb(torch.zeros(gh * gw, vdoc["hidden"]), get_vision_position_ids(grid, 2))
    enc = vdoc["encoder"]
    feeds = {enc["hidden"]: patch, enc["pos"]: pos, enc["cos"]: _f32(cos), enc["sin"]: _f32(sin)}
    tap_blobs = [d["tap"] for d in vdoc["deepstack"]]
    vit = nets.run("vision", feeds, [enc["output"], *tap_blobs])
    close(vit[enc["output"]], rec[f"block{vdoc['depth'] - 1}"], "ViT output")
    for d in vdoc["deepstack"]:
        close(vit[d["tap"]], rec[f"block{d['block']}"], f"tap of block {d['block']}")
    width = vdoc["merged_width"]
    merged = nets.run("merger", {"in0": vit[enc["output"]].reshape(-1, width)}, ["out0"])["out0"]
    close(merged, rec["merger"], "merger")
    features = []
    for k, d in enumerate(vdoc["deepstack"]):
        feature = nets.run(d["merger"], {"in0": vit[d["tap"]].reshape(-1, width)}, ["out0"])["out0"]
        close(feature, rec[f"ds{k}"], d["merger"])
        features.append(feature)

    # prefill: the fused embeddings (HF's), the DeepStack features on the image rows
    embeds = rec["lm"][1]["inputs_embeds"][0]
    text_rows = nets.run("embed", {"in0": _ids(ids)}, ["out0"])["out0"]
    close(text_rows[~image_rows.numpy()], embeds[~image_rows], "text embeddings")
    close(merged, embeds[image_rows], "image rows of the fused embeddings")
    length, hidden = ids.shape[1], model_json["hidden_size"]
    rcos, rsin = rec["rotary"]
    feeds = {
        ddoc["hidden"]: _f32(embeds),
        ddoc["mask"]: _f32(causal_mask(0, length)[0]),
        ddoc["cos"]: _f32(rcos[0]),
        ddoc["sin"]: _f32(rsin[0]),
    }
    for blob, feature in zip(ddoc["deepstack"], features, strict=True):
        ds = np.zeros((length, hidden), np.float32)
        ds[image_rows.numpy()] = feature
        feeds[blob] = ds
    for blob in ddoc["cache_inputs"]:
        feeds[blob] = ncnn.Mat()
    got, caches = nets.run_with_caches("decoder", feeds, [ddoc["output"]], ddoc["cache_outputs"])
    close(got[ddoc["output"]], rec["lm_out"].last_hidden_state[0], "prefill hidden")
    logits = nets.run("lm_head", {"in0": got[ddoc["output"]]}, ["out0"])["out0"]
    close(logits, out.logits[0], "prefill logits")

    # one decode step through the cache: no DeepStack rows
    token = int(out.logits[0, -1].argmax())
    with torch.no_grad():
        step = hf(input_ids=torch.tensor([[token]]), cache=out.cache, use_cache=True)
    rcos, rsin = rec["rotary"]
    token_row = nets.run("embed", {"in0": _ids(torch.tensor([token]))}, ["out0"])["out0"]
    feeds = {
        ddoc["hidden"]: token_row.reshape(1, hidden),
        ddoc["mask"]: _f32(causal_mask(length, 1)[0]),
        ddoc["cos"]: _f32(rcos[0]),
        ddoc["sin"]: _f32(rsin[0]),
    }
    feeds.update({blob: np.zeros((1, hidden), np.float32) for blob in ddoc["deepstack"]})
    for cin, cout in zip(ddoc["cache_inputs"], ddoc["cache_outputs"], strict=True):
        feeds[cin] = caches[cout]
    hidden_step = nets.run("decoder", feeds, [ddoc["output"]])[ddoc["output"]]
    close(hidden_step, rec["lm_out"].last_hidden_state[0], "decode step hidden")
    close(nets.run("lm_head", {"in0": hidden_step}, ["out0"])["out0"], step.logits[0], "decode step logits")


# ---- the same rule file on a 4.57-style config ----------------------------------------------------------


@pytest.mark.slow
def test_a_transformers_457_style_config_converts_to_the_same_bins(converted: Path, tmp_path: Path) -> None:
    ckpt = write_transformers_4_style(shutil.copytree(TINY, tmp_path / "ckpt"))
    assert "rope_scaling" in json.loads((ckpt / "config.json").read_text())["text_config"]
    out = tmp_path / "out"
    assert main(["apply", str(RULES), "--out", str(out), "--set", f"checkpoint={ckpt}"]) == 0
    for name in NETS:
        assert (out / f"{name}.ncnn.bin").read_bytes() == (converted / f"{name}.ncnn.bin").read_bytes(), name
        assert (out / f"{name}.ncnn.param").read_text() == (converted / f"{name}.ncnn.param").read_text(), (
            name
        )
    new, old = (json.loads((d / "model.json").read_text()) for d in (out, converted))
    assert new["decoder"]["rope"] == old["decoder"]["rope"] and new["tokens"] == old["tokens"]


# ---- bad input: one line naming the file, tensor or key; exit 2; no output folder -------------------------


def _one_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("gsurg: error:")]
    assert len(err) == 1, err
    return err[0]


@pytest.mark.slow
def test_a_checkpoint_missing_a_deepstack_merger_tensor_is_refused_before_hf_loads_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = shutil.copytree(TINY, tmp_path / "ckpt")
    tensors = load_file(str(ckpt / "model.safetensors"))
    missing = "model.visual.deepstack_merger_list.1.linear_fc2.weight"
    del tensors[missing]
    save_file(tensors, str(ckpt / "model.safetensors"), metadata={"format": "pt"})
    out = tmp_path / "out"
    assert main(["apply", str(RULES), "--out", str(out), "--set", f"checkpoint={ckpt}"]) == 2
    line = _one_error(capsys)
    assert repr(missing) in line and str(ckpt / "model.safetensors") in line and "DeepStack" in line
    assert not out.exists()


def test_an_mrope_section_not_summing_to_half_the_head_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = shutil.copytree(TINY, tmp_path / "ckpt")
    path = ckpt / "config.json"
    raw = json.loads(path.read_text())
    raw["text_config"]["rope_parameters"]["mrope_section"] = [6, 5, 4]  # 15, head_dim 32 / 2 = 16
    path.write_text(json.dumps(raw, indent=2))
    out = tmp_path / "out"
    assert main(["apply", str(RULES), "--out", str(out), "--set", f"checkpoint={ckpt}"]) == 2
    line = _one_error(capsys)
    assert str(path) in line and "mrope_section" in line and "head_dim/2 = 16" in line
    assert not out.exists()


# ---- the model.json contract -------------------------------------------------------------------------------


def test_a_sharded_checkpoint_missing_a_tensor_is_named_by_its_index(tmp_path: Path) -> None:
    """The header check reads a ``model.safetensors.index.json`` too: a tensor the index does not list is
    missing, whatever the shard holds."""
    from graphsurgeon.formats.safetensors import CheckpointError
    from graphsurgeon.models.qwen3_vl.export import check_tensors

    ckpt = shutil.copytree(TINY, tmp_path / "ckpt")
    (ckpt / "model.safetensors").rename(ckpt / "model-00001-of-00001.safetensors")
    names = sorted(load_file(str(ckpt / "model-00001-of-00001.safetensors")))
    missing = "model.visual.blocks.2.attn.qkv.weight"
    weight_map = {n: "model-00001-of-00001.safetensors" for n in names if n != missing}
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    with pytest.raises(CheckpointError, match=rf"index\.json: missing tensor '{missing}'$"):
        check_tensors(ckpt)
    weight_map[missing] = "model-00001-of-00001.safetensors"
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    check_tensors(ckpt)  # complete again: no error


def test_the_export_refuses_a_config_with_another_number_of_deepstack_taps() -> None:
    """The rule file declares three DeepStack merger graphs; a source asked for two names the key."""
    from graphsurgeon.export.errors import ExportError
    from graphsurgeon.models.qwen3_vl.export import build

    with pytest.raises(
        ExportError, match=r"config\.json: vision_config\.deepstack_visual_indexes has 3 taps"
    ):
        build({"deepstack_mergers": 2}, TINY)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("key", "value"),
    [
        (("decoder", "rope", "layout"), "1d"),  # a layout no runtime builds tables in
        (("decoder", "rope", "mrope_section"), [6, 5]),
        (("vision", "position_embedding", "align_corners"), "yes"),
        (("vision", "deepstack"), []),
        (("tokens", "image_pad"), None),
        (("family",), "penguin_vl"),
    ],
)
def test_the_schema_refuses_a_model_json_that_breaks_the_contract(
    model_json: dict[str, Any], key: tuple[str, ...], value: Any
) -> None:
    doc = json.loads(json.dumps(model_json))
    node = doc
    for part in key[:-1]:
        node = node[part]
    node[key[-1]] = value
    violation = load_schema(SCHEMA).violation(doc)
    assert violation is not None and violation.key.startswith(".".join(key[:2]))


@pytest.mark.slow
def test_apply_refuses_a_template_that_renders_outside_the_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rule file including qwen3_vl.yaml, its model.json template replaced by one that drops the
    decoder's MRoPE section: the schema check fails before anything is written into an existing output
    folder."""
    broken = (REPO / "graphsurgeon" / "models" / "qwen3_vl" / "model.json.j2").read_text()
    needle = '"mrope_section": {{ data.mrope_section | json }}, '
    assert needle in broken
    (tmp_path / "model.json.j2").write_text(broken.replace(needle, ""))
    rules = tmp_path / "broken.yaml"
    rules.write_text(
        "version: 1\nname: broken\ninclude: [" + json.dumps(str(RULES)) + "]\ngraphs: {}\nside_files:\n"
        "  - {template: model.json.j2, schema: " + json.dumps(str(SCHEMA)) + ", output: model.json,\n"
        "     data: {vision: '${config.vision_config}', image_processor: '${config.image_processor}',\n"
        "            mrope_section: '${config.mrope_section}', image_token_id: '${config.image_token_id}',\n"
        "            video_token_id: '${config.video_token_id}',\n"
        "            vision_start_token_id: '${config.vision_start_token_id}',\n"
        "            vision_end_token_id: '${config.vision_end_token_id}',\n"
        "            eos_token_id: '${config.eos_token_id}'}}\n"
    )
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("earlier work")
    assert main(["apply", str(rules), "--out", str(out)]) == 2
    line = _one_error(capsys)
    assert "decoder.rope" in line and "mrope_section" in line
    assert [p.name for p in out.iterdir()] == ["keep.txt"]  # nothing written, nothing removed
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no work folder left
