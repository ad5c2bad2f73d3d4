"""The judging half of `serving.export`: one file against PyTorch's answers (serving/parity.py's gate), and the
INT8 recipes tried in order until one passes and is fast enough on this CPU."""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from serving.engine import Classifier
from serving.model_folder import ONNX_FILE, ONNX_INT8_FILE
from serving.parity import ServedReference, compare, compare_label_sets, served_stats, verdict
from serving.quantize import BY_NAME, cpu_isa, default_order, quantize

log = logging.getLogger("serving.export")


class ExportConfig(Protocol):
    """What the gate reads of serving.export's ExportConfig (a Protocol, not an import: export.py imports
    this module, and tests/test_layout.py counts type-only imports as a circle too)."""
    output: Path
    target: str
    int8_recipes: tuple[str, ...]
    min_agreement: float
    max_f1_drop: float
    max_ece_rise: float
    near_tie_margin: float
    min_int8_speedup: float
    speed_rows: int
    speed_passes: int


CANDIDATE = ".int8-candidate.onnx"  # a recipe's output while it is judged; never served
SLOW_CANDIDATE = ".int8-slow.onnx"  # the fastest recipe that passed accuracy but not speed, so far


@dataclass(frozen=True)
class Judged:
    """The judged rows and PyTorch's answers on them: what every file is compared with."""

    texts: list[str]
    labels: list[str]
    logits: object  # PyTorch fp32's logits
    y_true: object  # label strings, a multi-label 0/1 matrix, or None
    f1: float | None  # PyTorch's macro-F1 (the model alone)
    served: ServedReference | None  # single-label: fp32's answers as users get them


def check_file(cfg: ExportConfig, file: Path, ref: Judged) -> tuple[dict, list[str], Classifier]:
    # blend=False: the file alone is loaded (and timed); the served transform adds the folder's blend to its logits
    clf = Classifier.load(file, provider="cuda" if cfg.target == "cuda" else "cpu", blend=False)
    logits = clf.predict_logits(ref.texts)
    stats = clf.space.pick(compare, compare_label_sets)(ref.logits, logits, ref.labels, ref.y_true, clf.thresholds)
    if ref.served is not None:
        stats["served"] = served_stats(ref.served, logits, cfg.near_tie_margin)
    return stats, verdict(stats, ref.f1, cfg.min_agreement, cfg.max_f1_drop, cfg.max_ece_rise), clf


def time_engines(fp32: Classifier, int8: Classifier, seqs: list, passes: int, min_seconds: float = 0.25) -> dict:
    """Seconds per pass over `seqs` for each engine (tokenized once: the model alone), median of
    `passes` interleaved passes, so that a burst of load elsewhere hits both alike. A pass repeats the
    rows until it has run `min_seconds`: a small model scores a few rows in milliseconds, where one
    scheduler tick on shared cores would decide."""
    times = {"fp32": [], "int8": []}
    plan = fp32.plan(seqs)  # the same passes for both files, planned (and the pass cost measured) before the clock
    for _ in range(passes):
        for name, clf in (("fp32", fp32), ("int8", int8)):
            n, t = 0, time.perf_counter()
            while n == 0 or time.perf_counter() - t < min_seconds:
                clf._logits(seqs, plan)  # the ONNX file alone: a blend's baseline would add the same cost to both
                n += 1
            times[name].append((time.perf_counter() - t) / n)
    fp32_s, int8_s = statistics.median(times["fp32"]), statistics.median(times["int8"])
    return {"fp32_s": round(fp32_s, 4), "int8_s": round(int8_s, 4), "speedup": round(fp32_s / int8_s, 3),
            "rows": len(seqs), "passes": passes}


def quantize_gated(cfg: ExportConfig, ref: Judged, calib: list[str]) -> tuple[dict | None, list, dict]:
    """Try the recipes in order; the first that passes the accuracy gate and is at least
    --min-int8-speedup times as fast as model.onnx here becomes model_quantized.onnx and the CPU
    default. When some pass accuracy but none is fast enough, the fastest of them is written and
    model.onnx stays the default. Returns (the written recipe's quantization info or None, every
    attempt with its numbers and why it failed, the CPU default decision for export_report.json)."""
    src, cand, slow, isa = cfg.output / ONNX_FILE, cfg.output / CANDIDATE, cfg.output / SLOW_CANDIDATE, cpu_isa()
    fp32 = Classifier.load(src, provider="cpu", blend=False)  # the speed baseline; also tokenizes calibration texts
    seqs = fp32.encode(ref.texts[: cfg.speed_rows])
    attempts, slow_best = [], None  # slow_best: (info, attempt) of the fastest accurate but slow recipe
    need = cfg.min_int8_speedup
    try:
        for name in cfg.int8_recipes or default_order(isa):
            t = time.time()
            try:
                info = quantize(src, cand, BY_NAME[name], isa, calibration_texts=calib, encoder=fp32)
            except Exception as e:  # noqa: BLE001 - a recipe this graph cannot take is a failed try, not the end
                attempts.append({"recipe": name, "passed": False, "why": [f"quantization failed: {e!r}"[:300]]})
                log.warning("INT8 recipe %s: quantization failed (%r); trying the next", name, e)
                continue
            stats, why, clf = check_file(cfg, cand, ref)
            stats.update(recipe=name, passed=not why, why=why)
            attempts.append(stats)
            if why:
                stats["seconds"] = round(time.time() - t, 1)
                log.info("INT8 recipe %s: failed: %s", name, "; ".join(why))
                continue
            speed = time_engines(fp32, clf, seqs, cfg.speed_passes)
            stats.update(speed=speed, fast_enough=speed["speedup"] >= need, seconds=round(time.time() - t, 1))
            log.info("INT8 recipe %s: passed, %.2fx model.onnx's speed on %s (%d rows, %d passes; needs %.2fx)",
                     name, speed["speedup"], isa, speed["rows"], speed["passes"], need)
            if stats["fast_enough"]:
                cand.replace(cfg.output / ONNX_INT8_FILE)
                return info, attempts, {
                    "file": ONNX_INT8_FILE, "isa": isa, "speedup": speed["speedup"], "min_speedup": need,
                    "why": f"INT8 ({name}) passed the gate and ran {speed['speedup']:.2f}x model.onnx's speed "
                           f"on this CPU ({isa}; at least {need:.2f}x required)"}
            if slow_best is None or speed["speedup"] > slow_best[1]["speed"]["speedup"]:
                cand.replace(slow)
                slow_best = (info, stats)
        if slow_best is None:
            return None, attempts, {"file": ONNX_FILE, "isa": isa, "why": "no INT8 recipe passed the accuracy gate"}
        info, stats = slow_best
        slow.replace(cfg.output / ONNX_INT8_FILE)
        return info, attempts, {
            "file": ONNX_FILE, "isa": isa, "speedup": stats["speed"]["speedup"], "min_speedup": need,
            "why": f"INT8 is not faster here: the fastest recipe that passed the gate ({stats['recipe']}) ran "
                   f"{stats['speed']['speedup']:.2f}x model.onnx's speed on this CPU ({isa}; at least {need:.2f}x "
                   f"required), so model.onnx serves by default; {ONNX_INT8_FILE} is kept for --int8"}
    finally:
        cand.unlink(missing_ok=True)
        slow.unlink(missing_ok=True)
