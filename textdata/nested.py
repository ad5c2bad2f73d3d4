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


def nested(fold_of: np.ndarray, fit: Callable[[np.ndarray], object], apply: Callable[[object, np.ndarray], object],
           out: np.ndarray) -> tuple[np.ndarray, list]:
    """`out` with each fold's rows set to apply(fit(other folds' rows), its rows), and what was fitted per fold
    (fold order). `fit` and `apply` take boolean row masks; `out` holds a row for each row of `fold_of`."""
    fitted = []
    for _, held, rest in fold_masks(fold_of):
        model = fit(rest)
        out[held] = apply(model, held)
        fitted.append(model)
    return out, fitted
