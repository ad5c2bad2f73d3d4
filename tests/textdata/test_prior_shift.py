"""The class-mix EM (textdata/prior_shift.py, Saerens et al. 2002): it recovers a moved mix from calibrated
probabilities, its test fires on a moved mix and about as often as its level on an unmoved one, and the corrected
probabilities score better where the mix moved."""

from __future__ import annotations

import numpy as np
import pytest

from textdata.prior_shift import adjust, chi2_sf, em_prior, estimate, likelihood_ratio, squarem_prior

TRAINED = np.array([0.5, 0.3, 0.2])
MEANS = np.array([[0.0, 0.0], [1.5, 0.0], [0.0, 1.5]])  # overlapping classes: posteriors far from one-hot


def rows(rng, mix, n):
    """(exact posteriors under the training mix, true labels) of n rows drawn at `mix`."""
    y = rng.choice(3, size=n, p=mix)
    x = MEANS[y] + rng.normal(size=(n, 2))
    log_like = -0.5 * ((x[:, None, :] - MEANS[None]) ** 2).sum(-1)
    p = np.exp(log_like - log_like.max(1, keepdims=True)) * TRAINED
    return p / p.sum(1, keepdims=True), y


def test_em_recovers_a_moved_mix_and_the_correction_lowers_the_log_loss():
    rng = np.random.default_rng(0)
    moved = np.array([0.1, 0.2, 0.7])
    p, y = rows(rng, moved, 3000)
    got = estimate(p, TRAINED)
    assert np.abs(got["prior"] - moved).max() < 0.04  # the answered mix is far off: the classes overlap
    assert np.abs(np.bincount(p.argmax(1), minlength=3) / len(p) - moved).max() > 0.08
    assert got["p_value"] < 1e-6 and got["total_variation"] == pytest.approx(0.5 * np.abs(got["prior"] - TRAINED).sum())
    fixed = adjust(p, TRAINED, got["prior"])
    np.testing.assert_allclose(fixed.sum(1), 1)
    loss = lambda q: -np.log(q[np.arange(len(y)), y]).mean()
    assert loss(fixed) < loss(p) - 0.05 and (fixed.argmax(1) == y).mean() > (p.argmax(1) == y).mean()


def test_the_test_fires_about_as_often_as_its_level_where_the_mix_did_not_move():
    rng = np.random.default_rng(1)
    fired = [estimate(rows(rng, TRAINED, 500)[0], TRAINED)["p_value"] < 0.05 for _ in range(200)]
    assert np.mean(fired) < 0.1  # about 0.05: the likelihood ratio is chi-square with 2 degrees of freedom


def test_chi2_tail_is_close_to_the_exact_one():
    from scipy.stats import chi2

    for dof in (1, 2, 4, 9, 39):
        for x in (0.5, 3.0, 10.0, 25.0, 60.0):
            assert chi2_sf(x, dof) == pytest.approx(chi2.sf(x, dof), abs=0.01)
    assert chi2_sf(0.0, 3) == 1.0


def test_em_with_extra_evidence_and_strength_is_the_teachers_rule():
    """finetune/teacher_data.py's `corrected` runs this EM: a strength of many pseudo-rows keeps the mix at the
    fitted one, and extra evidence per row moves the posteriors."""
    rng = np.random.default_rng(2)
    p, _ = rows(rng, np.array([0.1, 0.1, 0.8]), 400)
    held, _ = em_prior(p, TRAINED, strength=1e9)
    np.testing.assert_allclose(held, TRAINED, atol=1e-4)
    like = np.tile([1.0, 1.0, 0.01], (len(p), 1))
    _, post = em_prior(p, TRAINED, like=like)
    assert (post.argmax(1) != 2).all()


def test_a_warm_start_from_the_last_window_reaches_the_cold_estimate_in_fewer_rounds():
    """The monitor's EM starts from its last estimate (app/monitoring/mix.py): the window 100 answers later
    reaches the same mix as from the training mix, in fewer rounds (the last moves it less than TOLERANCE at
    the stop); a start of the wrong length or not a mix falls back to the cold start."""
    from textdata.prior_shift import TOLERANCE

    rng = np.random.default_rng(4)
    p, _ = rows(rng, np.array([0.1, 0.2, 0.7]), 1100)
    last = estimate(p[:1000], TRAINED)["prior"]
    cold, warm = estimate(p[100:], TRAINED), estimate(p[100:], TRAINED, start=last)
    np.testing.assert_allclose(warm["prior"], cold["prior"], atol=20 * TOLERANCE)
    assert warm["p_value"] == pytest.approx(cold["p_value"], rel=1e-3, abs=1e-12)

    def rounds(start):
        for k in range(1, 201):
            a, _ = em_prior(p[100:], TRAINED, rounds=k, tol=TOLERANCE, start=start)
            b, _ = em_prior(p[100:], TRAINED, rounds=k + 1, tol=TOLERANCE, start=start)
            if np.array_equal(a, b):
                return k
        return 201

    # EM converges linearly: a start ~0.01 from the fixed point instead of ~0.5 saves ~log(50) / log(1/rate)
    # rounds, here 95 -> 76, not most of them
    assert rounds(last) < 0.9 * rounds(None), (rounds(last), rounds(None))
    for bad in (np.array([0.5, 0.5]), np.array([np.nan, 0.5, 0.5]), np.zeros(3)):
        np.testing.assert_allclose(estimate(p[100:], TRAINED, start=bad)["prior"], cold["prior"])


def flat_window(classes, seed, rows=1600):
    """Rows as the removed bench/prior_shift.py's cost section drew them: flat Dirichlet(1) probabilities moved to a
    Dirichlet(5) mix (at 40 classes the fixed point puts classes at 0, where plain EM crawls)."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(classes), rows) * rng.dirichlet(np.ones(classes) * 5)
    return p / p.sum(1, keepdims=True)


@pytest.mark.parametrize("classes, seed", [(5, 0), (10, 1), (40, 2)])
def test_the_accelerated_em_reaches_plain_ems_fixed_point_cold_and_warm(classes, seed):
    """SQUAREM (squarem_prior, the monitor's EM) lands where plain EM run to a 1e-13 move ends, from the
    training mix and from the last window's estimate, at the training mix and at one nearby (a moderate p-value);
    plain EM's own 200-round stop is farther off."""
    p = flat_window(classes, seed)
    window = p[100:1100]
    for fitted in (np.full(classes, 1 / classes), p[1100:].mean(0)):
        fixed, _ = em_prior(window, fitted, rounds=30000, tol=1e-13)
        p_fixed = chi2_sf(max(0.0, likelihood_ratio(window, fitted, fixed)), classes - 1)
        last = estimate(p[:1000], fitted, accelerated=True)["prior"]
        for start in (None, last):
            got = estimate(window, fitted, start, accelerated=True)
            assert 0.5 * np.abs(got["prior"] - fixed).sum() < 2e-5
            assert got["p_value"] == pytest.approx(p_fixed, rel=1e-3, abs=1e-12)
        plain = estimate(window, fitted)["prior"]
        assert 0.5 * np.abs(plain - fixed).sum() > 0.5 * np.abs(got["prior"] - fixed).sum()


@pytest.mark.parametrize("classes, seed", [(5, 0), (10, 1), (40, 2)])
def test_the_accelerated_em_takes_a_fraction_of_plain_ems_steps(classes, seed):
    """Given as many EM steps as SQUAREM took, plain EM is ten times farther from the fixed point."""
    p = flat_window(classes, seed)[100:1100]
    fitted = np.full(classes, 1 / classes)
    fixed, _ = em_prior(p, fitted, rounds=30000, tol=1e-13)
    got, steps = squarem_prior(p, fitted)
    plain, _ = em_prior(p, fitted, rounds=steps - 1)  # em_prior takes rounds + 1 steps
    assert steps < 250
    assert np.abs(plain - fixed).sum() > 10 * np.abs(got - fixed).sum(), steps
    assert likelihood_ratio(p, fitted, got) >= likelihood_ratio(p, fitted, plain) - 1e-9


def test_the_accelerated_em_takes_back_a_class_the_last_window_dropped():
    """A warm start where a class sat at ~0 but the new rows want it: the mix barely moves a step, the
    likelihood bound (rows x (max gradient - 1)) keeps the EM going to the fixed point."""
    p = flat_window(40, 1)
    fitted = np.full(40, 1 / 40)
    window = p[100:1100]
    fixed, _ = em_prior(window, fitted, rounds=30000, tol=1e-13)
    last = estimate(p[:1000], fitted, accelerated=True)["prior"]
    got = estimate(window, fitted, last, accelerated=True)["prior"]
    assert 0.5 * np.abs(got - fixed).sum() < 2e-5
