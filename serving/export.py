"""Export a fine-tuned classifier to ONNX, optimise it for its target, optionally quantize, and gate on parity.

    python -m serving.export --model model/ --output onnx/ --quantize \\
        [--target cpu|cuda] [--eval-csv labeled.csv --text-column text --label-column label] [--min-agreement 0.99]

Writes into OUT: model.onnx (Optimum export, dynamic batch/sequence axes, ONNX Runtime transformer
fusions; fp16 for --target cuda), model_quantized.onnx (--quantize: dynamic INT8, CPU only), the
tokenizer, config.json (id2label), labels.json, normalization.json / training_config.json when the
model has them, and export_report.json: max |Δlogit|, argmax agreement and (with --eval-csv) macro-F1
of PyTorch and of each ONNX file. A file whose argmax agreement with PyTorch is below
--min-agreement is deleted and the command exits 2, so a folder never serves a model that failed.
"""

from __future__ import annotations

import argparse
import logging
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from serving.engine import ONNX_FILE, ONNX_INT8_FILE, REPORT_FILE, Classifier, ModelError
from serving.io import DataError, missing_text, read_table, write_json

log = logging.getLogger("serving.export")

# Files that travel with the model besides what Optimum writes (our own contracts from finetune/).
SIDECARS = ("normalization.json", "training_config.json")

# Parity texts when no --eval-csv is given: short and long, Korean, English, mixed, noisy.
SAMPLE_TEXTS = [
    "오늘 회의 일정 메모", "어제 꿈에서 바다를 봤다", "로그인할 때 오류가 발생했다", "내일 약속 기록해 두기",
    "error 500 when saving", "dream about flying", "memo: buy milk", "ㅋㅋㅋㅋ 진짜 웃기네",
    "서버 에러 다시 발생함!!", "회의록 정리", "꿈 일기 쓰기 좋은 날씨", "a", "1234", "?!",
    "파일을 저장하면 프로그램이 멈추고 오류 메시지가 나타납니다. 다시 시작해도 같은 문제가 생깁니다.",
    "Calc에서 셀 서식을 바꾸려면 서식 메뉴를 선택합니다.", "https://example.com 링크 메모 😀",
    " ".join(["긴 문장을 반복해서 모델의 최대 길이를 넘기는 입력입니다"] * 60),
]


@dataclass(frozen=True)
class ExportConfig:
    model: Path
    output: Path
    target: str = "cpu"
    quantize: bool = False
    eval_csv: Path | None = None
    text_column: str = "text"
    label_column: str = "label"
    min_agreement: float = 0.99
    opset: int | None = None
    max_eval_rows: int = 2000


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


def quantize(src: Path, dst: Path, isa: str) -> dict:
    """Dynamic INT8 of MatMul/Attention weights; activations quantized per batch at run time.

    Why not Optimum's ORTQuantizer: its shape inference fails on the fused (Attention,
    SkipLayerNormalization) graph. quantize_dynamic with DefaultTensorType handles the contrib ops.
    Weight type follows Optimum's per-ISA presets: signed weights where VNNI/AVX-512/ARM have fast
    u8s8 kernels; on plain AVX2, u8u8, because AVX2's u8s8 multiply-add can saturate.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    weight_type = QuantType.QUInt8 if isa == "avx2" else QuantType.QInt8
    ops = ["MatMul", "Attention"]
    quantize_dynamic(
        str(src), str(dst), weight_type=weight_type, per_channel=False, reduce_range=False,
        op_types_to_quantize=ops, extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )
    return {"isa": isa, "weight_type": weight_type.name, "ops": ops, "method": "onnxruntime quantize_dynamic"}


def _onnx_export(cfg: ExportConfig, work: Path) -> tuple[Path, Path]:
    """Optimum export + ORT transformer fusions (O2); fp16 on the GPU target. Returns (model file, raw folder)."""
    from optimum.exporters.onnx import main_export
    from optimum.onnxruntime import ORTOptimizer
    from optimum.onnxruntime.configuration import OptimizationConfig

    raw, opt = work / "raw", work / "optimized"
    kw = {"opset": cfg.opset} if cfg.opset else {}
    main_export(str(cfg.model), output=raw, task="text-classification", do_validation=False, **kw)
    gpu = cfg.target == "cuda"
    # O2 = fusions ONNX Runtime cannot always find at load time on its own (Attention, SkipLayerNorm,
    # BiasGelu); GELU approximation stays off because it changes logits.
    ocfg = OptimizationConfig(optimization_level=2, optimize_for_gpu=gpu, fp16=gpu)
    ORTOptimizer.from_pretrained(raw).optimize(ocfg, save_dir=opt)
    return opt / "model_optimized.onnx", raw


def _eval_rows(cfg: ExportConfig) -> tuple[list[str], list[str] | None]:
    if cfg.eval_csv is None:
        return list(SAMPLE_TEXTS), None
    df = read_table(cfg.eval_csv, columns=[cfg.text_column, cfg.label_column])
    df = df[~missing_text(df[cfg.text_column])]
    if len(df) > cfg.max_eval_rows:
        df = df.sample(cfg.max_eval_rows, random_state=0)
    if df.empty:
        raise DataError(f"{cfg.eval_csv}: no rows with text in column {cfg.text_column!r}")
    return SAMPLE_TEXTS + df[cfg.text_column].astype(str).tolist(), df[cfg.label_column].astype(str).tolist()


def _compare(ref: np.ndarray, got: np.ndarray, labels: list[str], y_true: list[str] | None) -> dict:
    from sklearn.metrics import f1_score

    out = {
        "texts": len(ref),
        "max_abs_logit_diff": float(np.abs(ref - got).max()),
        "mean_abs_logit_diff": float(np.abs(ref - got).mean()),
        "argmax_agreement": float((ref.argmax(1) == got.argmax(1)).mean()),
    }
    if y_true is not None:
        n = len(y_true)
        pred = [labels[i] for i in got[-n:].argmax(1)]
        out["macro_f1"] = float(f1_score(y_true, pred, average="macro", zero_division=0))
    return out


def run(cfg: ExportConfig) -> dict:
    if cfg.quantize and cfg.target == "cuda":
        raise ModelError("--quantize with --target cuda: dynamic INT8 has no CUDA kernels in ONNX Runtime "
                         "(it would run on the CPU); export fp16 for CUDA, or INT8 with --target cpu")
    if not (0.0 < cfg.min_agreement <= 1.0):
        raise DataError(f"--min-agreement {cfg.min_agreement}: use a fraction in (0, 1]")
    if not cfg.model.is_dir():
        raise ModelError(f"{cfg.model}: no such model folder")
    t0 = time.time()
    # fp32 eager on every device (on CUDA the torch default is bf16): the parity gate's reference.
    # Loading also validates config, labels and tokenizer.
    reference = Classifier.load(cfg.model, provider="torch", precision="fp32", cuda_graphs=False)
    texts, y_true = _eval_rows(cfg)
    cfg.output.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory(prefix=".export-", dir=cfg.output) as tmp:
        work = Path(tmp)
        model_file, raw = _onnx_export(cfg, work)
        files = {ONNX_FILE: model_file}
        quant_info = None
        if cfg.quantize:
            quant_info = quantize(model_file, work / ONNX_INT8_FILE, cpu_isa())
            files[ONNX_INT8_FILE] = work / ONNX_INT8_FILE
        for name in (ONNX_FILE, ONNX_INT8_FILE):
            (cfg.output / name).unlink(missing_ok=True)  # a stale file must not outlive this export
        for p in raw.iterdir():
            if p.suffix != ".onnx":
                shutil.copy2(p, cfg.output / p.name)
        for name in SIDECARS:
            if (cfg.model / name).exists():
                shutil.copy2(cfg.model / name, cfg.output / name)
        write_json(cfg.output / "labels.json", reference.labels)
        for name, src in files.items():
            shutil.move(src, cfg.output / name)

    ref_logits = reference.predict_logits(texts)
    report = {
        "source": str(cfg.model.resolve()),
        "target": cfg.target,
        "precision": "fp16" if cfg.target == "cuda" else "fp32",
        "optimization": "optimum O2 (ONNX Runtime transformer fusions)",
        "quantization": quant_info,
        "max_length": reference.max_length,
        "labels": reference.labels,
        "min_agreement": cfg.min_agreement,
        "eval_csv": str(cfg.eval_csv) if cfg.eval_csv else None,
        "sample_texts": len(SAMPLE_TEXTS),
        "eval_rows": len(y_true) if y_true else 0,
        "pytorch": {},
        "files": {},
    }
    if y_true is not None:
        report["pytorch"] = _compare(ref_logits, ref_logits, reference.labels, y_true)
    failed = []
    for name in files:
        if cfg.target == "cuda" and not _has_cuda():
            report["files"][name] = {"checked": False, "why": "fp16 CUDA model and no CUDA provider here"}
            log.warning("%s not checked against PyTorch: no CUDA provider on this machine", name)
            continue
        onnx_clf = Classifier.load(cfg.output / name, provider="cuda" if cfg.target == "cuda" else "cpu")
        stats = _compare(ref_logits, onnx_clf.predict_logits(texts), reference.labels, y_true)
        stats["checked"] = True
        stats["passed"] = stats["argmax_agreement"] >= cfg.min_agreement
        stats["size_mb"] = round((cfg.output / name).stat().st_size / 2**20, 2)
        report["files"][name] = stats
        if not stats["passed"]:
            failed.append(name)
    report["passed"] = not failed
    report["seconds"] = round(time.time() - t0, 1)
    write_json(cfg.output / REPORT_FILE, report)
    if failed:
        for name in failed:
            (cfg.output / name).unlink()
        details = ", ".join(f"{n}: argmax agreement {report['files'][n]['argmax_agreement']:.4f}" for n in failed)
        raise ModelError(f"parity gate failed ({details} < --min-agreement {cfg.min_agreement}); deleted "
                         f"{', '.join(failed)}; details in {cfg.output / REPORT_FILE}")
    return report


def _has_cuda() -> bool:
    import onnxruntime as ort

    return "CUDAExecutionProvider" in ort.get_available_providers()


def parse_args(argv: list[str] | None = None) -> ExportConfig:
    ap = argparse.ArgumentParser(prog="python -m serving.export", description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, type=Path, help="fine-tuned transformers folder")
    ap.add_argument("--output", required=True, type=Path, help="folder to write the ONNX model into")
    ap.add_argument("--target", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--quantize", action="store_true", help="also write model_quantized.onnx (INT8, CPU)")
    ap.add_argument("--eval-csv", type=Path, help="labeled table for the parity gate and macro-F1")
    ap.add_argument("--text-column", default="text")
    ap.add_argument("--label-column", default="label")
    ap.add_argument("--min-agreement", type=float, default=0.99, help="argmax agreement with PyTorch required")
    ap.add_argument("--opset", type=int, default=None)
    ap.add_argument("--max-eval-rows", type=int, default=2000, help="sample of --eval-csv rows to compare on")
    a = ap.parse_args(argv)
    return ExportConfig(**vars(a))


def main(argv: list[str] | None = None) -> int:
    # The quantizer logs every tensor at INFO on the root logger; only our own progress is worth reading.
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("serving").setLevel(logging.INFO)
    cfg = parse_args(argv)
    try:
        report = run(cfg)
    except (DataError, ModelError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name, s in report["files"].items():
        if s.get("checked"):
            f1 = f", macro-F1 {s['macro_f1']:.4f} (PyTorch {report['pytorch']['macro_f1']:.4f})" if "macro_f1" in s else ""
            print(f"{name}: {s['size_mb']} MB, max |Δlogit| {s['max_abs_logit_diff']:.2e}, "
                  f"argmax agreement {s['argmax_agreement']:.4f} on {s['texts']} texts{f1}")
        else:
            print(f"{name}: not checked ({s['why']})")
    print(f"wrote {cfg.output} ({report['seconds']} s); report: {cfg.output / REPORT_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
