"""What both kinds' k-fold outputs share (finetune/report.py's SingleLabelTask, finetune/multilabel_run.py's
MultiLabelTask): oof_predictions.csv's columns over every input row, and the pictures of the folds."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def row_notes(data, held, dropped: str) -> np.ndarray:
    """oof_predictions.csv's `error` per input row: why a row has no out-of-fold prediction ("" where it has)."""
    n_rows = len(data.table)
    error = np.full(n_rows, "", dtype=object)
    error[np.setdiff1d(np.arange(n_rows), data.keep)] = dropped
    if held is not None:
        error[held.keep] = "held out (--holdout): in holdout.csv"
    return error


def prob_columns(data, probs: np.ndarray, prefix: str) -> dict[str, np.ndarray]:
    """`{prefix}prob_<label>` per label over every input row (NaN where a row was not predicted)."""
    columns = {}
    for j, name in enumerate(data.labels):
        col = np.full(len(data.table), np.nan)
        col[data.keep] = probs[:, j]
        columns[f"{prefix}prob_{name}"] = col
    return columns


def fold_pictures(out: Path, report: dict, histories, model_f1: list[float]) -> None:
    """learning_curves.png and fold_scores.png (the model's macro-F1 per fold beside the baseline's and the
    blend's nested one)."""
    from finetune.plots import fold_scores_png, learning_curves_png

    learning_curves_png(histories, out / "learning_curves.png")
    blend = report["blend"] or {}
    fold_scores_png(model_f1, [b.get("macro_f1", np.nan) for b in report["baseline"]["folds"]], out / "fold_scores.png",
                    [b["macro_f1"] for b in blend["folds"]] if "folds" in blend else None)
