"""bench/encoder_transfer.py's pure parts: the draw of the training and unseen rows, the coverage quantile a
threshold is carried by, and what counts as a pass."""

from __future__ import annotations

import numpy as np

from bench.encoder_transfer import coverage_quantile, draw, passes, precision_coverage


def test_draw_is_per_class_disjoint_and_repeatable():
    y = np.repeat(np.arange(5), [510, 386, 417, 511, 401])  # BBC's class sizes
    train, unseen = draw(y, "per_class", 150, 1000, seed=3)
    assert np.bincount(y[train]).tolist() == [150] * 5
    assert len(unseen) == 1000 and not set(train) & set(unseen)
    again = draw(y, "per_class", 150, 1000, seed=3)
    assert np.array_equal(train, again[0]) and np.array_equal(unseen, again[1])
    other = draw(y, "per_class", 150, 1000, seed=4)
    assert not np.array_equal(train, other[0])


def test_draw_stratified_keeps_the_mix_of_a_small_class():
    y = np.repeat(np.arange(3), [1500, 460, 40])
    train, unseen = draw(y, "stratified", 900, 1000, seed=0)
    assert len(train) == 900 and len(unseen) == 1000 and not set(train) & set(unseen)
    assert abs(np.bincount(y[train])[2] - 18) <= 1  # 2% of 900


def test_coverage_quantile_answers_that_share_of_the_rows():
    scores = np.linspace(0.0, 1.0, 101)[::-1]
    t = coverage_quantile(scores, 0.25)
    assert (scores >= t).sum() == 25  # round(0.25 * 101)
    assert coverage_quantile(scores, 0.0) == float("inf")
    assert coverage_quantile(scores, 1.0) == 0.0


def test_passes_at_target_less_one_point():
    assert passes(0.890, 0.9) and not passes(0.8899, 0.9)
    assert passes(None, 0.9)  # nothing answered: no claim made
    probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    got = precision_coverage(probs, np.array([0, 0, 0]), np.array([True, True, False]))
    assert got == {"precision": 0.5, "coverage": 2 / 3, "answered": 2}
