"""k-fold's blend with the TF-IDF baseline: nested report, outputs, the saved blend and its served parity."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from baseline.blend import BASELINE_DIR, Blend, baseline_proba, fit_baseline, fit_blend
from finetune.blend import cv_blend

ROOT = Path(__file__).resolve().parents[2]


def kfold(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, "finetune/kfold.py", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc

LABELS = ["dream", "error", "memo"]


@pytest.fixture(scope="module")
def blend_run(tmp_path_factory, tiny_electra_dir, toy_rows):
    folder = tmp_path_factory.mktemp("kfold-blend")
    df = toy_rows(n_per_class=10, seed=4)
    data = folder / "notes.csv"
    df.to_csv(data, index=False)
    out = folder / "run"
    args = ["--model", tiny_electra_dir, "--data", data, "--folds", 3, "--epochs", 1, "--batch-size", 8,
            "--normalize", "kc", "--group-column", "page", "--class-weights", "--output", out]
    proc = kfold(*args, "--final", "--blend", "on")
    return df, out, proc, args


def test_report_table_and_csv_hold_a_nested_blend(blend_run):
    _, out, proc, _ = blend_run
    report = json.loads((out / "report.json").read_text())
    blend = report["blend"]
    assert blend["kept"] and blend["mode"] == "on" and len(blend["folds"]) == 3
    assert blend["macro_f1_mean"] == pytest.approx(np.mean([f["macro_f1"] for f in blend["folds"]]))
    assert "blend" in proc.stdout and f"{blend['macro_f1_mean']:.4f}" in proc.stdout
    oof = pd.read_csv(out / "oof_predictions.csv")
    y = oof["label"].map(LABELS.index).to_numpy()
    pm = oof[[f"prob_{c}" for c in LABELS]].to_numpy()
    pb = oof[[f"baseline_prob_{c}" for c in LABELS]].to_numpy()
    pbl = oof[[f"blend_prob_{c}" for c in LABELS]].to_numpy()
    fold = oof["fold"].to_numpy()
    for k, f in enumerate(blend["folds"]):
        # recomputed from the CSV: fold k's blend was fitted on the other folds' rows only
        rest, held = fold != k, fold == k
        params = fit_blend(pm[rest], pb[rest], y[rest])
        assert (f["model_weight"], f["baseline_weight"]) == pytest.approx(
            (params.model_weight, params.baseline_weight), rel=1e-3, abs=1e-4)
        np.testing.assert_allclose(pbl[held], params(pm[held], pb[held]), atol=1e-4)
    assert (oof["blend_pred_label"] == np.array(LABELS)[pbl.argmax(1)]).all()


def test_whether_the_model_learned_is_said_where_it_is_read(blend_run):
    from textdata.learned import assess

    _, out, proc, _ = blend_run
    report = json.loads((out / "report.json").read_text())
    oof = pd.read_csv(out / "oof_predictions.csv")
    y = oof["label"].map(LABELS.index).to_numpy()
    # recomputed from the out-of-fold CSV and the report's blend (seed 42, k-fold's default)
    want = assess(y, oof[[f"prob_{c}" for c in LABELS]].to_numpy(), report["blend"], 3, 42)
    assert report["learned"] == want
    assert json.loads((out / "model" / "training_config.json").read_text())["learned"] == want
    if want["message"]:  # one epoch of a tiny random encoder: usually
        assert want["message"] in report["warnings"] and f"warning: {want['message']}" in proc.stdout
    else:
        assert "warning: the model" not in proc.stdout
    assert "fold_scores.png" in proc.stdout.splitlines()[-1]


def test_final_model_serves_the_blend_k_fold_computed(blend_run):
    from serving.engine import Classifier
    from textdata.normalize import Normalizer

    df, out, _, _ = blend_run
    folder = out / "model"
    config = json.loads((folder / "training_config.json").read_text())
    report = json.loads((out / "report.json").read_text())
    assert config["blend"]["model_weight"] == report["blend"]["model_weight"]
    assert config["blend"]["nested_macro_f1_mean"] == report["blend"]["macro_f1_mean"]
    assert not [p for p in folder.rglob("*") if p.suffix in (".pkl", ".pickle", ".joblib", ".bin")]
    clf = Classifier.load(folder, provider="torch")
    texts = df["text"].tolist()[:12] + ["꿈에서 봤다!!!!! 😀", "처음 보는 말"]
    # k-fold's computation, redone here: the baseline refitted on every (normalised) row, the final blend
    kc = Normalizer("kc")
    y = df["label"].map(LABELS.index).to_numpy()
    baseline = fit_baseline([kc(t) for t in df["text"]], y, seed=42)
    logits = clf.predict_logits(texts)
    p = np.exp(logits - logits.max(1, keepdims=True))
    want = Blend(config["blend"]["model_weight"], config["blend"]["baseline_weight"])(
        p / p.sum(1, keepdims=True), baseline_proba(baseline, [kc(t) for t in texts], 3))
    # then the calibration k-fold chose for the blend (since stop 50 temperature is kept unless it loses in every
    # fold, finetune/calibration.pick_method), as written in the model folder
    cal = json.loads((folder / "calibration.json").read_text())
    assert cal["method"] == report["calibration"]["method"] and cal["fitted_on"] == "blend"
    if cal["method"] == "temperature":
        scaled = np.exp(np.log(np.clip(want, 1e-12, None)) / cal["temperature"])
        want = scaled / scaled.sum(1, keepdims=True)
    np.testing.assert_allclose(clf.predict_proba(texts), want, atol=1e-5)
    assert clf.info()["blend"]["nested_macro_f1_mean"] == report["blend"]["macro_f1_mean"]


def test_resume_of_a_run_from_before_the_blend_adds_it_without_training(blend_run, tmp_path, capsys):
    import shutil

    from finetune.kfold import main

    _, out, _, args = blend_run
    old = tmp_path / "old"
    shutil.copytree(out, old, ignore=shutil.ignore_patterns("model"))
    config = json.loads((old / "config.json").read_text())
    del config["blend"]  # as written before --blend existed
    config["output"] = str(old)
    (old / "config.json").write_text(json.dumps(config))
    args = [str(a) if a != out else str(old) for a in args]  # in-process: the folds are reused, nothing trains
    assert main([*args, "--resume", "--blend", "off"]) == 0
    assert capsys.readouterr().err.count("reused") == 3 and json.loads((old / "report.json").read_text())["blend"] is None
    assert "blend_prob_dream" not in pd.read_csv(old / "oof_predictions.csv").columns
    assert main([*args, "--resume"]) == 0  # auto
    before, after = (json.loads((p / "report.json").read_text()) for p in (out, old))
    assert after["blend"]["macro_f1_mean"] == pytest.approx(before["blend"]["macro_f1_mean"])
    assert after["blend"]["kept"] == (after["blend"]["macro_f1_mean"] > after["macro_f1_mean"])


def test_auto_keeps_the_blend_only_where_it_beats_the_model_nested():
    rng = np.random.default_rng(0)
    n, k = 300, 3
    y = rng.integers(0, k, n)
    fold_of = np.arange(n) % 3
    good = np.full((n, k), 0.05)
    good[np.arange(n), y] = 0.9
    noise = rng.dirichlet(np.ones(k), n)
    # a perfect model and a random baseline: nothing to gain, auto drops it, on keeps it
    section, _ = cv_blend(good, noise, y, fold_of, LABELS, "auto", 1.0)
    assert not section["kept"] and section["macro_f1_mean"] <= 1.0
    assert cv_blend(good, noise, y, fold_of, LABELS, "on", 1.0)[0]["kept"]
    # a random model and a perfect baseline: the blend wins
    section, blended = cv_blend(noise, good, y, fold_of, LABELS, "auto", 0.3)
    assert section["kept"] and section["macro_f1_mean"] == pytest.approx(1.0) and blended.shape == (n, k)
    assert cv_blend(good, noise, y, fold_of, LABELS, "off", 1.0) == (None, None)


def test_a_baseline_that_cannot_be_fitted_leaves_the_model_alone(tmp_path, tiny_electra_dir, capsys):
    from finetune.kfold import main

    # fold 0 trains on a single class: the baseline cannot be fitted there; the model still trains and is kept
    texts = [f"꿈 봤다 {c}" for c in "가나다라마바사아자차카타파하오늘내일어제꿈"] + ["오류", "에러 발생", "오류 에러"]
    rows = pd.DataFrame({"text": texts, "label": ["dream"] * 21 + ["error"] * 3,
                         "page": [f"p{i % 3}" for i in range(21)] + ["e"] * 3})
    data = tmp_path / "notes.csv"
    rows.to_csv(data, index=False)
    assert main(["--model", str(tiny_electra_dir), "--data", str(data), "--folds", "2", "--epochs", "1",
                 "--group-column", "page", "--output", str(tmp_path / "r"), "--final"]) == 0
    printed = capsys.readouterr()
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    errors = [f for f in report["baseline"]["folds"] if "error" in f]
    assert errors and "only one class" in errors[0]["error"]
    assert report["blend"]["kept"] is False and "could not be fitted" in report["blend"]["why"]
    assert any("baseline could not be fitted" in w for w in report["warnings"]) and "warning:" in printed.err
    assert "n/a" in printed.out
    assert not (tmp_path / "r" / "model" / BASELINE_DIR).exists()
    assert json.loads((tmp_path / "r" / "model" / "training_config.json").read_text())["blend"] is None


def test_holdout_reports_the_served_blend_on_rows_nothing_was_fitted_on(tmp_path, tiny_electra_dir, toy_rows):
    from finetune.kfold import main
    from finetune.metrics import fold_metrics
    from serving.engine import Classifier

    data = tmp_path / "notes.csv"
    toy_rows(n_per_class=12, seed=3).to_csv(data, index=False)
    out = tmp_path / "run"
    assert main(["--model", str(tiny_electra_dir), "--data", str(data), "--folds", "2", "--epochs", "1",
                 "--group-column", "page", "--holdout", "0.25", "--output", str(out), "--final", "--blend", "on"]) == 0
    held = pd.read_csv(out / "holdout.csv")
    report = json.loads((out / "report.json").read_text())
    served = Classifier.load(out / "model", provider="torch").predict_proba(held["text"].tolist())
    y = held["label"].map(LABELS.index).to_numpy()
    assert report["holdout"]["blend"]["macro_f1"] == pytest.approx(
        fold_metrics(y, served.argmax(1), LABELS)["macro_f1"])
