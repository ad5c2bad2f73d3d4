"""Fold metrics and their summary; scikit-learn computes every number so ours can't drift from it."""

from __future__ import annotations

import numpy as np
from sklearn.metrics import accuracy_score, confusion_matrix, f1_score, precision_recall_fscore_support

KEYS = ("accuracy", "macro_f1", "weighted_f1")


def fold_metrics(y_true: np.ndarray, y_pred: np.ndarray, labels: list[str]) -> dict:
    ids = list(range(len(labels)))
    p, r, f, s = precision_recall_fscore_support(y_true, y_pred, labels=ids, zero_division=0)
    return {
        "accuracy": float(accuracy_score(y_true, y_pred)),
        "macro_f1": float(f1_score(y_true, y_pred, labels=ids, average="macro", zero_division=0)),
        "weighted_f1": float(f1_score(y_true, y_pred, labels=ids, average="weighted", zero_division=0)),
        "per_class": {
            name: {"precision": float(p[i]), "recall": float(r[i]), "f1": float(f[i]), "support": int(s[i])}
            for i, name in enumerate(labels)
        },
        "confusion_matrix": confusion_matrix(y_true, y_pred, labels=ids).tolist(),
    }


def summarize(folds: list[dict], keys: tuple[str, ...] = KEYS) -> dict:
    """mean and (population) std of each headline metric (`keys`) over folds."""
    out = {}
    for key in keys:
        values = np.array([f[key] for f in folds], dtype=float)
        out[f"{key}_mean"] = float(values.mean())
        out[f"{key}_std"] = float(values.std())
    return out
