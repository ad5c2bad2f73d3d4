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


def test_mix_split_puts_a_class_mix_shift_in_the_mix_term_and_a_class_getting_worse_in_the_within_term():
    # out of fold: 50 rows predicted class 0 (all right), 50 class 1 (half right); every row over the threshold
    oof = np.tile([[0.9, 0.1]], (100, 1))
    oof[50:] = [0.1, 0.9]
    y = np.r_[np.zeros(50, int), np.ones(25, int), np.zeros(25, int)]
    # unseen: 90 rows class 0 (all right), 10 class 1 (half right): only the mix moved
    un = np.tile([[0.9, 0.1]], (100, 1))
    un[90:] = [0.1, 0.9]
    y_un = np.r_[np.zeros(90, int), np.ones(5, int), np.zeros(5, int)]
    got = tt.mix_split(oof, y, un, y_un, 0.5)
    assert got["oof"] == pytest.approx(0.75) and got["unseen"] == pytest.approx(0.95)
    assert got["mix"] == pytest.approx(0.2) and got["within"] == pytest.approx(0.0)
    assert got["mix_tv"] == pytest.approx(0.4)
    # the same mix as out of fold, class 0 now 80% right: all of the drop is within the class
    y_worse = y.copy()
    y_worse[:10] = 1
    got = tt.mix_split(oof, y, oof, y_worse, 0.5)
    assert got["mix"] == pytest.approx(0.0) and got["within"] == pytest.approx(-0.1)
    assert tt.mix_split(oof, y, un, y_un, None) is None
