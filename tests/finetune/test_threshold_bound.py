"""The served threshold with a stated confidence (finetune/coverage.py bound_threshold, served_threshold):
precision >= target holds with the stated probability on rows the threshold never saw, and the one-line
errors for an unreachable target and for too few rows."""

import numpy as np
import pytest

from finetune.calibration import calibrate
from finetune.coverage import bound_threshold, needed_rows, pick_threshold, served_threshold
from textdata.errors import DataError


def draw(n, rng):
    """Scores uniform in [0, 1]; a row is right with probability 0.5 + 0.5 * score (precision above t is
    0.75 + 0.25 t: exactly 0.9 at t = 0.6)."""
    conf = rng.random(n)
    return conf, rng.random(n) < 0.5 + 0.5 * conf


def true_precision(t):
    return 0.75 + 0.25 * t


def test_bound_holds_with_the_stated_probability_and_the_point_estimate_does_not():
    rng = np.random.default_rng(0)
    bound_fail = point_fail = none = 0
    draws = 200
    for _ in range(draws):
        conf, ok = draw(1500, rng)
        t, _ = bound_threshold(conf, ok, 0.9, 0.1)
        p, _ = pick_threshold(conf, ok, 0.9)
        bound_fail += t is not None and true_precision(t) < 0.9
        none += t is None
        point_fail += p is not None and true_precision(p) < 0.9
    # the bound fails (a threshold below 0.6) in at most ~10% of draws, the point estimate in ~half
    assert bound_fail / draws <= 0.12
    assert point_fail / draws >= 0.3 and none / draws < 0.05, (bound_fail, point_fail, none)


def test_bound_is_the_lowest_threshold_before_the_first_failure():
    conf = np.linspace(1, 0.01, 100)
    ok = np.ones(100, bool)
    ok[60:] = False  # the top 60 rows right, the rest wrong
    t, info = bound_threshold(conf, ok, 0.9, 0.1)
    answered = int((conf >= t).sum())
    assert 60 <= answered < 66  # a few wrong rows still keep the bound above 0.9 at 60+ right
    assert info["needed_rows"] == needed_rows(0.9, 0.05) == 29  # two sequences at 0.05: 0.9**29 <= 0.05 < 0.9**28


def test_unreachable_target_names_the_best_reachable_and_too_few_rows_how_many():
    rng = np.random.default_rng(3)
    n, c = 600, 3
    y = rng.integers(0, c, n)
    probs = np.full((n, c), 0.3)
    right = rng.random(n) < 0.8  # 80% right at every score
    top = np.where(right, y, (y + 1) % c)
    probs[np.arange(n), top] = 0.4 + 0.2 * rng.random(n)
    probs /= probs.sum(1, keepdims=True)
    fold_of = np.arange(n) % 3
    _, chosen, final = calibrate(probs, y, fold_of, "model")
    with pytest.raises(DataError) as e:
        served_threshold(chosen, final, probs, y, fold_of, ["a", "b", "c"], 0.95)
    msg = str(e.value)
    assert "\n" not in msg and "no threshold reaches it" in msg and "best reachable with 90% confidence is 0." in msg
    few = np.arange(30)  # 30 rows, all right: the point estimate is 1.0, a bound needs more
    with pytest.raises(DataError) as e:
        served_threshold(chosen, final, probs[few], top[few], fold_of[few], ["a", "b", "c"], 0.95)
    msg = str(e.value)
    assert "too few to state it with 90% confidence" in msg and "at least 59 answered rows" in msg, msg
    got = served_threshold(chosen, final, probs, y, fold_of, ["a", "b", "c"], 0.7)
    assert got["confidence"] == 0.9 and got["statement"].startswith("precision >= 0.70 with 90% confidence")
    assert f"estimated coverage of {got['estimated_coverage']:.2f}" in got["statement"]


def test_multi_label_summary_names_the_labels_never_confident():
    from finetune.calibration_multilabel import calibrate_labels as calibrate_multi_label
    from finetune.confidence import table_lines

    rng = np.random.default_rng(5)
    n = 1200
    Y = rng.random((n, 4)) < 0.4
    z = np.where(Y, 2.0, -2.0) + rng.normal(0, 1.0, (n, 4))  # labels a, b: informative
    z[:, 2:] = rng.normal(0, 1.0, (n, 2))  # labels c, d: noise, their rows never reach 0.9
    P = 1 / (1 + np.exp(-z))
    fold_of = np.arange(n) % 3
    section, _, _ = calibrate_multi_label(P, Y, fold_of, ["a", "b", "c", "d"], "model", 0.9, 0.5)
    assert section["served"]["never_confident"] == ["c", "d"]
    text = "\n".join(table_lines(section))
    assert "calibration (" in text and "served: target precision 0.9" in text
    assert "never confident (2 of 4 labels: their rows do not reach 0.9, threshold 1.0): c, d" in text


def test_multi_label_thresholds_hold_per_label_where_the_point_estimate_does_not():
    """Per label (finetune/coverage.py label_bound_thresholds): each label's precision above its threshold holds
    the target in about 90% of draws; the point estimate per label (pick_threshold) fails far more often. The
    served section states the confidence."""
    from finetune.calibration_multilabel import calibrate_labels as calibrate_multi_label
    from finetune.coverage import label_bound_thresholds

    rng = np.random.default_rng(11)
    fails, point_fails, tries = 0, 0, 0
    for _ in range(60):
        conf = rng.random((1500, 3))  # each label: true with probability 0.5 + 0.5 * score, as draw() above
        Y = rng.random((1500, 3)) < 0.5 + 0.5 * conf
        th, infos = label_bound_thresholds(conf, Y, 0.9, 0.1)
        for j in range(3):
            p, _ = pick_threshold(conf[:, j], Y[:, j], 0.9)
            tries += 1
            fails += th[j] < 1.0 and true_precision(th[j]) < 0.9
            point_fails += p is not None and true_precision(p) < 0.9
        assert (th < 1.0).all() and all(i["needed_rows"] == 29 for i in infos)
    assert fails / tries <= 0.12 and point_fails / tries >= 0.3, (fails, point_fails, tries)
    few = np.ones((20, 1)) * 0.99  # 20 rows, all right: below the 29 a 0.9 bound needs at 0.05 per sequence
    assert label_bound_thresholds(few, np.ones((20, 1)), 0.9)[0].tolist() == [1.0]
    n = 1200
    Yn = rng.random((n, 2)) < 0.4
    P = 1 / (1 + np.exp(-(np.where(Yn, 2.0, -2.0) + rng.normal(0, 1.0, (n, 2)))))
    served = calibrate_multi_label(P, Yn, np.arange(n) % 3, ["a", "b"], "model", 0.9, 0.5)[0]["served"]
    assert served["confidence"] == 0.9 and "Learn-then-Test per label" in served["rule"]
    assert served["statement"].startswith("each label's precision >= 0.90 with 90% confidence on texts like")


def test_a_higher_stated_confidence_serves_a_higher_threshold_and_says_so():
    """k-fold's --confidence reaches the bound as delta = 1 - confidence: on the same scores 97.5% asks more
    rows above the threshold than 90%, so the served threshold is never lower, and the statement names 97.5%."""
    from finetune.calibration_multilabel import calibrate_labels as calibrate_multi_label

    rng = np.random.default_rng(7)
    n, c = 1500, 3
    y = rng.integers(0, c, n)
    conf = rng.random(n)
    right = rng.random(n) < 0.5 + 0.5 * conf
    top = np.where(right, y, (y + 1) % c)
    probs = np.full((n, c), 0.1)
    probs[np.arange(n), top] = 0.2 + conf
    probs /= probs.sum(1, keepdims=True)
    fold_of = np.arange(n) % 3
    _, chosen, final = calibrate(probs, y, fold_of, "model")
    got = {d: served_threshold(chosen, final, probs, y, fold_of, ["a", "b", "c"], 0.85, d) for d in (0.1, 0.025)}
    assert "with 97.5% confidence" in got[0.025]["statement"] and got[0.025]["confidence"] == 0.975
    assert "with 90% confidence" in got[0.1]["statement"]
    th = {d: min(g["threshold"].values()) if isinstance(g["threshold"], dict) else g["threshold"] for d, g in got.items()}
    assert th[0.025] > th[0.1] - 1e-9 or got[0.025]["scope"] != got[0.1]["scope"], got
    assert got[0.025]["estimated_coverage"] <= got[0.1]["estimated_coverage"] + 0.02

    Y = rng.random((n, 2)) < 0.5 + 0.5 * rng.random((n, 2))
    P = np.clip(np.where(Y, 0.65, 0.35) + rng.normal(0, 0.2, (n, 2)), 0.01, 0.99)
    sec = {d: calibrate_multi_label(P, Y, fold_of, ["p", "q"], "model", 0.8, 0.5, delta=d)[0]["served"]
           for d in (0.1, 0.025)}
    assert "97.5% confidence" in sec[0.025]["statement"] and "90% confidence" in sec[0.1]["statement"]
    assert all(sec[0.025]["threshold"][k] >= sec[0.1]["threshold"][k] for k in ("p", "q")), sec


def test_per_class_bounds_split_delta_over_classes_unless_told_not_to():
    from finetune.coverage import pick_per_class

    # class 0: 15 rows all right, enough for a bound at delta 0.1 (14 rows at 0.8, each sequence at delta / 2)
    # but not at delta 0.1 / 2 classes (17 rows); class 1: 60 rows all right, enough either way
    probs = np.r_[np.tile([[0.9, 0.1]], (15, 1)), np.tile([[0.05, 0.95]], (60, 1))]
    y = np.r_[np.zeros(15, int), np.ones(60, int)]
    assert (needed_rows(0.8, 0.05), needed_rows(0.8, 0.025)) == (14, 17)
    split = pick_per_class(probs, y, 0.8, None, 0.1)
    each = pick_per_class(probs, y, 0.8, None, 0.1, split=False)
    assert split[0] == 1.0 and each[0] == pytest.approx(0.9)
    assert split[1] == each[1] == pytest.approx(0.95)
