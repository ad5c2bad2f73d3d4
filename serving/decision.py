"""What a model's scores answer: the engine's one decision object, picked once from the folder's label space
(textdata/labels.py) and carried as a value, so serving/engine.py has no kind branches.

- `TopLabel` (single-label): a softmax; the answer is the top label, a `Prediction`; confident where its calibrated
  probability clears its served threshold (calibration.json) and the text is in domain (ood/).
- `LabelSet` (multi-label, serving/multilabel.py): a sigmoid per label; the answer is the set of labels over their
  decision thresholds (thresholds.json, moved through the calibrator), a `MultiLabelPrediction`; confident where
  every label it asserts clears its own served threshold.
Both answer `probabilities`, `asserted`, `answers`, `info`, and for a scored file `columns` and `scored`; a caller
matches an answer by its type.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from serving.calibration import ServedCalibration
from serving.multilabel import MultiLabelPrediction, load_thresholds, multi_label_predictions, sigmoid
from textdata.calibration import top_label
from textdata.labels import LabelSpace


@dataclass
class Prediction:
    label: str
    score: float
    probabilities: dict[str, float]
    confident: bool = True  # the score clears the served threshold (calibration.json); always without one
    reason: str | None = None  # why not confident where the score is not why: "out of domain" (ood/)


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float32, copy=False)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


class TopLabel:
    """Single-label answers (see the module's docstring)."""

    thresholds = None  # no decision thresholds: the top label is the answer
    label_sep = None
    columns = ("pred_label", "pred_score", "confident")  # a scored file's answer columns (serving/scoring.py)

    def __init__(self, space: LabelSpace, calibration: ServedCalibration):
        self.space, self.calibration = space, calibration

    def probabilities(self, logits: np.ndarray) -> np.ndarray:
        return softmax(logits)

    def asserted(self, probs: np.ndarray) -> np.ndarray:
        """(n, L) bool: the label each row answers, its top one."""
        return top_label(probs)

    def answers(self, probs: np.ndarray, logits: np.ndarray, top_k: int | None, away: np.ndarray) -> list[Prediction]:
        labels = self.space.labels
        sure, reasons = self.calibration.flags(probs, away)
        out = []
        for p, ok, reason in zip(probs, sure, reasons):
            best = int(p.argmax())
            keep = range(len(labels)) if top_k is None else np.argsort(-p, kind="stable")[: max(1, top_k)]
            dist = {labels[j]: float(p[j]) for j in keep}
            out.append(Prediction(label=labels[best], score=float(p[best]), probabilities=dist, confident=bool(ok),
                                  reason=reason))
        return out

    def info(self) -> dict:
        return {"multi_label": False, "thresholds": None}

    def scored(self, probs: np.ndarray, have: np.ndarray, texts: list[str]) -> tuple[dict, np.ndarray]:
        """A scored file's answer columns but `confident` (NaN rows, `have` False, get none), and the confident
        flags of the `have` rows (`texts` their normalised texts: an out-of-domain one is never confident)."""
        best = np.where(have, np.nan_to_num(probs, nan=-1).argmax(1), -1)
        labels = np.array(self.space.labels, dtype=object)
        out = {"pred_label": np.where(have, labels[np.maximum(best, 0)], None),
               "pred_score": np.where(have, probs[np.arange(len(probs)), np.maximum(best, 0)], np.nan)}
        return out, self.calibration.confident(probs[have]) & ~self.calibration.out_of_domain(texts)


class LabelSet:
    """Multi-label answers (see the module's docstring): `thresholds` the decision thresholds on the served
    scale, `label_sep` the separator a set is joined with."""

    columns = ("pred_labels", "confident")  # a scored file's answer columns (serving/scoring.py)

    def __init__(self, space: LabelSpace, calibration: ServedCalibration, folder: Path):
        self.space, self.calibration = space, calibration
        # the tuned thresholds on the scale the scores are served (same label sets)
        self.spec = calibration.multi_label_thresholds(load_thresholds(folder, list(space.labels)))
        self.thresholds, self.label_sep = self.spec.values, self.spec.label_sep
        self.space = LabelSpace.of(space.labels, True, self.label_sep)  # thresholds.json's separator

    def probabilities(self, logits: np.ndarray) -> np.ndarray:
        return sigmoid(logits)

    def asserted(self, probs: np.ndarray) -> np.ndarray:
        """(n, L) bool: the labels each row answers, those over their decision thresholds."""
        return np.asarray(probs) > self.thresholds[None, :]

    def answers(self, probs: np.ndarray, logits: np.ndarray, top_k: int | None,
                away: np.ndarray) -> list[MultiLabelPrediction]:
        sure, reasons = self.calibration.flags(probs, away, self.asserted(probs))
        return multi_label_predictions(probs, logits, list(self.space.labels), self.thresholds, top_k, sure, reasons)

    def info(self) -> dict:
        return {"multi_label": True, "thresholds": self.spec.as_dict(list(self.space.labels)),
                "label_sep": self.label_sep, "thresholds_tuned": self.spec.tuned,
                "thresholds_source": self.spec.source}

    def scored(self, probs: np.ndarray, have: np.ndarray, texts: list[str]) -> tuple[dict, np.ndarray]:
        """As TopLabel's: `pred_labels` the labels over their thresholds joined by the separator ("" for none)."""
        over = self.asserted(probs)  # NaN rows compare False
        names = np.full(len(probs), None, dtype=object)
        for i in np.flatnonzero(have):
            names[i] = self.label_sep.join(self.space.labels[j] for j in np.flatnonzero(over[i]))  # id order
        return {"pred_labels": names}, self.calibration.confident(probs[have], over[have])


def decision_for(space: LabelSpace, calibration: ServedCalibration, folder: Path) -> TopLabel | LabelSet:
    """The folder's decision, picked once from its label space."""
    return space.pick(lambda: TopLabel(space, calibration), lambda: LabelSet(space, calibration, folder))()
