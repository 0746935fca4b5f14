"""The layer catalog covers every layer type of the ncnn wheel, and its expressions are well formed."""

from __future__ import annotations

from pathlib import Path

import ncnn
import pytest

from graphsurgeon.errors import CatalogError
from graphsurgeon.schema import ValueType, load_catalog
from graphsurgeon.schema.expr import evaluate


def test_every_wheel_layer_type_is_in_the_catalog() -> None:
    catalog = load_catalog()
    for name, spec in catalog.layers.items():
        assert ncnn.layer_to_index(name) == spec.index, name
    indices = sorted(spec.index for spec in catalog.layers.values())
    # layer_to_index is a bijection onto 0..N-1; nothing the wheel can create lies beyond the catalog
    assert indices == list(range(len(indices)))
    assert all(ncnn.create_layer(i) is None for i in range(len(indices), len(indices) + 64))
    assert ncnn.layer_to_index("NotALayer") == -1


def test_key_layers_have_their_documented_weight_order() -> None:
    """Spot checks written by hand from the ncnn sources (each layer's ``load_model``)."""
    catalog = load_catalog()
    ip = catalog.layers["InnerProduct"]
    assert [(w.name, w.load) for w in ip.weights[:2]] == [("weight", "tagged"), ("bias", "raw")]
    assert ip.param("weight_data_size").id == 2
    gemm = catalog.layers["Gemm"]
    env = gemm.env({4: 0, 5: 1, 6: 1, 3: 1, 7: 0, 8: 6, 9: 4, 10: 4})
    loads = gemm.active_weights(env)
    assert [(a.name, a.load_type, a.shape) for a in loads] == [("B", 0, (6, 4)), ("C_1xN", 0, (1, 6))]
    rms = catalog.layers["RMSNorm"]
    assert rms.param("eps").default == pytest.approx(0.001)
    assert rms.param("eps").type is ValueType.FLOAT
    md = catalog.layers["MemoryData"]
    (data,) = md.active_weights(md.env({0: 6, 1: 4}))
    assert (data.load_type, data.count) == (1, 24)
    (data,) = md.active_weights(md.env({0: 6, 1: 4, 21: 0}))
    assert data.load_type == 0


def test_default_expr_copies_another_param() -> None:
    conv = load_catalog().layers["Convolution"]
    env = conv.env({1: 3, 4: 1})
    assert env["kernel_h"] == 3
    assert env["pad_bottom"] == 1


def test_expression_language_is_safe_and_c_like() -> None:
    assert evaluate("-7 // 2", {}) == -3  # C truncation, not Python floor
    assert evaluate("a if b else c", {"a": 1, "b": 0, "c": 2}) == 2
    assert evaluate("ceil_div(10, 4) * 4 == align(10, 4)", {}) == 1
    with pytest.raises(CatalogError):
        evaluate("__import__('os')", {})
    with pytest.raises(CatalogError):
        evaluate("x.y", {"x": 1})
    with pytest.raises(CatalogError):
        evaluate("1 // 0", {})


def test_the_kv_cache_tops_of_attention_are_opaque() -> None:
    """R1020's net.cpp preserves the layout of exactly these tops: tops 1 and 2 of an SDPA or
    MultiHeadAttention (written by hand from ``Extractor::extract``); no other layer's."""
    catalog = load_catalog()
    for name in ("SDPA", "MultiHeadAttention"):
        spec = catalog.layers[name]
        assert [spec.is_opaque_output(i) for i in range(4)] == [False, True, True, False], name
    assert {n for n, s in catalog.layers.items() if s.opaque_outputs} == {"SDPA", "MultiHeadAttention"}
    split = catalog.layers["Split"]
    assert split.output_role(7) == "output" and not split.is_opaque_output(7)


def test_an_opaque_output_must_be_an_output_role(tmp_path: Path) -> None:
    bad = tmp_path / "catalog.yaml"
    bad.write_text("Foo:\n  index: 0\n  outputs: [output]\n  opaque_outputs: [cache]\n")
    with pytest.raises(CatalogError, match=r"opaque_outputs \['cache'\] are not output roles"):
        load_catalog(bad)
