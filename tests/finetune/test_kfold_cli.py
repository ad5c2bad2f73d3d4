"""The command users run, end to end in a subprocess, on the tiny fixture."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def kfold(*args, check=True):
    proc = subprocess.run([sys.executable, "finetune/kfold.py", *map(str, args)], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=600, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(proc.stderr[-3000:])
    return proc


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_electra_dir, toy_rows):
    folder = tmp_path_factory.mktemp("kfold")
    df = toy_rows(n_per_class=12)
    df.loc[5, "text"] = "   "  # dropped from training, but still in oof_predictions.csv
    df.loc[7, "text"] = "ㅋㅋㅋㅋㅋ 꿈에서 봤다!!!!! 😀"
    data = folder / "notes.csv"
    df.to_csv(data, index=False)
    out = folder / "run"
    proc = kfold("--model", tiny_electra_dir, "--data", data, "--folds", 3, "--epochs", 2, "--batch-size", 8,
                 "--normalize", "kc", "--group-column", "page", "--output", out, "--final")
    return df, out, proc


def test_report_has_folds_summary_baseline_and_config(finished_run):
    df, out, proc = finished_run
    report = json.loads((out / "report.json").read_text())
    assert len(report["folds"]) == 3
    for fold in report["folds"]:
        assert {"macro_f1", "weighted_f1", "accuracy", "per_class", "confusion_matrix", "seed"} <= set(fold)
    f1s = [f["macro_f1"] for f in report["folds"]]
    assert report["macro_f1_mean"] == pytest.approx(np.mean(f1s))
    assert report["macro_f1_std"] == pytest.approx(np.std(f1s))
    assert {"folds", "macro_f1_mean", "macro_f1_std", "accuracy_mean"} <= set(report["baseline"])
    assert report["config"]["group_column"] == "page" and report["seed"] == 42
    assert report["n_rows"] == len(df) and report["n_used"] == len(df) - 1
    assert "macro-F1" in proc.stdout and "baseline" in proc.stdout  # the summary table
    unknown = report["unknown_tokens"]  # any tokenizer's: this one is WordPiece, without "ㅋ" or emoji
    assert unknown["token"] == "[UNK]" and unknown["of_texts"] == report["n_used"] and unknown["texts"] >= 1
    assert f"unknown tokens ([UNK]): {unknown['tokens']:,} of {unknown['of_tokens']:,}" in proc.stdout
    for png in ("confusion_matrix.png", "learning_curves.png", "fold_scores.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"


def test_oof_predictions_keep_every_row_in_order(finished_run):
    df, out, _ = finished_run
    oof = pd.read_csv(out / "oof_predictions.csv", keep_default_na=False)
    assert len(oof) == len(df)
    assert oof["text"].tolist() == df["text"].tolist()
    assert oof.loc[5, "error"] != "" and oof.loc[5, "pred_label"] == ""
    used = oof.drop(index=5)
    assert set(used["pred_label"]) <= {"dream", "error", "memo"}
    probs = used[["prob_dream", "prob_error", "prob_memo"]].astype(float).to_numpy()
    np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-4)
    # groups never straddle folds
    assert used.groupby("page")["fold"].nunique().max() == 1


def test_final_model_reloads_with_labels_and_normalisation(finished_run):
    _, out, _ = finished_run
    folder = out / "model"
    assert (folder / "model.safetensors").exists() and not list(folder.glob("*.bin"))
    model = AutoModelForSequenceClassification.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    assert model.config.id2label == {0: "dream", 1: "error", 2: "memo"}
    assert tok.model_max_length == 128
    assert json.loads((folder / "normalization.json").read_text())["kind"] == "kc"
    assert json.loads((folder / "training_config.json").read_text())["seed"] == 42
    with torch.no_grad():
        logits = model(**tok(["꿈에서 봤다"], return_tensors="pt")).logits
    assert logits.shape == (1, 3)


def test_resume_reuses_finished_folds(finished_run, put_back):
    out = put_back(finished_run[1])  # resumed in place (a resume keeps its --output), put back after
    before = json.loads((out / "report.json").read_text())
    (out / "folds" / "fold_2.json").unlink()  # as if killed during the last fold
    data = out.parent / "notes.csv"
    proc = kfold("--model", before["resolved_model"], "--data", data, "--folds", 3, "--epochs", 2, "--batch-size", 8,
                 "--normalize", "kc", "--group-column", "page", "--output", out, "--resume")
    assert "fold 0: reused" in proc.stderr and "fold 1: reused" in proc.stderr and "fold 2: reused" not in proc.stderr
    after = json.loads((out / "report.json").read_text())
    assert [f["macro_f1"] for f in after["folds"][:2]] == [f["macro_f1"] for f in before["folds"][:2]]
    # same seed, same fold, same data: the rerun fold reproduces
    assert after["folds"][2]["macro_f1"] == pytest.approx(before["folds"][2]["macro_f1"], abs=1e-6)
    changed = kfold("--model", before["resolved_model"], "--data", data, "--folds", 3, "--epochs", 2, "--batch-size", 8,
                    "--seed", 7,
                    "--normalize", "kc", "--group-column", "page", "--output", out, "--resume", check=False)
    assert changed.returncode == 2 and "different ['seed']" in changed.stderr


def test_resume_accepts_older_configs_and_speed_switches():
    from dataclasses import asdict

    from finetune.kfold import parse_args, resume_differences

    def config(*flags):
        cfg = parse_args(["--model", "m", "--data", "d.csv", "--output", "o", *flags])
        return json.loads(json.dumps(asdict(cfg), default=str))

    now = config()
    older = json.loads(json.dumps(now))  # as written before the fast-path switches and --adapt-steps existed
    del older["train"]["static_shapes"], older["train"]["compile"], older["adapt"]
    assert resume_differences(older, now) == []
    assert resume_differences(now, config("--compile", "on", "--static-shapes", "off")) == []
    # New settings away from their defaults, and ordinary changes, still refuse.
    assert resume_differences(older, config("--adapt-steps", "50")) == ["adapt.steps"]
    assert resume_differences(now, config("--lr", "3e-4", "--folds", "3")) == ["folds", "train.lr"]


def test_list_models_and_offline_hub_id_message(tmp_path):
    listing = kfold("--list-models").stdout
    assert "KcELECTRA" in listing and "beomi/KcELECTRA-base-v2022" in listing and "minilm" in listing
    data = tmp_path / "never_read.csv"  # outside the source tree: a killed run leaves nothing there
    pd.DataFrame({"text": ["a", "b"] * 5, "label": ["x", "y"] * 5}).to_csv(data, index=False)
    proc = kfold("--model", "KcELECTRA", "--data", data, "--folds", 2, check=False)
    assert proc.returncode == 2
    assert "beomi/KcELECTRA-base-v2022" in proc.stderr and "local folder" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_holdout_is_never_trained_on_and_scores_the_final_model(tmp_path, tiny_electra_dir, toy_rows):
    from finetune.metrics import fold_metrics
    from finetune.train import encode, predict_proba

    df = toy_rows(n_per_class=12, seed=3)
    data = tmp_path / "notes.csv"
    df.to_csv(data, index=False)
    out = tmp_path / "run"
    proc = kfold("--model", tiny_electra_dir, "--data", data, "--folds", 3, "--epochs", 1, "--batch-size", 8,
                 "--group-column", "page", "--holdout", 0.25, "--output", out, "--final")
    held = pd.read_csv(out / "holdout.csv")
    assert list(held.columns) == list(df.columns) and 0 < len(held) < len(df) / 2
    assert sorted(held["label"].unique()) == ["dream", "error", "memo"]  # stratified
    oof = pd.read_csv(out / "oof_predictions.csv", keep_default_na=False)
    in_holdout = oof["text"].isin(set(held["text"])) & oof["page"].isin(set(held["page"]))
    assert (oof.loc[in_holdout, "fold"] == -1).all() and (oof.loc[~in_holdout, "fold"] >= 0).all()
    assert oof.loc[in_holdout, "error"].str.startswith("held out").all() and in_holdout.sum() == len(held)
    assert not set(held["page"]) & set(oof.loc[~in_holdout, "page"])  # whole groups held out
    report = json.loads((out / "report.json").read_text())
    assert report["n_used"] == len(df) - len(held) == report["final_model"]["n_train"]
    assert sum(f["n_val"] for f in report["folds"]) == report["n_used"]
    ho = report["holdout"]
    assert ho["n_rows"] == len(held) and ho["scored"] == "final model" and "macro_f1" in ho["baseline"]
    # the reported score is the saved final model's on exactly these rows
    model = AutoModelForSequenceClassification.from_pretrained(out / "model").eval()
    tok = AutoTokenizer.from_pretrained(out / "model")
    proba = predict_proba(model, encode(tok, held["text"].tolist(), 128), tok.pad_token_id, torch.device("cpu"), "fp32")
    y = held["label"].map({"dream": 0, "error": 1, "memo": 2}).to_numpy()
    assert ho["macro_f1"] == pytest.approx(fold_metrics(y, proba.argmax(1), ["dream", "error", "memo"])["macro_f1"])
    assert "holdout (" in proc.stdout
    bad = kfold("--model", tiny_electra_dir, "--data", data, "--holdout", 1.5, check=False)
    assert bad.returncode == 2 and "--holdout" in bad.stderr


def test_final_model_carries_the_drift_reference_of_its_served_oof_answers(finished_run):
    from finetune.calibration import calibrate
    from textdata.drift import CONFIDENCE_EDGES, bin_index

    _, out, _ = finished_run
    ref = json.loads((out / "model" / "reference.json").read_text())
    report = json.loads((out / "report.json").read_text())
    oof = pd.read_csv(out / "oof_predictions.csv", keep_default_na=False)
    used = oof[oof["error"] == ""]
    prefix = "blend_" if (report.get("blend") or {}).get("kept") else ""
    probs = used[[f"{prefix}prob_{k}" for k in ("dream", "error", "memo")]].astype(float).to_numpy()
    # what is served is calibrated (calibration.json): the reference holds the nested-calibrated answers
    y = used["label"].map(["dream", "error", "memo"].index).to_numpy()
    probs = calibrate(probs, y, used["fold"].astype(int).to_numpy(), "model")[1].calibrated
    names = np.array(["dream", "error", "memo"])[probs.argmax(1)]
    assert ref["class_mix"] == {k: int((names == k).sum()) for k in ("dream", "error", "memo")}
    want = np.bincount([bin_index(c, CONFIDENCE_EDGES) for c in probs.max(1)], minlength=10)
    assert ref["confidence"]["counts"] == want.tolist() and ref["n_rows"] == len(used)
