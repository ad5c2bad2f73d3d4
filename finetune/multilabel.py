"""Multi-label scores and thresholds: what k-fold --multi-label measures, computed by scikit-learn.

A row's predicted labels are those whose probability is over their threshold, `p > t` (serving/multilabel.py
answers with the same rule). Per-label thresholds are tuned on out-of-fold rows, each label's the one that
maximises its F1 there; and scored nested: fold k is scored with thresholds tuned on the other folds' rows
only, so the tuned score never saw the rows it is measured on. 0.5 for every label is reported beside.

The metrics (docs/finetune.md#multi-label says what each means):
- micro-F1: F1 over every (row, label) decision pooled; frequent labels weigh most;
- macro-F1: the mean of the per-label F1s; every label weighs the same (the search objective, see search.py);
- samples-F1: the mean over rows of each row's F1 between its true and predicted label sets; a row with no
  label answered with no label scores 1 (a correct "none of these"), hence zero_division=1 there only;
- subset accuracy: the share of rows whose predicted set equals the true set exactly;
- per label: precision, recall, F1 and support (rows carrying it).
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import accuracy_score, f1_score, precision_recall_fscore_support

from finetune import metrics
from textdata.nested import fold_masks, nested

KEYS = ("micro_f1", "macro_f1", "samples_f1", "subset_accuracy")
DEFAULT = 0.5
# Candidate thresholds: a grid rather than every distinct probability, so a label's threshold cannot sit on
# one row's score (a rare label's F1 surface is a few steps); (0, 1) open, as serving requires.
GRID = np.round(np.arange(0.02, 0.981, 0.01), 2)


def predict_sets(proba: np.ndarray, thresholds) -> np.ndarray:
    """(n, L) 0/1: label j predicted where proba > thresholds[j]."""
    return (np.asarray(proba) > np.asarray(thresholds, np.float64)).astype(np.int64)


def multilabel_metrics(Y: np.ndarray, pred: np.ndarray, labels: list[str]) -> dict:
    ids = list(range(len(labels)))
    p, r, f, s = precision_recall_fscore_support(Y, pred, labels=ids, zero_division=0)
    return {
        "micro_f1": float(f1_score(Y, pred, average="micro", zero_division=0)),
        "macro_f1": float(f1_score(Y, pred, average="macro", zero_division=0)),
        "samples_f1": float(f1_score(Y, pred, average="samples", zero_division=1)),
        "subset_accuracy": float(accuracy_score(Y, pred)),
        "per_label": {name: {"precision": float(p[j]), "recall": float(r[j]), "f1": float(f[j]),
                             "support": int(s[j])} for j, name in enumerate(labels)},
    }


def tune_thresholds(Y: np.ndarray, proba: np.ndarray) -> np.ndarray:
    """Per label, the grid threshold with the best F1 on these rows (ties: the one nearest 0.5); 0.5 for a label
    no row carries, whose F1 no threshold can raise."""
    Y = np.asarray(Y).astype(bool)
    proba = np.asarray(proba, np.float64)
    pos = Y.sum(0)
    best = np.full(Y.shape[1], DEFAULT)
    best_f1 = np.full(Y.shape[1], -1.0)
    for t in sorted(GRID, key=lambda g: abs(g - DEFAULT)):  # nearest 0.5 first: a later tie does not replace it
        pred = proba > t
        tp = (pred & Y).sum(0)
        f1 = 2 * tp / np.maximum(pred.sum(0) + pos, 1)
        better = f1 > best_f1 + 1e-12
        best[better], best_f1[better] = t, f1[better]
    best[pos == 0] = DEFAULT
    return best


def nested_thresholds(Y: np.ndarray, proba: np.ndarray, fold_of: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """(predicted sets where fold k's rows use thresholds tuned on the other folds' rows, those thresholds)."""
    return nested(fold_of, lambda rest: tune_thresholds(Y[rest], proba[rest]),
                  lambda t, held: predict_sets(proba[held], t), np.zeros(np.shape(Y), dtype=np.int64))


def summarize(folds: list[dict]) -> dict:
    """mean and (population) std of each multi-label headline metric over folds (finetune/metrics.py's)."""
    return metrics.summarize(folds, KEYS)


def scored(Y: np.ndarray, proba: np.ndarray, fold_of: np.ndarray, labels: list[str]) -> dict:
    """Per fold and mean ± std, nested-tuned (the headline) and at 0.5, of one set of out-of-fold probabilities."""
    pred, per_fold = nested_thresholds(Y, proba, fold_of)
    tuned, plain = [], []
    for (k, held, _), t in zip(fold_masks(fold_of), per_fold):
        tuned.append({"fold": int(k), **multilabel_metrics(Y[held], pred[held], labels),
                      "thresholds": dict(zip(labels, map(float, t)))})
        plain.append({"fold": int(k), **multilabel_metrics(Y[held], predict_sets(proba[held], DEFAULT), labels)})
    return {"folds": tuned, **summarize(tuned), "at_0_5": {"folds": plain, **summarize(plain)}}
