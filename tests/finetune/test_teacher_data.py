"""k-fold --teacher-column: teacher labels corrected on gold rows, gold rows weighed more, scores on gold rows only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from finetune.teacher_data import (
    absorbing,
    corrected,
    fold_training,
    gold_holdout,
    gold_repeats,
    load,
    relabelled,
    repeated,
    teacher_confusion,
    text_weight,
)
from textdata.errors import DataError
from textdata.labels import LabelSpace
from textdata.normalize import Normalizer

ROOT = Path(__file__).resolve().parents[2]


def test_a_class_the_teacher_never_answers_is_recovered_where_the_text_says_so():
    # class 2 is always answered 1; class 0 is answered right
    y_gold = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2])
    said = np.array([0, 0, 0, 1, 1, 1, 1, 1, 1])
    T = teacher_confusion(y_gold, said, 3)
    assert T[2, 1] > 0.8 and T[2, 2] < 0.1
    p = np.array([[0.1, 0.2, 0.7],   # answered 1, reads as 2: the answer 1 is ambiguous, the text decides
                  [0.1, 0.7, 0.2],   # answered 1, reads as 1
                  [0.1, 0.2, 0.7]])  # answered 0, reads as 2: the teacher is reliable on 0, its answer stands
    label, post = corrected(np.array([1, 1, 0]), p, T, rounds=0)
    assert label.tolist() == [2, 1, 0] and (post > 0.5).all()


def test_the_teacher_rows_class_mix_decides_the_borderline_texts():
    # 90 texts read as class 1, 10 as class 2, all answered 1; a borderline text leans to 2 under a uniform prior,
    # to 1 once EM has found that class 2 is a tenth of these rows
    T = teacher_confusion(np.array([0, 0, 0, 1, 1, 1, 2, 2, 2]), np.array([0, 0, 0, 1, 1, 1, 1, 1, 1]), 3)
    p = np.array([[0.02, 0.95, 0.03]] * 90 + [[0.02, 0.03, 0.95]] * 10 + [[0.1, 0.42, 0.48]])
    answered = np.ones(len(p), int)
    assert corrected(answered, p, T, rounds=0)[0][-1] == 2
    label = corrected(answered, p, T, strength=9)[0]
    assert label[-1] == 1 and label[:90].tolist() == [1] * 90 and label[90:100].tolist() == [2] * 10


def test_answers_outside_the_label_set_do_not_count_against_the_teacher():
    T = teacher_confusion(np.array([0, 0, 1]), np.array([0, -1, 1]), 2, alpha=0)
    assert T.tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_the_texts_weight_is_what_scores_best_on_the_gold_rows():
    """A weak gold-only model (ko-help: short texts, 8 rows a class) must not overrule a teacher that is mostly right;
    a strong one must recover the class the teacher never answers (it answers class 1 for class 2)."""
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 8)
    answered = np.where(y == 2, 1, y)
    answered[[0, 8]] = [1, 0]  # two other errors
    T = teacher_confusion(y, answered, 3)
    weak = rng.dirichlet(np.ones(3) * 0.3, size=len(y))  # confident and wrong as often as right
    assert text_weight(weak, y, answered, T, 3, None) < 1.0
    strong = np.full((len(y), 3), 0.05)
    strong[np.arange(len(y)), y] = 0.9
    assert text_weight(strong, y, answered, T, 3, None) == 1.0


def never_answered_table(seed: int) -> pd.DataFrame:
    """Three topics, 8 gold rows each; the teacher answers every `c` text `b` (never `c`), and `c` is a minority of
    the teacher rows (12 of 172), as BBC's `tech` in bench/teacher.py. Two topic words a text among six shared ones."""
    rng = np.random.default_rng(seed)
    topic = {"a": ["apple", "orchard", "harvest", "cider", "pear"], "b": ["market", "shares", "profit", "bank", "trade"],
             "c": ["software", "chip", "phone", "internet", "robot"]}
    shared = ["today", "report", "new", "year", "people", "said", "company", "market", "growth"]
    rows = []
    for label, n in (("a", 68), ("b", 108), ("c", 20)):
        for i in range(n):
            words = [*rng.choice(topic[label], 2), *rng.choice(shared, 6)]
            rng.shuffle(words)
            rows.append((" ".join(words) + f" n{label}{i}", label, label if i < 8 else "", "b" if label == "c" else label))
    return pd.DataFrame(rows, columns=["text", "true", "gold", "teacher"])


@pytest.mark.parametrize("seed", [1, 2])
def test_a_class_the_teacher_never_answers_is_recovered_when_the_weights_tie_on_the_gold_rows(tmp_path, seed):
    """On these gold rows every text weight above 0 scores the same; the rule once took the smallest (0.25), and then
    the teacher rows' class mix (`c` a minority) outvoted the flattened text: `c` recall 0.33 and 0.25. The answer
    that stands for a class the teacher never gives takes the text at full weight, and ties go to the larger."""
    df = never_answered_table(seed)
    df[["text", "gold", "teacher"]].to_csv(tmp_path / "t.csv", index=False)
    data = load(tmp_path / "t.csv", cfg(), Normalizer("none"))
    got = np.array(data.labels)[data.y][~data.gold]
    true = df["true"].to_numpy()[data.keep][~data.gold]
    assert (got[true == "c"] == "c").mean() >= 0.9 and (got == true).mean() >= 0.95
    assert data.text_weights == [1.0]


def test_the_answer_a_never_given_class_hides_under_takes_the_text_and_other_answers_stand_at_weight_0():
    y_gold = np.repeat(np.arange(3), 4)
    said = np.where(y_gold == 2, 1, y_gold)
    assert absorbing(y_gold, said, np.array([0, 1, 1]), 3).tolist() == [False, True, False]
    assert not absorbing(y_gold, said, np.array([2]), 3).any()  # the teacher rows name 2: it is answered
    T = teacher_confusion(y_gold, said, 3)
    p = np.array([[0.05, 0.05, 0.9], [0.05, 0.9, 0.05], [0.05, 0.05, 0.9]])  # the third reads as 2, answered 0
    full = absorbing(y_gold, said, np.array([1, 1, 0]), 3)
    assert relabelled(np.array([1, 1, 0]), p, T, 0.0, full, None).tolist() == [2, 1, 0]


def test_gold_repeats_auto_balances_gold_against_teacher_rows():
    assert gold_repeats(40, 1000, 0) == 25 and gold_repeats(40, 10, 0) == 1 and gold_repeats(2, 10_000, 0) == 50
    assert gold_repeats(40, 1000, 3) == 3


def teacher_table(tmp_path, toy_rows, n_per_class=12):
    """Gold labels on 4 rows a class; the teacher answers every row, never 'memo' (it says 'error')."""
    df = toy_rows(n_per_class=n_per_class)
    df["teacher"] = df["label"].replace({"memo": "error"})
    df["gold"] = ""
    for label in ("dream", "error", "memo"):
        df.loc[df.index[df["label"] == label][:4], "gold"] = label
    df["teacher_cost"] = 0.002
    path = tmp_path / "mixed.csv"
    df.to_csv(path, index=False)
    return df, path


def cfg(**kw):
    base = {"text_column": "text", "label_column": "gold", "teacher_column": "teacher", "encoding": "utf-8",
                "group_column": None, "seed": 0, "gold_weight": 0.0}
    return SimpleNamespace(**{**base, **kw})


def test_load_counts_outside_answers_and_keeps_gold_and_teacher_rows(tmp_path, toy_rows, capsys):
    df, path = teacher_table(tmp_path, toy_rows)
    df.loc[df.index[df["gold"] == ""][:3], "teacher"] = "banana"
    df.loc[df.index[df["gold"] == ""][3], ["teacher"]] = ""  # neither: dropped
    df.to_csv(path, index=False)
    data = load(path, cfg(), Normalizer("none"))
    assert data.outside == {"banana": 3} and "banana" in capsys.readouterr().err
    assert data.gold.sum() == 12 and len(data.y) == len(df) - 4
    assert data.labels == ["dream", "error", "memo"]
    assert (data.y[data.gold] == data.answered[data.gold]).sum() == 8  # the gold rows keep their gold labels


def test_a_class_with_too_few_gold_rows_is_refused(tmp_path, toy_rows):
    df, path = teacher_table(tmp_path, toy_rows)
    df.loc[df.index[df["gold"] == "memo"][1:], "gold"] = ""
    df.to_csv(path, index=False)
    with pytest.raises(DataError, match="memo"):
        load(path, cfg(), Normalizer("none"))


def test_a_fold_corrects_on_its_own_gold_rows_only(tmp_path, toy_rows):
    _, path = teacher_table(tmp_path, toy_rows)
    data = load(path, cfg(), Normalizer("none"))
    rows = np.arange(len(data.y))
    held = np.flatnonzero(data.gold)[:3]
    train = np.setdiff1d(rows, held)
    targets, fit_rows = fold_training(data, train, train, 0, 0.0)
    data.answered[held] = (data.answered[held] + 1) % 3  # what the held-out gold rows say changes nothing
    again, _ = fold_training(data, train, train, 0, 0.0)
    assert np.array_equal(targets[train], again[train])
    k = gold_repeats(int(data.gold[train].sum()), int((~data.gold[train]).sum()), 0.0)
    assert len(fit_rows) == len(train) + (k - 1) * int(data.gold[train].sum())
    assert np.array_equal(repeated(data, rows, 1.0), rows)


@pytest.fixture(scope="module")
def teacher_run(tmp_path_factory, tiny_electra_dir, toy_rows):
    folder = tmp_path_factory.mktemp("teach-kfold")
    df, path = teacher_table(folder, toy_rows, n_per_class=16)
    out = folder / "run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, "finetune/kfold.py", "--model", str(tiny_electra_dir), "--data", str(path),
                           "--label-column", "gold", "--teacher-column", "teacher", "--folds", "3", "--epochs", "1",
                           "--batch-size", "8", "--output", str(out), "--final"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return df, out, proc


def test_kfold_scores_on_gold_rows_only_and_judges_the_teacher_there(teacher_run):
    df, out, proc = teacher_run
    report = json.loads((out / "report.json").read_text())
    gold = df[df["gold"] != ""]
    assert sum(f["n_val"] for f in report["folds"]) == len(gold) == report["n_used"]
    t = report["teacher"]
    assert t["rows"] == {"gold": 12, "teacher_only": 36, "gold_with_teacher_answer": 12, "teacher_outside_label_set": {}}
    from sklearn.metrics import f1_score

    want = f1_score(gold["gold"], gold["teacher"], average="macro", labels=["dream", "error", "memo"], zero_division=0)
    assert t["teacher_macro_f1"] == pytest.approx(want, abs=1e-4)
    oof = pd.read_csv(out / "oof_predictions.csv", keep_default_na=False)
    scored = oof[oof["error"] == ""]
    assert len(scored) == 12 and set(scored["gold"]) == {"dream", "error", "memo"}
    assert (oof["error"].str.startswith("teacher row")).sum() == 36
    served = scored["blend_pred_label"] if "blend_pred_label" in scored and t["student"].startswith("blend") \
        else scored["pred_label"]
    assert t["student_macro_f1"] == pytest.approx(
        f1_score(scored["gold"], served, average="macro", labels=["dream", "error", "memo"], zero_division=0), abs=1e-4)
    assert t["agreement"] == pytest.approx((served.to_numpy() == scored["teacher"].to_numpy()).mean(), abs=1e-4)
    assert t["cost"]["teacher_per_1000_texts"] == pytest.approx(2.0)
    assert t["cost"]["student_cpu_seconds_per_1000_texts"] > 0
    assert t["relabelled_teacher_rows"] > 0  # 'error' answers on memo texts corrected
    assert "teacher macro-F1" in proc.stdout and (out / "model" / "model.safetensors").exists()


def test_the_holdout_is_gold_rows_only_and_never_reaches_a_training_label(tmp_path, toy_rows):
    df, path = teacher_table(tmp_path, toy_rows, n_per_class=16)
    for label in ("dream", "error", "memo"):  # 6 gold rows a class: 2 held out, 4 left
        df.loc[df.index[(df["label"] == label) & (df["gold"] == "")][:2], "gold"] = label
    df.to_csv(path, index=False)
    data = load(path, cfg(), Normalizer("none"))
    cv, held = gold_holdout(data, 0.34, 3, 0, path)
    assert held.gold.all() and len(held.y) == 6 and sorted(np.bincount(held.y)) == [2, 2, 2]
    assert (~cv.gold).sum() == (~data.gold).sum() and len(cv.y) + len(held.y) == len(data.y)
    assert not set(cv.keep) & set(held.keep)
    data.answered[np.isin(data.keep, held.keep)] = 0  # what the held-out rows say changes no training label
    again, _ = gold_holdout(data, 0.34, 3, 0, path)
    assert np.array_equal(cv.y, again.y)


def test_kfold_holds_out_gold_rows_and_scores_the_final_model_there(tmp_path, tiny_electra_dir, toy_rows):
    df, path = teacher_table(tmp_path, toy_rows, n_per_class=12)
    for label in ("dream", "error", "memo"):
        df.loc[df.index[(df["label"] == label) & (df["gold"] == "")][:2], "gold"] = label
    df.to_csv(path, index=False)
    out = tmp_path / "run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, "finetune/kfold.py", "--model", str(tiny_electra_dir), "--data", str(path),
                           "--label-column", "gold", "--teacher-column", "teacher", "--holdout", "0.34", "--folds",
                           "2", "--epochs", "1", "--batch-size", "8", "--output", str(out), "--final",
                           "--blend", "off", "--label-issues", "off"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    held = pd.read_csv(out / "holdout.csv", keep_default_na=False)
    assert len(held) == 6 and (held["gold"] != "").all()
    assert report["holdout"]["macro_f1"] is not None and report["teacher"]["rows"]["gold"] == 12
    assert report["teacher"]["rows"]["teacher_only"] == (df["gold"] == "").sum()


def test_kfold_refuses_a_negative_gold_weight(tmp_path, toy_csv):
    proc = subprocess.run([sys.executable, "finetune/kfold.py", "--model", "x", "--data", str(toy_csv),
                           "--teacher-column", "page", "--gold-weight", "-1"], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 2 and "--gold-weight" in proc.stderr


# ------------------------------------------------------------------------------------------------ multi-label
def multi_teacher_table(tmp_path, multilabel_rows, n=90, n_gold=30):
    """The first `n_gold` rows gold (an empty set written `[]`: an empty cell is no answer); the teacher answers
    every row and never says 'memo' (it says 'error'), writing `[]` for none."""
    df = multilabel_rows(n, seed=3)
    space = LabelSpace.of(["dream", "error", "memo"], True)
    said = [space.marked({{"memo": "error"}.get(x, x) for x in cell.split(";") if x}) for cell in df["label"]]
    df["teacher"] = said
    df["gold"] = [space.marked(x for x in cell.split(";") if x) if i < n_gold else "" for i, cell in
                  enumerate(df["label"])]
    path = tmp_path / "mixed-multi.csv"
    df.to_csv(path, index=False)
    return df, path


def test_multi_label_gold_and_teacher_rows_and_the_never_answered_label_recovered(tmp_path, multilabel_rows):
    df, path = multi_teacher_table(tmp_path, multilabel_rows)
    data = load(path, cfg(multi_label=True, label_sep=";"), Normalizer("none"))
    assert data.space.multi_label and data.labels == ["dream", "error", "memo"] and data.y is None
    assert data.gold.sum() == 30 and len(data.Y) == 90 and data.outside == {}
    truth = np.array([[int(x in cell.split(";")) for x in data.labels] for cell in df["label"]])
    assert np.array_equal(data.Y[data.gold], truth[:30])  # gold rows keep their gold sets, `[]` included
    assert (truth[:30].sum(1) == 0).any()
    teach = ~data.gold
    assert data.answered[teach][:, 2].sum() == 0  # the teacher never says memo...
    memo = truth[30:, 2] == 1
    assert data.Y[teach][memo, 2].mean() > 0.5  # ...and the gold rows' texts recover it on the teacher rows
    assert len(data.text_weights) == 3  # one text weight per label


def test_multi_label_teacher_cells_outside_the_label_set_are_counted_and_bad_gold_cells_named(tmp_path,
                                                                                              multilabel_rows, capsys):
    df, path = multi_teacher_table(tmp_path, multilabel_rows)
    df.loc[40, "teacher"], df.loc[41, "teacher"], df.loc[42, "teacher"] = "dream;banana", "dream,error", ""
    df.to_csv(path, index=False)
    data = load(path, cfg(multi_label=True, label_sep=";"), Normalizer("none"))
    assert data.outside == {"dream;banana": 1, "dream,error": 1} and "banana" in capsys.readouterr().err
    assert len(data.Y) == 87 and data.dropped == {"no gold label and no usable teacher label": 3}
    df.loc[2, "gold"] = "dream,error"  # a gold cell mixing separators: an error naming row, column and value
    df.to_csv(path, index=False)
    with pytest.raises(DataError, match=r"data row 3 .*column 'gold'.*dream,error"):
        load(path, cfg(multi_label=True, label_sep=";"), Normalizer("none"))


def test_multi_label_kfold_scores_on_gold_rows_only_and_judges_the_teacher_there(tmp_path, tiny_electra_dir,
                                                                                  multilabel_rows):
    df, path = multi_teacher_table(tmp_path, multilabel_rows)
    out = tmp_path / "run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, "finetune/kfold.py", "--model", str(tiny_electra_dir), "--data", str(path),
                           "--label-column", "gold", "--teacher-column", "teacher", "--multi-label", "--folds", "2",
                           "--epochs", "1", "--batch-size", "8", "--output", str(out), "--blend", "off"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert sum(f["n_val"] for f in report["folds"]) == 30 == report["teacher"]["rows"]["gold"]
    t = report["teacher"]
    assert t["rows"]["teacher_only"] == 60 and t["n_judged"] == 30
    from sklearn.metrics import f1_score

    labels = ["dream", "error", "memo"]
    as_matrix = lambda cells: np.array([[int(x in LabelSpace.of(labels, True).parse(c)) for x in labels] for c in cells])
    gold = df.iloc[:30]
    want = f1_score(as_matrix(gold["gold"]), as_matrix(gold["teacher"]), average="macro", zero_division=0)
    assert t["teacher_macro_f1"] == pytest.approx(want, abs=1e-4) and t["teacher_per_class"]["memo"]["f1"] == 0
    assert t["teacher_accuracy"] == pytest.approx((gold["gold"] == gold["teacher"]).mean(), abs=1e-4)
    oof = pd.read_csv(out / "oof_predictions.csv", keep_default_na=False)
    assert (oof["error"].str.startswith("teacher row")).sum() == 60
    assert t["relabelled_teacher_rows"] > 0 and len(t["text_weights"]) >= 3  # one per label and correction


def test_multi_label_holdout_is_gold_rows_only_and_never_reaches_a_training_label(tmp_path, multilabel_rows):
    _, path = multi_teacher_table(tmp_path, multilabel_rows, n=90, n_gold=45)
    data = load(path, cfg(multi_label=True, label_sep=";"), Normalizer("none"))
    cv, held = gold_holdout(data, 0.3, 2, 0, path)
    assert held.gold.all() and held.y is None and held.Y.shape[1] == 3 and 8 <= len(held.Y) <= 20
    assert (~cv.gold).sum() == (~data.gold).sum() and len(cv.Y) + len(held.Y) == len(data.Y)
    data.answered[np.isin(data.keep, held.keep)] = 1  # what the held-out rows say changes no training label
    again, _ = gold_holdout(data, 0.3, 2, 0, path)
    assert np.array_equal(cv.Y, again.Y)
