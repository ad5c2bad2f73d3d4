"""k-fold --multi-label: label sets read and checked, folds stratified over labels, thresholds tuned nested, the
one-vs-rest baseline served as fitted, the search's objective, and the whole command on a tiny fixture."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import f1_score

from finetune.data import inner_split, load_labeled, make_folds, split_holdout
from finetune.multilabel import (
    GRID,
    multilabel_metrics,
    nested_thresholds,
    predict_sets,
    scored,
    tune_thresholds,
)
from textdata.errors import DataError

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
WORDS = {"dream": ["꿈", "꿈에서", "dream", "봤다"], "error": ["오류", "에러", "error", "발생했다"],
         "memo": ["메모", "기록", "memo", "약속"]}
FILLER = ["오늘", "내일", "어제", "회의", "시간", "좋은 날씨", "일기"]


def ml_rows(n: int = 90, seed: int = 0, sep: str = ";") -> pd.DataFrame:
    """Rows with 0, 1 or 2 labels (a fifth with none), each label's keywords in its texts; 12 `page` groups."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        chosen = sorted(rng.sample(list(WORDS), (0, 1, 1, 1, 2, 2, 1, 0, 1, 2)[i % 10]))
        parts = [w for lab in chosen for w in rng.sample(WORDS[lab], 2)] + rng.sample(FILLER, rng.randint(1, 3))
        rng.shuffle(parts)
        rows.append({"text": " ".join(parts), "labels": sep.join(chosen), "page": f"p{i % 12}"})
    return pd.DataFrame(rows)


def random_Y(n=600, n_labels=8, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rates = np.array([0.5, 0.3, 0.2, 0.1, 0.05, 0.03, 0.02, 0.01])[:n_labels]
    return (rng.random((n, n_labels)) < rates).astype(np.int64)


# ------------------------------------------------------------------------------------------ reading
def test_label_sets_from_csv_jsonl_and_parquet_with_rows_without_label(tmp_path):
    df = ml_rows()
    csv = tmp_path / "d.csv"
    df.to_csv(csv, index=False)
    data = load_labeled(csv, label_column="labels", folds=3, multi_label=True)
    assert data.multi_label and data.y is None and data.labels == ["dream", "error", "memo"]
    assert data.Y.shape == (len(df), 3) and len(data.texts) == len(df)  # no row dropped, none-rows included
    for i, cell in enumerate(df["labels"]):
        assert [data.labels[j] for j in np.flatnonzero(data.Y[i])] == (cell.split(";") if cell else [])
    assert (data.Y.sum(1) == 0).sum() == (df["labels"] == "").sum() > 0
    listed = df.assign(labels=[c.split(";") if c else [] for c in df["labels"]])
    for name in ("d.jsonl", "d.parquet"):
        path = tmp_path / name
        listed.to_json(path, orient="records", lines=True, force_ascii=False) if name.endswith("jsonl") \
            else listed.to_parquet(path)
        other = load_labeled(path, label_column="labels", folds=3, multi_label=True)
        assert other.labels == data.labels and np.array_equal(other.Y, data.Y)


def test_mixed_separators_name_the_file_row_and_value(tmp_path):
    df = ml_rows()
    df.loc[1, "text"] = " "  # dropped before the labels are read: row numbers still count it
    df.loc[4, "labels"] = "dream,error;memo"
    path = tmp_path / "mixed.csv"
    df.to_csv(path, index=False)
    with pytest.raises(DataError) as e:
        load_labeled(path, label_column="labels", folds=3, multi_label=True)
    msg = str(e.value)
    assert str(path) in msg and "data row 5" in msg and "'dream,error;memo'" in msg and "','" in msg
    assert "\n" not in msg


def test_label_containing_the_separator_is_refused(tmp_path):
    df = ml_rows().assign(labels=lambda d: [c.split(";") if c else [] for c in d["labels"]])
    df.at[2, "labels"] = ["dream", "a;b"]
    path = tmp_path / "d.jsonl"
    df.to_json(path, orient="records", lines=True, force_ascii=False)
    with pytest.raises(DataError, match=r"data row 3.*'a;b'.* contains the separator ';'"):
        load_labeled(path, label_column="labels", folds=3, multi_label=True)


def test_rare_label_is_named_with_the_largest_folds_that_work(tmp_path):
    df = ml_rows()
    for i in (1, 2, 3):
        df.loc[i, "labels"] = df.loc[i, "labels"] + ";rare" if df.loc[i, "labels"] else "rare"
    path = tmp_path / "d.csv"
    df.to_csv(path, index=False)
    with pytest.raises(DataError) as e:
        load_labeled(path, label_column="labels", folds=5, multi_label=True)
    assert "'rare' (3 rows)" in str(e.value) and "lower --folds to 3" in str(e.value) and str(path) in str(e.value)
    assert load_labeled(path, label_column="labels", folds=3, multi_label=True).labels[-1] == "rare"


def test_a_column_without_separator_warns_once_and_trains(tmp_path, capsys):
    df = ml_rows().assign(labels=lambda d: d["labels"].str.split(";").str[0])  # one label or none per row
    path = tmp_path / "d.csv"
    df.to_csv(path, index=False)
    data = load_labeled(path, label_column="labels", folds=3, multi_label=True)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no row of column 'labels' holds more than one label" in err[0]
    assert (data.Y.sum(1) <= 1).all() and data.labels == ["dream", "error", "memo"]


def test_a_column_written_with_another_separator_is_refused_naming_it(tmp_path):
    """'dream,error' with --label-sep ';' was trained as one odd label (with a warning), and a Label-tab name
    'a,b' passed the app's check, then failed in the child: the label-name rule refuses it everywhere."""
    df = ml_rows().assign(labels=lambda d: d["labels"].str.replace(";", ","))
    path = tmp_path / "d.csv"
    df.to_csv(path, index=False)
    with pytest.raises(DataError) as e:
        load_labeled(path, label_column="labels", folds=3, multi_label=True)
    first = next(i for i, c in enumerate(df["labels"]) if "," in c)
    assert f"data row {first + 1}" in str(e.value) and "','" in str(e.value) and "--label-sep" in str(e.value)


# ------------------------------------------------------------------------------------------ folds
def test_folds_keep_every_labels_share_and_cover_every_row_once():
    Y = random_Y()
    folds = make_folds(Y, None, 5, seed=1)
    seen = np.concatenate([va for _, va in folds])
    assert sorted(seen) == list(range(len(Y)))
    for tr, va in folds:
        assert not set(tr) & set(va)
        # iterative stratification: each label's rows split within a row of the exact share
        assert np.all(np.abs(Y[va].sum(0) - Y.sum(0) / 5) <= 1.0 + 1e-9)
    # a plain random split of the same sizes misses that by several rows for the frequent labels
    rng = np.random.default_rng(1)
    perm = rng.permutation(len(Y))
    assert max(np.abs(Y[perm[k::5]].sum(0) - Y.sum(0) / 5).max() for k in range(5)) > 2


def test_grouped_folds_keep_groups_whole_and_spread_the_labels():
    Y = random_Y(n=600, n_labels=4)
    groups = np.repeat(np.arange(200), 3)
    Y = Y[np.repeat(np.arange(0, 600, 3), 3)]  # a group's rows share their labels
    folds = make_folds(Y, groups, 4, seed=0)
    fold_of = {}
    for k, (_, va) in enumerate(folds):
        for g in set(groups[va]):
            assert fold_of.setdefault(g, k) == k
        assert np.all(Y[va].sum(0) > 0)
    assert len(fold_of) == 200


def test_inner_split_and_holdout_are_stratified_over_labels(tmp_path):
    Y = random_Y()
    tr, va = inner_split(Y, None, 0.2, seed=0)
    assert not set(tr) & set(va) and len(tr) + len(va) == len(Y)
    assert np.all(np.abs(Y[va].sum(0) - 0.2 * Y.sum(0)) <= 1.0 + 1e-9)
    df = ml_rows(120)
    path = tmp_path / "d.csv"
    df.to_csv(path, index=False)
    data = load_labeled(path, label_column="labels", folds=3, multi_label=True)
    cv, held = split_holdout(data, 0.2, 3, 0, path)
    assert sorted(np.concatenate([cv.keep, held.keep])) == list(range(120)) and 20 <= len(held.texts) <= 28
    assert np.array_equal(held.Y, data.Y[held.keep]) and held.multi_label and held.y is None


# ------------------------------------------------------------------------------------------ thresholds, metrics
def test_tuned_thresholds_are_the_grid_f1_optimum_per_label():
    rng = np.random.default_rng(0)
    Y = random_Y(400, 5)
    proba = np.clip(Y * rng.uniform(0.2, 0.9, Y.shape) + rng.uniform(0, 0.4, Y.shape), 0, 1)
    t = tune_thresholds(Y, proba)
    for j in range(Y.shape[1]):
        best = max(f1_score(Y[:, j], proba[:, j] > g, zero_division=0) for g in GRID)
        assert f1_score(Y[:, j], proba[:, j] > t[j], zero_division=0) == pytest.approx(best)
    assert tune_thresholds(np.zeros((10, 1), int), np.full((10, 1), 0.9))[0] == 0.5  # no positives: 0.5


def test_nested_thresholds_never_read_the_scored_folds_labels():
    rng = np.random.default_rng(1)
    Y = random_Y(300, 4)
    proba = np.clip(0.6 * Y + rng.uniform(0, 0.5, Y.shape), 0, 1)
    fold_of = np.arange(300) % 3
    pred, per_fold = nested_thresholds(Y, proba, fold_of)
    for k in range(3):
        assert np.array_equal(per_fold[k], tune_thresholds(Y[fold_of != k], proba[fold_of != k]))
        assert np.array_equal(pred[fold_of == k], predict_sets(proba[fold_of == k], per_fold[k]))
    flipped = Y.copy()
    flipped[fold_of == 0] = 1 - flipped[fold_of == 0]  # fold 0's own labels change: its thresholds must not
    assert np.array_equal(nested_thresholds(flipped, proba, fold_of)[1][0], per_fold[0])
    report = scored(Y, proba, fold_of, ["a", "b", "c", "d"])
    assert report["macro_f1_mean"] == pytest.approx(np.mean([f["macro_f1"] for f in report["folds"]]))
    assert report["at_0_5"]["folds"][0]["micro_f1"] == pytest.approx(
        f1_score(Y[fold_of == 0], proba[fold_of == 0] > 0.5, average="micro"))


def test_metrics_are_sklearns_and_a_correct_none_scores_one():
    Y = np.array([[1, 0], [0, 1], [0, 0], [1, 1]])
    pred = np.array([[1, 0], [0, 0], [0, 0], [1, 1]])
    m = multilabel_metrics(Y, pred, ["a", "b"])
    assert m["subset_accuracy"] == pytest.approx(0.75)
    assert m["micro_f1"] == pytest.approx(f1_score(Y, pred, average="micro"))
    assert m["macro_f1"] == pytest.approx(np.mean([1.0, 2 / 3]))
    assert m["samples_f1"] == pytest.approx((1 + 0 + 1 + 1) / 4)  # row 3: none answered none
    assert m["per_label"]["b"] == {"precision": 1.0, "recall": 0.5, "f1": pytest.approx(2 / 3), "support": 2}


# ------------------------------------------------------------------------------------------ baseline and blend
def test_served_one_vs_rest_baseline_and_blend_equal_the_fitted_ones(tmp_path):
    from baseline.blend import ServedBlend
    from baseline.label_blend import (
        LabelBlend,
        fit_label_blend,
        fit_ovr_baseline,
        ovr_proba,
        save_ovr_baseline,
    )

    df = ml_rows(120)
    labels = ["dream", "error", "memo"]
    Y = np.array([[lab in c.split(";") for lab in labels] for c in df["labels"]], dtype=np.int64)
    texts = df["text"].tolist()
    base = fit_ovr_baseline(texts[:90], Y[:90], seed=0)
    p_base = ovr_proba(base, texts[90:])
    p_model = np.clip(0.5 + 0.3 * (Y[90:] - 0.5) + np.random.default_rng(0).normal(0, 0.1, (30, 3)), 0.01, 0.99)
    blend = fit_label_blend(p_model, p_base, Y[90:])
    assert len(blend.model_weight) == 3 and min(blend.model_weight + blend.baseline_weight) >= 0
    save_ovr_baseline(base, tmp_path, blend, {"method": "test"})
    served = ServedBlend(tmp_path, 3)
    assert np.allclose(served.baseline.predict_proba(texts[90:]), p_base, atol=1e-9)
    assert np.allclose(served(p_model, texts[90:]), blend(p_model, p_base), atol=1e-6)
    assert isinstance(served.blend, LabelBlend) and served.info()["model_weight"] == blend.model_weight


def test_label_blend_learns_to_trust_the_informative_model():
    from baseline.label_blend import fit_label_blend

    rng = np.random.default_rng(0)
    Y = random_Y(500, 3)
    p_model = np.where(Y == 1, 0.8, 0.2)
    p_noise = rng.uniform(0.05, 0.95, Y.shape)
    b = fit_label_blend(p_model, p_noise, Y)
    assert all(a > 5 * max(w, 1e-3) for a, w in zip(b.model_weight, b.baseline_weight))


# ------------------------------------------------------------------------------------------ search objective
def test_search_objective_is_the_nested_tuned_macro_f1_for_multi_label():
    from types import SimpleNamespace

    from finetune.search import objective
    from textdata.labels import LabelSpace

    rng = np.random.default_rng(2)
    Y = random_Y(90, 3)
    proba = np.clip(0.6 * Y + rng.uniform(0, 0.5, Y.shape), 0, 1)
    folds = [(np.setdiff1d(np.arange(90), np.arange(k, 90, 3)), np.arange(k, 90, 3)) for k in range(3)]
    data = SimpleNamespace(space=LabelSpace.of(["a", "b", "c"], multi_label=True), Y=Y, labels=["a", "b", "c"],
                           texts=[""] * 90)
    prep = SimpleNamespace(data=data, folds=folds)
    value = objective(prep, {k: proba[va] for k, (_, va) in enumerate(folds)}, [0.1, 0.2, 0.3])
    assert value == pytest.approx(scored(Y, proba, np.arange(90) % 3, data.labels)["macro_f1_mean"])
    assert value != pytest.approx(0.2)
    single = SimpleNamespace(data=SimpleNamespace(space=LabelSpace.of(["a", "b", "c"])), folds=folds)
    assert objective(single, {}, [0.1, 0.2, 0.3]) == pytest.approx(0.2)


# ------------------------------------------------------------------------------------------ the command
@pytest.fixture(scope="module")
def ml_run(tmp_path_factory, tiny_electra_dir):
    folder = tmp_path_factory.mktemp("ml-kfold")
    df = ml_rows(120)
    df.loc[6, "text"] = "  "  # dropped (empty text), still in oof_predictions.csv
    data = folder / "notes.csv"
    df.to_csv(data, index=False)
    out = folder / "run"
    args = [sys.executable, "finetune/kfold.py", "--model", tiny_electra_dir, "--data", data, "--label-column",
            "labels", "--multi-label", "--group-column", "page", "--folds", 3, "--epochs", 2, "--batch-size", 8,
            "--class-weights", "--holdout", 0.2, "--final", "--blend", "on", "--output", out]
    proc = subprocess.run([str(a) for a in args], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return df, out, proc


def test_multi_label_run_reports_nested_and_0_5_scores(ml_run):
    _, out, proc = ml_run
    report = json.loads((out / "report.json").read_text())
    assert report["multi_label"] and report["labels"] == ["dream", "error", "memo"] and report["label_sep"] == ";"
    assert report["rows_without_label"] > 0 and report["config"]["multi_label"] is True
    folds = report["folds"]
    assert len(folds) == 3
    for key in ("micro_f1", "macro_f1", "samples_f1", "subset_accuracy"):
        assert report[f"{key}_mean"] == pytest.approx(np.mean([f["tuned"][key] for f in folds]))
        assert report["at_0_5"][f"{key}_mean"] == pytest.approx(np.mean([f["at_0_5"][key] for f in folds]))
    assert set(folds[0]["tuned"]["per_label"]["memo"]) == {"precision", "recall", "f1", "support"}
    assert "macro_f1_mean" in report["baseline"] and report["blend"]["kept"] and "macro_f1_mean" in report["blend"]
    assert len(report["blend"]["model_weight"]) == 3
    # the held-out rows: the served folder (blend read back) at tuned thresholds and at 0.5, and the baseline
    held = report["holdout"]
    assert held["served"] == "blend" and {"micro_f1", "macro_f1", "at_0_5", "model", "baseline"} <= set(held)
    assert set(held["tuned_beats_0_5"]) == {"micro_f1", "macro_f1"}
    assert "micro-F1" in proc.stdout and "@0.5" in proc.stdout and "holdout" in proc.stdout
    for png in ("per_label_f1.png", "label_cooccurrence.png", "learning_curves.png", "fold_scores.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"


def test_multi_label_run_says_whether_the_model_learned(ml_run):
    from textdata.learned import assess_multi

    _, out, _ = ml_run
    report = json.loads((out / "report.json").read_text())
    oof = pd.read_csv(out / "oof_predictions.csv", keep_default_na=False)
    used = oof[oof["fold"] >= 0]  # the rows the folds scored, in the run's order

    def sets(column):
        return np.array([[int(lab in str(s).split(";")) for lab in report["labels"]] for s in used[column]])

    assert report["learned"] == assess_multi(sets("labels"), sets("pred_labels"), report["blend"], report["seed"])
    assert json.loads((out / "model" / "training_config.json").read_text())["learned"] == report["learned"]


def test_oof_predictions_hold_every_row_probabilities_and_label_sets(ml_run):
    df, out, _ = ml_run
    oof = pd.read_csv(out / "oof_predictions.csv", keep_default_na=False)
    held = pd.read_csv(out / "holdout.csv", keep_default_na=False)
    assert len(oof) == len(df) and oof["text"].tolist() == df["text"].fillna("").tolist()
    assert {"pred_labels", "prob_dream", "prob_error", "prob_memo", "baseline_pred_labels", "blend_pred_labels",
            "blend_prob_memo", "fold", "error"} <= set(oof.columns)
    assert oof.loc[6, "error"].startswith("dropped")
    assert (oof["error"] == "held out (--holdout): in holdout.csv").sum() == len(held)
    used = oof[oof["fold"] >= 0]
    report = json.loads((out / "report.json").read_text())
    for _, row in used.head(20).iterrows():  # pred_labels: the fold's nested thresholds applied to its probabilities
        t = report["folds"][row["fold"]]["tuned"]["thresholds"]
        want = [lab for lab in report["labels"] if float(row[f"prob_{lab}"]) > t[lab]]
        assert row["pred_labels"] == ";".join(want)


def test_final_model_folder_follows_the_multi_label_contract(ml_run):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from baseline.blend import ServedBlend
    from textdata.calibration import read_calibration

    _, out, _ = ml_run
    model_dir = out / "model"
    config = json.loads((model_dir / "config.json").read_text())
    assert config["problem_type"] == "multi_label_classification"
    spec = json.loads((model_dir / "thresholds.json").read_text())
    assert spec["labels"] == ["dream", "error", "memo"] and spec["tuned"] is True and spec["label_sep"] == ";"
    assert spec["default"] == 0.5 and all(0 < t < 1 for t in spec["thresholds"])
    report = json.loads((out / "report.json").read_text())
    assert spec["thresholds"] == [report["thresholds"]["final"][n] for n in spec["labels"]]
    assert json.loads((model_dir / "baseline" / "tfidf.json").read_text())["multi_label"] is True
    reference = json.loads((model_dir / "reference.json").read_text())  # the drift monitor's, per label
    assert reference["multi_label"] and "(none)" in reference["class_mix"]
    # k-fold's final computation on the held-out rows, recomputed from the saved folder
    written = pd.read_csv(out / "holdout_predictions.csv", keep_default_na=False)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    texts = written["text"].tolist()
    with torch.no_grad():
        logits = torch.cat([model(**tok([t], truncation=True, max_length=128, return_tensors="pt")).logits
                            for t in texts])
    proba = ServedBlend(model_dir, 3)(torch.sigmoid(logits).numpy(), texts)
    want = [";".join(n for n, p, t in zip(spec["labels"], row, spec["thresholds"]) if p > t) for row in proba]
    assert written["pred_labels"].tolist() == want  # cut on the uncalibrated scores, as thresholds.json was tuned
    # the scores written are calibrated by the folder's calibration.json (per label, issue 33)
    calibrator, _, cal_spec = read_calibration(model_dir, spec["labels"])
    assert cal_spec["problem_type"] == "multi_label_classification" and cal_spec["method"] in ("temperature", "platt", "none")
    got = written[[f"prob_{n}" for n in spec["labels"]]].to_numpy()
    assert np.allclose(got, calibrator(proba.astype(np.float64)), atol=1e-5)


# ------------------------------------------------------------------------------------------ training
def _ml_train(tiny_electra_dir, **switches):
    import torch
    from transformers import AutoTokenizer

    from finetune.models import load_classifier
    from finetune.train import TrainConfig, encode, fit
    from textdata.labels import LabelSpace

    df = ml_rows(24)
    labels = ["dream", "error", "memo"]
    Y = np.array([[lab in c.split(";") for lab in labels] for c in df["labels"]], dtype=np.int64)
    tok = AutoTokenizer.from_pretrained(tiny_electra_dir)
    torch.manual_seed(0)
    model = load_classifier("tiny", str(tiny_electra_dir), LabelSpace.of(labels, multi_label=True), dropout=0.0)
    cfg = TrainConfig(epochs=2, batch_size=7, lr=1e-3, patience=0, class_weights=True, **switches)
    hist = fit(model, tok, encode(tok, df["text"].tolist(), 64), Y, [], Y[:0], cfg, seed=0)
    return hist, model, tok, df, Y


def test_multi_label_training_is_bce_with_pos_weight_and_padding_rows_count_nothing(tiny_electra_dir):
    import torch

    from finetune.train import bce_loss, predict_proba

    plain, model, tok, df, Y = _ml_train(tiny_electra_dir, static_shapes="off")
    fixed, _, _, _, _ = _ml_train(tiny_electra_dir, static_shapes="on")  # short last batch padded with rows
    np.testing.assert_allclose(fixed.train_loss, plain.train_loss, rtol=1e-4, atol=1e-5)
    assert plain.train_loss[-1] < plain.train_loss[0]
    logits = torch.randn(5, 3)
    target = torch.tensor(Y[:5], dtype=torch.float32)
    pw = torch.tensor([2.0, 1.0, 0.5])
    want = torch.nn.BCEWithLogitsLoss(pos_weight=pw)(logits, target)
    padded = torch.cat([target, -torch.ones(2, 3)])
    assert torch.allclose(bce_loss(torch.cat([logits, torch.randn(2, 3)]), padded, pw), want)
    proba = predict_proba(model, [tok(t)["input_ids"] for t in df["text"][:4]], 0, torch.device("cpu"))
    assert proba.shape == (4, 3) and not np.allclose(proba.sum(1), 1.0)  # independent sigmoids, not a softmax
    assert model.config.problem_type == "multi_label_classification"


def test_multi_label_search_scores_trials_by_kfolds_nested_tuned_macro_f1(tmp_path, tiny_electra_dir):
    from finetune import search

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    data = tmp_path / "notes.csv"
    ml_rows(90).to_csv(data, index=False)
    out = tmp_path / "search"
    code = search.main(["--model", str(tiny_electra_dir), "--data", str(data), "--output", str(out), "--label-column",
                        "labels", "--multi-label", "--folds", "3", "--batch-size", "8", "--epochs", "1",
                        "--trials", "2", "--no-prune"])
    assert code == 0
    report = json.loads((out / "search_report.json").read_text())
    best = json.loads((out / "best" / "report.json").read_text())
    # the trial's score is the number k-fold reports for the same folds: macro-F1 at nested tuned thresholds
    assert report["best"]["macro_f1_mean"] == pytest.approx(best["macro_f1_mean"])
    assert best["multi_label"] and best["macro_f1_mean"] != pytest.approx(best["at_0_5"]["macro_f1_mean"])
    trial = next(r for r in report["trials"] if r["trial"] == report["best"]["trial"])
    assert trial["fold_macro_f1"] == pytest.approx([f["at_0_5"]["macro_f1"] for f in best["folds"]])


def test_multi_label_run_ranks_label_issues_through_cleanlabs_multilabel_api(ml_run):
    """issue 34's step on the real multi-label k-fold: label sets given and suggested, from the kept blend."""
    df, out, proc = ml_run
    section = json.loads((out / "report.json").read_text())["label_issues"]
    assert section["multi_label"] and section["probabilities"].startswith("blend")
    assert set(section["per_class"]) == {"dream", "error", "memo"}
    table = pd.read_csv(out / "label_issues.csv", keep_default_na=False)
    assert len(table) == section["n_flagged"] and table["quality"].is_monotonic_increasing
    for _, r in table.iterrows():  # the given set is the row's, as read
        assert set(filter(None, r["given_label"].split(";"))) == set(filter(None, str(df.loc[r["row"], "labels"]).split(";")))
    assert "label issues (" in proc.stdout and (out / "model" / "label_issues.csv").exists()
