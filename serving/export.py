"""Export a fine-tuned classifier to ONNX, optimise it for its target, optionally quantize, and gate on parity.

    python -m serving.export --model model/ --output onnx/ --quantize \\
        [--target cpu|cuda] [--eval-csv labeled.csv --text-column text --label-column label]
        [--min-agreement 0.99] [--max-f1-drop 0.5] [--max-ece-rise 1] [--near-tie-margin 0.1]
        [--confident-score 0.9] [--int8-recipes static-qdq,dynamic-per-channel,...]
        [--min-int8-speedup 1.15] [--speed-rows 256] [--speed-passes 3]

Writes into OUT: model.onnx (Optimum export, dynamic batch/sequence axes, ONNX Runtime transformer
fusions; fp16 for --target cuda), model_quantized.onnx (--quantize: INT8 for CPU, the first recipe
of --int8-recipes that passes the gate), the tokenizer, config.json (id2label: the labels),
normalization.json / training_config.json / calibration.json / baseline/ (the TF-IDF blend) when the model
has them, and export_report.json.
The gate (serving/parity.py) compares each file with PyTorch on up to --max-eval-rows rows of
--eval-csv or, without labels, on a built-in sample (agreement only, with a warning). A single-label file is
judged on what users see (its logits through the folder's blend and calibration): agreement on the answers
fp32 is confident of and beyond near-ties, the served macro-F1 and ECE (parity.py says how). A multi-label model (config.json problem_type
multi_label_classification) is judged so per label decision (served score > served threshold; the mean per-label
ECE), serving/parity_multilabel.py; its --eval-csv label cells hold names separated by
--label-sep (default: thresholds.json's, else ";"), or a JSON list in JSONL/Parquet. A file that fails is not kept and the command exits 2; when only
INT8 fails, model.onnx is kept and the report lists every recipe tried and why each failed.
INT8 must also be faster: a recipe that passes is timed against model.onnx on up to --speed-rows of
the judged rows on this CPU (the engine alone, median of --speed-passes interleaved passes) and becomes
the CPU default only if it is at least --min-int8-speedup times as fast. Otherwise the next recipe is
tried; when none is fast enough, the fastest that passed is still written (for `--int8` on another
CPU) but export_report.json's `cpu_default` names model.onnx and says why. The report records the
instruction set it was measured on (`isa`); the engine warns when it serves on another.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":  # outside the project's venv: a one-line hint, not a traceback
    from textdata.inputs import hint_on_missing_module

    sys.excepthook = hint_on_missing_module

import argparse
import logging
import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from baseline.blend import carry_blend
from baseline.ood import carry_ood
from serving.engine import Classifier, ModelError
from serving.export_gate import CANDIDATE, Judged, check_file, quantize_gated
from serving.model_folder import ONNX_FILE, ONNX_INT8_FILE, REPORT_FILE
from serving.parity import (
    ServedReference,
    agreement,
    builtin_sample,
    compare,
    compare_label_sets,
    served_line,
    tokenization_mismatch,
)
from serving.quantize import BY_NAME, DEFAULT_ORDER, NO_VNNI_ORDER, cpu_isa
from serving.quiet import understood_messages_dropped
from textdata.errors import DataError, exits_2_on_user_error
from textdata.flags import Flag, config_from, parser_for
from textdata.inputs import check_table
from textdata.labels import LabelSpace
from textdata.learned import folder_note
from textdata.model_files import CARRIED
from textdata.plain_files import copy_plain_file
from textdata.run_folder import check_classifier, model_in_run
from textdata.tables import missing_text, read_table, write_json

log = logging.getLogger("serving.export")

# Files that travel with the model besides what Optimum writes (our own contracts from finetune/).
SIDECARS = CARRIED  # textdata/model_files.py: the manifest says which files travel


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
    max_f1_drop: float = 0.5
    max_ece_rise: float = 1.0  # points of top-label ECE (served scores) a file may add
    near_tie_margin: float = 0.1  # fp32's top two served scores closer than this: a changed label is noise
    confident_score: float = 0.9  # a confident answer where calibration.json sets no threshold
    int8_recipes: tuple[str, ...] = ()  # empty: this CPU's order (serving.quantize.default_order)
    opset: int | None = None
    max_eval_rows: int = 2000
    sample_size: int = 500
    min_int8_speedup: float = 1.15
    speed_rows: int = 256
    speed_passes: int = 3
    label_sep: str | None = None  # multi-label --eval-csv: None = thresholds.json's label_sep, else ";"


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


def _eval_rows(cfg: ExportConfig) -> tuple[list[str], list[str] | None, list[str]]:
    """(judged texts, their labels or None, calibration texts for static INT8, disjoint from the judged)."""
    if cfg.eval_csv is None:
        return builtin_sample(cfg.sample_size), None, builtin_sample(200, seed=1)
    df = read_table(cfg.eval_csv, columns={cfg.text_column: "--text-column", cfg.label_column: "--label-column"})
    df = df[~missing_text(df[cfg.text_column])]
    if df.empty:
        raise DataError(f"{cfg.eval_csv}: no rows with text in column {cfg.text_column!r}")
    df = df.sample(frac=1.0, random_state=0)
    n_calib = min(200, len(df) // 5)
    calib, judged = df.iloc[:n_calib], df.iloc[n_calib : n_calib + cfg.max_eval_rows]
    texts = judged[cfg.text_column].astype(str).tolist()
    # raw cells: a multi-label model parses them (JSONL/Parquet lists included), a single-label one takes strings
    cells = [(i, c) for i, c in zip(judged.index, judged[cfg.label_column])]
    return texts, cells, calib[cfg.text_column].astype(str).tolist() or texts


def _targets(cfg: ExportConfig, reference: Classifier, cells: list | None):
    """The gate's y_true: label strings, or for a multi-label model an (n, L) 0/1 matrix (labels the model
    does not know are left out, with a warning naming them). Each cell is read by the model's label space (a
    multi-label one with --label-sep where given); one it cannot read is a DataError naming the row, the column
    and the value, as in training."""
    if cells is None:
        return None
    space = reference.space.with_sep(cfg.label_sep)
    sets = [space.parse(c, f"{cfg.eval_csv}: data row {i + 1}, column {cfg.label_column!r}") for i, c in cells]
    return space.pick(_label_targets, _set_targets)(cfg, space, sets)


def _label_targets(cfg: ExportConfig, space: LabelSpace, sets: list[list[str]]) -> list[str]:
    return [space.join(names) for names in sets]


def _set_targets(cfg: ExportConfig, space: LabelSpace, sets: list[list[str]]) -> np.ndarray:
    y, unknown = space.matrix(sets)
    if unknown:
        log.warning("%s: %d label name(s) the model does not know are left out of the gate's targets: %s",
                    cfg.eval_csv, len(unknown), ", ".join(f"{k!r} ({v} rows)" for k, v in list(unknown.items())[:5]))
    return y


def _check_config(cfg: ExportConfig) -> ExportConfig:
    """The options checked before anything loads (a typo answers at once); the model folder a run folder names."""
    if cfg.quantize and cfg.target == "cuda":
        raise ModelError("--quantize with --target cuda: dynamic INT8 has no CUDA kernels in ONNX Runtime "
                         "(it would run on the CPU); export fp16 for CUDA, or INT8 with --target cpu")
    if not (0.0 < cfg.min_agreement <= 1.0):
        raise DataError(f"--min-agreement {cfg.min_agreement}: use a fraction in (0, 1]")
    if not (cfg.max_ece_rise >= 0 and 0 <= cfg.near_tie_margin < 1 and 0 < cfg.confident_score <= 1):
        raise DataError(f"--max-ece-rise {cfg.max_ece_rise}, --near-tie-margin {cfg.near_tie_margin}, --confident-score "
                        f"{cfg.confident_score}: use points >= 0, a score gap in [0, 1) and a score in (0, 1] "
                        "(e.g. 1, 0.1, 0.9)")
    if cfg.min_int8_speedup < 0 or cfg.speed_rows < 1 or cfg.speed_passes < 1:
        raise DataError(f"--min-int8-speedup {cfg.min_int8_speedup}, --speed-rows {cfg.speed_rows}, "
                        f"--speed-passes {cfg.speed_passes}: use a ratio >= 0 (0 = INT8 whatever its speed "
                        "here) and positive counts (e.g. 1.15, 256, 3)")
    if cfg.max_f1_drop < 0:
        raise DataError(f"--max-f1-drop {cfg.max_f1_drop}: use points of macro-F1 >= 0 (0.5 = half a point)")
    unknown = [r for r in cfg.int8_recipes if r not in BY_NAME]
    if unknown:
        raise DataError(f"--int8-recipes {','.join(cfg.int8_recipes)}: unknown {unknown}; "
                        f"known: {', '.join(BY_NAME)}")
    if not cfg.model.is_dir():
        raise ModelError(f"{cfg.model}: no such model folder")
    cfg = replace(cfg, model=model_in_run(cfg.model, use=("model",)))
    check_classifier(cfg.model)
    if cfg.eval_csv is not None:
        check_table(cfg.eval_csv, {cfg.text_column: "--text-column", cfg.label_column: "--label-column"},
                    flag="--eval-csv")
    return cfg


def _write_folder(cfg: ExportConfig) -> None:
    """model.onnx and what travels with it (tokenizer, config.json with id2label, our sidecars, the blend) into
    --output; a file an earlier export left there that this model does not have is removed."""
    cfg.output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".export-", dir=cfg.output) as tmp:
        model_file, raw = _onnx_export(cfg, Path(tmp))
        for name in (ONNX_FILE, ONNX_INT8_FILE, CANDIDATE):
            (cfg.output / name).unlink(missing_ok=True)  # a stale file must not outlive this export
        for p in raw.iterdir():
            if p.suffix != ".onnx":
                shutil.copy2(p, cfg.output / p.name)
        for name in SIDECARS:
            if (cfg.model / name).exists():  # plain bytes: a link to a system file is refused, not copied
                copy_plain_file(cfg.model / name, cfg.output / name)
            else:  # a calibration from an earlier export into this folder must not calibrate this model
                (cfg.output / name).unlink(missing_ok=True)
        carry_blend(cfg.model, cfg.output)
        carry_ood(cfg.model, cfg.output)
        shutil.move(model_file, cfg.output / ONNX_FILE)


def _report_head(cfg: ExportConfig, reference: Classifier, ref: Judged) -> dict:
    """What export_report.json says before any file is judged."""
    # k-fold's finding (textdata/learned.py), for the answers as served: with the blend when it travels along
    note = folder_note(cfg.model, blended=reference.model_folder.has_blend)
    y_true = ref.y_true
    return {
        "source": str(cfg.model.resolve()),
        "target": cfg.target,
        "precision": "fp16" if cfg.target == "cuda" else "fp32",
        "optimization": "optimum O2 (ONNX Runtime transformer fusions)",
        "quantization": None,
        "isa": cpu_isa(),
        "cpu_default": {"file": ONNX_FILE, "why": "no --quantize"},
        "max_length": reference.max_length,
        "labels": reference.labels,
        **reference.space.pick({}, {"multi_label": True, "thresholds": reference.info()["thresholds"]}),
        "gate": {"judged_on": "eval_csv" if y_true is not None else "builtin_sample", "rows": len(ref.texts),
                 **reference.space.pick({}, {"agreement": "per-label decisions (sigmoid > threshold)"}),
                 **({"judges": "served answers (blend and calibration applied): agreement on fp32's confident "
                               "answers and beyond near-ties, served macro-F1 and ECE",
                     "confident": ref.served.confident_rule, "near_tie_margin": cfg.near_tie_margin,
                     "max_ece_rise_points": cfg.max_ece_rise if y_true is not None else None}
                    if ref.served is not None else {}),
                 "min_agreement": cfg.min_agreement,
                 "max_f1_drop_points": cfg.max_f1_drop if y_true is not None else None},
        "eval_csv": str(cfg.eval_csv) if cfg.eval_csv else None,
        "eval_rows": len(y_true) if y_true is not None else 0,
        "pytorch": {"macro_f1": ref.f1} if y_true is not None else {},
        "files": {},
        "warnings": [note] if note else [],
    }


def _judge_files(cfg: ExportConfig, report: dict, ref: Judged, calib) -> dict:
    """Gate model.onnx, then (--quantize) the INT8 recipes, into `report`; {file: why} for each that failed."""
    failed = {}
    if cfg.target == "cuda" and not _has_cuda():
        report["files"][ONNX_FILE] = {"checked": False, "why": "fp16 CUDA model and no CUDA provider here"}
        log.warning("%s not checked against PyTorch: no CUDA provider on this machine", ONNX_FILE)
    else:
        stats, why, _ = check_file(cfg, cfg.output / ONNX_FILE, ref)
        report["files"][ONNX_FILE] = {**stats, "checked": True, "passed": not why, "why": why,
                                      "size_mb": round((cfg.output / ONNX_FILE).stat().st_size / 2**20, 2)}
        if why:
            failed[ONNX_FILE] = "; ".join(why)
    if cfg.quantize and not failed:
        info, attempts, report["cpu_default"] = quantize_gated(cfg, ref, calib)
        report["quantization"], report["int8_attempts"] = info, attempts
        if info and report["cpu_default"]["file"] == ONNX_FILE:
            log.warning("%s", report["cpu_default"]["why"])
        if info:
            best = next(a for a in attempts if a["recipe"] == info["recipe"])
            report["files"][ONNX_INT8_FILE] = {**best, "checked": True,
                                               "size_mb": round((cfg.output / ONNX_INT8_FILE).stat().st_size / 2**20, 2)}
        else:
            failed[ONNX_INT8_FILE] = "every recipe failed (" + "; ".join(
                f"{a['recipe']}: {', '.join(a['why'])}" for a in attempts) + ")"
    return failed


def run(cfg: ExportConfig) -> dict:
    cfg = _check_config(cfg)
    t0 = time.time()
    # fp32 eager on every device (on CUDA the torch default is bf16): the parity gate's reference.
    # Loading also validates config, labels and tokenizer.
    reference = Classifier.load(cfg.model, provider="torch", precision="fp32", cuda_graphs=False)
    texts, cells, calib = _eval_rows(cfg)
    y_true = _targets(cfg, reference, cells)
    mismatch = tokenization_mismatch(cfg.model, reference, texts)
    if mismatch:
        raise ModelError(f"{cfg.model}: serving would tokenize differently from training: {mismatch}")
    if y_true is None:
        log.warning("no --eval-csv: the parity gate judges agreement on %d built-in texts, not on your "
                    "data, and cannot judge macro-F1; pass --eval-csv with labeled rows to judge on them", len(texts))
    _write_folder(cfg)
    labels = reference.labels
    ref_logits = reference.predict_logits(texts)
    compare_as = reference.space.pick(compare, compare_label_sets)
    ref_f1 = compare_as(ref_logits, ref_logits, labels, y_true, reference.thresholds).get("macro_f1")
    served = ServedReference.of(reference, texts, ref_logits, y_true, cfg.confident_score)
    ref = Judged(texts, labels, ref_logits, y_true, ref_f1, served)
    report = _report_head(cfg, reference, ref)
    failed = _judge_files(cfg, report, ref, calib)
    report["passed"] = not failed
    report["seconds"] = round(time.time() - t0, 1)
    write_json(cfg.output / REPORT_FILE, report)
    if failed:
        if ONNX_FILE in failed:  # fp32 stays when only INT8 failed: it still serves
            (cfg.output / ONNX_FILE).unlink()
        kept = "" if ONNX_FILE in failed else f"; {ONNX_FILE} (fp32) passed and is kept"
        details = ", ".join(f"{n}: {w}" for n, w in failed.items())
        raise ModelError(f"parity gate failed ({details}){kept}; details in {cfg.output / REPORT_FILE}")
    return report


def _has_cuda() -> bool:
    import onnxruntime as ort

    return "CUDAExecutionProvider" in ort.get_available_providers()


def _recipe_list(value: str) -> tuple[str, ...]:
    return tuple(r.strip() for r in value.split(",") if r.strip())


FLAGS = {
    "model": Flag("fine-tuned transformers folder"),
    "output": Flag("folder to write the ONNX model into"),
    "target": Flag("the device the export is for", choices=("cpu", "cuda")),
    "quantize": Flag("also write model_quantized.onnx (INT8, CPU)"),
    "eval_csv": Flag("labeled table for the parity gate and macro-F1", shown="none: a built-in sample, no F1"),
    "text_column": Flag("the --eval-csv column holding the texts"),
    "label_column": Flag("the --eval-csv column holding the labels"),
    "min_agreement": Flag("agreement with PyTorch required on the answers fp32 is confident of and beyond near-ties "
                          "(per-label decisions for a multi-label model)"),
    "max_f1_drop": Flag("macro-F1 points a file may lose against PyTorch on --eval-csv rows"),
    "max_ece_rise": Flag("points of ECE (served scores: top-label; multi-label: mean per label) a file may add "
                         "on --eval-csv rows"),
    "near_tie_margin": Flag("answers whose top two fp32 served scores are closer than this (multi-label: a score this "
                            "close to its threshold) may change; --min-agreement holds on the rest"),
    "confident_score": Flag("a served score that counts as confident where calibration.json sets no threshold "
                            "(multi-label: this or 1 minus it); --min-agreement holds on those answers"),
    "int8_recipes": Flag(f"INT8 recipes to try in order, comma-separated, first that passes wins "
                         f"(known: {', '.join(BY_NAME)})", type=_recipe_list,
                         shown=f"{','.join(DEFAULT_ORDER)} (with VNNI or on ARM), {','.join(NO_VNNI_ORDER)} (without; "
                               "AVX2 leaves out static-qdq)"),
    "opset": Flag("ONNX opset", shown="Optimum's choice"),
    "min_int8_speedup": Flag("INT8 becomes the CPU default only if this many times as fast as model.onnx here "
                             "(0: whatever its speed, e.g. when exporting for another CPU)"),
    "speed_rows": Flag("judged rows timed for the speed check"),
    "speed_passes": Flag("interleaved timed passes (median)"),
    "max_eval_rows": Flag("--eval-csv rows the gate judges (seeded sample)"),
    "label_sep": Flag("multi-label model: separator of the names in --eval-csv's label cells",
                      shown="thresholds.json's label_sep, else ;"),
    "sample_size": Flag("built-in texts judged when there is no --eval-csv"),
}


def build_parser() -> argparse.ArgumentParser:
    return parser_for(ExportConfig, "python -m serving.export", __doc__.split("\n")[0], FLAGS)


def parse_args(argv: list[str] | None = None) -> ExportConfig:
    return config_from(ExportConfig, build_parser().parse_args(argv))


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    # The quantizer logs every tensor at INFO on the root logger; only our own progress is worth reading.
    from textdata.log_stream import StderrHandler

    logging.basicConfig(level=logging.WARNING, format="%(message)s", handlers=[StderrHandler()])
    logging.getLogger("serving").setLevel(logging.INFO)
    cfg = parse_args(argv)
    with understood_messages_dropped():
        report = run(cfg)
    f1_ref = report["pytorch"].get("macro_f1")
    for name, s in report["files"].items():
        if not s.get("checked"):
            print(f"{name}: not checked ({s['why']})")
            continue
        f1 = f", macro-F1 {s['macro_f1']:.4f} (PyTorch {f1_ref:.4f})" if "macro_f1" in s else ""
        recipe = f", INT8 recipe {s['recipe']}" if "recipe" in s else ""
        what, share = agreement(s)
        print(f"{name}: {s['size_mb']} MB, max |Δlogit| {s['max_abs_logit_diff']:.2e}, "
              f"{what} {share:.4f} on {s['texts']} texts{f1}{recipe}")
        if "served" in s:
            print("  served: " + served_line(s["served"]))
    if cfg.quantize:
        print(f"CPU default: {report['cpu_default']['file']}: {report['cpu_default']['why']}")
    for w in report["warnings"]:
        print(f"warning: {w}")
    print(f"wrote {cfg.output} ({report['seconds']} s); report: {cfg.output / REPORT_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
