"""bench/threshold_transfer.py's saved fits: a resplit's scores written once and read back without refitting,
so rules are compared again on the same scores."""

from __future__ import annotations

import numpy as np
import pytest

import bench.threshold_transfer as tt


def small():
    words = [["goal", "match", "team", "league"], ["bank", "market", "share", "profit"], ["film", "actor", "stage", "award"]]
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 30)
    texts = [" ".join(rng.choice(words[c], 4)) + f" row{i}" for i, c in enumerate(y)]
    return texts, y, np.array([f"g{i // 3}" for i in range(len(y))])


def test_fitted_scores_are_saved_once_and_read_back_without_refitting(tmp_path, monkeypatch):
    texts, y, groups = small()
    cache = tmp_path / "s.npz"
    first = tt.fitted(texts, y, groups, 3, 3, 0, cache)
    assert cache.exists() and not list(tmp_path.glob("*.tmp.npz"))
    assert first["oof"].shape == (len(first["train"]), 3) and len(first["train"]) + len(first["unseen"]) == len(y)
    assert not set(groups[first["train"]]) & set(groups[first["unseen"]])  # whole groups unseen

    def refit(*a, **k):
        raise AssertionError("refitted")

    monkeypatch.setattr(tt, "fit_proba", refit)
    monkeypatch.setattr(tt, "out_of_fold", refit)
    again = tt.fitted(texts, y, groups, 3, 3, 0, cache)
    assert set(again) == set(first)
    for k in first:
        np.testing.assert_array_equal(again[k], first[k])
    with pytest.raises(AssertionError, match="refitted"):  # no cache: it fits
        tt.fitted(texts, y, groups, 3, 3, 0, None)

