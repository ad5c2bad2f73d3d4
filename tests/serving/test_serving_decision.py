"""The engine's one decision object (serving/decision.py), picked once from the folder's label space: a single-label
folder answers `Prediction`s, a multi-label one `MultiLabelPrediction`s, each confident by the one rule."""

from __future__ import annotations

import json

import numpy as np

from serving.calibration import ServedCalibration
from serving.decision import LabelSet, Prediction, TopLabel, decision_for
from serving.multilabel import MultiLabelPrediction
from textdata.calibration import Calibrator
from textdata.labels import LabelSpace

LABELS = ["a", "b", "c"]


def _calibration(thresholds) -> ServedCalibration:
    return ServedCalibration(Calibrator("none"), np.asarray(thresholds, np.float64), why="")


def test_a_single_label_space_answers_top_labels_confident_over_their_threshold(tmp_path):
    decision = decision_for(LabelSpace.of(LABELS), _calibration([0.6, 0.6, 0.9]), tmp_path)
    assert isinstance(decision, TopLabel) and decision.thresholds is None and decision.label_sep is None
    logits = np.array([[3.0, 0.0, 0.0], [0.0, 0.0, 2.0]], np.float32)
    probs = decision.probabilities(logits)
    assert np.allclose(probs.sum(1), 1)
    got = decision.answers(probs, logits, None, np.array([False, False]))
    assert all(type(p) is Prediction for p in got)
    assert [p.label for p in got] == ["a", "c"] and [p.confident for p in got] == [True, False]  # c needs 0.9
    away = decision.answers(probs, logits, 1, np.array([True, False]))
    assert not away[0].confident and away[0].reason == "out of domain" and len(away[0].probabilities) == 1
    assert decision.info() == {"multi_label": False, "thresholds": None}


def test_a_multi_label_space_answers_sets_over_thresholds_json_and_its_separator(tmp_path):
    (tmp_path / "thresholds.json").write_text(json.dumps(
        {"labels": LABELS, "thresholds": [0.5, 0.3, 0.8], "label_sep": "|", "tuned": True}))
    decision = decision_for(LabelSpace.of(LABELS, multi_label=True), _calibration([0.9, 0.9, 0.9]), tmp_path)
    assert isinstance(decision, LabelSet) and decision.label_sep == "|" and decision.space.sep == "|"
    logits = np.array([[2.5, -0.5, -3.0], [-3.0, -3.0, -3.0]], np.float32)
    probs = decision.probabilities(logits)
    got = decision.answers(probs, logits, None, np.zeros(2, bool))
    assert all(type(p) is MultiLabelPrediction for p in got)
    # row 0 asserts a (0.92 > 0.5) and b (0.38 > 0.3); b is under its 0.9 precision threshold: not confident
    assert got[0].labels == ["a", "b"] and not got[0].confident and got[0].reason is None
    assert got[1].labels == [] and got[1].confident  # asserting nothing asserts nothing wrong
    info = decision.info()
    assert info["multi_label"] and info["thresholds"] == {"a": 0.5, "b": 0.3, "c": 0.8} and info["label_sep"] == "|"
