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

import warnings
from dataclasses import dataclass
from typing import Protocol

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


def lower_bounds(right: np.ndarray, n: np.ndarray, delta: float) -> np.ndarray:
    """One-sided Clopper-Pearson lower bounds on a precision, k right of n answered, at confidence 1 - delta
    (here, not in coverage.py, which imports this module: the rules below take it at effective rows)."""
    from scipy.stats import beta

    k = np.asarray(right, float)
    return np.where(k > 0, beta.ppf(delta, np.maximum(k, 1e-12), np.asarray(n, float) - k + 1), 0.0)


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
    w = _page_weights(k, k, draws, np.random.default_rng(seed))
    precision = _precisions(w, g, np.asarray(correct, np.float32), np.asarray(answered) - 1)
    return np.quantile(np.nan_to_num(precision, nan=0.0), q, axis=0, method="lower")


def _page_weights(k: int, pages: int, draws: int, rng) -> np.ndarray:
    """draws x k: how often each of k groups is drawn when `pages` groups are drawn with replacement."""
    return rng.multinomial(pages, np.full(k, 1.0 / k), size=draws).astype(np.float32)


def _precisions(w: np.ndarray, g: np.ndarray, correct: np.ndarray, at: np.ndarray) -> np.ndarray:
    """draws x thresholds: the precision of the first at + 1 rows under each draw's group weights `w` (nan
    where a draw answers none); cumulative sums over the rows for every draw at once."""
    rows = w[:, g]  # draws x rows: each row's weight is its group's count in the draw
    total = np.cumsum(rows, axis=1)[:, at]
    right = np.cumsum(rows * correct, axis=1)[:, at]
    return np.divide(right, total, out=np.full_like(right, np.nan), where=total > 0)


def prediction_gaps(correct: np.ndarray, groups: np.ndarray, answered: np.ndarray, batch: float = 1.0,
                    draws: int = BOOTSTRAP_DRAWS, seed: int = 0) -> np.ndarray:
    """draws x thresholds: (the precision of a resample of `batch` x k groups) - (that of a resample of all k
    groups), drawn independently (rows in score order, highest first; nan where a draw answers none): how far
    one future batch's precision falls from the estimate when both are page samples."""
    _, g = np.unique(np.asarray(groups), return_inverse=True)
    k = int(g.max()) + 1 if len(g) else 0
    rng, at, ok = np.random.default_rng(seed), np.asarray(answered) - 1, np.asarray(correct, np.float32)
    here = _precisions(_page_weights(k, k, draws, rng), g, ok, at)
    return _precisions(_page_weights(k, max(1, round(batch * k)), draws, rng), g, ok, at) - here


def bootstrap_prediction_lower(correct: np.ndarray, groups: np.ndarray, answered: np.ndarray, q: float,
                               batch: float = 1.0, draws: int = BOOTSTRAP_DRAWS, seed: int = 0) -> np.ndarray:
    """A lower `q` prediction bound on the precision that a future batch of `batch` x as many groups as these
    will show at each threshold (rows in score order, highest first): the observed precision plus the `q`
    quantile of prediction_gaps, so both the estimate's sampling and the batch's own are in it. A draw with no
    answered row is left out."""
    gaps = prediction_gaps(correct, groups, answered, batch, draws, seed)
    observed = np.cumsum(np.asarray(correct, float))[np.asarray(answered) - 1] / np.asarray(answered, float)
    with warnings.catch_warnings():  # the top thresholds' few pages may be in no draw: nan, never tested
        warnings.simplefilter("ignore", RuntimeWarning)
        return observed + np.nanquantile(gaps, q, axis=0, method="lower")


class GroupRule(Protocol):
    """How a grouped threshold's bound is taken from its rows (coverage.bound_threshold's `rule`): `lower`
    gets the rows in score order (highest first), their groups, the answered rows at each threshold, their
    effective rows at the design effect, and the one-sided error q; `starts` the effective rows from which
    the fixed sequences test a threshold (no bound passes with fewer); `name` goes to the report."""

    name: str

    def lower(self, correct, groups, answered, eff, q) -> np.ndarray: ...

    def starts(self, eff: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class DesignBound:
    """The confidence bound over unseen groups: each threshold's Clopper-Pearson bound at n / deff effective
    rows. What it states: the precision of unseen groups like these (their mean, an infinite batch of them)."""

    name = "design"

    def over(self, group):
        return f"over unseen {group!r} groups like the training ones"

    def lower(self, correct, groups, answered, eff, q):
        precision = np.cumsum(correct)[np.asarray(answered) - 1] / np.asarray(answered, float)
        return lower_bounds(precision * eff, eff, q)

    def starts(self, eff):
        return eff


@dataclass(frozen=True)
class PageBootstrap:
    """The confidence bound by the page (cluster) bootstrap's lower quantile (bootstrap_lower)."""

    name = "bootstrap"

    def over(self, group):
        return DESIGN.over(group)

    def lower(self, correct, groups, answered, eff, q):
        return bootstrap_lower(correct, groups, answered, q)

    def starts(self, eff):
        return eff


@dataclass(frozen=True)
class PredictionBound:
    """A prediction bound: the precision that one future batch of `batch` x as many rows (and groups) as the
    out-of-fold ones will show, not the mean over unseen groups: the estimate's variance and the batch's own
    add, p(1 - p) (deff / n + deff / (batch n)), i.e. Clopper-Pearson at eff x batch / (1 + batch) effective
    rows (a batch as large as the out-of-fold rows: half of them), where the fixed sequences start too (at the
    design effect's rows the first thresholds tested would fail and stop them). `bootstrap`: by two independent
    page resamples instead (bootstrap_prediction_lower), its sequences starting where PageBootstrap's do."""

    batch: float = 1.0
    bootstrap: bool = False

    @property
    def name(self) -> str:
        return f"prediction{'-bootstrap' if self.bootstrap else ''} (batch {self.batch:g}x)"

    def over(self, group):
        size = "as large as the training rows" if self.batch == 1 else f"{self.batch:g}x as large as the training rows"
        return f"on one batch of unseen {group!r} groups {size}"

    def lower(self, correct, groups, answered, eff, q):
        if self.bootstrap:
            return bootstrap_prediction_lower(correct, groups, answered, q, self.batch)
        return DesignBound().lower(correct, groups, answered, np.asarray(eff, float) * self.batch / (1 + self.batch), q)

    def starts(self, eff):  # the bootstrap's sequences start where the page bootstrap's do
        return np.asarray(eff, float) * (1.0 if self.bootstrap else self.batch / (1 + self.batch))


DESIGN = DesignBound()
# What --group-column serves (since 2026-11-27; DESIGN before): issue 42's target is the precision of one finite
# unseen batch, and on ko-help by page (10 resplits, TF-IDF + LR, docs/notes/log.md, "ko-help by page") DESIGN's threshold missed it in
# 2 of 10 at 0.8 (.788, .752) where this one held 8 of 8 it stated (2 refused with the best reachable named) at a
# coverage of 0.177 instead of 0.270; at 0.9 this one stated nothing, DESIGN once. A refusal that names the best
# reachable target keeps the promise; a stated 0.8 that comes out 0.75 breaks it. The page bootstrap's prediction
# form states more (0.265) but misses what DESIGN misses.
SERVED = PredictionBound()
