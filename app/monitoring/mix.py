"""The class mix a monitor window estimates from its served probabilities (Saerens et al. 2002, EM:
textdata/prior_shift.py) and the prior correction it may put in force (--prior-correction, serving/prior.py).
`w` below is an app/monitoring/monitor.py Window."""

from __future__ import annotations

import logging

import numpy as np

from app.label_kinds import space_from
from serving.multilabel import MultiLabelPrediction
from serving.prior import PriorCorrection
from textdata.prior_shift import SHIFT_LEVEL, estimate, should_correct

log = logging.getLogger("app")

MIX_MAX_LABELS = 200  # a window keeps each answer's distribution up to this many labels (1,000 x 200 floats)
MIX_MIN_ROWS = 50  # answers before the class mix is estimated (fewer: its likelihood-ratio test is not chi-square)


def distribution(pred, labels: list[str]) -> tuple | None:
    """A single-label answer's probability per label, to 4 decimals; labels a top_k answer left out share what its
    shown ones leave. None for a multi-label answer (its labels are not one distribution)."""
    if isinstance(pred, MultiLabelPrediction) or len(labels) > MIX_MAX_LABELS:
        return None
    shown = {**(pred.probabilities or {}), pred.label: float(pred.score)}
    missing = [name for name in labels if name not in shown]
    rest = max(0.0, 1.0 - sum(shown.get(name, 0.0) for name in labels)) / max(1, len(missing))
    return tuple(round(float(shown.get(name, rest)), 4) for name in labels)


def estimated_mix(w) -> dict | None:
    """The class mix of the texts in the window, estimated from the served probabilities by EM (Saerens et al.
    2002), against the training mix (reference.json's mean out-of-fold probability, else its answered mix), and
    whether it moved (textdata/prior_shift.py); None for a multi-label version, or without a reference."""
    got = mix_estimate(w)
    if got is None:
        return None
    return {"mix": dict(zip(w.labels, np.round(got["prior"], 4).tolist())),
            "training_mix": dict(zip(w.labels, np.round(got["fitted"], 4).tolist())),
            "rows": got["rows"], "p_value": got["p_value"], "total_variation": round(got["total_variation"], 4),
            "moved": bool(got["p_value"] < SHIFT_LEVEL)}


def mix_estimate(w) -> dict | None:
    """textdata/prior_shift.py's `estimate` of the window (arrays), with the training mix as `fitted`."""
    ref = w.reference
    probs = [s.probs for s in w.seen if s.probs is not None]
    # one class mix exists only for single-label answers (a set's labels are not one distribution)
    if ref is None or space_from(ref).pick(False, True) or len(probs) < MIX_MIN_ROWS:
        return None
    fitted = ref.get("mean_probability") or {k: ref["class_mix"].get(k, 0) for k in w.labels}
    base = np.array([fitted.get(k, 0.0) for k in w.labels], np.float64)
    if base.sum() <= 0:
        return None
    # warm start from this window's last estimate, accelerated (SQUAREM): the same fixed point in a fraction of plain
    # EM's cost (docs/notes/log.md, "Class-mix shift"), and reached where plain EM's 200 rounds stop short of it
    got = estimate(np.array(probs, np.float64), base / base.sum(), w.em_start, accelerated=True)
    w.em_start = got["prior"]
    return {**got, "fitted": base / base.sum()}


def wins(spec: dict) -> bool:
    """k-fold's check (finetune/prior_check.py, calibration.json's "prior_correction"): False where it measured
    that the correction loses for this model; a folder from before the check keeps the flag's word."""
    check = (spec or {}).get("prior_correction")
    return True if not check else bool(check.get("wins"))


def correct(engine, w) -> None:
    """--prior-correction: put the window's class mix in force on the engine where the rule says it wins
    (serving/prior.py), take it away where it does not."""
    calibration = getattr(engine.clf, "calibration", None)
    if calibration is None or engine.clf.space.pick(False, True):
        return
    got = mix_estimate(w)
    before = calibration.prior
    calibration.prior = (PriorCorrection(tuple(w.labels), got["fitted"], got["prior"], got["rows"], got["p_value"])
                         if should_correct(got) and wins(calibration.spec) else None)
    if (before is None) != (calibration.prior is None):
        log.warning("prior correction %s on version %s (%s)", "on" if before is None else "off", w.version,
                    "no estimate" if got is None else f"p = {got['p_value']:.3g} over {got['rows']} answers")

