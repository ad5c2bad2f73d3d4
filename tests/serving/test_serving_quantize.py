from __future__ import annotations

import shutil

import numpy as np
import onnx

from serving.engine import Classifier
from serving.parity import builtin_sample
from serving.quantize import RECIPES, node_groups, quantize


def test_every_recipe_writes_what_it_says_and_keeps_the_logits_close(exported_dir, tmp_path):
    folder = tmp_path / "onnx"
    shutil.copytree(exported_dir, folder)
    src = folder / "model.onnx"
    groups = node_groups(onnx.load(str(src)))
    # The tiny ELECTRA has 2 layers: one FFN output per layer, the last layer's 4 weight nodes.
    assert len(groups["ffn_out"]) == 2 and all("/output/dense/" in n for n in groups["ffn_out"])
    assert len(groups["last_layer"]) == 4 and len(groups["attention"]) == 2
    texts = builtin_sample(60)
    fp32 = Classifier.load(src)
    ref = fp32.predict_logits(texts)
    for r in RECIPES:
        dst = folder / f"{r.name}.onnx"
        info = quantize(src, dst, r, "avx512_vnni", calibration_texts=texts[:20], encoder=fp32)
        graph = onnx.load(str(dst)).graph
        ops = {n.op_type for n in graph.node}
        fp32_matmuls = {n.name for n in graph.node if n.op_type == "MatMul"}
        if r.method == "static":
            assert {"QuantizeLinear", "DequantizeLinear"} <= ops
        else:
            assert ops & {"MatMulInteger", "DynamicQuantizeMatMul"}, r.name
        if "ffn_out" in r.keep_fp32:
            assert set(groups["ffn_out"]) <= fp32_matmuls and info["fp32_nodes"] == sorted(groups["ffn_out"])
        # QAttention replaces each Attention unless Attention is not quantized or that node is kept fp32.
        kept_attention = "Attention" not in r.ops or set(groups["attention"]) & set(info["fp32_nodes"])
        assert ("Attention" in ops) == bool(kept_attention), r.name
        got = Classifier.load(dst).predict_logits(texts)
        assert np.abs(got - ref).max() < 0.5 and (got.argmax(1) == ref.argmax(1)).mean() >= 0.9, r.name
