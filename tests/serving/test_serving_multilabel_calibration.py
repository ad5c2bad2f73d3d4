"""Multi-label calibration served end to end (issue 33): k-fold --multi-label --final --target-precision writes the
per-label calibrator and precision thresholds in calibration.json, serving.export copies it, and the engine serves
the calibrated sigmoids, the same label sets as the uncalibrated thresholds cut, and `confident` per answer.
A folder without calibration.json keeps serving the raw sigmoids with every answer confident."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from serving import export
from serving.engine import Classifier

TARGET = 0.75  # the tiny model reaches ~0.82 on some label here: margin for other CPUs
LABELS = ["dream", "error", "memo"]  # tests/multilabel_fixture.py


@pytest.fixture(scope="module")
def ml_calibrated(tiny_electra_dir, multilabel_rows, tmp_path_factory):
    from finetune import kfold

    tmp = tmp_path_factory.mktemp("ml-calibrated")
    data = tmp / "rows.csv"
    multilabel_rows(240, seed=12).to_csv(data, index=False)
    run_dir = tmp / "run"
    kfold.run(kfold.parse_args(["--model", str(tiny_electra_dir), "--data", str(data), "--multi-label", "--folds", "2",
                                "--epochs", "4", "--lr", "3e-3", "--batch-size", "16", "--holdout", "0.25",
                                "--blend", "off", "--target-precision", str(TARGET), "--output", str(run_dir), "--final"]))
    out = tmp / "onnx"
    export.run(export.ExportConfig(model=run_dir / "model", output=out, eval_csv=run_dir / "holdout.csv"))
    return run_dir, out


def raw_served(folder, texts):
    """What the folder serves before calibration: the model's sigmoids, blended where it carries a blend (the
    engine with its calibration switched off is not used: these numbers come from transformers and the blend)."""
    import torch
    from transformers import AutoTokenizer, ElectraForSequenceClassification

    from baseline.blend import ServedBlend
    from textdata.normalize import Normalizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = ElectraForSequenceClassification.from_pretrained(folder).eval()
    clean = [Normalizer.load(folder)(t) for t in texts]
    with torch.no_grad():
        p = torch.sigmoid(model(**tok(clean, padding=True, truncation=True, return_tensors="pt")).logits).numpy()
    return ServedBlend(folder, p.shape[1])(p, clean) if (folder / "baseline").exists() else p


def by_hand(spec, p):
    """calibration.json's per-label map, written out: sigmoid(z / T_l) or sigmoid(a_l z + b_l), z the logit."""
    q = np.clip(np.asarray(p, np.float64), 1e-12, 1 - 1e-12)
    z = np.log(q / (1 - q))
    if spec["method"] == "temperature":
        z = z / np.asarray(spec["temperature"])
    else:
        z = z * np.asarray(spec["params"]["weights"]) + np.asarray(spec["params"]["bias"])
    return 1 / (1 + np.exp(-z))


def test_final_writes_per_label_calibrator_thresholds_and_nested_estimates(ml_calibrated):
    run_dir, out = ml_calibrated
    spec = json.loads((run_dir / "model" / "calibration.json").read_text())
    report = json.loads((run_dir / "report.json").read_text())
    labels = report["labels"]
    assert spec["problem_type"] == "multi_label_classification" and spec["labels"] == labels
    assert spec["method"] in ("temperature", "platt") and spec["method"] == report["calibration"]["method"]
    assert spec["target_precision"] == TARGET and spec["threshold_scope"] == "per_label"
    assert set(spec["threshold"]) == set(labels) and all(0 <= t <= 1 for t in spec["threshold"].values())
    assert spec["threshold"] == report["calibration"]["served"]["threshold"]
    assert 0 <= spec["estimated_coverage"] <= 1 and spec["nested"]["folds"] == 2
    assert spec["nested"]["ece_after"] == pytest.approx(report["calibration"]["after"]["ece_mean"])
    assert json.loads((out / "calibration.json").read_text()) == spec  # export carries it unchanged
    # the held-out rows as served: calibrated, with their calibration before and after in the report
    assert set(report["holdout"]["calibration"]) == {"method", "before", "after"}


def test_engine_serves_calibrated_sigmoids_same_sets_and_confident(ml_calibrated):
    run_dir, out = ml_calibrated
    spec = json.loads((out / "calibration.json").read_text())
    held = pd.read_csv(run_dir / "holdout_predictions.csv", dtype=str, keep_default_na=False)
    texts = held["text"].tolist() + ["오늘 회의 시간", "꿈 오류 메모 기록"]
    clf = Classifier.load(out, quantized=False)
    labels = clf.labels
    raw = raw_served(run_dir / "model", texts)
    want = by_hand(spec, raw)
    assert not np.allclose(want, raw, atol=1e-3), "the fitted calibrator should change the scores"
    np.testing.assert_allclose(clf.predict_proba(texts), want, atol=1e-4)
    preds = clf.predict(texts)
    np.testing.assert_allclose([[p.scores[n] for n in labels] for p in preds], want, atol=1e-4)
    # the label sets are the ones thresholds.json (tuned on uncalibrated scores) cuts on the raw scores
    tuned = json.loads((out / "thresholds.json").read_text())["thresholds"]
    assert [p.labels for p in preds] == [[n for n, v, t in zip(labels, row, tuned) if v > t] for row in raw]
    # confident: every asserted label clears its precision threshold
    th = spec["threshold"]
    assert [p.confident for p in preds] == [all(p.scores[n] >= th[n] for n in p.labels) and p.reason is None
                                            for p in preds]
    # k-fold's own answers on the held-out rows are the served ones
    n = len(held)
    np.testing.assert_allclose(held[[f"prob_{x}" for x in labels]].astype(float).to_numpy(), want[:n], atol=1e-4)
    assert held["pred_labels"].tolist() == [";".join(p.labels) for p in preds[:n]]
    info = clf.info()["calibration"]
    assert info["calibrated"] is True and info["problem_type"] == "multi_label_classification"
    assert info["method"] == spec["method"] and info["threshold"] == th and info["target_precision"] == TARGET
    assert "through calibration.json" in clf.info()["thresholds_source"]


def test_off_topic_texts_are_out_of_domain(ml_calibrated):
    """--final fits the out-of-domain detector for multi-label too (a centroid per label): off-topic texts come
    back not confident with the reason, the API keeps it at any min_confidence; export carries ood/."""
    from app.http.api import _shape

    run_dir, out = ml_calibrated
    report = json.loads((run_dir / "report.json").read_text())
    assert report["out_of_domain"]["cut"] >= 0 and (out / "ood" / "ood.json").exists()
    clf = Classifier.load(out, quantized=False)
    preds = clf.predict(["Shares in the bank fell sharply after the chancellor announced new taxes on profits",
                         "library for parsing XML documents in Perl (development files)", "꿈에서 봤다 오늘 일기"])
    assert [p.reason for p in preds] == ["out of domain", "out of domain", None]
    assert not preds[0].confident and not preds[1].confident
    shaped = _shape(preds[0], None, 0.0)
    assert shaped["reason"] == "out of domain" and shaped["confident"] is False
    assert "reason" not in _shape(preds[2], None)


def test_folder_without_calibration_serves_raw_sigmoids_all_confident(ml_calibrated, tmp_path):
    run_dir, out = ml_calibrated
    plain = tmp_path / "plain"
    shutil.copytree(out, plain)
    (plain / "calibration.json").unlink()
    shutil.rmtree(plain / "ood")  # the out-of-domain detector's answers are test_off_topic_texts_are_out_of_domain's
    texts = pd.read_csv(run_dir / "holdout.csv", dtype=str, keep_default_na=False)["text"].tolist()
    clf = Classifier.load(plain, quantized=False)
    np.testing.assert_allclose(clf.predict_proba(texts), raw_served(run_dir / "model", texts), atol=1e-4)
    preds = clf.predict(texts)
    assert all(p.confident for p in preds)
    info = clf.info()["calibration"]
    assert info["calibrated"] is False and info["threshold"] is None and "no calibration.json" in info["why"]
    tuned = json.loads((plain / "thresholds.json").read_text())["thresholds"]
    assert clf.thresholds.tolist() == tuned  # thresholds.json as it is


def test_confident_follows_each_asserted_labels_threshold(multilabel_classifier_dir, multilabel_rows, tmp_path):
    """A hand-written per-label calibrator and thresholds on the trained fixture: both answers occur, and each is
    the rule (every asserted label at or over its threshold); the sets stay those of the uncalibrated cut."""
    texts = multilabel_rows(60, seed=21)["text"].tolist()
    raw = Classifier.load(multilabel_classifier_dir, provider="torch", precision="fp32").predict_proba(texts)
    tuned = np.array(json.loads((multilabel_classifier_dir / "thresholds.json").read_text())["thresholds"])
    spec = {"method": "temperature", "problem_type": "multi_label_classification", "labels": LABELS,
            "fitted_on": "model", "temperature": [2.0, 0.5, 1.3], "threshold_scope": "per_label"}
    cal = by_hand(spec, raw)
    asserted = raw > tuned
    spec["threshold"] = {n: float(np.median(cal[asserted[:, j], j])) for j, n in enumerate(LABELS)}
    folder = tmp_path / "cal"
    shutil.copytree(multilabel_classifier_dir, folder)
    (folder / "calibration.json").write_text(json.dumps(spec))
    clf = Classifier.load(folder, provider="torch", precision="fp32")
    preds = clf.predict(texts)
    np.testing.assert_allclose([[p.scores[n] for n in LABELS] for p in preds], cal, atol=1e-5)
    assert [p.labels for p in preds] == [[n for n, a in zip(LABELS, row) if a] for row in asserted]
    want = [all(p.scores[n] >= spec["threshold"][n] for n in p.labels) for p in preds]
    assert [p.confident for p in preds] == want and True in want and False in want
    np.testing.assert_allclose(clf.thresholds, by_hand(spec, tuned[None, :])[0], atol=1e-9)
