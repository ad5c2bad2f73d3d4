"""Label issues from out-of-fold probabilities (finetune/label_issues.py): cleanlab's verdict, the files, the hook."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from finetune import label_issues as li

ROOT = Path(__file__).resolve().parents[2]


def noisy_arrays(n=600, k=4, flips=60, seed=0):
    """Softmax rows that favour the true class, and labels of which `flips` were changed to another class."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    logits = rng.normal(0, 1, (n, k))
    logits[np.arange(n), y] += 3.5
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    flipped = rng.choice(n, flips, replace=False)
    given = y.copy()
    given[flipped] = (y[flipped] + rng.integers(1, k, flips)) % k
    return y, given, probs.astype(np.float32), flipped


def test_single_label_flags_the_flipped_rows_with_cleanlabs_own_verdict_ranked_and_corrected():
    from cleanlab.filter import find_label_issues

    y, given, probs, flipped = noisy_arrays()
    issues = li.find_single(given, probs, list("abcd"))
    p64 = probs.astype(np.float64) / probs.astype(np.float64).sum(1, keepdims=True)
    # cleanlab's mask itself, not a re-implementation of it
    assert set(issues.ranked) == set(np.flatnonzero(find_label_issues(given, p64, n_jobs=1)))
    hits = len(set(issues.ranked) & set(flipped))
    assert hits / len(issues.ranked) > 0.8 and hits / len(flipped) > 0.8
    q = issues.quality[issues.ranked]
    assert np.all(np.diff(q) >= 0)  # most likely error first
    assert np.allclose(issues.quality, p64[np.arange(len(given)), given])  # self-confidence
    sug = np.array(issues.suggested)
    assert np.all(sug != given)
    assert np.mean(sug[flipped] == y[flipped]) > 0.9
    est = {k: v["estimated_noise_rate"] for k, v in issues.per_class.items()}
    assert 0.03 < np.mean(list(est.values())) < 0.2  # 10% flipped
    assert sum(v["flagged"] for v in issues.per_class.values()) == len(issues.ranked)
    assert issues.joint.shape == (4, 4)


def test_multi_label_uses_cleanlabs_multilabel_api_and_suggests_the_set_over_one_half():
    from cleanlab.multilabel_classification.filter import find_label_issues

    rng = np.random.default_rng(1)
    n, L = 500, 5
    Y = (rng.random((n, L)) < 0.3).astype(int)
    Y[:20] = 0  # rows with no label are valid multi-label rows
    probs = 1 / (1 + np.exp(-(rng.normal(0, 1, (n, L)) + (2 * Y - 1) * 3)))
    flipped = rng.choice(n, 40, replace=False)
    given = Y.copy()
    given[flipped, 2] = 1 - given[flipped, 2]
    issues = li.find_multi(given, probs, list("vwxyz"))
    lists = [list(np.flatnonzero(r)) for r in given]
    assert set(issues.ranked) == set(np.flatnonzero(find_label_issues(lists, probs, n_jobs=1)))
    assert len(set(issues.ranked) & set(flipped)) / len(flipped) > 0.8
    sug = np.array(issues.suggested)
    assert np.array_equal(sug, (probs >= 0.5).astype(int))
    r = issues.ranked
    assert np.all(issues.p_suggested[r] >= issues.p_given[r])
    assert issues.per_class["x"]["flagged"] > 5 * max(issues.per_class[c]["flagged"] for c in "vwyz")
    assert issues.joint.shape == (L, 2, 2)


def test_multi_label_suggestion_uses_thresholds_tuned_on_the_other_folds():
    """A label the model scores low on every row (an uncalibrated, rare label) is never suggested at 0.5; its
    nested tuned threshold suggests it where the model ranks it high, as the served model would answer."""
    from finetune.multilabel import nested_thresholds

    rng = np.random.default_rng(2)
    n, L = 600, 3
    Y = (rng.random((n, L)) < 0.3).astype(int)
    logits = rng.normal(0, 1, (n, L)) + (2 * Y - 1) * 3
    logits[:, 1] -= 5  # label 1: right order, every probability far under 0.5
    probs = 1 / (1 + np.exp(-logits))
    fold_of = np.arange(n) % 3
    at_half = np.array(li.find_multi(Y, probs, list("abc")).suggested)
    tuned = np.array(li.find_multi(Y, probs, list("abc"), fold_of).suggested)
    assert at_half[:, 1].sum() < 0.1 * Y[:, 1].sum()  # 0.5 misses label 1
    assert np.array_equal(tuned, nested_thresholds(Y, probs, fold_of)[0])
    assert (tuned[:, 1] == Y[:, 1]).mean() > 0.9 > (at_half[:, 1] == Y[:, 1]).mean()


def fake_data(given, labels, texts=None, multi=False, groups=None, keep=None):
    n = len(given)
    data = SimpleNamespace(labels=labels, texts=texts or [f"text {i}" for i in range(n)],
                           keep=np.arange(n) if keep is None else keep, groups=groups, multi_label=multi)
    if multi:
        data.Y = given
    else:
        data.y = given
    return data


def test_run_writes_the_csv_most_likely_first_with_rows_of_the_data_file_and_a_plot(tmp_path):
    _, given, probs, _ = noisy_arrays(n=300, flips=30)
    keep = np.arange(300) + 2  # two rows of the file were dropped before: `row` is the file's, not the position
    data = fake_data(given, list("abcd"), keep=keep, groups=np.array([f"g{i % 7}" for i in range(300)]))
    warnings = []
    blend = np.roll(probs, 1, axis=1)  # a different set of probabilities: which one was used must show
    section = li.run("auto", tmp_path, data, probs, blend, {"kept": False}, np.arange(300) % 3, "x/notes.csv", warnings,
                     li.SingleLabelIssues())
    assert not warnings and section["probabilities"].startswith("model")
    table = pd.read_csv(tmp_path / li.FILE)
    assert list(table.columns) == [*li.COLUMNS, "group", "data"]
    assert len(table) == section["n_flagged"] > 0 and table["data"].eq("notes.csv").all()
    assert table["quality"].is_monotonic_increasing and list(table["rank"]) == list(range(1, len(table) + 1))
    pos = table["row"].to_numpy() - 2
    assert list(table["text"]) == [data.texts[i] for i in pos]
    assert list(table["given_label"]) == [data.labels[given[i]] for i in pos]
    assert np.allclose(table["p_given"], probs[pos, given[pos]], atol=1e-5)
    assert (table["given_label"] != table["suggested_label"]).all()
    assert (tmp_path / li.PLOT).stat().st_size > 1000
    assert li.table_lines(section)[0].startswith(f"label issues (model (out-of-fold)): {len(table)} of 300")

    used = li.run("auto", tmp_path, data, probs, blend, {"kept": True}, np.arange(300) % 3, "notes.csv", warnings,
                  li.SingleLabelIssues())
    assert used["probabilities"].startswith("blend")


def test_too_few_rows_of_a_class_names_it_and_skips_the_step_without_failing(tmp_path):
    given = np.array([0] * 20 + [1] * 20 + [2] * 3)
    probs = np.full((43, 3), 1 / 3)
    (tmp_path / li.FILE).write_text("stale\n")
    warnings = []
    section = li.run("auto", tmp_path, fake_data(given, ["memo", "note", "rare"]), probs, None, None,
                     np.zeros(43, int), "d.csv", warnings, li.SingleLabelIssues())
    assert "skipped" in section and "'rare' (3 rows)" in warnings[0] and "'memo'" not in warnings[0]
    assert not (tmp_path / li.FILE).exists()  # no stale list from an earlier run either
    enough = np.array([0] * 20 + [1] * 20)
    holes = np.full((40, 2), 0.5)
    holes[7] = np.nan
    section = li.run("auto", tmp_path, fake_data(enough, ["memo", "note"]), holes, None, None, np.zeros(40, int),
                     "d.csv", warnings, li.SingleLabelIssues())
    assert section["skipped"] == warnings[-1] and "1 rows have no out-of-fold probability" in warnings[-1]
    assert li.run("off", tmp_path, fake_data(given, ["memo", "note", "rare"]), probs, None, None,
                  np.zeros(43, int), "d.csv", warnings, li.SingleLabelIssues()) is None


def test_multi_label_run_writes_label_sets(tmp_path):
    rng = np.random.default_rng(2)
    Y = (rng.random((200, 3)) < 0.4).astype(int)
    probs = 1 / (1 + np.exp(-(rng.normal(0, 1, (200, 3)) + (2 * Y - 1) * 3)))
    given = Y.copy()
    given[:15, 0] = 1 - given[:15, 0]
    section = li.run("auto", tmp_path, fake_data(given, ["a", "b", "c"], multi=True), probs, None, None,
                     np.zeros(200, int), "d.csv", [], li.MultiLabelIssues(";"))
    assert section["multi_label"] and section["n_flagged"] >= 10
    table = pd.read_csv(tmp_path / li.FILE, keep_default_na=False)
    assert list(table.columns)[-1] == "label_sep" and set(table["label_sep"]) == {";"}  # the review UI reads sets by it
    first = table.iloc[0]
    assert set(first["given_label"].split(";")) ^ set(first["suggested_label"].split(";")) <= {"a", "b", "c", ""}
    row = int(first["row"])
    assert first["suggested_label"] == ";".join(n for n, p in zip("abc", probs[row]) if p >= 0.5)


# ------------------------------------------------------------------------------------------ through k-fold
def kfold(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "finetune/kfold.py", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def grouped_run(tmp_path_factory, tiny_electra_dir, toy_rows):
    folder = tmp_path_factory.mktemp("kfold-label-issues")
    df = toy_rows(n_per_class=10, seed=5)
    df.loc[[0, 1, 2], "label"] = df.loc[[0, 1, 2], "label"].map({"dream": "memo", "memo": "error", "error": "dream"})
    data = folder / "notes.csv"
    df.to_csv(data, index=False)
    out = folder / "run"
    proc = kfold("--model", tiny_electra_dir, "--data", data, "--folds", 3, "--epochs", 1, "--batch-size", 8,
                 "--group-column", "page", "--class-weights", "--final", "--output", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return df, out, proc


def test_kfold_writes_label_issues_from_what_is_served_and_the_model_folder_carries_them(grouped_run):
    df, out, proc = grouped_run
    report = json.loads((out / "report.json").read_text())
    section = report["label_issues"]
    served = "blend" if report["blend"]["kept"] else "model"
    assert section["probabilities"].startswith(served)
    assert set(section["per_class"]) == {"dream", "error", "memo"}
    assert sum(v["rows"] for v in section["per_class"].values()) == len(df)
    table = pd.read_csv(out / li.FILE)
    assert len(table) == section["n_flagged"] and table["data"].eq("notes.csv").all()
    oof = pd.read_csv(out / "oof_predictions.csv")
    prefix = "blend_prob_" if served == "blend" else "prob_"
    for _, r in table.iterrows():  # the probabilities are the served out-of-fold ones of that row
        assert r["text"] == df.loc[r["row"], "text"] and r["given_label"] == df.loc[r["row"], "label"]
        assert r["p_given"] == pytest.approx(oof.loc[r["row"], prefix + r["given_label"]], abs=1e-4)
        assert r["fold"] == oof.loc[r["row"], "fold"] and r["group"] == df.loc[r["row"], "page"]
    assert "label issues (" in proc.stdout and "flagged (estimated noise rate) per class" in proc.stdout
    assert (out / "model" / li.FILE).read_bytes() == (out / li.FILE).read_bytes()


def test_resume_with_label_issues_off_trains_nothing_and_drops_the_list(grouped_run, tiny_electra_dir, put_back):
    again = put_back(grouped_run[1])  # resumed in place (a resume keeps its --output), put back after
    args = json.loads((again / "report.json").read_text())["config"]
    proc = kfold("--model", tiny_electra_dir, "--data", args["data"], "--folds", 3, "--epochs", 1, "--batch-size", 8,
                 "--group-column", "page", "--class-weights", "--output", again, "--resume", "--label-issues", "off")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("reused from") == 3
    assert json.loads((again / "report.json").read_text())["label_issues"] is None
    assert not (again / li.FILE).exists() and not (again / li.PLOT).exists()


def test_kfold_with_a_class_too_small_for_the_method_warns_and_finishes(tmp_path, tiny_electra_dir, toy_rows):
    df = toy_rows(n_per_class=8, seed=6)
    rare = df.index[df["label"] == "memo"][3:]
    df = df.drop(rare)  # 3 memo rows: enough for 2 folds, too few for confident learning
    df.to_csv(tmp_path / "d.csv", index=False)
    proc = kfold("--model", tiny_electra_dir, "--data", tmp_path / "d.csv", "--folds", 2, "--epochs", 1,
                 "--batch-size", 8, "--output", tmp_path / "run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "label issues skipped" in proc.stderr and "'memo' (3 rows)" in proc.stderr
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert "skipped" in report["label_issues"] and not (tmp_path / "run" / li.FILE).exists()


def test_a_tiny_set_probability_is_not_written_as_zero():
    """Issue 45: p_given, a multi-label set's probability (a product), rounded to 0.0 in label_issues.csv."""
    issues = li.Issues(ranked=np.array([0]), quality=np.array([2.5e-7]), suggested=[np.array([0, 1])],
                    p_given=np.array([1.234567e-9]), p_suggested=np.array([0.61234567]), per_class={}, joint=None)
    data = SimpleNamespace(labels=["a", "b"], multi_label=True, Y=np.array([[1, 0]]), y=None, keep=np.array([0]),
                           texts=["t"], groups=None, label_sep=";")
    row = li.issues_table(issues, data, np.array([0]), "d.csv", li.MultiLabelIssues(";")).iloc[0]
    assert row["p_given"] == pytest.approx(1.23457e-9) and row["quality"] == pytest.approx(2.5e-7)
    assert row["p_suggested"] == 0.612346 and row["given_label"] == "a" and row["suggested_label"] == "b"
