"""The served threshold's bound where rows come in groups (--group-column: pages, documents, users): texts of
one group are right or wrong together more often than chance, so n answered rows carry less evidence than n
independent ones, and a row-level Clopper-Pearson bound is too narrow for unseen groups.

The survey-sampling correction (Kish 1965; for unequal clusters, Kerry & Bland 2001): the design effect
deff = 1 + (m - 1) * rho, with m = sum(m_g^2) / n the size-weighted mean group size among the answered rows
and rho the intra-group correlation of correctness (one-way ANOVA estimator, Donner 1986) on every
out-of-fold row; the bound is Clopper-Pearson at the effective sample size n / deff, with as many right in
proportion. rho <= 0 (groups no more alike than chance) leaves the row-level bound as it was.
"""

from __future__ import annotations

import numpy as np


def correctness_icc(correct: np.ndarray, groups: np.ndarray) -> float:
    """The intra-group correlation of a 0/1 outcome (ANOVA estimator), clipped to [0, 1]; 0 where it is not
    estimable (one group, or every group a single row)."""
    y = np.asarray(correct, float)
    _, g = np.unique(np.asarray(groups), return_inverse=True)
    sizes = np.bincount(g)
    n, k = len(y), len(sizes)
    if k < 2 or n <= k:
        return 0.0
    means = np.bincount(g, weights=y) / sizes
    msb = float((sizes * (means - y.mean()) ** 2).sum() / (k - 1))
    msw = float(((y - means[g]) ** 2).sum() / (n - k))
    m0 = (n - (sizes**2).sum() / n) / (k - 1)
    denom = msb + (m0 - 1) * msw
    return float(np.clip((msb - msw) / denom, 0.0, 1.0)) if denom > 0 else 0.0


def size_weighted_mean(order: np.ndarray, groups: np.ndarray, answered: np.ndarray) -> np.ndarray:
    """For the rows taken in `order` (highest score first), sum(m_g^2) / n over the first `answered[i]` rows:
    each row adds 2 * (rows of its group already in) + 1 to sum(m_g^2)."""
    _, g = np.unique(np.asarray(groups)[order], return_inverse=True)
    seen = np.zeros(g.max() + 1 if len(g) else 0, int)
    before = np.empty(len(g), int)
    for i, gi in enumerate(g):  # rows are few (out-of-fold rows); a loop keeps the running count plain
        before[i] = seen[gi]
        seen[gi] += 1
    squares = np.cumsum(2 * before + 1)
    return squares[np.asarray(answered) - 1] / np.asarray(answered, float)


def effective_rows(n: np.ndarray, m: np.ndarray, rho: float) -> np.ndarray:
    """n / deff, deff = 1 + (m - 1) * rho (never above n)."""
    return np.asarray(n, float) / (1.0 + (np.asarray(m, float) - 1.0) * max(rho, 0.0))


BOOTSTRAP_DRAWS = 1000


def bootstrap_lower(correct: np.ndarray, groups: np.ndarray, answered: np.ndarray, q: float,
                    draws: int = BOOTSTRAP_DRAWS, seed: int = 0) -> np.ndarray:
    """The cluster (group) bootstrap's lower `q` quantile of the precision of the first `answered[i]` rows
    (rows in score order, highest first): whole groups resampled with replacement (Davison & Hinkley 1997,
    sec. 3.8), so a page right or wrong together moves every threshold's precision together, at no assumed
    design effect. One weight per group a draw (multinomial counts), cumulative sums over the rows for
    every draw at once; a draw with no answered row counts as precision 0. Seeded: the same rows, the same
    bound."""
    _, g = np.unique(np.asarray(groups), return_inverse=True)
    k = int(g.max()) + 1 if len(g) else 0
    w = np.random.default_rng(seed).multinomial(k, np.full(k, 1.0 / k), size=draws).astype(np.float32)
    at = np.asarray(answered) - 1
    rows = w[:, g]  # draws x rows: each row's weight is its group's count in the draw
    total = np.cumsum(rows, axis=1)[:, at]
    right = np.cumsum(rows * np.asarray(correct, np.float32), axis=1)[:, at]
    precision = np.divide(right, total, out=np.zeros_like(right), where=total > 0)
    return np.quantile(precision, q, axis=0, method="lower")
