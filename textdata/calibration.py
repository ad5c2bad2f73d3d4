"""The calibrator and the served threshold: one definition that k-fold fits (finetune/calibration.py) and
serving applies (serving/calibration.py), so a served score is the number k-fold measured.

Single-label: the served probabilities p (the blend's where it is kept, else the model's) are rescaled on
their logarithms, which is what a temperature does to logits (softmax(log p) = p):

    temperature:  p' = softmax(log p / T)                       (one parameter; the argmax never moves)
    vector:       p' = softmax(w ⊙ log p + b)                   (2 per class; kept only where it wins, nested)
    none:         p' = p                                        (where no calibrator beat the scores nested:
                                                                 a kept blend is fitted by log-loss already)

Multi-label: each label's sigmoid probability is rescaled on its logit, z = log(p / (1 - p)):

    temperature:  p'_l = sigmoid(z_l / T_l)                     (one parameter per label)
    platt:        p'_l = sigmoid(a_l z_l + b_l)                 (two per label, a_l > 0)
    none:         p'_l = p_l                                    (as single-label)

The threshold: an answer is `confident` when its top calibrated probability is at least the threshold of
the label it answers (one threshold for every label, or one per label where that won in k-fold); a
multi-label answer is confident when every label it asserts clears its own. calibration.json holds
both; absent, scores are served as they are and every answer counts as confident. A multi-label folder's
decision thresholds (thresholds.json, tuned on uncalibrated scores) are served moved through the
calibrator (`decision_thresholds`): each label's map is increasing, so the label sets stay the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from textdata.labels import is_multi_label
from textdata.model_files import CALIBRATION as CALIBRATION_FILE

METHODS = ("temperature", "vector", "none")
MULTI_LABEL_METHODS = ("temperature", "platt", "none")
_FLOOR = 1e-12  # log(0) guard, as in baseline/blend.py


@dataclass(frozen=True)
class Calibrator:
    method: str  # temperature | vector | none (single-label); temperature | platt | none (multi-label)
    multi_label: bool = False
    temperature: float | tuple = 1.0  # one T (single-label), one per label (multi-label temperature)
    weights: tuple | None = None  # vector: w per class; platt: a per label
    bias: tuple | None = None  # vector: b per class; platt: b per label

    def __call__(self, probs: np.ndarray) -> np.ndarray:
        """Calibrated probabilities, same shape and dtype as `probs`."""
        p = np.asarray(probs)
        if self.method == "none":
            return p
        if self.multi_label:
            q = np.clip(p.astype(np.float64), _FLOOR, 1 - _FLOOR)
            z = np.log(q) - np.log1p(-q)
            if self.method == "temperature":
                z = z / np.asarray(self.temperature, np.float64)
            else:
                z = z * np.asarray(self.weights) + np.asarray(self.bias)
            return (0.5 * (1.0 + np.tanh(0.5 * z))).astype(p.dtype, copy=False)  # sigmoid, no overflow
        z = np.log(np.clip(p, _FLOOR, 1.0))
        if self.method == "temperature":
            z = z * np.asarray(1.0 / self.temperature, z.dtype)
        else:
            z = z * np.asarray(self.weights, z.dtype) + np.asarray(self.bias, z.dtype)
        z = np.exp(z - z.max(axis=-1, keepdims=True))
        return (z / z.sum(axis=-1, keepdims=True)).astype(p.dtype, copy=False)

    def params(self) -> dict:
        """The parameters as calibration.json stores them."""
        if self.method == "none":
            return {}
        if self.method == "temperature":
            t = self.temperature
            return {"temperature": list(t) if isinstance(t, tuple) else float(t)}
        return {"params": {"weights": list(self.weights), "bias": list(self.bias)}}


def threshold_vector(threshold, labels: list[str]) -> np.ndarray | None:
    """calibration.json's threshold (a number, {label: number}, or null) as one threshold per label."""
    if threshold is None:
        return None
    if isinstance(threshold, dict):
        return np.array([float(threshold[name]) for name in labels], np.float64)
    return np.full(len(labels), float(threshold), np.float64)


def confident(probs: np.ndarray, thresholds: np.ndarray | None) -> np.ndarray:
    """Single-label: per row, does the top probability clear the threshold of the label it answers."""
    probs = np.asarray(probs)
    if thresholds is None:
        return np.ones(len(probs), bool)
    best = probs.argmax(1)
    return probs[np.arange(len(probs)), best] >= thresholds[best]


def confident_multi_label(
    probs: np.ndarray, asserted: np.ndarray, thresholds: np.ndarray | None
) -> np.ndarray:
    """Multi-label: per row, does every asserted label (`asserted`: (n, L) bool, over its decision threshold)
    clear its precision threshold. A row asserting no label asserts nothing wrong: confident."""
    if thresholds is None:
        return np.ones(len(probs), bool)
    return ~(np.asarray(asserted, bool) & (np.asarray(probs) < thresholds)).any(1)


def decision_thresholds(calibrator: Calibrator | None, thresholds: np.ndarray) -> np.ndarray:
    """Multi-label decision thresholds on the calibrated scale: p > t exactly where calibrated p > calibrated t."""
    t = np.asarray(thresholds, np.float64)
    return t if calibrator is None else calibrator(t[None, :])[0]


def calibrator_from_json(spec: dict, n_labels: int) -> Calibrator:
    """The Calibrator that calibration.json describes; ValueError (one line) when it is not one."""
    multi = is_multi_label(spec)
    method = spec.get("method")
    if method not in (MULTI_LABEL_METHODS if multi else METHODS):
        raise ValueError(f"unknown method {method!r}")
    if method == "none":
        return Calibrator(method, multi)
    if method == "temperature":
        t = spec["temperature"]
        t = tuple(float(v) for v in t) if multi else float(t)
        values = np.atleast_1d(np.asarray(t, np.float64))
        if (multi and len(values) != n_labels) or not np.all(np.isfinite(values)) or np.any(values <= 0):
            raise ValueError(
                f"temperature {spec['temperature']!r}: need positive finite values"
                + (f", one per label ({n_labels})" if multi else "")
            )
        return Calibrator(method, multi, temperature=t)
    w, b = (tuple(float(v) for v in spec["params"][k]) for k in ("weights", "bias"))
    if len(w) != n_labels or len(b) != n_labels or not np.all(np.isfinite(w + b)):
        raise ValueError(f"params: need {n_labels} finite weights and biases, got {len(w)} and {len(b)}")
    if multi and min(w) <= 0:  # the served decision thresholds move through the map: it must keep each order
        raise ValueError(f"params: Platt weights must be positive, got {min(w)!r}")
    return Calibrator(method, multi, weights=w, bias=b)


def read_calibration(
    folder: str | Path, labels: list[str]
) -> tuple[Calibrator, np.ndarray | None, dict] | None:
    """(calibrator, thresholds per label or None, the JSON) from folder/calibration.json, or None without
    one; ValueError naming the file when it is unreadable or does not fit these labels."""
    path = Path(folder) / CALIBRATION_FILE
    if not path.exists():
        return None
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
        if spec.get("labels") is not None and list(spec["labels"]) != list(labels):
            raise ValueError(f"fitted for labels {spec['labels']}, the model has {list(labels)}")
        calibrator = calibrator_from_json(spec, len(labels))
        thresholds = threshold_vector(spec.get("threshold"), list(labels))
        if thresholds is not None and not np.all((thresholds >= 0) & (thresholds <= 1)):
            raise ValueError(f"threshold {spec['threshold']!r} outside [0, 1]")
    except (ValueError, KeyError, TypeError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(f"{path}: unreadable calibration ({type(e).__name__}: {msg})") from None
    return calibrator, thresholds, spec


BINS = 15  # top-label ECE bins (equal width), as in Guo et al. and Desai & Durrett


def binary_ece(p: np.ndarray, y: np.ndarray, bins: int = BINS) -> float:
    """Expected calibration error of one probability against its 0/1 outcome: rows binned by `p` (equal-width
    bins over [0, 1]), the gap between the outcome's rate and the mean probability per bin, weighted by the
    bin's rows."""
    which = np.minimum((p * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        rows = which == b
        if rows.any():
            total += rows.sum() * abs(y[rows].mean() - p[rows].mean())
    return float(total / max(1, len(y)))


def top_label_ece(probs: np.ndarray, y: np.ndarray, bins: int = BINS) -> float:
    """ECE of the top label: its probability against whether it is right."""
    return binary_ece(probs.max(1), probs.argmax(1) == y, bins)
