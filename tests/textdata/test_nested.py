"""The one out-of-fold loop (textdata/nested.py, issue 41): every "fitted on the other folds" number of a k-fold
report goes through it, as an array filled fold by fold or as a score per fold, chained to an earlier step."""

from __future__ import annotations

import numpy as np

from textdata.nested import nested


def test_each_fold_is_answered_by_what_the_other_folds_fitted():
    fold_of = np.array([1, 0, 1, 0, 2])
    y = np.array([10.0, 20.0, 30.0, 40.0, 50.0])
    out, fitted = nested(fold_of, lambda rest: y[rest].mean(), lambda m, held: np.full(held.sum(), m), np.empty(5))
    assert fitted == [(10 + 30 + 50) / 3, (20 + 40 + 50) / 3, (10 + 20 + 30 + 40) / 4]  # fold order 0, 1, 2
    assert out.tolist() == [fitted[1], fitted[0], fitted[1], fitted[0], fitted[2]]


def test_a_score_per_fold_chained_to_an_earlier_steps_fits():
    fold_of = np.array([0, 1, 0, 1])
    seen = []

    def fit(rest, earlier):
        seen.append((rest.tolist(), earlier))
        return earlier * 2

    scores, fitted = nested(fold_of, fit, lambda m, held, earlier: {"m": m, "rows": int(held.sum()), "e": earlier},
                            per_fold=["a", "b"])
    assert seen == [([False, True, False, True], "a"), ([True, False, True, False], "b")]
    assert scores == {0: {"m": "aa", "rows": 2, "e": "a"}, 1: {"m": "bb", "rows": 2, "e": "b"}} and fitted == ["aa", "bb"]
