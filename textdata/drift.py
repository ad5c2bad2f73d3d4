"""What a model saw at training, as histograms, and how far what it serves has moved from it.

k-fold (`--final`) writes `reference.json` beside the model from its out-of-fold answers (the served
probabilities: the blend's where it is kept); the server (app/monitoring/monitor.py) counts the same histograms over a
sliding window of what it answers and compares them with `psi`.

Why the population stability index: it is what model-monitoring practice (and NannyML/Evidently for
categorical features) reports for a shift of a binned distribution, it is additive over bins (so each bin's
share of the alarm can be shown), symmetric, and has conventional thresholds (0.1 watch, 0.25 act). Its
sampling noise under no shift is about (bins - 1) * (1/n_window + 1/n_reference), 0.01 for 8 bins and a
window of 1,000, far under the alarm. A KS test would need the raw values and, on windows of thousands,
flags shifts too small to matter.
"""

from __future__ import annotations

import numpy as np

from textdata.labels import NONE_LABEL  # multi-label: a text with no label over its threshold
from textdata.model_files import REFERENCE as REFERENCE_FILE

# Top-label confidence in 10 equal bins; text length (characters) on a log scale, so a short-note service
# and a long-document one both spread over the bins.
CONFIDENCE_EDGES = [i / 10 for i in range(11)]
LENGTH_EDGES = [0, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, float("inf")]
EPS = 1e-4  # PSI's floor for an empty bin: a bin never seen in one side must not make it infinite
PSI_WATCH, PSI_ALERT = 0.1, 0.25


def bin_index(value: float, edges: list[float]) -> int:
    """The bin of `value` among len(edges) - 1 bins, the last one closed; O(log bins)."""
    i = int(np.searchsorted(edges, value, side="right")) - 1
    return min(max(i, 0), len(edges) - 2)


def answers(probabilities: np.ndarray, labels: list[str], thresholds=None) -> tuple[list[str], np.ndarray]:
    """(answered labels, top confidence) per row: argmax for single-label; multi-label (`thresholds` given)
    counts every label over its threshold (NONE_LABEL where none is) and its highest probability."""
    p = np.asarray(probabilities, dtype=np.float64)
    if thresholds is None:
        return [labels[i] for i in p.argmax(1)], p.max(1)
    over = p > np.asarray(thresholds)[None, :]  # p > t: the rule k-fold and serving use
    names = [[labels[j] for j in np.flatnonzero(row)] or [NONE_LABEL] for row in over]
    return [n for row in names for n in row], p.max(1)


def histogram(values, edges: list[float]) -> list[int]:
    counts = np.zeros(len(edges) - 1, dtype=np.int64)
    for v in values:
        counts[bin_index(float(v), edges)] += 1
    return counts.tolist()


def build_reference(probabilities: np.ndarray, texts: list[str], labels: list[str], thresholds=None,
                    source: str = "out-of-fold") -> dict:
    """reference.json: the answered-label mix, the confidence and text-length histograms of `texts`."""
    answered, confidence = answers(probabilities, labels, thresholds)
    mix = {name: 0 for name in [*labels, *([NONE_LABEL] if thresholds is not None else [])]}
    for name in answered:
        mix[name] += 1
    # single-label: the training mix as the served scores see it, what the class-mix estimate divides by
    mean = None if thresholds is not None else dict(zip(labels, np.asarray(probabilities, np.float64).mean(0).round(6).tolist()))
    return {"source": source, "n_rows": len(texts), "multi_label": thresholds is not None,
            "class_mix": mix, **({"mean_probability": mean} if mean is not None else {}),
            "confidence": {"edges": CONFIDENCE_EDGES, "counts": histogram(confidence, CONFIDENCE_EDGES)},
            "length": {"edges": LENGTH_EDGES[:-1] + ["inf"], "counts": histogram(map(len, texts), LENGTH_EDGES)}}


def psi(reference_counts, window_counts) -> float:
    """Population stability index between two histograms over the same bins (counts, any totals)."""
    ref = np.asarray(reference_counts, dtype=np.float64)
    now = np.asarray(window_counts, dtype=np.float64)
    if ref.sum() == 0 or now.sum() == 0:
        return 0.0
    ref = np.maximum(ref / ref.sum(), EPS)
    now = np.maximum(now / now.sum(), EPS)
    return float(np.sum((now - ref) * np.log(now / ref)))


def level(value: float) -> str:
    return "alert" if value >= PSI_ALERT else "watch" if value >= PSI_WATCH else "ok"


def save_reference(folder, served_oof: np.ndarray, texts: list[str], labels: list[str], thresholds=None) -> dict:
    """Write `folder`/reference.json from the out-of-fold probabilities of what the folder serves."""
    from pathlib import Path

    from textdata.tables import write_json

    ref = build_reference(served_oof, texts, labels, thresholds)
    write_json(Path(folder) / REFERENCE_FILE, ref)
    return ref
