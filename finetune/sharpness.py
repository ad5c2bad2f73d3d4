"""The --final model's calibration share (issue 42): the served model is sharper than the fold models whose
out-of-fold scores fitted the calibrator and chose the threshold, so it is cooled on rows it never saw.

The final model trains on more rows and more steps than any fold model; an encoder trained for a few epochs is
far from converged, so its scores on new texts are much sharper than the folds' were on theirs (MiniLM on 750 BBC
sentences: mean top score out of fold 0.39, the final model on unseen rows 0.67). The calibrator fitted on the
folds then maps those sharper scores to over-confident ones (unseen ECE 0.23 where the raw model read 0.09,
bench/encoder_transfer.py with --blend off, removed: docs/notes/log.md), and more rows clear the threshold than out of fold.

`--calibration-share S` keeps about S of the rows (stratified; whole groups with --group-column; gold rows with
--teacher-column) from the final model and its baseline, scores them as served, and fits one factor tau >= 1:
the served calibrator is the folds' calibrator followed by a temperature tau (temperature T -> T * tau; vector
w, b -> w / tau, b / tau; none -> temperature tau). One parameter, so a few dozen rows fit it, while the rich calibrator and the
threshold keep every out-of-fold row. Cooling only: a final model that is not sharper keeps tau = 1; tau < 1
would sharpen scores on rows that cannot show a bound on it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from finetune.calibration import scores
from finetune.data import inner_split
from textdata.calibration import Calibrator, calibrator_from_json

MIN_ROWS = 50  # fewer held-out rows fit tau too loosely to be worth the final model's training rows
MAX_TAU = 20.0


def share_positions(data, share: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(positions the final model trains on, positions it is cooled on); the second is empty where the share is
    off or would hold out fewer than MIN_ROWS rows (then every row trains, as before)."""
    every = np.arange(len(data.texts))
    if not share:
        return every, every[:0]
    gold = getattr(data, "gold", None)  # --teacher-column: only gold rows score anything
    pool = every if gold is None else np.flatnonzero(gold)
    groups = None if data.groups is None else data.groups[pool]
    _, held = inner_split(data.targets[pool], groups, share, seed + 7919)  # a split apart from the folds' own
    held = pool[held]
    if len(held) < MIN_ROWS:
        return every, every[:0]
    return np.setdiff1d(every, held), np.sort(held)


def cooled(cal: Calibrator, tau: float) -> Calibrator:
    """The calibrator followed by a temperature tau on its output, as one calibrator of the same file format."""
    if tau == 1.0:
        return cal
    if cal.method == "none":
        return Calibrator("temperature", temperature=float(tau))
    if cal.method == "temperature":
        return dataclasses.replace(cal, temperature=float(cal.temperature) * tau)
    # softmax(log softmax(v) / tau) = softmax(v / tau): a temperature on the vector calibrator's output scales its
    # weights and biases alike (weights alone would leave the biases to decide as tau grows)
    return dataclasses.replace(cal, weights=tuple(float(w) / tau for w in cal.weights),
                               bias=tuple(float(b) / tau for b in cal.bias))


def fit_tau(cal: Calibrator, probs: np.ndarray, y: np.ndarray, low: float = 1.0) -> float:
    """tau in [low, MAX_TAU] minimising the mean log-loss of cooled(cal, tau) on the held-out rows (1 where
    nothing in the range beats it)."""
    from scipy.optimize import minimize_scalar

    p = np.asarray(probs, np.float64)
    nll = lambda log_tau: scores(cooled(cal, float(np.exp(log_tau)))(p), y)["log_loss"]
    res = minimize_scalar(nll, bounds=(np.log(low), np.log(MAX_TAU)), method="bounded", options={"xatol": 1e-4})
    return 1.0 if nll(0.0) <= res.fun else round(float(np.exp(res.x)), 6)


def mean_top(probs: np.ndarray) -> float:
    return float(np.asarray(probs).max(1).mean())


def cool(section: dict, n_labels: int, served_raw: np.ndarray, y: np.ndarray, n_train: int) -> dict:
    """Fit tau on the held-out rows' served (uncalibrated) probabilities and cool section["final"] in place; the
    record report["calibration"]["share"] keeps: before -> after on those rows, and the uncooled calibrator."""
    cal = calibrator_from_json({**section["final"], "problem_type": "single_label"}, n_labels)
    tau = fit_tau(cal, served_raw, y)
    c = cooled(cal, tau)
    p_before, p_after = cal(served_raw), c(served_raw)
    record = {"rows": len(y), "final_trained_on": int(n_train), "tau": tau, "final_before": section["final"],
              "before": scores(p_before, y), "after": scores(p_after, y), "mean_top_before": mean_top(p_before),
              "mean_top_after": mean_top(p_after)}
    section["final"] = {"method": c.method, **c.params()}
    section["share"] = record
    return record


def cool_final(report: dict, folder, proba: np.ndarray, texts: list[str], y: np.ndarray, n_labels: int,
               blend_kept: bool, n_train: int) -> None:
    """The final model's probabilities on its held-out rows, served as the folder serves them (the saved blend
    where kept), cool report["calibration"] before calibration.json is written."""
    from baseline.blend import ServedBlend

    served = ServedBlend(folder, n_labels)(proba, texts) if blend_kept else proba
    cool(report["calibration"], n_labels, np.asarray(served, np.float64), np.asarray(y), n_train)


def line(record: dict | None) -> str | None:
    """The printed line: how much sharper the final model was, and what cooling it did on its held-out rows."""
    if not record:
        return None
    b, a = record["before"], record["after"]
    if record["tau"] == 1.0:
        return (f"final model: {record['rows']} rows held out from it, no sharper than the fold models there "
                f"(log-loss {b['log_loss']:.4f}, ECE {b['ece']:.4f}): calibration served as fitted")
    return (f"final model: sharper than the fold models on the {record['rows']} rows held out from it; calibration "
            f"cooled by {record['tau']:.2f} there (log-loss {b['log_loss']:.4f} -> {a['log_loss']:.4f}, ECE "
            f"{b['ece']:.4f} -> {a['ece']:.4f}, mean top score {record['mean_top_before']:.3f} -> "
            f"{record['mean_top_after']:.3f})")
