"""The one out-of-fold loop behind every "fitted on the other folds" number of a k-fold report: for each fold k,
something is fitted on the rows of the other folds only and applied to fold k's rows, so the number it gives
on fold k never saw fold k's labels (the blend, the per-label thresholds, the calibrators, the served threshold).
scikit-learn's `cross_val_predict` is this loop for estimators; here the "estimator" is any fit function.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np


def fold_masks(fold_of: np.ndarray) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(fold id, its rows, the other folds' rows) as boolean masks, folds in ascending order."""
    fold_of = np.asarray(fold_of)
    for k in np.unique(fold_of):
        held = fold_of == k
        yield int(k), held, ~held


def nested(fold_of: np.ndarray, fit: Callable, apply: Callable, out: np.ndarray | None = None,
           per_fold: list | None = None) -> tuple[np.ndarray | dict, list]:
    """For each fold (ascending): apply(fit(the other folds' rows), its rows); and what was fitted per fold (fold
    order). `fit` and `apply` take boolean row masks. With `out` (a row for each row of `fold_of`): `out` with
    each fold's rows set to what `apply` gave; without: {fold id: what `apply` gave} (a per-fold score).
    `per_fold`: what an earlier nested step fitted for each fold (fold order), on the same other folds (the
    calibrator of a threshold chosen on calibrated scores), handed to `fit` and `apply` as their last argument."""
    fitted, answers = [], {}
    for i, (k, held, rest) in enumerate(fold_masks(fold_of)):
        given = () if per_fold is None else (per_fold[i],)
        model = fit(rest, *given)
        got = apply(model, held, *given)
        if out is None:
            answers[k] = got
        else:
            out[held] = got
        fitted.append(model)
    return (answers if out is None else out), fitted
