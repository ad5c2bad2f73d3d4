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

from textdata.calibration import confident
from textdata.errors import DataError

TARGETS = (0.80, 0.90, 0.95, 0.98, 0.99)
MIN_ANSWERED = 20
PER_CLASS_MARGIN = 0.01


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


def _counts(conf: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Rows at or above each threshold."""
    s = np.sort(conf)
    return len(s) - np.searchsorted(s, thresholds, side="left")


def pick_per_class(probs: np.ndarray, y: np.ndarray, target: float, fallback: float | None) -> np.ndarray:
    """One threshold per class, chosen on the rows predicted as that class; a class with fewer than
    MIN_ANSWERED such rows takes `fallback` (the global threshold), one whose rows never reach the target
    gets 1.0 (never confident)."""
    best = probs.argmax(1)
    conf = probs.max(1)
    out = np.empty(probs.shape[1])
    for c in range(probs.shape[1]):
        rows = best == c
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


def _thresholds(probs, y, target: float, scope: str) -> np.ndarray | None:
    t, _ = pick_threshold(probs.max(1), probs.argmax(1) == y, target)
    if scope == "global":
        return None if t is None else np.full(probs.shape[1], t)
    return pick_per_class(probs, y, target, t)


def nested_coverage(
    probs_rest_by_fold: list,
    probs_held: np.ndarray,
    y: np.ndarray,
    fold_of: np.ndarray,
    target: float,
    scope: str,
) -> dict:
    """Per fold: the threshold chosen on the other folds' rows (as calibrated by that fold's calibrator),
    scored on the fold's own rows (nested-calibrated); mean ± std over folds."""
    folds = []
    for k, rest_probs in zip(np.unique(fold_of), probs_rest_by_fold):
        held, rest = fold_of == k, fold_of != k
        th = _thresholds(rest_probs, y[rest], target, scope)
        row = {"fold": int(k), **answered(probs_held[held], y[held], th)}
        if th is not None:
            row["threshold"] = float(th[0]) if scope == "global" else [round(float(v), 6) for v in th]
        folds.append(row)
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
    return [
        cal(np.asarray(probs[fold_of != k], np.float64))
        for k, cal in zip(np.unique(fold_of), chosen.per_fold)
    ]


def served_threshold(
    chosen, final, probs: np.ndarray, y: np.ndarray, fold_of: np.ndarray, labels: list[str], target: float
) -> dict:
    """What --target-precision serves: the threshold chosen on every row (as the final calibrator scores
    them), global or per class where that won nested, with the nested estimates. DataError (one line,
    naming the best precision reached) when no threshold reaches the target on the out-of-fold rows."""
    calibrated = final(np.asarray(probs, np.float64))
    t, best = pick_threshold(calibrated.max(1), calibrated.argmax(1) == y, target)
    if t is None:
        raise DataError(
            f"--target-precision {target:g}: no threshold reaches it on the {len(y)} out-of-fold rows "
            f"(the best precision reached is {best:.4f}, answering at least "
            f"{min(MIN_ANSWERED, len(y))} rows); use a lower target, e.g. with --resume to keep the folds"
        )
    rest = _rest_probs(chosen, probs, fold_of)
    nested = {
        s: nested_coverage(rest, chosen.calibrated, y, fold_of, target, s) for s in ("global", "per_class")
    }
    g, pc = nested["global"], nested["per_class"]
    floor = min(target, g["precision_mean"] if g["precision_mean"] is not None else target)
    wins = (
        pc["coverage_mean"] >= g["coverage_mean"] + PER_CLASS_MARGIN
        and pc["precision_mean"] is not None
        and pc["precision_mean"] >= floor
    )
    scope = "per_class" if wins else "global"
    threshold = (
        dict(zip(labels, (round(float(v), 6) for v in pick_per_class(calibrated, y, target, t))))
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
    return {
        "target_precision": target,
        "scope": scope,
        "threshold": threshold,
        "why": why,
        "estimated_coverage": est["coverage_mean"],
        "estimated_coverage_std": est["coverage_std"],
        "estimated_precision": est["precision_mean"],
        "estimated_precision_std": est["precision_std"],
        "nested": nested,
    }
