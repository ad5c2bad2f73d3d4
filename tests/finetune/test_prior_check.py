"""k-fold's check of --prior-correction (finetune/prior_check.py): on calibrated out-of-fold scores the correction
wins under simulated class-mix shifts and is recorded as served; on under-confident scores (the EM then runs
the mix away, as on ko-help's unseen pages) it loses and is not; too few rows say so."""

import json

import numpy as np

from finetune.prior_check import prior_check


def calibrated(n, rng, classes=5):
    logits = rng.normal(0, 2, (n, classes))
    p = np.exp(logits)
    p /= p.sum(1, keepdims=True)
    return p, np.array([rng.choice(classes, p=row) for row in p])  # labels drawn from the scores: calibrated


def test_wins_on_calibrated_scores_and_loses_on_flattened_ones():
    rng = np.random.default_rng(0)
    p, y = calibrated(720, rng)
    got = prior_check(p, y)
    assert got["wins"] and got["same"]["fired"] <= 2 and got["one"]["lower_where_fired"] >= 0.8
    assert "served with --prior-correction" in got["why"]
    flat = p**0.3
    flat /= flat.sum(1, keepdims=True)
    lost = prior_check(flat, y)
    assert not lost["wins"] and "not served" in lost["why"]
    json.dumps([got, lost])  # report.json takes it as is (a numpy bool once broke the write)


def test_too_few_rows_is_not_a_win():
    rng = np.random.default_rng(1)
    p, y = calibrated(150, rng)
    got = prior_check(p, y)
    assert not got["wins"] and "needs 200" in got["why"]


def test_a_window_is_estimated_as_the_served_monitor_estimates_it():
    """The check judges the mix the server's monitor would estimate (SQUAREM, app/monitoring/mix.py): on a
    300-row window of 40 classes plain EM's 200 rounds stop well short of the fixed point that one reaches."""
    from finetune.prior_check import WINDOW, _window, mix_of, sample
    from textdata.prior_shift import em_prior, estimate

    rng = np.random.default_rng(2)
    p = rng.dirichlet(np.ones(40), 1600) * rng.dirichlet(np.ones(40) * 5)
    p /= p.sum(1, keepdims=True)
    y = np.array([rng.choice(40, p=row) for row in p])
    fitted, base = p.mean(0), np.bincount(y, minlength=40) / len(y)
    got = _window(p, y, fitted, "same", base, np.random.default_rng(5))
    r = np.random.default_rng(5)
    window = p[sample(y, mix_of("same", base, r), WINDOW, r)]
    np.testing.assert_allclose(got["prior"], estimate(window, fitted, accelerated=True)["prior"])
    fixed, _ = em_prior(window, fitted, rounds=30000, tol=1e-13)
    plain = estimate(window, fitted)["prior"]
    assert np.abs(got["prior"] - fixed).sum() < 0.1 * np.abs(plain - fixed).sum()
