"""The KV-cache decoder runner (graphsurgeon.verify.kv_session) checked against itself and against numpy.

* Qwen3-0.6B decoder (corpus, synthesized fp16 weights): prefill 5 + 3 decode steps equals one prefill of 8,
  repeated sessions are bit-identical, cache bytes grow by a fixed amount per token.
* A tiny 2-layer GQA decoder written here in the corpus convention: the harness equals an HF-style numpy
  reference (so the mask, RoPE and cache conventions are right, not only self-consistent), the same graph
  with native GQA (no ExpandDims/Tile/Reshape before SDPA) runs side by side on the same .bin with equal
  outputs and half the cache bytes, and the error paths name what failed.
* Llama-3.2-1B decoder (slow, ~30 s): prefill vs decode as for Qwen3.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from graphsurgeon.cli import main as gsurg
from graphsurgeon.errors import GsurgError
from graphsurgeon.formats.model_bin import read_bin
from graphsurgeon.formats.param_text import read_param_text
from graphsurgeon.verify.errors import KVDecoderError, VerifyError
from graphsurgeon.verify.kv_session import KVDecoder, lockstep, max_abs_diff
from graphsurgeon.verify.kv_signature import inspect_decoder
from graphsurgeon.verify.rope import MASKED, causal_mask, llama3_inv_freq, rope_inv_freq, rope_tables
from tests.conftest import CORPUS

QWEN3 = CORPUS / "llm" / "qwen3_0.6b_decoder.ncnn.param"
LLAMA = CORPUS / "llm" / "llama3.2_1b_decoder.ncnn.param"
SEED = 3
PROMPT, DECODE = 5, 3  # prefill 5 tokens, then 3 one-token steps: positions 5, 6, 7
TOL = 1e-5  # on hidden states of magnitude ~1 (outputs are RMSNorm'd); observed ~7e-7 (Qwen3), ~9e-7 (Llama)


def _synth(param: Path, out: Path) -> Path:
    assert (
        gsurg(["synth-bin", str(param), "-o", str(out), "--seed", str(SEED), "--storage", "fp16", "-q"]) == 0
    )
    return out


def _hidden(n: int, width: int, seed: int = 0) -> np.ndarray:
    """Small inputs (0.1·N(0,1)): each layer's RMSNorm bounds the update, so 28 random layers stay finite."""
    return (0.1 * np.random.default_rng(seed).standard_normal((n, width))).astype(np.float32)


# ---- per-position inputs (no model needed) ----------------------------------------------------------------


def test_causal_mask_is_finite_and_covers_past_plus_new_tokens() -> None:
    m = causal_mask(5, 3)
    assert m.shape == (3, 8) and m.dtype == np.float32 and np.isfinite(m).all()
    assert (m[0, :6] == 0).all() and (m[0, 6:] == MASKED).all()
    assert (m[2] == 0).all()
    assert np.array_equal(causal_mask(0, 8)[5:], m)  # the same rows whichever step builds them


def test_rope_rows_depend_only_on_the_absolute_position() -> None:
    inv = rope_inv_freq(128, 1e6)
    cos, sin = rope_tables(np.arange(8), inv)
    assert cos.shape == sin.shape == (8, 128)
    assert np.array_equal(cos[:, :64], cos[:, 64:])  # HF cat(freqs, freqs)
    cos5, sin5 = rope_tables([5, 6, 7], inv)
    assert np.array_equal(cos5, cos[5:]) and np.array_equal(sin5, sin[5:])
    half, _ = rope_tables([5], inv, width="half")
    assert half.shape == (1, 64) and np.array_equal(half[0], cos[5, :64])
    scaled = llama3_inv_freq(64)
    assert scaled.shape == (32,) and scaled[0] == rope_inv_freq(64, 500_000.0)[0] and scaled[-1] < inv[-1]


# ---- discovery on the corpus graphs (params only) ---------------------------------------------------------


@pytest.mark.parametrize(
    ("param", "layers", "head_dim", "hidden"), [(QWEN3, 28, 128, 1024), (LLAMA, 16, 64, 2048)]
)
def test_signature_is_found_from_the_graph(param: Path, layers: int, head_dim: int, hidden: int) -> None:
    sig = inspect_decoder(param)
    assert (sig.hidden, sig.mask, sig.cos, sig.sin, sig.output) == ("in0", "in1", "in2", "in3", "out0")
    assert sig.num_layers == layers and sig.head_dim == head_dim and sig.hidden_size == hidden
    assert not sig.rope_interleaved
    assert [s.input for s in sig.caches[:2]] == ["cache_k0", "cache_v0"]
    assert [(s.output, s.kind) for s in sig.caches[-2:]] == [
        (f"out_cache_k{layers - 1}", "k"),
        (f"out_cache_v{layers - 1}", "v"),
    ]
    assert len({s.layer for s in sig.caches}) == layers and len(sig.caches) == 2 * layers


# ---- Qwen3-0.6B with synthesized weights -------------------------------------------------------------------


@pytest.fixture(scope="module")
def qwen3(fp16_weights: Callable[[Path, int], Path]) -> Iterator[KVDecoder]:
    t0 = time.perf_counter()
    model = fp16_weights(QWEN3, SEED)  # 0.9 GB, the same as test_rules_shipped.py's
    decoder = KVDecoder(QWEN3, model, num_threads=1)
    print(f"\nqwen3: synth-bin + load {time.perf_counter() - t0:.1f} s")
    yield decoder
    decoder.close()


@pytest.mark.slow
def test_qwen3_decode_steps_equal_one_prefill(qwen3: KVDecoder) -> None:
    x = _hidden(PROMPT + DECODE, 1024)
    t0 = time.perf_counter()
    with qwen3.session() as s:
        prefill = s.prefill(x[:PROMPT])
        steps = [s.decode_step(x[p : p + 1]) for p in range(PROMPT, PROMPT + DECODE)]
        assert s.position == PROMPT + DECODE
    t1 = time.perf_counter()
    full = qwen3.run(x, [PROMPT + DECODE]).steps[0]
    t2 = time.perf_counter()

    assert prefill.hidden.shape == (PROMPT, 1024) and np.array_equal(prefill.last, prefill.hidden[-1])
    assert [st.start for st in steps] == [5, 6, 7] and all(st.hidden.shape == (1, 1024) for st in steps)
    incremental = np.concatenate([prefill.hidden, *(st.hidden for st in steps)])
    assert np.isfinite(incremental).all() and np.isfinite(full.hidden).all()
    scale = float(np.abs(full.hidden).max())
    diff_decoded = max_abs_diff(incremental[PROMPT:], full.hidden[PROMPT:])
    diff_prefill = max_abs_diff(incremental[:PROMPT], full.hidden[:PROMPT])
    print(
        f"\nqwen3: decode vs prefill max|diff| {diff_decoded:.2e} (prompt rows {diff_prefill:.2e}), "
        f"max|h| {scale:.3f}; prefill+3 steps {t1 - t0:.2f} s, prefill 8 {t2 - t1:.2f} s"
    )
    assert 0.1 < scale < 100
    assert diff_decoded <= TOL * scale and diff_prefill <= TOL * scale

    # The check is not vacuous: the same token after another prompt's cache gives a different state.
    with qwen3.session() as other:
        other.prefill(_hidden(PROMPT, 1024, seed=1))
        unrelated = other.decode_step(x[PROMPT])
    assert max_abs_diff(unrelated.hidden, full.hidden[PROMPT : PROMPT + 1]) > 100 * TOL * scale


@pytest.mark.slow
def test_qwen3_repeated_session_is_bit_identical(qwen3: KVDecoder) -> None:
    x = _hidden(PROMPT + DECODE, 1024, seed=2)
    schedule = [PROMPT] + [1] * DECODE
    first, second = qwen3.run(x, schedule), qwen3.run(x, schedule)
    assert first.hidden.tobytes() == second.hidden.tobytes()
    assert first.cache_bytes == second.cache_bytes and first.allocated_bytes == second.allocated_bytes


@pytest.mark.slow
def test_qwen3_cache_bytes_grow_linearly(qwen3: KVDecoder) -> None:
    trace = qwen3.run(_hidden(PROMPT + DECODE, 1024, seed=4), [PROMPT] + [1] * DECODE)
    # 28 layers x (k, v) x 16 heads (k/v are tiled to the 16 query heads before SDPA) x 128 x fp32
    per_token = 28 * 2 * 16 * 128 * 4
    assert trace.cache_bytes == [n * per_token for n in range(PROMPT, PROMPT + DECODE + 1)]
    info = trace.steps[-1].caches[0]
    assert (info.dims, info.w, info.h, info.c, info.elemsize, info.elempack) == (3, 128, 8, 16, 4, 1)
    # allocated: SDPA reserves capacity (16 rows at first, then +50 %), so it is a step function above
    assert all(a >= n for a, n in zip(trace.allocated_bytes, trace.cache_bytes, strict=True))
    assert trace.allocated_bytes == sorted(trace.allocated_bytes)
    print(f"\nqwen3 cache bytes: logical {trace.cache_bytes}, allocated {trace.allocated_bytes}")


# ---- a tiny GQA decoder in the corpus convention ---------------------------------------------------------

TINY_H, TINY_HEADS, TINY_KV, TINY_D, TINY_LAYERS = 16, 4, 2, 8, 2


def _tiny_param(native_gqa: bool) -> str:
    """Two layers: RMSNorm → q/k/v Gemm → Reshape/Permute → RotaryEmbed (q, k) → [k/v tiled to the query
    heads like the corpus, or native GQA] → SDPA 7=1 → Permute/Reshape → o Gemm → residual; final RMSNorm."""
    h, nh, nkv, d, n = TINY_H, TINY_HEADS, TINY_KV, TINY_D, TINY_LAYERS
    rep = nh // nkv

    def gemm(name: str, src: str, dst: str, n_out: int, k: int) -> str:
        return f"Gemm {name} 1 1 {src} {dst} 10=-1 2=0 3=1 4=0 5=1 6=1 7=0 8={n_out} 9={k}"

    caches = " ".join(f"cache_k{i} cache_v{i}" for i in range(n))
    lines = [
        "Input in0 0 1 in0",
        "Input in1 0 1 in1",
        f"Split sp_mask 1 {n} in1 " + " ".join(f"mask{i}" for i in range(n)),
        "Input in2 0 1 in2",
        f"Split sp_cos 1 {2 * n} in2 " + " ".join(f"cos{i}q cos{i}k" for i in range(n)),
        "Input in3 0 1 in3",
        f"Split sp_sin 1 {2 * n} in3 " + " ".join(f"sin{i}q sin{i}k" for i in range(n)),
        f"Input kv_cache 0 {2 * n} {caches}",
    ]
    x = "in0"
    for i in range(n):
        lines += [
            f"Split sp_x{i} 1 2 {x} x{i}a x{i}b",
            f"RMSNorm norm{i} 1 1 x{i}a n{i} 0={h} 1=1.000000e-06 2=1",
            f"Split sp_n{i} 1 3 n{i} n{i}q n{i}k n{i}v",
            gemm(f"q{i}", f"n{i}q", f"q{i}", nh * d, h),
            f"Reshape rq{i} 1 1 q{i} q{i}r 0={d} 1={nh} 2=-1",
            f"Permute pq{i} 1 1 q{i}r q{i}p 0=2",
            gemm(f"k{i}", f"n{i}k", f"k{i}", nkv * d, h),
            f"Reshape rk{i} 1 1 k{i} k{i}r 0={d} 1={nkv} 2=-1",
            f"Permute pk{i} 1 1 k{i}r k{i}p 0=2",
            gemm(f"v{i}", f"n{i}v", f"v{i}", nkv * d, h),
            f"Reshape rv{i} 1 1 v{i} v{i}r 0={d} 1={nkv} 2=-1",
            f"Permute pv{i} 1 1 v{i}r v{i}p 0=2",
            f"RotaryEmbed ropeq{i} 3 1 q{i}p cos{i}q sin{i}q q{i}e 0=0",
            f"RotaryEmbed ropek{i} 3 1 k{i}p cos{i}k sin{i}k k{i}e 0=0",
        ]
        k_in, v_in = f"k{i}e", f"v{i}p"
        if not native_gqa:
            for t, src in (("k", k_in), ("v", v_in)):
                lines += [
                    f"ExpandDims ed{t}{i} 1 1 {src} {t}{i}u -23303=1,1",
                    f"Tile tl{t}{i} 1 1 {t}{i}u {t}{i}t -23302=4,1,{rep},1,1",
                    f"Reshape rx{t}{i} 1 1 {t}{i}t {t}{i}x 0={d} 1=-1 2={nh}",
                ]
            k_in, v_in = f"k{i}x", f"v{i}x"
        lines += [
            f"SDPA sdpa{i} 6 3 q{i}e {k_in} {v_in} mask{i} cache_k{i} cache_v{i} a{i} out_cache_k{i} "
            f"out_cache_v{i} 5=1 6={1 / np.sqrt(d):.6f} 7=1",
            f"Permute pa{i} 1 1 a{i} a{i}p 0=2",
            f"Reshape ra{i} 1 1 a{i}p a{i}r 0={nh * d} 1=-1",
            gemm(f"o{i}", f"a{i}r", f"o{i}", h, nh * d),
            f"BinaryOp add{i} 2 1 x{i}b o{i} y{i} 0=0",
        ]
        x = f"y{i}"
    lines.append(f"RMSNorm norm_out 1 1 {x} out0 0={h} 1=1.000000e-06 2=1")
    blobs = {b for line in lines for b in _line_blobs(line)}
    return "\n".join(["7767517", f"{len(lines)} {len(blobs)}", *lines]) + "\n"


def _line_blobs(line: str) -> list[str]:
    f = line.split()
    nb, nt = int(f[2]), int(f[3])
    return f[4 : 4 + nb + nt]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny")
    paths = {"tiled": root / "tiled.param", "native": root / "native.param"}
    for key, path in paths.items():
        path.write_text(_tiny_param(native_gqa=key == "native"))
    paths["bin"] = _synth(paths["tiled"], root / "tiny.bin")  # the native graph loads the same weights
    assert _synth(paths["native"], root / "native.bin").read_bytes() == paths["bin"].read_bytes()
    return paths


def _reference(param: Path, model: Path, x: np.ndarray, inv_freq: np.ndarray) -> np.ndarray:
    """HF-style numpy forward of the tiny decoder over the whole sequence (float64, no cache)."""
    graph = read_param_text(param)
    read_bin(graph, model)

    def w(layer: str, slot: str) -> np.ndarray:
        return graph.layer(layer).weights[slot].numpy().astype(np.float64)

    def rms(v: np.ndarray, gamma: np.ndarray) -> np.ndarray:
        return v / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + 1e-6) * gamma

    def rope(v: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        half = v.shape[-1] // 2
        rotated = np.concatenate([-v[..., half:], v[..., :half]], axis=-1)
        return v * cos + rotated * sin

    n = x.shape[0]
    cos, sin = (t.astype(np.float64) for t in rope_tables(np.arange(n), inv_freq))
    mask = np.where(np.tri(n, dtype=bool), 0.0, -np.inf)
    h = x.astype(np.float64)
    for i in range(TINY_LAYERS):
        a = rms(h, w(f"norm{i}", "gamma"))
        q = (a @ w(f"q{i}", "B").T).reshape(n, TINY_HEADS, TINY_D).transpose(1, 0, 2)
        k = (a @ w(f"k{i}", "B").T).reshape(n, TINY_KV, TINY_D).transpose(1, 0, 2)
        v = (a @ w(f"v{i}", "B").T).reshape(n, TINY_KV, TINY_D).transpose(1, 0, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        k, v = (np.repeat(t, TINY_HEADS // TINY_KV, axis=0) for t in (k, v))  # repeat_interleave
        s = q @ k.transpose(0, 2, 1) / np.sqrt(TINY_D) + mask
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        o = (p @ v).transpose(1, 0, 2).reshape(n, TINY_HEADS * TINY_D)
        h = h + o @ w(f"o{i}", "B").T
    return rms(h, w("norm_out", "gamma"))


def test_tiny_decoder_matches_numpy_and_native_gqa_halves_the_cache(tiny: dict[str, Path]) -> None:
    x = (0.5 * np.random.default_rng(5).standard_normal((8, TINY_H))).astype(np.float32)
    schedule = [PROMPT] + [1] * DECODE
    with KVDecoder(tiny["tiled"], tiny["bin"]) as tiled, KVDecoder(tiny["native"], tiny["bin"]) as native:
        assert tiled.signature.head_dim == TINY_D and tiled.signature.hidden_size == TINY_H
        assert native.signature.caches == tiled.signature.caches
        a, b = lockstep([tiled, native], x, schedule)
        chunked = tiled.run(x, [3, 2, 2, 1])
    ref = _reference(tiny["tiled"], tiny["bin"], x, tiled.inv_freq)
    print(
        f"\ntiny: vs numpy {max_abs_diff(a.hidden, ref):.2e}, native vs tiled {max_abs_diff(a, b):.2e}, "
        f"chunked {max_abs_diff(a, chunked):.2e}; cache bytes {a.cache_bytes} vs {b.cache_bytes}"
    )
    assert max_abs_diff(a.hidden, ref) < TOL
    assert max_abs_diff(a, b) < TOL and max_abs_diff(a, chunked) < TOL
    per_token = TINY_LAYERS * 2 * TINY_HEADS * TINY_D * 4
    assert a.cache_bytes == [n * per_token for n in range(PROMPT, PROMPT + DECODE + 1)]
    assert b.cache_bytes == [n // 2 for n in a.cache_bytes]
    assert b.allocated_bytes == [n // 2 for n in a.allocated_bytes]
    assert [c.c for c in b.steps[-1].caches] == [TINY_KV] * (2 * TINY_LAYERS)


def test_errors_name_what_failed(tiny: dict[str, Path], tmp_path: Path) -> None:
    short = tmp_path / "short.bin"
    short.write_bytes(tiny["bin"].read_bytes()[:-8])
    with pytest.raises(GsurgError):  # gsurg's walk of the .bin against the .param
        KVDecoder(tiny["tiled"], short)
    with pytest.raises(VerifyError, match=r"short\.bin"):  # ncnn's own load_model
        KVDecoder(tiny["tiled"], short, verify_bin=False)

    decoder = KVDecoder(tiny["tiled"], tiny["bin"])
    x = np.zeros((2, TINY_H), np.float32)
    with decoder.session() as s:
        with pytest.raises(KVDecoderError, match="before prefill"):
            s.decode_step(x[:1])
        with pytest.raises(KVDecoderError, match="hidden width"):
            s.prefill(np.zeros((2, TINY_H + 1), np.float32))
        s.prefill(x)
        with pytest.raises(KVDecoderError, match="already at position 2"):
            s.prefill(x)
        with pytest.raises(KVDecoderError, match="one token"):
            s.decode_step(x)

    decoder.signature = dataclasses.replace(decoder.signature, output="no_such_blob")
    with decoder.session() as s:
        with pytest.raises(KVDecoderError, match=r"ex\.extract\('no_such_blob'\) returned -1"):
            s.prefill(x)
        with pytest.raises(KVDecoderError, match="failed earlier"):
            s.prefill(x)
    decoder.close()
    with pytest.raises(KVDecoderError, match="closed"):
        decoder.session()


# ---- Llama-3.2-1B (2 GB of fp16 weights) -------------------------------------------------------------------


@pytest.mark.slow
def test_llama32_decode_steps_equal_one_prefill(fp16_weights: Callable[[Path, int], Path]) -> None:
    t0 = time.perf_counter()
    model = fp16_weights(LLAMA, SEED)  # the same as test_rules_shipped.py's
    with KVDecoder(LLAMA, model, inv_freq=llama3_inv_freq(64)) as decoder:
        t1 = time.perf_counter()
        x = _hidden(PROMPT + DECODE, 2048)
        incremental, full = (decoder.run(x, s) for s in ([PROMPT] + [1] * DECODE, [PROMPT + DECODE]))
    diff, scale = max_abs_diff(incremental, full), float(np.abs(full.hidden).max())
    print(f"\nllama3.2: max|diff| {diff:.2e}, max|h| {scale:.3f}; setup {t1 - t0:.1f} s")
    assert np.isfinite(incremental.hidden).all() and 0.1 < scale < 100
    assert diff <= TOL * scale
    assert incremental.cache_bytes == [n * 16 * 2 * 32 * 64 * 4 for n in range(PROMPT, PROMPT + DECODE + 1)]
