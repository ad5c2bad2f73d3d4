"""Coverage at a precision: the threshold on calibrated scores that keeps the answered rows' precision at a
target, chosen on out-of-fold rows and scored nested (fold k's threshold chosen on the other folds, then
its coverage and precision measured on fold k), for the report's table and for `--target-precision`.

A threshold is chosen as the lowest one whose answered rows (top calibrated probability >= it) reach the
target precision, i.e. the most coverage that keeps the target on the rows it is chosen on, counting only
thresholds that answer at least MIN_ANSWERED rows (a precision on fewer rows is not an estimate). Per
class (each class's own threshold, chosen on the rows it is predicted for) is served only where it
measurably wins over one threshold for all: nested mean coverage at least PER_CLASS_MARGIN higher, at a
nested precision no lower than the target or than the global threshold's.
"""

from __future__ import annotations

import numpy as np

from finetune.group_bound import (
    SERVED,
    GroupRule,
    correctness_icc,
    effective_rows,
    lower_bounds,
    size_weighted_mean,
)
from textdata.calibration import confident
from textdata.errors import DataError
from textdata.nested import fold_masks
from textdata.nested import nested as out_of_fold

TARGETS = (0.80, 0.90, 0.95, 0.98, 0.99)
MIN_ANSWERED = 20
PER_CLASS_MARGIN = 0.01
DELTA = 0.10  # the served threshold's precision holds with probability 1 - DELTA (bound_threshold)


def precision_curve(conf: np.ndarray, correct: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(thresholds, precision of the rows at or above each), one entry per distinct score, highest first."""
    order = np.argsort(-conf, kind="stable")
    c, ok = conf[order], correct[order].astype(float)
    last_of_tie = np.r_[c[1:] != c[:-1], True]  # a threshold answers every row tied with it
    answered = np.flatnonzero(last_of_tie) + 1
    return c[answered - 1], np.cumsum(ok)[answered - 1] / answered


def pick_threshold(
    conf: np.ndarray, correct: np.ndarray, target: float, min_answered: int = MIN_ANSWERED
) -> tuple[float | None, float]:
    """(the lowest threshold whose answered rows reach `target` precision, or None; the best precision any
    threshold answering at least `min_answered` rows reaches)."""
    if len(conf) == 0:
        return None, float("nan")
    thresholds, precision = precision_curve(np.asarray(conf, float), np.asarray(correct, bool))
    counts = _counts(np.asarray(conf, float), thresholds)
    enough = counts >= min(min_answered, len(conf))
    if not enough.any():
        return None, float("nan")
    best = float(precision[enough].max())
    ok = np.flatnonzero(enough & (precision >= target))
    return (float(thresholds[ok[-1]]) if len(ok) else None), best


def needed_rows(target: float, delta: float) -> int:
    """The fewest answered rows, all right, whose Clopper-Pearson lower bound reaches `target` at confidence
    1 - delta: n with target**n <= delta (k = n right: the bound is delta**(1/n))."""
    return int(np.ceil(np.log(delta) / np.log(target))) if 0 < target < 1 else 1


SEQUENCE_STARTS = (1, 4)  # each fixed sequence starts at this many times the fewest rows a bound can pass at


def fixed_sequences(lower: np.ndarray, eff: np.ndarray, need: int, target: float) -> tuple[list[int], list[int]]:
    """Per sequence of SEQUENCE_STARTS (thresholds highest first, each tested once its effective rows reach
    `need` x the start): the last index that passes before the first failure, and the first index tested."""
    found, firsts = [], []
    for start in SEQUENCE_STARTS:
        tested = eff >= need * start
        failed = np.flatnonzero(tested & (lower < target))
        passed = np.flatnonzero(tested & (lower >= target))
        last = passed[passed < failed[0]] if len(failed) else passed
        found += [int(last[-1])] if len(last) else []
        firsts += list(np.flatnonzero(tested)[:1])
    return found, firsts


def bound_threshold(
    conf: np.ndarray, correct: np.ndarray, target: float, delta: float, groups: np.ndarray | None = None,
    rho: float | None = None, rule: GroupRule = SERVED,
) -> tuple[float | None, dict]:
    """(the lowest threshold at which precision >= target holds with probability >= 1 - delta, or None; what
    was reached). Learn-then-Test with fixed-sequence testing (Angelopoulos et al. 2021): thresholds tested
    from the highest down by their Clopper-Pearson bounds, stopping at the first that fails. The order
    depends on the scores only, not on the labels, so the error stays at delta. Two sequences at delta / 2
    each, the lower threshold served: one starts at the fewest answered rows a bound can pass at
    (`needed_rows`: all of them right), one at 4x as many, where one wrong row among the top few no longer
    stops it (synthetic rows, 1,500 out-of-fold: no threshold in 5% of draws from the first alone, 0% from
    both; tests/finetune/test_threshold_bound.py). With `groups`: each threshold's bound at its effective
    sample size (finetune/group_bound.py: the design effect of the answered rows' groups at the intra-group
    correlation `rho`, estimated on these rows where not given), so that it holds over unseen groups; `rule`
    (a group_bound rule value: SERVED = PredictionBound(), DESIGN, PageBootstrap()) says how each threshold's
    bound is taken from its rows and from how many effective rows the sequences start (a bootstrap of a few
    pages is too narrow)."""
    conf, correct = np.asarray(conf, float), np.asarray(correct, bool)
    half = delta / len(SEQUENCE_STARTS)
    need = needed_rows(target, half)
    info = {"needed_rows": need, "rows": len(conf), "best_bound": None, "best_bound_coverage": None}
    if groups is not None:
        rho = correctness_icc(correct, groups) if rho is None else rho
        info["icc"] = round(float(rho), 6)
    if len(conf) < need:
        return None, info
    thresholds, precision = precision_curve(conf, correct)
    n = _counts(conf, thresholds)
    if groups is None:
        lower, eff = lower_bounds(np.rint(precision * n), n, half), n
        starts = eff
    else:  # fewer effective rows: the same precision on them, a wider bound
        order = np.argsort(-conf, kind="stable")
        eff = effective_rows(n, size_weighted_mean(order, groups, n), rho)
        lower = rule.lower(correct[order], np.asarray(groups)[order], n, eff, half)
        starts = rule.starts(eff)
        info["rule"] = rule.name
    found, firsts = fixed_sequences(lower, starts, need, target)
    if not firsts:  # grouped: too few effective rows for either sequence to start
        return None, info
    # the highest target this rule reaches: a sequence passes anything only if its first threshold passes
    best = max(firsts, key=lambda i: lower[i])
    info.update(best_bound=float(lower[best]), best_bound_coverage=float(n[best] / len(conf)))
    if not found:
        return None, info
    at = max(found)  # the lower threshold: more rows answered
    if groups is not None:
        info.update(effective_rows=round(float(eff[at]), 1), design_effect=round(float(n[at] / eff[at]), 4))
    return float(thresholds[at]), info


def label_bound_thresholds(P: np.ndarray, Y: np.ndarray, target: float, delta: float = DELTA
                           ) -> tuple[np.ndarray, list[dict]]:
    """Multi-label: per label, `bound_threshold` on that label's probability (the rows at or above a threshold
    assert it, rightly where the label is true), at `delta` for each label: each label's precision >= target
    holds with probability 1 - delta on texts like these (a per-label statement: Bonferroni over 40 labels
    would need ~60 rows all right per label before any is answered). 1.0 (never confident) where the bound
    does not reach the target; per label what bound_threshold reached."""
    P, Y = np.asarray(P, float), np.asarray(Y)
    out, infos = np.ones(P.shape[1]), []
    for j in range(P.shape[1]):
        t, info = bound_threshold(P[:, j], Y[:, j] == 1, target, delta)
        infos.append(info)
        out[j] = 1.0 if t is None else t
    return out, infos


def _counts(conf: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Rows at or above each threshold."""
    s = np.sort(conf)
    return len(s) - np.searchsorted(s, thresholds, side="left")


def pick_per_class(
    probs: np.ndarray, y: np.ndarray, target: float, fallback: float | None, delta: float | None = None,
    groups: np.ndarray | None = None, rule: GroupRule = SERVED, split: bool = True,
) -> np.ndarray:
    """One threshold per class, chosen on the rows predicted as that class; a class with fewer than
    MIN_ANSWERED such rows takes `fallback` (the global threshold), one whose rows never reach the target
    gets 1.0 (never confident). With `delta`: each class's bound at delta / classes (so that every class
    holds the target together with probability 1 - delta, and so does their mix; `split` False: at delta
    each, so each class alone holds with 1 - delta), no fallback; with `groups`, at the correlation of every
    row's correctness (a class's own rows are too few to estimate it)."""
    best = probs.argmax(1)
    conf = probs.max(1)
    rho = None if groups is None else correctness_icc(best == y, groups)
    out = np.empty(probs.shape[1])
    for c in range(probs.shape[1]):
        rows = best == c
        if delta is not None:
            t, _ = bound_threshold(conf[rows], y[rows] == c, target, delta / (probs.shape[1] if split else 1),
                                   None if groups is None else groups[rows], rho, rule)
            out[c] = 1.0 if t is None else t
            continue
        if rows.sum() < MIN_ANSWERED:
            out[c] = 1.0 if fallback is None else fallback
            continue
        t, _ = pick_threshold(conf[rows], y[rows] == c, target)
        out[c] = 1.0 if t is None else t
    return out


def answered(probs: np.ndarray, y: np.ndarray, thresholds: np.ndarray | None) -> dict:
    """Coverage and precision of the rows `thresholds` (one per class) answer confidently."""
    if thresholds is None:
        return {"coverage": 0.0, "precision": None, "answered": 0}
    keep = confident(probs, thresholds)
    n = int(keep.sum())
    precision = float((probs[keep].argmax(1) == y[keep]).mean()) if n else None
    return {"coverage": float(keep.mean()), "precision": precision, "answered": n}


def choose(conf: np.ndarray, correct: np.ndarray, target: float, delta: float | None,
           groups: np.ndarray | None = None, rule: GroupRule = SERVED) -> tuple[float | None, dict]:
    """The served rule: the bound at `delta` (over unseen groups where `groups` are given), or (None) the
    point estimate; with what the bound reached (bound_threshold's info; {} for the point estimate)."""
    if delta is None:
        return pick_threshold(conf, correct, target)[0], {}
    return bound_threshold(conf, correct, target, delta, groups, rule=rule)


def _thresholds(probs, y, target: float, scope: str, delta: float | None = None, groups=None,
                rule: GroupRule = SERVED) -> np.ndarray | None:
    t, _ = choose(probs.max(1), probs.argmax(1) == y, target, delta, groups, rule)
    if scope == "global":
        return None if t is None else np.full(probs.shape[1], t)
    return pick_per_class(probs, y, target, t, delta, groups, rule)


def nested_coverage(
    probs_rest_by_fold: list,
    probs_held: np.ndarray,
    y: np.ndarray,
    fold_of: np.ndarray,
    target: float,
    scope: str,
    delta: float | None = None,
    groups: np.ndarray | None = None,
    rule: GroupRule = SERVED,
) -> dict:
    """Per fold: the threshold chosen on the other folds' rows (as calibrated by that fold's calibrator),
    scored on the fold's own rows (nested-calibrated); mean ± std over folds."""
    def chosen(rest, rest_probs) -> np.ndarray | None:
        return _thresholds(rest_probs, y[rest], target, scope, delta, None if groups is None else groups[rest], rule)

    def scored(th, held, _) -> dict:
        row = answered(probs_held[held], y[held], th)
        if th is not None:
            row["threshold"] = float(th[0]) if scope == "global" else [round(float(v), 6) for v in th]
        return row

    rows, _ = out_of_fold(fold_of, chosen, scored, per_fold=probs_rest_by_fold)
    folds = [{"fold": k, **row} for k, row in rows.items()]
    cov = np.array([f["coverage"] for f in folds])
    prec = np.array([np.nan if f["precision"] is None else f["precision"] for f in folds])
    return {
        "target": target,
        "scope": scope,
        "folds": folds,
        "coverage_mean": float(cov.mean()),
        "coverage_std": float(cov.std()),
        "precision_mean": None if np.isnan(prec).all() else float(np.nanmean(prec)),
        "precision_std": None if np.isnan(prec).all() else float(np.nanstd(prec)),
    }


def coverage_table(
    chosen, probs: np.ndarray, y: np.ndarray, fold_of: np.ndarray, targets=TARGETS
) -> list[dict]:
    """The report's coverage table (global thresholds), one entry per target precision."""
    rest = _rest_probs(chosen, probs, fold_of)
    return [nested_coverage(rest, chosen.calibrated, y, fold_of, t, "global") for t in targets]


def _rest_probs(chosen, probs, fold_of) -> list:
    return [cal(np.asarray(probs[rest], np.float64)) for (_, _, rest), cal in zip(fold_masks(fold_of), chosen.per_fold)]


def percent(confidence: float) -> str:
    """0.9 -> '90%', 0.975 -> '97.5%' (a team's --confidence, said as it was given)."""
    return f"{confidence * 100:.4g}%"


def rows_needed(precision: float, target: float, delta: float) -> int | None:
    """About how many answered rows at this `precision` a Clopper-Pearson bound needs to reach `target` at
    confidence 1 - delta; None where the precision is not above the target."""
    if precision <= target:
        return None
    n = needed_rows(target, delta)
    while n < 10_000_000:
        if lower_bounds(np.array([np.floor(precision * n)]), np.array([n]), delta)[0] >= target:
            return n
        n = int(n * 1.1) + 1
    return None


def best_reachable(conf: np.ndarray, correct: np.ndarray, delta: float, groups=None, rule: GroupRule = SERVED
                   ) -> tuple[float | None, float]:
    """(the highest target bound_threshold reaches on these rows, to 4 decimals, or None; its coverage), by
    bisection: the rows a bound needs grow with the target, so a closed form would miss that."""
    lo, hi, found = 0.0, 1.0, None
    for _ in range(17):
        mid = (lo + hi) / 2
        t, _ = bound_threshold(conf, correct, mid, delta, groups, rule=rule)
        lo, hi, found = (mid, hi, (mid, t)) if t is not None else (lo, mid, found)
    if found is None:
        return None, 0.0
    return float(np.floor(found[0] * 1e4) / 1e4), float((np.asarray(conf) >= found[1]).mean())


def unreachable(target: float, delta: float, conf: np.ndarray, correct: np.ndarray, groups=None,
                rule: GroupRule = SERVED) -> str:
    """The one line for a target the bound does not reach: too few rows (how many are needed; grouped rows
    count as `rule` counts them: rule.starts of their design effect's rows), or a target above what these rows reach (the best reachable with the
    stated confidence)."""
    n = len(conf)
    _, info = bound_threshold(conf, correct, target, delta, groups, rule=rule)
    t, best = pick_threshold(conf, correct, target)
    head = f"--target-precision {target:g}: "
    if t is not None:  # the point estimate reaches it: the rows are too few to state it with confidence
        answered_rows = int((conf >= t).sum())
        need = rows_needed(float(correct[conf >= t].mean()), target, delta)
        if need is not None and groups is not None:  # as many effective rows as the rule counts at today's groups
            order = np.argsort(-conf, kind="stable")
            eff = effective_rows([answered_rows], size_weighted_mean(order, groups, [answered_rows]), info["icc"])
            need = int(np.ceil(need * answered_rows / float(rule.starts(eff)[0])))
        more = "" if need is None else f"; at the precision they reach, about {int(np.ceil(need * n / answered_rows))} rows are needed"
        return (head + f"the {n} out-of-fold rows are too few to state it with {percent(1 - delta)} confidence (at least "
                f"{info['needed_rows']} answered rows, all right{more}); label more rows or lower the target")
    best_target, coverage = best_reachable(conf, correct, delta, groups, rule)
    reach = ("" if best_target is None else f"the best reachable with {percent(1 - delta)} confidence is "
             f"{best_target:.4f}, at coverage {coverage:.3f}; ")
    return (head + f"no threshold reaches it on the {n} out-of-fold rows ({reach}the best precision reached is "
            f"{best:.4f}, answering at least {min(MIN_ANSWERED, n)} rows); use a lower target, e.g. with --resume to "
            "keep the folds")


def statement(target: float, confidence: float | None, coverage: float, group: str | None = None,
              rule: GroupRule = SERVED) -> str:
    """What a team is told the served threshold promises (grouped: about unseen groups, as `rule` states it)."""
    held = f"with {percent(confidence)} confidence " if confidence else "(a point estimate, no stated confidence) "
    like = rule.over(group) if group and confidence else "on texts like the training rows"
    return f"precision >= {target:.2f} {held}{like}, at an estimated coverage of {coverage:.2f}"


def _rule(delta: float | None, per_class: bool, grouped: dict | None) -> str:
    if delta is None:
        return "point estimate: the lowest threshold whose out-of-fold precision reaches the target"
    rule = (f"Learn-then-Test: the lowest threshold whose Clopper-Pearson lower bound (fixed-sequence, delta "
            f"{delta:g}{' per class / classes' if per_class else ''}) reaches the target on the out-of-fold rows")
    if grouped:
        rule += (f", at their effective sample size over groups of {grouped['column']!r} (design effect 1 + (m - 1) "
                 f"* rho, intra-group correlation of correctness rho {grouped['icc']:.4f}; bound: {grouped['bound']})")
    return rule


def served_threshold(
    chosen, final, probs: np.ndarray, y: np.ndarray, fold_of: np.ndarray, labels: list[str], target: float,
    delta: float | None = DELTA, groups: np.ndarray | None = None, group_column: str | None = None,
    group_rule: GroupRule = SERVED,
) -> dict:
    """What --target-precision serves: the threshold chosen on every row (as the final calibrator scores
    them): the lowest whose precision >= target holds with probability 1 - delta (bound_threshold; delta
    None: the point estimate; `groups`: over unseen groups, finetune/group_bound.py), global or per class
    where that won nested, with the nested estimates. DataError (one line: the best reachable, or how many
    rows are needed) where the target is not reached."""
    calibrated = final(np.asarray(probs, np.float64))
    conf, correct = calibrated.max(1), calibrated.argmax(1) == y
    groups = None if groups is None or delta is None else np.asarray(groups)
    t, info = choose(conf, correct, target, delta, groups, group_rule)
    if t is None:
        if delta is None:
            _, best = pick_threshold(conf, correct, target)
            raise DataError(
                f"--target-precision {target:g}: no threshold reaches it on the {len(y)} out-of-fold rows "
                f"(the best precision reached is {best:.4f}, answering at least "
                f"{min(MIN_ANSWERED, len(y))} rows); use a lower target, e.g. with --resume to keep the folds"
            )
        raise DataError(unreachable(target, delta, conf, correct, groups, group_rule))
    rest = _rest_probs(chosen, probs, fold_of)
    nested = {s: nested_coverage(rest, chosen.calibrated, y, fold_of, target, s, delta, groups, group_rule)
              for s in ("global", "per_class")}
    g, pc = nested["global"], nested["per_class"]
    floor = min(target, g["precision_mean"] if g["precision_mean"] is not None else target)
    wins = (
        pc["coverage_mean"] >= g["coverage_mean"] + PER_CLASS_MARGIN
        and pc["precision_mean"] is not None
        and pc["precision_mean"] >= floor
    )
    scope = "per_class" if wins else "global"
    threshold = (
        dict(zip(labels, (round(float(v), 6) for v in pick_per_class(calibrated, y, target, t, delta, groups, group_rule))))
        if wins
        else round(t, 6)
    )
    est = nested[scope]
    why = (
        f"per class: nested coverage {pc['coverage_mean']:.3f} vs {g['coverage_mean']:.3f} with one threshold"
        if wins
        else f"one threshold: per-class thresholds' nested coverage {pc['coverage_mean']:.3f} vs "
        f"{g['coverage_mean']:.3f} (needs +{PER_CLASS_MARGIN} at no lower precision)"
    )
    confidence = None if delta is None else round(1 - delta, 6)
    grouped = None
    if groups is not None:  # the served bound's own info: its rho, design effect and effective rows
        grouped = {"column": group_column or "group", "groups": len(np.unique(groups)), "icc": info["icc"],
                   "bound": group_rule.name,
                   **{k: info.get(k) for k in ("design_effect", "effective_rows")}}
    out = {
        "target_precision": target,
        "confidence": confidence,
        "rule": _rule(delta, wins, grouped),
        "statement": statement(target, confidence, est["coverage_mean"], grouped and grouped["column"], group_rule),
        "scope": scope,
        "threshold": threshold,
        "why": why,
        "estimated_coverage": est["coverage_mean"],
        "estimated_coverage_std": est["coverage_std"],
        "estimated_precision": est["precision_mean"],
        "estimated_precision_std": est["precision_std"],
        "nested": nested,
    }
    return {**out, "grouped": grouped} if grouped else out
