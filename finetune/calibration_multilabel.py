"""Calibration and thresholds for a target precision when each label is its own sigmoid (multi-label).

Each label's probability is rescaled on its logit (textdata/calibration.py): a temperature per label by
default, Platt scaling (a slope and an intercept per label) only where its nested log-loss wins in every
fold and by VECTOR_MARGIN on average, and none where the chosen one's nested log-loss is not below the
scores' own (the single-label rule, finetune/calibration.py's choose(): a kept blend is fitted by log-loss
on these rows already). Scored nested like the single-label calibrator. Calibration error
here is the labels' mean binary ECE (15 bins on each label's probability against its 0/1 target).

For a target precision, each label gets its own threshold: the lowest at which the rows asserting that
label are right at least `target` of the time with 90% confidence, or k-fold's --confidence (finetune/coverage.py's
Learn-then-Test bound, per label: label_bound_thresholds), 1.0 where none is. A row is confident
when every label it asserts (over its decision threshold, thresholds.json) clears its precision threshold.
The decision thresholds are tuned on uncalibrated scores; the engine moves them through the calibrator
(each label's map is increasing, so the label sets do not change), and the nested estimate does the same
with each fold's own decision thresholds and calibrator, so it scores the rule that is served.
"""

from __future__ import annotations

import numpy as np

from finetune.calibration import BINS, ece_floor, label_drawn_ece, mean_binary_ece, pick_method
from finetune.coverage import (
    DELTA,
    MIN_ANSWERED,
    label_bound_thresholds,
    percent,
    pick_threshold,
    statement,
    unreachable,
)
from textdata.calibration import Calibrator, LabelCalibrator, confident
from textdata.errors import DataError
from textdata.nested import fold_masks
from textdata.nested import nested as out_of_fold

_FLOOR = 1e-7


def _logits(p: np.ndarray) -> np.ndarray:
    q = np.clip(np.asarray(p, np.float64), _FLOOR, 1 - _FLOOR)
    return np.log(q) - np.log1p(-q)


def scores(P: np.ndarray, Y: np.ndarray) -> dict:
    """Mean binary ECE over labels, mean binary log-loss and Brier over every (row, label)."""
    p = np.clip(np.asarray(P, np.float64), _FLOOR, 1 - _FLOOR)
    Y = np.asarray(Y, np.float64)
    return {
        "ece": mean_binary_ece(p, Y),
        "log_loss": float(-np.mean(Y * np.log(p) + (1 - Y) * np.log1p(-p))),
        "brier": float(np.mean((p - Y) ** 2)),
    }


def _label_temperature(z: np.ndarray, y: np.ndarray) -> float:
    from scipy.optimize import minimize_scalar

    def nll(log_beta):
        s = np.exp(log_beta) * z
        return float(np.mean(np.logaddexp(0, s) - y * s))  # binary cross-entropy on logits

    return float(np.exp(-minimize_scalar(nll, bounds=(-10.0, 10.0), method="bounded").x))


def fit(P: np.ndarray, Y: np.ndarray, method: str) -> Calibrator:
    """Per-label temperature (T_l) or Platt (a_l, b_l, by scikit-learn's logistic regression on the logit).
    A label that is never (or always) on in these rows keeps its probabilities (T = 1, or a = 1, b = 0), as
    does one whose Platt slope is not positive (its scores rank the wrong way round: nothing to rescale)."""
    from sklearn.linear_model import LogisticRegression

    Z = _logits(P)
    Y = np.asarray(Y)
    temps, a, b = [], [], []
    for j in range(Z.shape[1]):
        both = 0 < Y[:, j].sum() < len(Y)
        if method == "temperature":
            temps.append(round(_label_temperature(Z[:, j], Y[:, j]), 8) if both else 1.0)
        else:
            lr = LogisticRegression(C=1e4, max_iter=1000).fit(Z[:, [j]], Y[:, j]) if both else None
            # a slope <= 0 would reverse the label's order, and the served thresholds move with the map
            keep = lr is not None and lr.coef_[0, 0] > 0
            a.append(round(float(lr.coef_[0, 0]), 8) if keep else 1.0)
            b.append(round(float(lr.intercept_[0]), 8) if keep else 0.0)
    if method == "temperature":
        return LabelCalibrator("temperature", temperature=tuple(temps))
    return LabelCalibrator("platt", weights=tuple(a), bias=tuple(b))


def nested(P: np.ndarray, Y: np.ndarray, fold_of: np.ndarray, method: str) -> tuple[np.ndarray, list, list]:
    out, cals = out_of_fold(fold_of, lambda rest: fit(P[rest], Y[rest], method),
                            lambda cal, held: cal(np.asarray(P[held], np.float64)), np.empty(P.shape, np.float64))
    folds = [{"fold": k, "before": scores(P[held], Y[held]), "after": scores(out[held], Y[held])}
             for k, held, _ in fold_masks(fold_of)]
    return out, cals, folds


def label_thresholds(P: np.ndarray, Y: np.ndarray, target: float, delta: float = DELTA
                     ) -> tuple[np.ndarray, list[float]]:
    """(per label: the lowest threshold at which that label's precision >= `target` holds with 1 - delta confidence
    (finetune/coverage.py label_bound_thresholds), 1.0 where none does; per label the best precision reached)."""
    best = [pick_threshold(P[:, j], Y[:, j] == 1, target)[1] for j in range(P.shape[1])]
    return label_bound_thresholds(P, Y, target, delta)[0], best


def answered(P: np.ndarray, Y: np.ndarray, thresholds: np.ndarray, decision: np.ndarray) -> dict:
    """Coverage (confident rows) and the micro precision of the labels asserted in those rows (a label is
    asserted over its decision threshold, strictly, as serving/multilabel.py cuts)."""
    asserted = P > decision
    keep = confident(P, thresholds, asserted)
    hits = (asserted[keep] & (Y[keep] == 1)).sum()
    said = asserted[keep].sum()
    return {
        "coverage": float(keep.mean()),
        "precision": float(hits / said) if said else None,
        "answered": int(keep.sum()),
    }


def calibrate_labels(
    P: np.ndarray,
    Y: np.ndarray,
    fold_of: np.ndarray,
    labels: list[str],
    fitted_on: str,
    target: float | None = None,
    decision: np.ndarray | float = 0.5,
    delta: float = DELTA,
) -> tuple[dict, Calibrator, np.ndarray]:
    """(report["calibration"] for a multi-label run, the calibrator fitted on every row, the nested-calibrated
    out-of-fold probabilities). With `target`, the served per-label thresholds and their nested coverage;
    DataError when no label reaches it. `decision`: the uncalibrated decision thresholds, one per label or
    one row per fold (each fold's nested tuned thresholds); `delta`: 1 - the stated confidence."""
    P, Y = np.asarray(P, np.float64), np.asarray(Y)
    n_folds = len(np.unique(fold_of))
    decision = np.asarray(decision, np.float64)
    decision = np.broadcast_to(decision if decision.ndim == 2 else decision.reshape(1, -1), (n_folds, P.shape[1]))
    runs = {m: nested(P, Y, fold_of, m) for m in ("temperature", "platt")}
    before_loss = np.array([f["before"]["log_loss"] for f in runs["temperature"][2]])
    t_loss = np.array([f["after"]["log_loss"] for f in runs["temperature"][2]])
    p_loss = np.array([f["after"]["log_loss"] for f in runs["platt"][2]])
    served, method, gain = pick_method(before_loss, t_loss, p_loss, ("temperature", "platt"))
    calibrated, cals, folds = runs[method]
    why = f"per-label {method}: Platt's nested log-loss gain over temperatures {gain:+.4f}"
    if served == "none":  # finetune/calibration.py's pick_method, per label
        before = np.mean([f["before"]["log_loss"] for f in folds])
        why = (f"none: per-label {method}'s nested log-loss {np.mean([f['after']['log_loss'] for f in folds]):.4f} "
               f"is not below the scores' own {before:.4f}, so they are served as they are")
        method, calibrated = "none", P
        cals = [LabelCalibrator("none")] * len(folds)
        folds = [{**f, "after": f["before"]} for f in folds]
    final = fit(P, Y, method) if method != "none" else LabelCalibrator("none")
    mean = lambda key, part: float(np.mean([f[part][key] for f in folds]))
    std = lambda key, part: float(np.std([f[part][key] for f in folds]))
    section = {
        "method": method,
        "multi_label": True,
        "fitted_on": fitted_on,
        "bins": BINS,
        "nested": True,
        "why": why,
        "folds": folds,
        "final": {"method": final.method, **final.params()},
        **{
            part: {
                f"{k}_{s}": (mean if s == "mean" else std)(k, part)
                for k in ("ece", "log_loss", "brier")
                for s in ("mean", "std")
            }
            for part in ("before", "after")
        },
        "ece_floor": ece_floor(calibrated, fold_of, drawn_ece=label_drawn_ece),  # of the served (after) scores
    }
    if target is not None:
        section["served"] = _served(P, Y, fold_of, labels, target, final, cals, calibrated, decision, delta)
    return section, final, calibrated


def _served(P, Y, fold_of, labels, target, final, cals, calibrated, decision, delta) -> dict:
    served = final(P)
    thresholds, best = label_thresholds(served, Y, target, delta)
    if np.all(thresholds >= 1.0):  # one line: the nearest label's best reachable target, or the rows it needs
        j = int(np.nanargmax(np.where(np.isnan(best), -1.0, best)))
        nearest = unreachable(target, delta, served[:, j], Y[:, j] == 1).split(": ", 1)[1]
        raise DataError(
            f"--target-precision {target:g}: no label reaches it on the {len(Y)} out-of-fold rows with "
            f"{percent(1 - delta)} confidence (the best precision reached is {np.nanmax(best):.4f}, asserting at least "
            f"{MIN_ANSWERED} rows); the nearest label, {labels[j]!r}: {nearest}"
        )
    def chosen(rest, fold) -> np.ndarray:  # fold: its calibrator and decision thresholds, fitted on `rest` too
        return label_thresholds(fold[0](P[rest]), Y[rest], target, delta)[0]

    def scored(th, held, fold) -> dict:
        return answered(calibrated[held], Y[held], th, fold[0](fold[1][None, :])[0])

    rows, _ = out_of_fold(fold_of, chosen, scored, per_fold=list(zip(cals, decision)))
    folds = [{"fold": k, **row} for k, row in rows.items()]
    cov = [f["coverage"] for f in folds]
    prec = [f["precision"] for f in folds if f["precision"] is not None]
    return {
        "target_precision": target,
        "confidence": round(1 - delta, 6),
        "rule": f"Learn-then-Test per label: the lowest threshold whose Clopper-Pearson lower bound (fixed-sequence, "
                f"delta {delta:g} per label) reaches the target on the out-of-fold rows",
        "statement": "each label's " + statement(target, 1 - delta, float(np.mean(cov))),
        "scope": "per_label",
        "threshold": dict(zip(labels, (round(float(t), 6) for t in thresholds))),
        # threshold 1.0: the label's rows never reach the target, so an answer asserting it is never confident
        "never_confident": [name for name, t in zip(labels, thresholds) if t >= 1.0],
        "estimated_coverage": float(np.mean(cov)),
        "estimated_coverage_std": float(np.std(cov)),
        "estimated_precision": float(np.mean(prec)) if prec else None,
        "estimated_precision_std": float(np.std(prec)) if prec else None,
        "folds": folds,
    }
