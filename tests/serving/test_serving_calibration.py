"""The engine serves calibrated probabilities and a `confident` flag from calibration.json; folders without
one keep working; export carries it (serving/calibration.py, textdata/calibration.py)."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from serving import export, score
from serving.engine import Classifier
from textdata.calibration import Calibrator
from textdata.errors import ModelError

TEXTS = ["꿈에서 봤다", "오류 발생했다", "메모 기록", "회의 시간 약속", "처음 보는 말", "꿈 오류 메모"] * 3


def with_calibration(src, dst, **spec):
    shutil.copytree(src, dst)
    if spec:
        labels = json.loads((dst / "config.json").read_text())["id2label"]
        spec = {"labels": [labels[str(i)] for i in range(len(labels))], "fitted_on": "model", **spec}
        (dst / "calibration.json").write_text(json.dumps(spec))
    return dst


def test_scores_are_calibrated_and_flagged(exported_dir, tmp_path):
    plain = Classifier.load(exported_dir, quantized=False)
    raw = plain.predict_proba(TEXTS)
    expected = Calibrator("temperature", temperature=2.5)(raw)
    # a threshold between two of the calibrated scores, so that the texts straddle it whatever the tiny model
    top = np.unique(expected.max(1))
    cut = float((top[len(top) // 2 - 1] + top[len(top) // 2]) / 2)
    folder = with_calibration(
        exported_dir,
        tmp_path / "cal",
        method="temperature",
        temperature=2.5,
        threshold=cut,
        target_precision=0.9,
        estimated_coverage=0.61,
        threshold_scope="global",
    )
    clf = Classifier.load(folder, quantized=False)
    np.testing.assert_allclose(clf.predict_proba(TEXTS), expected, atol=1e-6)
    preds = clf.predict(TEXTS)
    assert [p.score for p in preds] == pytest.approx(expected.max(1).tolist(), abs=1e-6)
    assert [p.confident for p in preds] == (expected.max(1) >= cut).tolist()
    assert 0 < sum(p.confident for p in preds) < len(preds)  # the texts straddle the threshold
    assert [p.label for p in preds] == [
        p.label for p in plain.predict(TEXTS)
    ]  # a temperature moves no answer
    info = clf.info()["calibration"]
    assert info["calibrated"] and info["threshold"] == cut and info["target_precision"] == 0.9
    assert info["estimated_coverage"] == 0.61 and info["method"] == "temperature"


def test_per_class_threshold_and_vector_scaling(exported_dir, tmp_path):
    plain = Classifier.load(exported_dir, quantized=False)
    labels = plain.labels
    w, b = [1.5, 0.8, 1.2], [0.3, -0.2, 0.0]
    folder = with_calibration(
        exported_dir,
        tmp_path / "vec",
        method="vector",
        params={"weights": w, "bias": b},
        threshold={labels[0]: 0.99, labels[1]: 0.0, labels[2]: 0.5},
    )
    clf = Classifier.load(folder, quantized=False)
    expected = Calibrator("vector", weights=tuple(w), bias=tuple(b))(plain.predict_proba(TEXTS))
    np.testing.assert_allclose(clf.predict_proba(TEXTS), expected, atol=1e-6)
    th = np.array([0.99, 0.0, 0.5])
    best = expected.argmax(1)
    assert [p.confident for p in clf.predict(TEXTS)] == (expected.max(1) >= th[best]).tolist()


def test_a_folder_without_calibration_keeps_working(exported_dir):
    clf = Classifier.load(exported_dir, quantized=False)
    assert all(p.confident for p in clf.predict(TEXTS))
    info = clf.info()["calibration"]
    assert info["calibrated"] is False and info["threshold"] is None and "every answer" in info["why"]
    np.testing.assert_allclose(clf.predict_proba(TEXTS).sum(1), 1, atol=1e-5)


def test_broken_calibration_is_one_line_and_blend_mismatch_is_not_applied(exported_dir, tmp_path):
    bad = with_calibration(exported_dir, tmp_path / "bad", method="temperature", temperature=0)
    with pytest.raises(ModelError, match=r"calibration.json: unreadable calibration .*temperature 0"):
        Classifier.load(bad, quantized=False)
    other = with_calibration(
        exported_dir,
        tmp_path / "other",
        method="temperature",
        temperature=2.0,
        threshold=0.5,
        fitted_on="blend",
    )
    clf = Classifier.load(other, quantized=False)  # no baseline/ here: the blend is not served
    plain = Classifier.load(exported_dir, quantized=False)
    np.testing.assert_allclose(clf.predict_proba(TEXTS), plain.predict_proba(TEXTS), atol=1e-6)
    assert all(p.confident for p in clf.predict(TEXTS)) and "blend" in clf.info()["calibration"]["why"]


def test_score_writes_the_confident_column(exported_dir, tmp_path):
    folder = with_calibration(
        exported_dir, tmp_path / "cal", method="temperature", temperature=2.5, threshold=0.5
    )
    inp, out = tmp_path / "in.csv", tmp_path / "out.csv"
    pd.DataFrame({"text": TEXTS + [""]}).to_csv(inp, index=False)
    score.run(
        score.ScoreConfig(model=folder, input=inp, output=out, progress=False, quantized=False, batch_rows=5)
    )
    got = pd.read_csv(out, keep_default_na=False, dtype=str)
    assert got.columns.tolist()[1:4] == ["pred_label", "pred_score", "confident"]
    clf = Classifier.load(folder, quantized=False)
    expected = ["True" if p.confident else "False" for p in clf.predict(TEXTS)]
    assert got["confident"].tolist() == expected + [""]  # the empty row: no prediction, no flag
    np.testing.assert_allclose(
        got["pred_score"][:-1].astype(float), [p.score for p in clf.predict(TEXTS)], atol=1e-5
    )


def test_export_carries_calibration_and_drops_a_stale_one(trained_classifier_dir, tmp_path):
    src = with_calibration(
        trained_classifier_dir, tmp_path / "model", method="temperature", temperature=1.7, threshold=0.4
    )
    out = tmp_path / "onnx"
    export.run(export.ExportConfig(model=src, output=out))
    assert json.loads((out / "calibration.json").read_text()) == json.loads(
        (src / "calibration.json").read_text()
    )
    assert Classifier.load(out).info()["calibration"]["threshold"] == 0.4
    (src / "calibration.json").unlink()
    export.run(export.ExportConfig(model=src, output=out))
    assert not (out / "calibration.json").exists()


def test_a_folder_from_before_the_confidence_setting_states_90_percent(exported_dir, tmp_path):
    """calibration.json written before k-fold's --confidence (a statement, no "confidence" field): its bound was
    at 90%, and /v1/model says so; a recorded level is shown as recorded; a point estimate claims none."""
    base = {"method": "temperature", "temperature": 1.0, "threshold": 0.5, "target_precision": 0.9,
            "threshold_scope": "global"}
    old = with_calibration(exported_dir, tmp_path / "old", **base,
                           statement="precision >= 0.90 with 90% confidence on texts like the training rows")
    assert Classifier.load(old, quantized=False).info()["calibration"]["confidence"] == 0.9
    new = with_calibration(exported_dir, tmp_path / "new", **base, confidence=0.975,
                           statement="precision >= 0.90 with 97.5% confidence on texts like the training rows")
    info = Classifier.load(new, quantized=False).info()["calibration"]
    assert info["confidence"] == 0.975 and "97.5%" in info["statement"]
    point = with_calibration(exported_dir, tmp_path / "point", **base, confidence=None)
    assert Classifier.load(point, quantized=False).info()["calibration"].get("confidence") is None
