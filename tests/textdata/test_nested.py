"""The one out-of-fold loop (textdata/nested.py): each fold's rows get what was fitted on the other folds only."""

from __future__ import annotations

import numpy as np

from textdata.nested import fold_masks, nested


def test_each_fold_gets_what_the_other_folds_fitted_and_never_its_own_rows():
    rng = np.random.default_rng(0)
    fold_of = rng.integers(0, 4, size=50)
    values = rng.normal(size=50)
    seen = []

    def fit(rest):
        seen.append(rest.copy())
        return values[rest].mean()

    out, fitted = nested(fold_of, fit, lambda mean, held: np.full(held.sum(), mean), np.empty(50))
    for (k, held, rest), mean, used in zip(fold_masks(fold_of), fitted, seen):
        assert not (used & held).any() and (used == rest).all() and (used | held).all()
        assert np.allclose(out[held], values[fold_of != k].mean()) and mean == values[fold_of != k].mean()
    assert [k for k, _, _ in fold_masks(fold_of)] == [0, 1, 2, 3]
