from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from serving.engine import Classifier
from serving.parity import builtin_sample
from serving.quantize import (
    BY_NAME,
    DEFAULT_ORDER,
    ISA_WEIGHTS,
    ISAS,
    RECIPES,
    cpu_isa,
    default_order,
    node_groups,
    quantize,
)


def test_every_recipe_writes_what_it_says_and_keeps_the_logits_close(exported_dir, tmp_path):
    folder = tmp_path / "onnx"
    shutil.copytree(exported_dir, folder)
    src = folder / "model.onnx"
    groups = node_groups(onnx.load(str(src)))
    # The tiny ELECTRA has 2 layers: one FFN output per layer, the last layer's 4 weight nodes.
    assert len(groups["ffn_out"]) == 2 and all("/output/dense/" in n for n in groups["ffn_out"])
    assert len(groups["ffn_in"]) == 2 and all("/intermediate/dense/" in n for n in groups["ffn_in"])
    assert len(groups["attention_out"]) == 2 and all("/attention/output/dense/" in n for n in groups["attention_out"])
    assert len(groups["last_layer"]) == 4 and len(groups["attention"]) == 2
    texts = builtin_sample(60)
    fp32 = Classifier.load(src)
    ref = fp32.predict_logits(texts)
    # Quantized for the CPU that runs the test: a file made for VNNI on an AVX2-only CPU is exactly
    # the saturation that ISA_WEIGHTS exists to avoid (test_each_isa_gets_the_weights_its_kernels_want).
    isa = cpu_isa()
    for r in RECIPES:
        dst = folder / f"{r.name}.onnx"
        info = quantize(src, dst, r, isa, calibration_texts=texts[:20], encoder=fp32)
        assert info["isa"] == isa
        graph = onnx.load(str(dst)).graph
        ops = {n.op_type for n in graph.node}
        fp32_matmuls = {n.name for n in graph.node if n.op_type == "MatMul"}
        if r.method == "static":
            assert {"QuantizeLinear", "DequantizeLinear"} <= ops
        else:
            assert ops & {"MatMulInteger", "DynamicQuantizeMatMul"}, r.name
        if "ffn_out" in r.keep_fp32:
            assert set(groups["ffn_out"]) <= fp32_matmuls and info["fp32_nodes"] == sorted(groups["ffn_out"])
        if r.only:  # a subset: its groups quantized, every other MatMul left fp32
            picked = {n for g in r.only for n in groups[g]}
            others = {n.name for n in onnx.load(str(src)).graph.node if n.op_type == "MatMul"} - picked
            assert picked and others <= fp32_matmuls and not picked & fp32_matmuls, r.name
        # QAttention replaces each Attention unless Attention is not quantized or that node is kept fp32.
        kept_attention = ("Attention" not in r.ops or set(groups["attention"]) & set(info["fp32_nodes"])
                          or (r.only and "attention" not in r.only))
        assert ("Attention" in ops) == bool(kept_attention), r.name
        got = Classifier.load(dst).predict_logits(texts)
        assert np.abs(got - ref).max() < 0.5, r.name
        if r.reduce_range:  # 7-bit weights may flip this tiny model's near-ties (docs/serving.md): decisive rows agree
            top2 = np.sort(ref, 1)[:, -2:]
            decisive = top2[:, 1] - top2[:, 0] > 0.1
            assert decisive.sum() >= 30 and (got.argmax(1) == ref.argmax(1))[decisive].all(), r.name
        else:
            assert (got.argmax(1) == ref.argmax(1)).mean() >= 0.9, r.name


def _quantized_weights(file) -> list[np.ndarray]:
    return [numpy_helper.to_array(i) for i in onnx.load(str(file)).graph.initializer if i.name.endswith("_quantized")]


@pytest.mark.parametrize("isa", ISAS)
def test_each_isa_gets_the_weights_its_kernels_want(exported_dir, tmp_path, isa):
    """The file format only (no CPU needed): u8 weights for dynamic INT8 where u8s8 products would
    saturate (no VNNI), 7-bit s8 weights for static QDQ there; full-range s8 with VNNI and on ARM."""
    src = exported_dir / "model.onnx"
    texts = builtin_sample(20)
    plan = ISA_WEIGHTS[isa]
    dyn = quantize(src, tmp_path / "dyn.onnx", BY_NAME["dynamic-per-channel"], isa)
    weights = _quantized_weights(tmp_path / "dyn.onnx")
    assert weights and {w.dtype for w in weights} == {np.dtype(np.uint8 if isa in ("avx2", "avx512") else np.int8)}
    assert dyn["weight_type"] == plan.dynamic and dyn["reduce_range"] is False
    enc = Classifier.load(src)
    st = quantize(src, tmp_path / "st.onnx", BY_NAME["static-qdq"], isa, calibration_texts=texts, encoder=enc)
    weights = _quantized_weights(tmp_path / "st.onnx")
    assert weights and {w.dtype for w in weights} == {np.dtype(np.int8)}
    widest = max(int(np.abs(w.astype(np.int32)).max()) for w in weights)
    # reduce_range: 7-bit weights, so that u8 x s8 pair sums stay inside int16 (2 * 255 * 64 < 32767).
    assert (widest <= 64) == plan.static_reduce_range == st["reduce_range"] == (isa in ("avx2", "avx512"))


def test_unknown_isa_is_refused(exported_dir, tmp_path):
    with pytest.raises(ValueError, match="unknown instruction set 'avx3'"):
        quantize(exported_dir / "model.onnx", tmp_path / "x.onnx", BY_NAME["dynamic"], "avx3")


@pytest.mark.parametrize("isa", ["avx2", "avx512_vnni"])
def test_recipes_that_pin_a_weight_format_keep_it_on_every_isa(exported_dir, tmp_path, isa):
    """ONNX Runtime's AVX2 advice as recipes: U8U8, and U8S8 with 7-bit weights, whatever the instruction set."""
    src = exported_dir / "model.onnx"
    u8 = quantize(src, tmp_path / "u8.onnx", BY_NAME["dynamic-u8u8-per-channel"], isa)
    assert u8["weight_type"] == "QUInt8" and not u8["reduce_range"]
    assert {w.dtype for w in _quantized_weights(tmp_path / "u8.onnx")} == {np.dtype(np.uint8)}
    rr = quantize(src, tmp_path / "rr.onnx", BY_NAME["dynamic-reduce-range-per-channel"], isa)
    weights = _quantized_weights(tmp_path / "rr.onnx")
    assert rr["weight_type"] == "QInt8" and rr["reduce_range"]
    assert {w.dtype for w in weights} == {np.dtype(np.int8)} and max(int(np.abs(w.astype(np.int32)).max()) for w in weights) <= 64
    enc = Classifier.load(src)
    st = quantize(src, tmp_path / "st.onnx", BY_NAME["static-qdq-u8u8"], isa, calibration_texts=builtin_sample(20), encoder=enc)
    assert st["weight_type"] == "QUInt8" and not st["reduce_range"]  # 7 bits are for s8 weights only
    assert {w.dtype for w in _quantized_weights(tmp_path / "st.onnx")} == {np.dtype(np.uint8)}


def test_without_vnni_the_export_tries_the_avx2_formats_first():
    assert default_order("avx512_vnni") == default_order("arm64") == DEFAULT_ORDER
    for isa in ("avx2", "avx512"):
        order = default_order(isa)
        assert BY_NAME[order[0]].reduce_range and BY_NAME[order[0]].weight_type == "QInt8"
        assert all(name in BY_NAME for name in order)
    # static QDQ ran at half fp32's speed on AVX2: it cannot pass the speed check there, so it is not tried
    assert set(DEFAULT_ORDER) < set(default_order("avx512"))
    assert set(default_order("avx2")) == set(default_order("avx512")) - {"static-qdq"}
