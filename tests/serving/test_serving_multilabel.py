"""Multi-label serving (issue 32): sigmoid per label and thresholds.json in the engine, the export's per-label
gate and copied files, ONNX vs PyTorch parity on per-label probabilities, batch scoring's columns."""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pandas as pd
import pytest

from serving import export
from serving.engine import Classifier, ModelError
from serving.multilabel import MultiLabelPrediction, decision_margin
from serving.score import run as score_run
from serving.scoring import ScoreConfig

THRESHOLDS = np.array([0.45, 0.5, 0.6])  # tests/multilabel_fixture.py
LABELS = ["dream", "error", "memo"]


def finetune_half():
    """The per-label blend of issue 32's finetune half (k-fold --multi-label)."""
    from baseline import label_blend

    return label_blend


@pytest.fixture(scope="module")
def ml_exported(multilabel_classifier_dir, multilabel_rows, tmp_path_factory):
    out = tmp_path_factory.mktemp("ml-exported")
    eval_csv = out.parent / "ml-eval.csv"
    multilabel_rows(60, seed=2).to_csv(eval_csv, index=False)
    (multilabel_classifier_dir / "calibration.json").write_text(
        '{"method": "temperature", "problem_type": "multi_label_classification", "temperature": [1, 1, 1]}')
    try:
        export.run(export.ExportConfig(model=multilabel_classifier_dir, output=out, quantize=True, eval_csv=eval_csv,
                                       min_agreement=0.95, min_int8_speedup=0))
    finally:
        (multilabel_classifier_dir / "calibration.json").unlink()
    return out


def torch_probs(folder, texts):
    """What k-fold's final model computes: transformers' forward and torch.sigmoid, no engine involved."""
    import torch
    from transformers import AutoTokenizer, ElectraForSequenceClassification

    tok = AutoTokenizer.from_pretrained(folder)
    model = ElectraForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        return torch.sigmoid(model(**tok(texts, padding=True, truncation=True, return_tensors="pt")).logits).numpy()


def test_engine_answers_label_sets_over_the_tuned_thresholds(multilabel_classifier_dir, multilabel_rows):
    texts = multilabel_rows(40, seed=5)["text"].tolist() + ["오늘 회의 시간"]
    clf = Classifier.load(multilabel_classifier_dir, provider="torch", precision="fp32")
    assert clf.multi_label and clf.label_sep == ";"
    np.testing.assert_allclose(clf.thresholds, THRESHOLDS)
    want = torch_probs(multilabel_classifier_dir, texts)
    preds = clf.predict(texts)
    got = np.array([[p.scores[lab] for lab in LABELS] for p in preds])
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert [p.labels for p in preds] == [[lab for lab, v, t in zip(LABELS, row, THRESHOLDS) if v > t] for row in want]
    assert any(p.labels == [] for p in preds) and any(len(p.labels) >= 2 for p in preds)
    # a probability between 0.5 and its label's tuned threshold: only the tuned threshold gives the right set
    between = (want > 0.5) != (want > THRESHOLDS)
    assert between.any(), "the fixture should put some probability between 0.5 and a tuned threshold"
    info = clf.info()
    assert info["multi_label"] is True and info["thresholds"] == dict(zip(LABELS, THRESHOLDS.tolist()))
    assert info["thresholds_tuned"] is True and info["label_sep"] == ";"
    top = clf.predict(texts[:1], top_k=2)[0]
    assert isinstance(top, MultiLabelPrediction) and len(top.probabilities) == 2 and len(top.scores) == 3
    np.testing.assert_allclose(clf.predict_proba(texts), want, atol=1e-5)


def test_single_label_models_are_untouched(tiny_classifier_dir):
    clf = Classifier.load(tiny_classifier_dir, provider="torch")
    p = clf.predict(["꿈에서 봤다"])[0]
    assert type(p).__name__ == "Prediction" and not hasattr(p, "labels")
    assert abs(sum(p.probabilities.values()) - 1) < 1e-5
    assert clf.info()["multi_label"] is False and clf.info()["thresholds"] is None and clf.thresholds is None


def test_thresholds_file_checked_and_absent_means_half(multilabel_classifier_dir, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(multilabel_classifier_dir, folder)
    (folder / "thresholds.json").unlink()
    clf = Classifier.load(folder, provider="torch")
    np.testing.assert_allclose(clf.thresholds, 0.5)
    assert clf.info()["thresholds_tuned"] is False
    bad = {"labels": ["dream", "memo", "error"], "thresholds": [0.5, 0.5, 0.5]}
    (folder / "thresholds.json").write_text(json.dumps(bad))
    with pytest.raises(ModelError, match="thresholds.json: labels .* do not match"):
        Classifier.load(folder, provider="torch")
    (folder / "thresholds.json").write_text(json.dumps({**bad, "labels": LABELS, "thresholds": [0.5, 1.2, 0.5]}))
    with pytest.raises(ModelError, match="1.2 for label 'error' is not a probability"):
        Classifier.load(folder, provider="torch")


def test_export_keeps_problem_type_copies_thresholds_and_judges_per_label(ml_exported, multilabel_classifier_dir):
    cfg = json.loads((ml_exported / "config.json").read_text())
    assert cfg["problem_type"] == "multi_label_classification"
    assert json.loads((ml_exported / "thresholds.json").read_text())["thresholds"] == THRESHOLDS.tolist()
    assert (ml_exported / "calibration.json").exists()  # sidecars of issues 33/35 travel too
    r = json.loads((ml_exported / "export_report.json").read_text())
    assert r["passed"] and r["multi_label"] is True and r["gate"]["agreement"].startswith("per-label")
    assert r["thresholds"] == dict(zip(LABELS, THRESHOLDS.tolist()))
    fp32, int8 = r["files"]["model.onnx"], r["files"]["model_quantized.onnx"]
    assert fp32["label_agreement"] == 1.0 and fp32["row_agreement"] == 1.0 and "argmax_agreement" not in fp32
    assert abs(fp32["macro_f1"] - r["pytorch"]["macro_f1"]) < 1e-9 and r["pytorch"]["macro_f1"] > 0.5
    assert int8["label_agreement"] >= 0.95 and int8["macro_f1_change_points"] >= -0.5
    assert r["eval_rows"] == 48  # 60 rows, 12 calibrate static INT8
    # Issue 44: judged on served answers (calibrated scores over the served thresholds), as single-label files are
    assert r["gate"]["confident"] == "served score >= 0.9 or <= 0.1" and r["gate"]["near_tie_margin"] == 0.1
    for s in (fp32["served"], int8["served"]):
        assert s["unit"] == "label decisions" and s["confident_rows"] + 0 <= 48 * 3
        assert {"confident_agreement", "beyond_near_tie_agreement", "macro_f1_change_points",
                "ece_change_points"} <= set(s)
    assert fp32["served"]["agreement"] == 1.0 and abs(fp32["served"]["ece_change_points"]) < 1e-6
    assert fp32["served"]["macro_f1_reference"] == pytest.approx(fp32["served"]["macro_f1"])


def test_multi_label_served_gate_counts_decisions_near_their_threshold_as_ties():
    """Per label decision: a flip next to its threshold is a near-tie; one far from it, or on a confident
    row, fails the gate; F1 and the mean per-label ECE are the served scores'."""
    from serving.parity import ServedLabelSets, served_stats, served_verdict

    probs = np.array([[0.9, 0.46, 0.1], [0.2, 0.8, 0.65], [0.05, 0.55, 0.9]])
    t = np.array([0.5, 0.5, 0.6])
    confident = np.array([[True] * 3, [True] * 3, [False] * 3])
    y = np.array([[1, 0, 0], [0, 1, 1], [0, 1, 1]])
    ref = ServedLabelSets(lambda logits: logits, probs, confident, "rule", LABELS, y, t)
    near = probs.copy()
    near[0, 1] = 0.52  # 0.04 from its threshold: flips, a near-tie
    s = served_stats(ref, near, 0.1)
    assert (s["changed_in_near_ties"], s["changed_beyond_near_ties"], s["beyond_near_tie_agreement"]) == (1, 0, 1.0)
    assert s["confident_agreement"] == pytest.approx(5 / 6) and s["agreement"] == pytest.approx(8 / 9)
    assert s["macro_f1_reference"] == 1.0 and s["macro_f1"] < 1.0
    assert served_verdict(s, 0.8, 50, 100) == []
    far = probs.copy()
    far[2, 2] = 0.3  # 0.3 below its threshold, on a row fp32 is not confident of
    s = served_stats(ref, far, 0.1)
    assert s["changed_beyond_near_ties"] == 1 and s["largest_changed_margin"] == pytest.approx(0.3)
    why = served_verdict(s, 0.99, 50, 100)
    assert len(why) == 1 and why[0].startswith("agreement beyond near-ties (fp32's scores more than 0.1 from the")


def test_multi_label_int8_is_judged_on_served_answers(multilabel_classifier_dir, multilabel_rows, tmp_path,
                                                      monkeypatch):
    """The old multi-label gate judged plain agreement of the model's own decisions: a recipe that keeps every
    served answer but moves half the model's decisions (as the gate sees them) now passes; one that changes
    decisions fp32 is confident of is refused."""
    from serving import export_gate

    judged, real_compare, real_served = [], export_gate.compare_label_sets, export_gate.served_stats

    def compare(ref, got, *a):
        stats = real_compare(ref, got, *a)
        if len(judged) == 2:
            stats["label_agreement"] = 0.5
        return stats

    def served(ref, got, margin):
        judged.append(True)
        stats = real_served(ref, got, margin)
        if len(judged) == 2:
            stats["confident_agreement"] = 0.9
        return stats

    monkeypatch.setattr(export_gate, "compare_label_sets", compare)
    monkeypatch.setattr(export_gate, "served_stats", served)
    eval_csv = tmp_path / "eval.csv"
    multilabel_rows(40, seed=2).to_csv(eval_csv, index=False)
    r = export.run(export.ExportConfig(model=multilabel_classifier_dir, output=tmp_path / "onnx", quantize=True,
                                       eval_csv=eval_csv, min_agreement=0.95, min_int8_speedup=0,
                                       int8_recipes=("dynamic", "dynamic-per-channel")))
    first, second = r["int8_attempts"]
    assert first["passed"] is False and first["why"][0].startswith(
        f"agreement on the {first['served']['confident_rows']} label decisions fp32 is confident of")
    assert second["label_agreement"] == 0.5 and second["passed"] is True
    assert r["cpu_default"]["file"] == "model_quantized.onnx"


def test_onnx_matches_pytorch_per_label(ml_exported, multilabel_classifier_dir, multilabel_rows):
    texts = multilabel_rows(50, seed=7)["text"].tolist() + ["긴 문장 " * 200, "a"]
    ref = Classifier.load(multilabel_classifier_dir, provider="torch", precision="fp32", cuda_graphs=False)
    onnx = Classifier.load(ml_exported, provider="cpu", quantized=False)
    assert onnx.info()["backend"] == "onnx" and onnx.multi_label
    p_ref, p_onnx = ref.predict_proba(texts), onnx.predict_proba(texts)
    assert np.abs(p_ref - p_onnx).max() < 1e-5
    assert [p.labels for p in ref.predict(texts)] == [p.labels for p in onnx.predict(texts)]
    int8 = Classifier.load(ml_exported, provider="cpu", quantized=True)
    agree = (int8.predict_proba(texts) > THRESHOLDS) == (p_ref > THRESHOLDS)
    assert agree.mean() >= 0.95


def test_export_reads_json_list_labels_and_names_unknown_ones(multilabel_classifier_dir, multilabel_rows, tmp_path,
                                                             caplog):
    rows = multilabel_rows(30, seed=3)
    rows["label"] = [c.split(";") if c else [] for c in rows["label"]]
    rows.loc[0, "label"] = ["dream", "weather"]
    path = tmp_path / "eval.jsonl"
    rows.to_json(path, orient="records", lines=True, force_ascii=False)
    out = tmp_path / "onnx"
    export.run(export.ExportConfig(model=multilabel_classifier_dir, output=out, eval_csv=path, min_agreement=0.95))
    r = json.loads((out / "export_report.json").read_text())
    assert r["passed"] and 0 < r["files"]["model.onnx"]["macro_f1"] <= 1
    assert "'weather' (1 rows)" in caplog.text


def test_decision_margin_puts_labels_near_their_threshold_first():
    probs = np.array([[0.9, 0.1], [0.52, 0.1], [0.5, 0.99]])
    m = decision_margin(probs, np.array([0.5, 0.5]))
    assert m[2] == 0 and m[1] < m[0] and np.argsort(m).tolist() == [2, 1, 0]


def test_score_writes_pred_labels_and_probabilities(ml_exported, multilabel_rows, tmp_path):
    rows = multilabel_rows(25, seed=9)[["text"]]
    rows.loc[3, "text"] = "   "
    src, out = tmp_path / "in.csv", tmp_path / "out.parquet"
    rows.to_csv(src, index=False, quoting=csv.QUOTE_ALL)  # unquoted, a blank line would be skipped by the reader
    summary = score_run(ScoreConfig(model=ml_exported, input=src, output=out, progress=False))
    df = pd.read_parquet(out)
    assert list(df.columns) == ["text", "pred_labels", "confident", "prob_dream", "prob_error", "prob_memo", "error",
                                "model_version"]
    assert len(df) == 25 and df.loc[3, "error"] == "empty text" and pd.isna(df.loc[3, "pred_labels"])
    clf = Classifier.load(ml_exported)
    ok = df.drop(index=3)
    preds = clf.predict(ok["text"].tolist())
    assert ok["pred_labels"].tolist() == [";".join(p.labels) for p in preds]
    np.testing.assert_allclose(ok[["prob_dream", "prob_error", "prob_memo"]].to_numpy(),
                               [[p.scores[lab] for lab in LABELS] for p in preds], atol=1e-6)
    assert "" in ok["pred_labels"].tolist() and any(";" in v for v in ok["pred_labels"])
    assert summary["labels"].get("(none)", 0) == (ok["pred_labels"] == "").sum()
    csv_out = tmp_path / "out.csv"
    score_run(ScoreConfig(model=ml_exported, input=src, output=csv_out, progress=False, top_k=2))
    top = pd.read_csv(csv_out, dtype=str, keep_default_na=False)
    assert list(top.columns)[1:5] == ["pred_labels", "confident", "top1_label", "top1_score"]
    assert top["pred_labels"].drop(index=3).tolist() == ok["pred_labels"].tolist()


def test_engine_applies_the_per_label_blend(multilabel_classifier_dir, multilabel_rows, tmp_path):
    """k-fold's multi-label blend (textdata/label_blend.py, the finetune half of issue 32) is applied per label
    before the thresholds; --no-blend serves the model's own sigmoids."""
    label_blend = finetune_half()
    from textdata.normalize import Normalizer

    folder = tmp_path / "blended"
    shutil.copytree(multilabel_classifier_dir, folder)
    rows = multilabel_rows(60, seed=4)
    y = np.array([[int(lab in c.split(";")) for lab in LABELS] for c in rows["label"]])
    baseline = label_blend.fit_ovr_baseline(rows["text"].tolist(), y, 0)
    blend = label_blend.LabelBlend((1.5, 0.5, 1.0), (0.8, 1.2, 0.0))
    label_blend.save_ovr_baseline(baseline, folder, blend, {"method": "test"})
    texts = multilabel_rows(30, seed=8)["text"].tolist()
    plain = Classifier.load(folder, provider="torch", precision="fp32", blend=False)
    served = Classifier.load(folder, provider="torch", precision="fp32")
    p_model = plain.predict_proba(texts)
    want = blend(p_model, label_blend.ovr_proba(baseline, [Normalizer()(t) for t in texts]))
    np.testing.assert_allclose(served.predict_proba(texts), want, atol=1e-5)
    assert [p.labels for p in served.predict(texts)] == [[lab for lab, v, t in zip(LABELS, r, THRESHOLDS) if v > t]
                                                          for r in want]
    assert not np.allclose(want, p_model, atol=1e-3)  # the blend changed something
    assert list(served.info()["blend"]["model_weight"]) == [1.5, 0.5, 1.0]


def test_served_answers_equal_kfolds_final_computation_on_unseen_rows(tiny_electra_dir, multilabel_rows, tmp_path):
    """k-fold --multi-label --final --holdout (the finetune half) writes the final model's answers on rows it never
    saw (holdout_predictions.csv: tuned thresholds, blend when kept); the exported folder answers the same."""
    finetune_half()  # k-fold --multi-label: the finetune half of issue 32
    from finetune import kfold

    data = tmp_path / "rows.csv"
    multilabel_rows(240, seed=12).to_csv(data, index=False)
    run_dir = tmp_path / "run"
    kfold.run(kfold.parse_args(["--model", str(tiny_electra_dir), "--data", str(data), "--multi-label", "--folds", "2",
                                "--epochs", "2", "--lr", "3e-3", "--batch-size", "16", "--holdout", "0.25",
                                "--output", str(run_dir), "--final"]))
    out = tmp_path / "onnx"
    export.run(export.ExportConfig(model=run_dir / "model", output=out, eval_csv=run_dir / "holdout.csv"))
    want = pd.read_csv(run_dir / "holdout_predictions.csv", dtype=str, keep_default_na=False)
    clf = Classifier.load(out)
    preds = clf.predict(want["text"].tolist())
    probs = want[[f"prob_{lab}" for lab in clf.labels]].astype(float).to_numpy()
    np.testing.assert_allclose([[p.scores[lab] for lab in clf.labels] for p in preds], probs, atol=1e-5)
    assert [";".join(p.labels) for p in preds] == want["pred_labels"].tolist()
