"""Class-mix shift: the class mix of the texts a model is served, estimated from its own probabilities, and the
probabilities corrected to it (Saerens, Latinne & Decaestecker 2002, "Adjusting the outputs of a classifier to new
a priori probabilities"). One EM for every stage that needs it: a teacher's rows (finetune/teacher_data.py), the
served window (app/monitoring/monitor.py) and the measurement (docs/notes/log.md). numpy and the standard library only:
serving and the slim image import it.

With p(c | x) calibrated for the training mix pi, the mix of new rows pi' is the fixed point of
    p'(c | x) ∝ p(c | x) pi'(c) / pi(c),      pi'(c) = mean over rows of p'(c | x),
and the log-likelihood ratio of pi' against pi, 2 sum_x log sum_c p(c | x) pi'(c) / pi(c), is asymptotically
chi-square with C - 1 degrees of freedom where the mix did not move: the test that says whether it did.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

EM_ROUNDS = 50
TOLERANCE = 1e-6  # a mix that moves less than this in a round has converged
# the accelerated EM's stop: its steps are cheap, and where a class heads to 0 (40 flat classes) plain EM moving
# under 1e-6 a round is still ~1e-3 (TV) from its fixed point; 1e-8 lands within ~1e-5 (docs/notes/log.md)
SQUAREM_TOLERANCE = 1e-8
SQUAREM_STEPS = 600  # EM steps at most (plain EM: 200 rounds)
GAP = 1e-4  # ... and once the log-likelihood is provably within this of its best
SHIFT_LEVEL = 0.001  # the test's level: the mix moved where p < this (docs/notes/log.md: 0 of 40 unmoved BBC windows)
MIN_ROWS = 200  # answers in the window before a correction is put in force (docs/notes/log.md)
_FLOOR = 1e-6  # a class the training rows never show still gets a prior the ratio can divide by


def em_prior(probs: np.ndarray, fitted_prior=None, like: np.ndarray | None = None, rounds: int = EM_ROUNDS,
             strength: float = 0.0, tol: float = 0.0, start=None) -> tuple[np.ndarray, np.ndarray]:
    """(the rows' class mix, each row's posterior under it) by EM from p(c | x) = `probs`, calibrated for the
    mix `fitted_prior` (None: uniform). `like`: (rows, classes) extra evidence per row multiplied in (a
    teacher's P(its answer | true class)); `strength`: pseudo-rows at `fitted_prior` holding the estimate
    towards it; `tol`: stop once the mix moves less than it in a round (0: run every round); `start`: the first
    mix (None: `fitted_prior`), e.g. the last window's estimate, which a window 100 answers later barely moves."""
    p = np.asarray(probs, np.float64)
    n = p.shape[1]
    base = np.full(n, 1 / n) if fitted_prior is None else np.asarray(fitted_prior, np.float64).clip(min=_FLOOR)
    prior = base.copy() if start is None else np.asarray(start, np.float64).clip(min=_FLOOR) / np.sum(start)
    post = p
    for _ in range(rounds + 1):
        post = p * (prior / base)
        if like is not None:
            post = post * like
        post = post / post.sum(1, keepdims=True).clip(min=1e-12)
        new = (post.sum(0) + strength * base) / (len(post) + strength) if len(post) + strength else prior
        moved = float(np.abs(new - prior).max())
        prior = new
        if tol and moved < tol:
            break
    return prior, post


def squarem_prior(probs: np.ndarray, fitted_prior, start=None, tol: float = SQUAREM_TOLERANCE,
                  steps: int = SQUAREM_STEPS) -> tuple[np.ndarray, int]:
    """(em_prior's fixed point without `like` or `strength`, the EM steps it took) by SQUAREM (Varadhan & Roland
    2008, step length S3): from two EM steps, the change r and its change v, it jumps to x - 2a r + a^2 v with
    a = -max(1, |r| / |v|), then takes one EM step from there. Where the jump leaves the simplex or its likelihood
    is below the first EM step's, it keeps the two plain steps, so the likelihood never falls, as in plain EM.
    Stops once an EM step moves the mix less than `tol`."""
    base = np.asarray(fitted_prior, np.float64).clip(min=_FLOOR)
    # a row's likelihood of the mix q is (a @ q) up to a factor of its own: one EM step is two products with `a`
    a = np.asarray(probs, np.float64) / base
    q = base / base.sum() if start is None else np.asarray(start, np.float64).clip(min=_FLOOR)
    q = q / q.sum()
    if not len(a):
        return q, 0

    def em(x):
        s = (a @ x).clip(min=1e-300)
        g = (a.T @ (1 / s)) / len(a)  # the log-likelihood's gradient / rows; sum(x * g) = 1
        return x * g, float(np.log(s).sum()), float(g.max())

    taken = 0
    while taken < steps:
        f1, _, top = em(q)
        r = f1 - q
        # concavity: the best log-likelihood is at most rows x (max g - 1) above q's, so a class stuck near 0 that
        # the rows want (g > 1) keeps it going where the mix barely moves
        if np.abs(r).max() < tol and len(a) * (top - 1) < GAP:
            return f1, taken + 1
        f2, like1, _ = em(f1)
        taken += 2
        v = f2 - f1 - r
        vv = float(v @ v)
        alpha = max(1.0, math.sqrt(float(r @ r) / vv)) if vv > 0 else 1.0
        jump = q + 2 * alpha * r + alpha * alpha * v
        q = f2
        if alpha > 1 and (jump > 0).all():
            fx, like, _ = em(jump / jump.sum())
            taken += 1
            if like >= like1:
                q = fx
    return q, taken


def adjust(probs: np.ndarray, fitted_prior, prior) -> np.ndarray:
    """`probs` (calibrated for `fitted_prior`) moved to the class mix `prior`: p(c | x) prior(c) / fitted(c),
    renormalised; same dtype."""
    p = np.asarray(probs)
    w = np.asarray(prior, np.float64) / np.asarray(fitted_prior, np.float64).clip(min=_FLOOR)
    q = p.astype(np.float64) * w
    return (q / q.sum(-1, keepdims=True).clip(min=1e-300)).astype(p.dtype, copy=False)


def likelihood_ratio(probs: np.ndarray, fitted_prior, prior) -> float:
    """2 x the log-likelihood gain of the rows under `prior` over `fitted_prior` (>= 0 at the EM's fixed point)."""
    w = np.asarray(prior, np.float64) / np.asarray(fitted_prior, np.float64).clip(min=_FLOOR)
    return float(2 * np.log((np.asarray(probs, np.float64) * w).sum(1).clip(min=1e-300)).sum())


def chi2_sf(x: float, dof: int) -> float:
    """P(chi-square with `dof` degrees of freedom > x), by the Wilson-Hilferty cube-root normal approximation
    (within ~0.002 of the exact tail at the levels a test uses; no scipy in serving)."""
    if x <= 0 or dof < 1:
        return 1.0
    k = float(dof)
    z = ((x / k) ** (1 / 3) - (1 - 2 / (9 * k))) / math.sqrt(2 / (9 * k))
    return float(1 - NormalDist().cdf(z))


def estimate(probs: np.ndarray, fitted_prior, start=None, accelerated: bool = False) -> dict:
    """The rows' estimated class mix and the test of whether it moved from `fitted_prior`: {"prior", "lr",
    "p_value", "rows", "total_variation" (half the L1 distance between the mixes)}. `start`: where the EM
    begins (the last estimate: the monitor's warm start); the fixed point is the same, reached in fewer rounds.
    `accelerated`: by squarem_prior (the same fixed point in a fraction of the EM steps, and closer to it where
    plain EM's 200 rounds stop short)."""
    p = np.asarray(probs, np.float64)
    base = np.asarray(fitted_prior, np.float64).clip(min=_FLOOR)
    base = base / base.sum()
    ok = start is not None and len(start) == len(base) and np.isfinite(start).all() and np.sum(start) > 0
    start = start if ok else None
    prior = squarem_prior(p, base, start)[0] if accelerated else em_prior(p, base, rounds=200, tol=TOLERANCE,
                                                                          start=start)[0]
    lr = max(0.0, likelihood_ratio(p, base, prior))
    return {"prior": prior, "lr": lr, "p_value": chi2_sf(lr, p.shape[1] - 1), "rows": len(p),
            "total_variation": float(0.5 * np.abs(prior - base).sum())}


def should_correct(estimate: dict | None) -> bool:
    """The served rule (serving/prior.py): a window of at least MIN_ROWS answers whose mix moved (p < SHIFT_LEVEL)."""
    return bool(estimate) and estimate["rows"] >= MIN_ROWS and estimate["p_value"] < SHIFT_LEVEL
