"""INT8 recipes for the fused (Optimum O2) ONNX graph, tried in order by `serving.export --quantize`.

Each recipe is one call into ONNX Runtime's quantization tools; which ones exist and in what order
they are tried was chosen by measurement on fine-tuned MiniLM (docs/notes/log.md, "INT8 recipes on a real model").
"""

from __future__ import annotations

import platform
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Recipe:
    name: str
    method: str = "dynamic"  # dynamic | static
    per_channel: bool = False
    reduce_range: bool = False
    ops: tuple[str, ...] = ("MatMul", "Attention")
    keep_fp32: tuple[str, ...] = ()  # node groups left in fp32: "ffn_out", "last_layer", "attention"
    only: tuple[str, ...] = ()  # node groups quantized, the rest fp32 (empty: every node of `ops`)
    weight_type: str | None = None  # QInt8 (s8) or QUInt8 (u8); None: the instruction set's (ISA_WEIGHTS)


# ONNX Runtime's quantization docs for x86 without VNNI (AVX2, AVX-512 without VNNI) prescribe U8U8, or U8S8 with
# reduce_range (7-bit weights, so that VPMADDUBSW's int16 pair sums cannot saturate), per channel; the `-u8u8` and
# `-reduce-range` recipes pin those formats on any CPU, the subsets quantize only where most of the work is.
RECIPES = [
    Recipe("dynamic"),
    Recipe("dynamic-per-channel", per_channel=True),
    Recipe("dynamic-matmul-only", ops=("MatMul",)),
    Recipe("dynamic-keep-ffn-out", keep_fp32=("ffn_out",)),
    Recipe("dynamic-keep-last-layer", keep_fp32=("last_layer",)),
    Recipe("static-qdq", method="static", per_channel=True, ops=("MatMul",)),
    Recipe("dynamic-u8u8-per-channel", per_channel=True, weight_type="QUInt8"),
    Recipe("dynamic-reduce-range", reduce_range=True, weight_type="QInt8"),
    Recipe("dynamic-reduce-range-per-channel", per_channel=True, reduce_range=True, weight_type="QInt8"),
    Recipe("dynamic-ffn-only", per_channel=True, only=("ffn_in", "ffn_out")),
    Recipe("dynamic-reduce-range-ffn-only", per_channel=True, reduce_range=True, weight_type="QInt8",
           only=("ffn_in", "ffn_out")),
    Recipe("dynamic-attention-only", per_channel=True, only=("attention", "attention_out")),
    Recipe("static-qdq-per-tensor", method="static", ops=("MatMul",)),
    Recipe("static-qdq-u8u8", method="static", per_channel=True, ops=("MatMul",), weight_type="QUInt8"),
]
BY_NAME = {r.name: r for r in RECIPES}
# Tried in this order by `serving.export --quantize` (measured: docs/notes/log.md, "INT8 recipes on a real model").
DEFAULT_ORDER = ("dynamic-per-channel", "dynamic-keep-ffn-out", "static-qdq")  # fastest first
# Without VNNI: U8S8 with 7-bit weights first, the format ONNX Runtime's fast AVX2 kernels take (its U8U8 kernels
# widen to int16 and run at about fp32's rate), then the u8u8 recipes of DEFAULT_ORDER; the export's speed check decides.
NO_VNNI_ORDER = ("dynamic-reduce-range-per-channel", "dynamic-reduce-range-ffn-only", *DEFAULT_ORDER)
# Measured on an AVX2-only EPYC (docs/notes/log.md, "INT8 speed on AVX2"): the dynamic recipes ran at
# fp32's rate per CPU-second and static QDQ at half of it, so static can never pass the speed check there and is not
# tried (its calibration is the slowest try). AVX-512 without VNNI is unmeasured and keeps NO_VNNI_ORDER.
AVX2_ORDER = tuple(name for name in NO_VNNI_ORDER if not name.startswith("static"))
ISAS = ("avx2", "avx512", "avx512_vnni", "arm64")


def default_order(isa: str) -> tuple[str, ...]:
    """The recipes `serving.export --quantize` tries on this instruction set, in order."""
    return {"avx2": AVX2_ORDER, "avx512": NO_VNNI_ORDER}.get(isa, DEFAULT_ORDER)


@dataclass(frozen=True)
class IsaWeights:
    """How weights are stored for one instruction set, and why (docs/serving.md, "INT8 per instruction set")."""

    dynamic: str  # QuantType name of dynamic recipes' weights: QInt8 (u8s8 products) or QUInt8 (u8u8)
    static: str  # the same for static QDQ recipes
    static_reduce_range: bool  # 7-bit weights for static QDQ
    why: str


# x86 without VNNI multiplies u8 by s8 with VPMADDUBSW, whose int16 pair sums saturate (ONNX Runtime's
# quantization docs, "When and why do I need to try U8U8?"): that is what failed the recipe test on an
# AVX2 CI machine. Dynamic recipes there store u8 weights (u8u8: no saturation, full 8 bits); static
# QDQ keeps s8 weights with reduce_range (7 bits, what the docs prescribe for U8S8 per-channel on
# AVX2/AVX-512), because its u8 activations come from calibration, not from each batch.
_NO_VNNI = IsaWeights("QUInt8", "QInt8", True, "no VNNI: u8s8 products saturate in int16 (VPMADDUBSW)")
ISA_WEIGHTS = {
    "avx2": _NO_VNNI,
    "avx512": _NO_VNNI,
    "avx512_vnni": IsaWeights("QInt8", "QInt8", False, "VNNI (VPDPBUSD) sums u8s8 products in int32"),
    "arm64": IsaWeights("QInt8", "QInt8", False, "ARM dot-product instructions sum in int32"),
}


def cpu_isa() -> str:
    """The best x86 instruction set for INT8 kernels here: avx512_vnni, avx512, avx2 (the fallback) or arm64."""
    if platform.machine().lower() in ("arm64", "aarch64"):
        return "arm64"
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return "avx2"
    if "avx512_vnni" in flags or "avx_vnni" in flags:
        return "avx512_vnni"
    return "avx512" if "avx512f" in flags else "avx2"


def node_groups(model) -> dict[str, list[str]]:
    """Names of the quantizable nodes by role. Names come from the HF module path that Optimum keeps
    (encoder.layer.N.output.dense) and from the fusion (Attention_N, numbered in graph order)."""
    nodes = [n for n in model.graph.node if n.op_type in ("MatMul", "Attention")]
    layer = {}
    for n in nodes:
        m = re.search(r"layer\.(\d+)/", n.name) or re.fullmatch(r"Attention_(\d+)", n.name)
        if m:
            layer[n.name] = int(m.group(1))
    last = max(layer.values(), default=-1)
    def matching(pattern: str) -> list[str]:
        return [n.name for n in nodes if re.search(pattern, n.name)]

    return {
        "ffn_out": matching(r"layer\.\d+/output/dense/MatMul$"),
        "ffn_in": matching(r"layer\.\d+/intermediate/dense/MatMul$"),
        "attention_out": matching(r"layer\.\d+/attention/output/dense/MatMul$"),
        "last_layer": [name for name, i in layer.items() if i == last],
        "attention": [n.name for n in nodes if n.op_type == "Attention"],
    }


class _Feeds:
    """CalibrationDataReader over texts, one text per batch so that no padding enters the ranges."""

    def __init__(self, encoder, texts: Sequence[str], input_names: list[str]):
        self._it = iter(encoder.encode(list(texts)))
        self._names = input_names

    def get_next(self):
        ids = next(self._it, None)
        if ids is None:
            return None
        a = np.asarray([ids], np.int64)
        feeds = {"input_ids": a, "attention_mask": np.ones_like(a), "token_type_ids": np.zeros_like(a)}
        return {k: v for k, v in feeds.items() if k in self._names}


def quantize(src: Path, dst: Path, recipe: Recipe, isa: str, nodes_to_quantize: list[str] | None = None,
             calibration_texts: Sequence[str] | None = None, encoder=None) -> dict:
    """Write `dst`, the INT8 version of `src` by `recipe`; returns what was done (for export_report.json).

    Why not Optimum's ORTQuantizer: its shape inference fails on the fused (Attention,
    SkipLayerNormalization) graph; ONNX Runtime's own tools with DefaultTensorType handle the contrib ops.
    Weight type and range follow `ISA_WEIGHTS[isa]`: quantize for the CPU that will serve the file.
    """
    import onnx
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static

    model = onnx.load(str(src))
    groups = node_groups(model)
    if isa not in ISA_WEIGHTS:
        raise ValueError(f"unknown instruction set {isa!r}: use one of {ISAS}")
    exclude = sorted({n for g in recipe.keep_fp32 for n in groups[g]})
    if recipe.only:
        picked = sorted({n for g in recipe.only for n in groups[g]})
        if not picked:
            raise ValueError(f"recipe {recipe.name}: no {'/'.join(recipe.only)} nodes in this graph")
        nodes_to_quantize = sorted(set(nodes_to_quantize) & set(picked)) if nodes_to_quantize else picked
    plan = ISA_WEIGHTS[isa]
    static = recipe.method == "static"
    weight_type = QuantType[recipe.weight_type or (plan.static if static else plan.dynamic)]
    # 7-bit weights are for s8 weights only (u8u8 products cannot saturate)
    reduce_range = recipe.reduce_range or (static and plan.static_reduce_range and weight_type == QuantType.QInt8)
    info = {"recipe": recipe.name, "method": recipe.method, "isa": isa, "ops": list(recipe.ops),
            "per_channel": recipe.per_channel, "reduce_range": reduce_range, "fp32_nodes": exclude,
            "only": list(recipe.only), "weight_type": weight_type.name}
    extra = {"DefaultTensorType": onnx.TensorProto.FLOAT}
    if recipe.method == "dynamic":
        quantize_dynamic(src, dst, weight_type=weight_type, per_channel=recipe.per_channel,
                         reduce_range=reduce_range, op_types_to_quantize=list(recipe.ops),
                         nodes_to_quantize=nodes_to_quantize, nodes_to_exclude=exclude, extra_options=extra)
    elif static:
        if not calibration_texts or encoder is None:
            raise ValueError("static quantization needs calibration texts and an encoder")
        names = [i.name for i in model.graph.input]
        quantize_static(src, dst, _Feeds(encoder, calibration_texts, names), quant_format=QuantFormat.QDQ,
                        per_channel=recipe.per_channel, reduce_range=reduce_range,
                        activation_type=QuantType.QUInt8, weight_type=weight_type,
                        op_types_to_quantize=list(recipe.ops), nodes_to_quantize=nodes_to_quantize,
                        nodes_to_exclude=exclude, extra_options=extra)
        info["calibration_texts"] = len(calibration_texts)
    else:
        raise ValueError(f"unknown quantization method {recipe.method!r}")
    return info
