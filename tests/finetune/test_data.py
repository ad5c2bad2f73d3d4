"""Folds are stratified (and grouped when asked); every bad input names its problem."""

import numpy as np
import pandas as pd
import pytest

from finetune.data import inner_split, load_labeled, make_folds
from finetune.kfold import main
from textdata.errors import DataError


def test_folds_are_stratified_and_cover_every_row_once():
    rng = np.random.default_rng(0)
    y = rng.choice(3, size=300, p=[0.6, 0.3, 0.1])
    folds = make_folds(y, None, 5, seed=1)
    seen = np.concatenate([va for _, va in folds])
    assert sorted(seen) == list(range(300))
    overall = np.bincount(y) / len(y)
    for tr, va in folds:
        assert not set(tr) & set(va)
        assert np.abs(np.bincount(y[va], minlength=3) / len(va) - overall).max() < 0.03


def test_grouped_folds_keep_each_group_in_one_fold():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(60), 5)
    y = np.repeat(rng.choice(3, size=60), 5)
    folds = make_folds(y, groups, 5, seed=1)
    fold_of_group = {}
    for k, (_, va) in enumerate(folds):
        for g in set(groups[va]):
            assert fold_of_group.setdefault(g, k) == k
    assert len(fold_of_group) == 60


def test_inner_split_never_overlaps_and_is_carved_from_training_only():
    y = np.array([0] * 40 + [1] * 20 + [2] * 2)  # class 2 too small to split: stays in training
    tr, va = inner_split(y, None, 0.1, seed=0)
    assert not set(tr) & set(va)
    assert sorted(np.concatenate([tr, va])) == list(range(len(y)))
    assert 2 not in set(y[va])
    assert 0.05 < len(va) / len(y) < 0.15


def test_label_ids_are_sorted_and_numeric_labels_sort_numerically(tmp_path):
    path = tmp_path / "d.csv"
    pd.DataFrame({"text": [f"t{i}" for i in range(12)], "label": ["10", "2", "1"] * 4}).to_csv(path, index=False)
    data = load_labeled(path, folds=2)
    assert data.labels == ["1", "2", "10"]
    assert list(data.y[:3]) == [2, 1, 0]


def run_cli(capsys, *args):
    code = main(list(args))
    return code, capsys.readouterr().err


def write(tmp_path, df, name="d.csv"):
    path = tmp_path / name
    df.to_csv(path, index=False)
    return path


def test_missing_file(capsys, tmp_path, tiny_electra_dir):
    code, err = run_cli(capsys, "--model", str(tiny_electra_dir), "--data", str(tmp_path / "nope.csv"))
    assert code == 2 and "nope.csv: no such file" in err


def test_bad_encoding_names_the_line(capsys, tmp_path, tiny_electra_dir):
    path = tmp_path / "cp949.csv"
    path.write_bytes(b"text,label\nhello,a\n" + "꿈을 꿨다,b\n".encode("cp949"))
    code, err = run_cli(capsys, "--model", str(tiny_electra_dir), "--data", str(path))
    assert code == 2 and "line 3 is not valid utf-8" in err and "cp949" in err


def test_cp949_file_reads_with_encoding_flag(tmp_path):
    path = tmp_path / "cp949.csv"
    path.write_bytes("text,label\n꿈을 꿨다,a\n회의 일정,b\n".encode("cp949"))
    data = load_labeled(path, folds=1, encoding="cp949")
    assert data.texts == ["꿈을 꿨다", "회의 일정"]


def test_missing_column_lists_columns(capsys, tmp_path, tiny_electra_dir):
    path = write(tmp_path, pd.DataFrame({"sentence": ["a", "b"], "label": ["x", "y"]}))
    code, err = run_cli(capsys, "--model", str(tiny_electra_dir), "--data", str(path))
    assert code == 2 and "no column 'text'" in err and "['sentence', 'label']" in err
    assert err.strip().endswith("name yours with --text-column")
    path = write(tmp_path, pd.DataFrame({"text": ["a", "b"], "topic": ["x", "y"]}))
    code, err = run_cli(capsys, "--model", str(tiny_electra_dir), "--data", str(path), "--group-column", "page")
    assert code == 2 and "no column 'label', 'page'" in err and "--label-column / --group-column" in err


def test_empty_texts_and_labels_are_counted_then_dropped_or_fail(capsys, tmp_path):
    df = pd.DataFrame({"text": ["a", "", "  ", "d", "e", "f"] * 2, "label": ["x", "y", "x", "", "y", "x"] * 2})
    path = write(tmp_path, df)
    data = load_labeled(path, folds=2)
    assert len(data.y) == 6 and data.dropped == {"empty 'text'": 4, "empty 'label'": 2}
    assert "dropping 6 of 12 rows" in capsys.readouterr().err
    with pytest.raises(DataError, match="6 of 12 rows.*--on-missing drop"):
        load_labeled(path, folds=2, on_missing="fail")


def test_nan_texts_in_jsonl_count_as_missing(tmp_path):
    path = tmp_path / "d.jsonl"
    pd.DataFrame({"text": ["a", None, "c", "d"], "label": ["x", "y", "x", "y"]}).to_json(path, orient="records", lines=True)
    data = load_labeled(path, folds=1)
    assert data.dropped == {"empty 'text'": 1} and len(data.texts) == 3


def test_rare_class_is_named_with_its_count(capsys, tmp_path, tiny_electra_dir):
    df = pd.DataFrame({"text": [f"t{i}" for i in range(13)], "label": ["big"] * 10 + ["tiny"] * 3})
    code, err = run_cli(capsys, "--model", str(tiny_electra_dir), "--data", str(write(tmp_path, df)), "--folds", "5")
    assert code == 2 and "'tiny' (3 rows)" in err and "--folds" in err


def test_a_multi_label_file_without_the_flag_is_told_to_pass_it(tmp_path):
    """Issue 45: the debtags file without --multi-label listed ~70 label combinations as classes in one
    3,900-character line and advised "lower --folds to 2" with --folds 2, never saying "multi"."""
    tags = ["net", "web", "devel", "admin", "game", "sound", "x11", "text"]
    combos = [";".join(tags[j] for j in range(8) if (i >> j) & 1) or "net" for i in range(1, 80)]
    path = tmp_path / "tags.csv"
    pd.DataFrame({"text": [f"t{i}" for i in range(len(combos) + 4)], "label": combos + ["net"] * 4}).to_csv(path, index=False)
    with pytest.raises(DataError) as e:
        load_labeled(path, folds=2)
    said = str(e.value)
    assert "hold several labels joined by ';': is this a multi-label file? Pass --multi-label." in said
    assert " more." in said and len(said) < 800  # the list of classes is capped
    assert "lower --folds to 2" not in said and "a single row cannot be cross-validated" in said
    pipes = tmp_path / "pipes.csv"
    pd.DataFrame({"text": ["a", "b", "c", "d"], "label": ["x|y", "x", "y|z", "x"]}).to_csv(pipes, index=False)
    with pytest.raises(DataError, match=r"Pass --multi-label --label-sep '\|'"):
        load_labeled(pipes, folds=2)
    plain = tmp_path / "plain.csv"
    pd.DataFrame({"text": list("abcdef"), "label": ["x", "x", "y", "y", "z", "z"]}).to_csv(plain, index=False)
    with pytest.raises(DataError) as e:
        load_labeled(plain, folds=3)
    said = str(e.value).split(": ", 1)[1]  # the path names the test, "multi_label" in it
    assert "multi-label" not in said and said.endswith("or merge or drop the class, or lower --folds to 2")


def test_single_class(capsys, tmp_path, tiny_electra_dir):
    df = pd.DataFrame({"text": [f"t{i}" for i in range(10)], "label": ["only"] * 10})
    code, err = run_cli(capsys, "--model", str(tiny_electra_dir), "--data", str(write(tmp_path, df)))
    assert code == 2 and "single class ('only')" in err


def test_too_few_groups(capsys, tmp_path, tiny_electra_dir):
    df = pd.DataFrame({"text": [f"t{i}" for i in range(20)], "label": ["a", "b"] * 10, "doc": ["d1", "d2"] * 10})
    code, err = run_cli(capsys, "--model", str(tiny_electra_dir), "--data", str(write(tmp_path, df)),
                        "--group-column", "doc")
    assert code == 2 and "2 groups, fewer than --folds 5" in err


def test_unknown_flag_fails_loudly(capsys, toy_csv, tiny_electra_dir):
    with pytest.raises(SystemExit) as e:
        main(["--model", str(tiny_electra_dir), "--data", str(toy_csv), "--epoch", "3", "--bogus"])
    assert e.value.code == 2 and "--bogus" in capsys.readouterr().err
