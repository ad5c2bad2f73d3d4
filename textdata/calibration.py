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

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from textdata.labels import PROBLEM_TYPES, SINGLE_LABEL, LabelSpace
from textdata.model_files import CALIBRATION as CALIBRATION_FILE
from textdata.plain_files import read_json

METHODS = ("temperature", "vector", "none")
MULTI_LABEL_METHODS = ("temperature", "platt", "none")
_FLOOR = 1e-12  # log(0) guard, as in baseline/blend.py


@dataclass(frozen=True)
class Calibrator:
    """A single-label calibrator: a softmax's probabilities rescaled on their logarithms (temperature | vector |
    none). `LabelCalibrator` is the multi-label one; `calibrator_for` picks the class from a label space."""

    method: str  # temperature | vector | none (single-label); temperature | platt | none (multi-label)
    multi_label: bool = False  # the kind, as the class says it (LabelCalibrator: True)
    temperature: float | tuple = 1.0  # one T (single-label), one per label (multi-label temperature)
    weights: tuple | None = None  # vector: w per class; platt: a per label
    bias: tuple | None = None  # vector: b per class; platt: b per label
    methods = METHODS  # what calibration.json may name for this kind

    def __call__(self, probs: np.ndarray) -> np.ndarray:
        """Calibrated probabilities, same shape and dtype as `probs`."""
        p = np.asarray(probs)
        return p if self.method == "none" else self._scaled(p)

    def _scaled(self, p: np.ndarray) -> np.ndarray:
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

    @staticmethod
    def read_temperature(value, n_labels: int) -> float:
        return _number(value, "temperature", low=0, above=True)


@dataclass(frozen=True)
class LabelCalibrator(Calibrator):
    """A multi-label calibrator: each label's sigmoid probability rescaled on its logit (temperature | platt |
    none), a parameter (or two) per label."""

    multi_label: bool = True
    methods = MULTI_LABEL_METHODS

    def _scaled(self, p: np.ndarray) -> np.ndarray:
        q = np.clip(p.astype(np.float64), _FLOOR, 1 - _FLOOR)
        z = np.log(q) - np.log1p(-q)
        if self.method == "temperature":
            z = z / np.asarray(self.temperature, np.float64)
        else:
            z = z * np.asarray(self.weights) + np.asarray(self.bias)
        return (0.5 * (1.0 + np.tanh(0.5 * z))).astype(p.dtype, copy=False)  # sigmoid, no overflow

    @staticmethod
    def read_temperature(value, n_labels: int) -> tuple:
        return _numbers(value, "temperature", n_labels, low=0, above=True)


def calibrator_for(space: LabelSpace) -> type[Calibrator]:
    """The calibrator class of a label space's kind, picked once."""
    return space.pick(Calibrator, LabelCalibrator)


def threshold_vector(threshold, labels: list[str]) -> np.ndarray | None:
    """calibration.json's threshold (a number, {label: number}, or null) as one threshold per label."""
    if threshold is None:
        return None
    if isinstance(threshold, dict):
        return np.array([float(threshold[name]) for name in labels], np.float64)
    return np.full(len(labels), float(threshold), np.float64)


def top_label(probs: np.ndarray) -> np.ndarray:
    """(n, L) bool: each row's top label, the one a single-label answer asserts."""
    probs = np.asarray(probs)
    out = np.zeros(probs.shape, bool)
    out[np.arange(len(probs)), probs.argmax(1)] = True
    return out


def confident(probs: np.ndarray, thresholds: np.ndarray | None, asserted: np.ndarray | None = None) -> np.ndarray:
    """Per row, does every label it asserts clear its threshold (a NaN score clears none). `asserted`: (n, L)
    bool, the labels a multi-label answer holds (over their decision thresholds); by default the top label, what
    a single-label answer holds. A row asserting no label asserts nothing wrong: confident."""
    probs = np.asarray(probs)
    if thresholds is None:
        return np.ones(len(probs), bool)
    held = top_label(probs) if asserted is None else np.asarray(asserted, bool)
    return ~(held & ~(probs >= thresholds)).any(1)


def decision_thresholds(calibrator: Calibrator | None, thresholds: np.ndarray) -> np.ndarray:
    """Multi-label decision thresholds on the calibrated scale: p > t exactly where calibrated p > calibrated t."""
    t = np.asarray(thresholds, np.float64)
    return t if calibrator is None else calibrator(t[None, :])[0]


MAX_FILE_BYTES = 4 << 20  # per-label parameters for 10,000 labels are ~0.5 MB
MAX_TEXT_CHARS = 1000  # a free-text field /v1/model shows (the nested estimates' `why`)


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _number(value, field: str, low: float = -math.inf, high: float = math.inf, above: bool = False) -> float:
    """A JSON number (not a string, a boolean or NaN) within [low, high] (or > low with `above`)."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    if not ok or value > high or (value <= low if above else value < low):
        bounds = "" if (low, high) == (-math.inf, math.inf) else (
            " > 0" if above and low == 0 and high == math.inf else f" in [{low:g}, {high:g}]")
        raise ValueError(f"{field} {_shown(value)} is not a finite number{bounds}")
    return float(value)


def _numbers(value, field: str, n: int, **bounds) -> tuple:
    if not isinstance(value, list) or len(value) != n:
        raise ValueError(f"{field}: need a list of {n} numbers, got {_shown(value)}")
    return tuple(_number(v, f"{field}[{i}]", **bounds) for i, v in enumerate(value))


def calibrator_from_json(spec: dict, n_labels: int) -> Calibrator:
    """The Calibrator that calibration.json describes; ValueError (one line, naming the field) when it is not
    one. Values are JSON numbers: a temperature "2" (a string) or a negative weight (which turns every answer
    around) is refused, not read as something meaningful."""
    kind = calibrator_for(LabelSpace.recorded(spec))  # calibration.json's problem_type
    method = spec.get("method")
    if method not in kind.methods:
        raise ValueError(f"method {_shown(method)}: expected one of {kind.methods}")
    if method == "none":
        return kind(method)
    if method == "temperature":
        return kind(method, temperature=kind.read_temperature(spec.get("temperature"), n_labels))
    params = spec.get("params")
    if not isinstance(params, dict):
        raise TypeError(f"params: need {{\"weights\": [...], \"bias\": [...]}}, got {_shown(params)}")
    # A weight <= 0 reverses (or drops) a label's own evidence: every answer inverted. Fits keep them positive.
    w = _numbers(params.get("weights"), "params.weights", n_labels, low=0, above=True)
    b = _numbers(params.get("bias"), "params.bias", n_labels)
    return kind(method, weights=w, bias=b)


def _checked_fields(spec: dict, labels: list[str]) -> dict:
    """The fields serving reads or shows (/v1/model), each checked; others are not carried."""
    out = {k: spec[k] for k in ("problem_type", "method") if k in spec}
    if spec.get("fitted_on") is not None:
        if spec["fitted_on"] not in ("model", "blend"):
            raise ValueError(f"fitted_on {_shown(spec['fitted_on'])}: expected 'model' or 'blend'")
        out["fitted_on"] = spec["fitted_on"]
    for k in ("target_precision", "estimated_coverage", "estimated_precision"):
        if spec.get(k) is not None:
            out[k] = _number(spec[k], k, 0.0, 1.0)
    if spec.get("confidence") is not None:  # the bound's level (k-fold's --confidence), shown in the statement
        out["confidence"] = _number(spec["confidence"], "confidence", 0.5, 1.0)
    elif "confidence" not in spec and spec.get("target_precision") is not None and spec.get("statement"):
        out["confidence"] = 0.9  # written before --confidence existed: the bound was then always at 90%
    said = spec.get("statement")
    if said is not None:
        if not isinstance(said, str) or len(said) > MAX_TEXT_CHARS:
            raise ValueError(f"statement {_shown(said)}: expected a text of at most {MAX_TEXT_CHARS:,} characters")
        out["statement"] = said
    scope = spec.get("threshold_scope")
    if scope is not None and (not isinstance(scope, str) or len(scope) > 40):
        raise ValueError(f"threshold_scope {_shown(scope)}: expected a short name ('global', 'per_class')")
    nested = spec.get("nested")
    if isinstance(nested, dict) and len(nested) <= 64:
        for k, v in nested.items():
            if isinstance(v, str) and len(v) > MAX_TEXT_CHARS:
                raise ValueError(f"nested.{str(k)[:40]}: {len(v):,} characters, over {MAX_TEXT_CHARS:,}")
            if v is not None and not isinstance(v, (str, bool, int, float)):
                raise ValueError(f"nested.{str(k)[:40]}: {_shown(v)} is not a number or a short text")
        out["nested"] = {str(k)[:80]: v for k, v in nested.items()}
    elif nested is not None and not isinstance(nested, bool):
        raise ValueError(f"nested {_shown(nested)}: expected an object of at most 64 estimates")
    return {**out, **({"threshold_scope": scope} if scope is not None else {}), "labels": list(labels)}


def _threshold(spec: dict, labels: list[str]) -> np.ndarray | None:
    threshold = spec.get("threshold")
    if threshold is None:
        return None
    if isinstance(threshold, dict):
        missing = [name for name in labels if name not in threshold]
        if missing:
            raise ValueError(f"threshold: no value for label {missing[0]!r} (of {len(missing)} missing)")
        return np.array([_number(threshold[n], f"threshold[{n!r}]", 0.0, 1.0) for n in labels], np.float64)
    return np.full(len(labels), _number(threshold, "threshold", 0.0, 1.0), np.float64)


def read_calibration(
    folder: str | Path, labels: list[str], space: LabelSpace | None = None
) -> tuple[Calibrator, np.ndarray | None, dict] | None:
    """(calibrator, thresholds per label or None, the checked fields) from folder/calibration.json, or None
    without one; ValueError naming the file and the field when it is unreadable, does not fit these labels, or
    (`space` given: the folder's label space) was fitted for the other kind of model."""
    path = Path(folder) / CALIBRATION_FILE
    if not path.exists():
        return None
    try:
        spec = read_json(path, MAX_FILE_BYTES)
        if not isinstance(spec, dict):
            raise TypeError(f"expected a JSON object, got {type(spec).__name__} {_shown(spec)}")
        kind = spec.get("problem_type", SINGLE_LABEL)  # files from before multi-label have none
        if kind not in PROBLEM_TYPES:
            raise ValueError(f"problem_type {_shown(kind)}: expected {' or '.join(map(repr, PROBLEM_TYPES))}")
        fitted = LabelSpace.recorded(spec).with_labels(labels)
        if space is not None and fitted.problem_type != space.problem_type:
            raise ValueError(f"problem_type {kind!r}: fitted for a {fitted.kind} model, this folder's is "
                             f"{space.kind}")
        given = spec.get("labels")
        if given is not None and (not isinstance(given, list) or given != list(labels)):
            raise ValueError(f"labels: fitted for labels {_shown(given)}, the model has {_shown(list(labels))}")
        calibrator = calibrator_from_json(spec, len(labels))
        thresholds = _threshold(spec, list(labels))
        checked = {**_checked_fields(spec, labels), **calibrator.params(),
                   "threshold": thresholds_as_given(spec.get("threshold"), thresholds, labels)}
    except (ValueError, KeyError, TypeError, RecursionError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(f"{path}: unreadable calibration ({type(e).__name__}: {msg})") from None
    return calibrator, thresholds, checked


def thresholds_as_given(threshold, checked: np.ndarray | None, labels: list[str]):
    """The threshold as calibration.json gives it (one number, or one per label), from its checked values."""
    if checked is None:
        return None
    return float(checked[0]) if not isinstance(threshold, dict) else dict(zip(labels, checked.tolist()))


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
