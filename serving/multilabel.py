"""Multi-label serving: what a multi-label model folder carries and how its answers are read.

A model folder is multi-label when its config.json says `problem_type: "multi_label_classification"`
(what transformers' BCE-with-logits head and finetune/kfold.py --multi-label write). Its
`thresholds.json` (written by k-fold, copied by serving.export) holds one threshold per label:

    {"labels": [names in id order], "thresholds": [float per label], "default": 0.5, "tuned": true,
     "label_sep": ";"}

Without it every label's threshold is 0.5. Probabilities are independent sigmoids, one per label; a text's
labels are those whose probability is over their threshold (strictly: `p > t`), possibly none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from textdata.errors import ModelError
from textdata.labels import DEFAULT_SEP, check_sep, is_multi_label
from textdata.model_files import THRESHOLDS as THRESHOLDS_FILE
from textdata.plain_files import read_json

DEFAULT_THRESHOLD = 0.5
__all__ = ["is_multi_label"]  # kept importable here: the engine and older callers ask serving.multilabel


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """Per-label probabilities, float32, without overflow warnings for large negative logits."""
    z = np.asarray(logits, np.float32)
    return (0.5 * (1.0 + np.tanh(0.5 * z))).astype(np.float32, copy=False)


@dataclass(frozen=True)
class Thresholds:
    values: np.ndarray  # (L,) float64, label id order
    label_sep: str = DEFAULT_SEP
    tuned: bool = False
    source: str = "default 0.5 (no thresholds.json)"

    def as_dict(self, labels: list[str]) -> dict[str, float]:
        return {lab: float(t) for lab, t in zip(labels, self.values)}


MAX_FILE_BYTES = 8 << 20  # 10,000 labels with their thresholds are ~0.3 MB


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def load_thresholds(folder: str | Path, labels: list[str]) -> Thresholds:
    """The folder's thresholds.json checked against the model's labels, or 0.5 per label without one; ModelError
    naming the file and the field for anything else."""
    path = Path(folder) / THRESHOLDS_FILE
    if not path.exists():
        check_sep(DEFAULT_SEP, f"{Path(folder) / 'config.json'} (no {THRESHOLDS_FILE}: the default)", labels, ModelError)
        return Thresholds(np.full(len(labels), DEFAULT_THRESHOLD))
    expected = '{"labels": [...], "thresholds": [...], "label_sep": ";"}'
    try:
        spec = read_json(path, MAX_FILE_BYTES)
    except (OSError, ValueError, RecursionError) as e:
        raise ModelError(f"{path}: unreadable ({type(e).__name__}: {str(e)[:200]}); expected {expected}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("labels"), list) or not isinstance(
            spec.get("thresholds"), list):
        raise ModelError(f"{path}: expected {expected}, with lists for labels and thresholds")
    names, values = spec["labels"], spec["thresholds"]
    if names != list(labels) or len(values) != len(labels):
        shown = [str(n)[:40] for n in names[:5]]
        raise ModelError(f"{path}: labels {shown}{'…' if len(names) > 5 else ''} ({len(values)} thresholds) "
                         f"do not match the model's {list(labels)[:5]} ({len(labels)} labels, config.json id order)")
    bad = [(n, v) for n, v in zip(names, values) if not _is_number(v) or not math.isfinite(v) or not 0.0 < v < 1.0]
    if bad:
        raise ModelError(f"{path}: threshold {repr(bad[0][1])[:40]} for label {bad[0][0]!r} is not a probability "
                         "in (0, 1)")
    sep = spec.get("label_sep")
    sep = DEFAULT_SEP if sep in (None, "") else sep  # absent: the default, as before
    check_sep(sep, f"{path}, field 'label_sep'", labels, ModelError)  # the label space's one rule
    return Thresholds(np.asarray(values, np.float64), sep, spec.get("tuned") is True, THRESHOLDS_FILE)


@dataclass
class MultiLabelPrediction:
    """One text's answer from a multi-label model. `labels`: those over their thresholds (maybe none);
    `scores`: every label's probability, id order. `label`/`score`/`probabilities` are the most likely
    label, its probability and the scores (top_k-limited when asked), so code written for single-label
    predictions keeps working (the check at activation, the Classify tab)."""

    labels: list[str]
    scores: dict[str, float]
    label: str
    score: float
    probabilities: dict[str, float]
    logits: np.ndarray = field(repr=False, default=None)  # the model's own logits, for raw-score clients (TEI)
    confident: bool = True  # every label in `labels` clears its threshold in calibration.json; always without one
    reason: str | None = None  # why not confident where the scores are not why: "out of domain" (ood/)

    def raw_scores(self, names: list[str]) -> dict[str, float]:
        return {lab: float(v) for lab, v in zip(names, self.logits)}


def multi_label_predictions(probs: np.ndarray, logits: np.ndarray, labels: list[str], thresholds: np.ndarray,
                            top_k: int | None, confident=None, reasons=None) -> list[MultiLabelPrediction]:
    over = probs > thresholds[None, :]
    sure = np.ones(len(probs), bool) if confident is None else np.asarray(confident, bool)
    out = []
    for i, (p, lg, row, ok) in enumerate(zip(probs, logits, over, sure)):
        scores = {labels[j]: float(p[j]) for j in range(len(labels))}
        best = int(p.argmax())
        dist = scores if top_k is None else {labels[j]: scores[labels[j]]
                                             for j in np.argsort(-p, kind="stable")[: max(1, top_k)]}
        out.append(MultiLabelPrediction([labels[j] for j in np.flatnonzero(row)], scores, labels[best],
                                        float(p[best]), dist, lg, bool(ok), None if reasons is None else reasons[i]))
    return out


def decision_margin(probs: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Per row, how far its least certain label is from its threshold, as a share of the room on that side
    (0: a label exactly at its threshold, 1: every label at 0 or 1). The Label tab's confidence: least
    confident first puts the texts where one tick could go either way first."""
    t = thresholds[None, :]
    room = np.where(probs > t, 1.0 - t, t)
    return (np.abs(probs - t) / room).min(axis=1) if probs.shape[1] else np.ones(len(probs))
