"""The monitor's class-mix estimate (issue 42): each single-label answer's served probabilities kept in the window,
the mix the window's texts have estimated from them by EM against the training mix (Saerens et al. 2002;
textdata/prior_shift.py), and, with --prior-correction, that mix put in force on the served engine where the
measured rule says it wins (serving/prior.py)."""

from __future__ import annotations

import logging

import numpy as np

from serving.multilabel import MultiLabelPrediction
from serving.prior import PriorCorrection, should_correct
from textdata.prior_shift import SHIFT_LEVEL, estimate

log = logging.getLogger("app")
MIX_MAX_LABELS = 200  # a window keeps each answer's distribution up to this many labels (1,000 x 200 floats)
MIX_MIN_ROWS = 50  # answers before the class mix is estimated (fewer: its likelihood-ratio test is not chi-square)


def distribution(pred, labels: list[str], served: PriorCorrection | None = None) -> tuple | None:
    """A single-label answer's probability per label, to 4 decimals, as calibrated (`served`: the correction in
    force is undone, so an estimate is never made on its own output); labels a top_k answer left out share what
    its shown ones leave. None for a multi-label answer (its labels are not one distribution)."""
    if isinstance(pred, MultiLabelPrediction) or len(labels) > MIX_MAX_LABELS:
        return None
    shown = {**(pred.probabilities or {}), pred.label: float(pred.score)}
    missing = [name for name in labels if name not in shown]
    rest = max(0.0, 1.0 - sum(shown.get(name, 0.0) for name in labels)) / max(1, len(missing))
    p = np.array([[shown.get(name, rest) for name in labels]], np.float64)
    return tuple(np.round(p[0] if served is None else served.undo(p)[0], 4).tolist())


def mix_estimate(window) -> dict | None:
    """textdata/prior_shift.py's `estimate` of a window (arrays), with the training mix as `fitted`: reference.json's
    mean out-of-fold probability, else its answered mix; None for a multi-label version, without a reference, or
    under MIX_MIN_ROWS answers."""
    ref = window.reference
    probs = [s.probs for s in window.seen if s.probs is not None]
    if ref is None or ref.get("multi_label") or len(probs) < MIX_MIN_ROWS:
        return None
    fitted = ref.get("mean_probability") or {k: ref["class_mix"].get(k, 0) for k in window.labels}
    base = np.array([fitted.get(k, 0.0) for k in window.labels], np.float64)
    if base.sum() <= 0:
        return None
    return {**estimate(np.array(probs, np.float64), base / base.sum()), "fitted": base / base.sum()}


def estimated_mix(window) -> dict | None:
    """/v1/monitor's `estimated_mix`: the window's mix and the training mix per label, and whether it moved."""
    got = mix_estimate(window)
    if got is None:
        return None
    return {"mix": dict(zip(window.labels, np.round(got["prior"], 4).tolist())),
            "training_mix": dict(zip(window.labels, np.round(got["fitted"], 4).tolist())),
            "rows": got["rows"], "p_value": got["p_value"], "total_variation": round(got["total_variation"], 4),
            "moved": bool(got["p_value"] < SHIFT_LEVEL)}


def correct(engine, window) -> None:
    """--prior-correction: put the window's class mix in force on the engine where the rule says it wins, take
    it away where it does not (a log line at each turn)."""
    calibration = getattr(engine.clf, "calibration", None)
    if calibration is None or getattr(engine.clf, "multi_label", False):
        return
    got = mix_estimate(window)
    before = calibration.prior
    calibration.prior = (PriorCorrection(tuple(window.labels), got["fitted"], got["prior"], got["rows"],
                                         got["p_value"]) if should_correct(got) else None)
    if (before is None) != (calibration.prior is None):
        log.warning("prior correction %s on version %s (%s)", "on" if before is None else "off", window.version,
                    "no estimate" if got is None else f"p = {got['p_value']:.3g} over {got['rows']} answers")
