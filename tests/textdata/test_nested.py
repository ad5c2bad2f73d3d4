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


def test_no_module_writes_its_own_other_folds_loop():
    """Issue 41: every "fitted on the other folds" number goes through textdata/nested.py (`nested`, or its
    `fold_masks` for per-fold inputs); a module that picks the other folds' rows by hand (`fold_of != k`, the
    out-of-domain detector's index did) is a second copy of the loop."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    by_hand = re.compile(r"fold_of\s*!=|!=\s*fold_of")
    found = [f"{p.relative_to(root)}:{i}" for package in ("textdata", "serving", "finetune", "baseline")
             for p in sorted((root / package).rglob("*.py")) if p.name != "nested.py"
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if by_hand.search(line)]
    assert not found, found
