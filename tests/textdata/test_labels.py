"""The label space (issue 41): one parser for label cells, the same in training, scoring and retraining; and one
label-name rule (issue 40 M4/M5/L) for every place a name comes from."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from textdata.errors import DataError, ModelError
from textdata.labels import (
    MULTI_LABEL,
    NONE_LABEL,
    LabelSpace,
    check_sep,
    name_problem,
    parse_set,
)


def test_label_cells_parse_every_way():
    assert parse_set("a; b;;a", ";") == ["a", "b"]
    assert parse_set('["a", "b"]', ";") == ["a", "b"]
    assert parse_set(["b", "a"], ";") == ["b", "a"]
    assert parse_set(np.array(["b", None], dtype=object), ";") == ["b"]
    assert parse_set(float("nan"), ";") == [] and parse_set("", ";") == [] and parse_set(None, ";") == []
    assert parse_set("a|b", "|") == ["a", "b"]
    with pytest.raises(DataError, match="row 3: '\\[a, b\\]' starts like a JSON list"):
        parse_set("[a, b]", ";", "x.csv row 3")
    with pytest.raises(DataError, match="holds \\{'a': 1\\}"):
        parse_set('[{"a": 1}]', ";", "x.csv row 3")
    space = LabelSpace.of(["a", "b", "c"], multi_label=True)
    y, unknown = space.targets(["a;c", "", "b;z"], "x.csv")
    assert y.tolist() == [[1, 0, 1], [0, 0, 0], [0, 1, 0]] and unknown == {"z": 1}
    ids, unknown = LabelSpace.of(["a", "b"]).targets(["b", " a ", "q"], "x.csv")
    assert ids.tolist() == [1, 0, -1] and unknown == {"q": 1}


def test_a_single_label_cell_is_its_text():
    space = LabelSpace.of(["[x]", "a,b"])
    assert space.parse(" [x] ") == ["[x]"] and space.parse("a,b") == ["a,b"] and space.parse("") == []
    assert space.problem_type == "single_label_classification" and not space.multi_label
    assert LabelSpace.of(multi_label=True).problem_type == MULTI_LABEL


def test_what_the_space_carries_for_its_kind():
    """The label space answers what callers used to branch on: a file's own separator (a single-label space has
    none), what a transformers config is told (single-label: nothing, as before), the kind our JSON files record,
    and a set joined in the order given (the teacher's answer) or sorted (a canonical cell)."""
    single, multi = LabelSpace.of(["a", "b"]), LabelSpace.of(["a", "b"], multi_label=True)
    assert single.with_sep("|") == single and multi.with_sep("|").sep == "|" and multi.with_sep(None).sep == ";"
    assert single.config_fields() == {} and multi.config_fields() == {"problem_type": MULTI_LABEL}
    assert LabelSpace.recorded({"multi_label": True}).multi_label and not LabelSpace.recorded({}).multi_label
    assert multi.join(["b", "a"], sort=False) == "b;a" and multi.join(["b", "a"]) == "a;b"
    assert single.join(["b"], sort=False) == "b" and multi.with_labels(["c"]) == LabelSpace(("c",), ";")


def _csv(path: Path, cells: list[str]) -> Path:
    words = ["dream sleep", "error crash", "memo note"]
    pd.DataFrame({"text": [f"{words[i % 3]} {i}" for i in range(len(cells))], "label": cells}).to_csv(path, index=False)
    return path


def test_a_json_list_cell_is_one_label_set_in_training_scoring_and_retraining(tmp_path):
    """`["a", "b"]` in a CSV cell trained as ONE label named '["a", "b"]' while serving and the retraining check
    read it as {a, b}. Now k-fold's reader, the export's gate targets and the app's table all read {a, b}."""
    from app.versions.trainset import canonical_set
    from finetune.data import load_labeled
    from serving.export import _targets

    cells = ['["dream", "error"]', "dream;error", "memo", '["memo"]', "dream", "error"] * 2
    data = load_labeled(_csv(tmp_path / "d.csv", cells), folds=2, multi_label=True)
    assert data.labels == ["dream", "error", "memo"]
    assert data.Y[0].tolist() == data.Y[1].tolist() == [1, 1, 0] and data.Y[3].tolist() == [0, 0, 1]
    cfg = SimpleNamespace(label_sep=None, eval_csv="e.csv", label_column="label")
    ref = SimpleNamespace(space=LabelSpace.of(data.labels, multi_label=True, sep=";"))
    assert _targets(cfg, ref, list(enumerate(cells))).tolist() == data.Y.tolist()
    assert canonical_set(cells[0], ";") == canonical_set(cells[1], ";") == "dream;error"


def test_a_cell_the_parser_cannot_read_names_row_column_and_value_in_training_and_scoring(tmp_path):
    from finetune.data import load_labeled
    from serving.export import _targets

    cells = ["dream", "error", "memo", "[dream, error]", "dream;error", "memo"]
    with pytest.raises(DataError) as e:
        load_labeled(_csv(tmp_path / "d.csv", cells), folds=2, multi_label=True)
    assert "d.csv" in str(e.value) and "data row 4" in str(e.value) and "column 'label'" in str(e.value)
    assert "'[dream, error]'" in str(e.value)
    cfg = SimpleNamespace(label_sep=None, eval_csv="e.csv", label_column="label")
    ref = SimpleNamespace(space=LabelSpace.of(["dream", "error", "memo"], multi_label=True, sep=";"))
    with pytest.raises(DataError) as e:
        _targets(cfg, ref, list(enumerate(cells)))
    assert "e.csv" in str(e.value) and "data row 4" in str(e.value) and "column 'label'" in str(e.value)
    assert "'[dream, error]'" in str(e.value)


def test_a_single_label_cell_the_rule_refuses_names_row_column_and_value_in_training_and_scoring(tmp_path):
    """Single-label alike: k-fold's reader and the export's gate read a label cell through the same label space,
    and a name the rule refuses (here a spreadsheet formula) is an error naming the file, the row, the column and
    the value in both (the gate took any cell as a label string before)."""
    from finetune.data import load_labeled
    from serving.export import _targets

    cells = ["dream", "error", "memo", "=cmd()", "dream", "error", "memo", "dream"]
    with pytest.raises(DataError) as e:
        load_labeled(_csv(tmp_path / "d.csv", cells), folds=2)
    assert "d.csv" in str(e.value) and "data row 4" in str(e.value) and "column 'label'" in str(e.value)
    assert "'=cmd()'" in str(e.value)
    cfg = SimpleNamespace(label_sep=None, eval_csv="e.csv", label_column="label")
    ref = SimpleNamespace(space=LabelSpace.of(["dream", "error", "memo"]))
    with pytest.raises(DataError) as e:
        _targets(cfg, ref, list(enumerate(cells)))
    assert "e.csv" in str(e.value) and "data row 4" in str(e.value) and "column 'label'" in str(e.value)
    assert "'=cmd()'" in str(e.value)
    assert _targets(cfg, ref, list(enumerate([" dream", "memo", float("nan")]))) == ["dream", "memo", ""]


BAD_NAMES = ['=HYPERLINK("http://x","y")', "+cmd|' /C calc'!A0", "@SUM(A1)", "a\x00b", "a\nb", "\u202eevil",
             "a\u2066b", "x" * 61, NONE_LABEL, ""]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_the_name_rule_refuses_for_every_kind(name):
    assert name_problem(name) and name_problem(name, ";")


@pytest.mark.parametrize("name", ["[x]", "[1]", "a,b", "a|b", "a;b", "x]"])
def test_the_name_rule_refuses_what_would_not_read_back_as_one_label_of_a_set(name):
    assert name_problem(name, ";") and not name_problem(name)


@pytest.mark.parametrize("name", ["memo", "-1", "+2.5", "a=b", "꿈", "role::program", "x" * 60])
def test_the_name_rule_takes_ordinary_names(name):
    assert name_problem(name) is None and name_problem(name, ";") is None


def test_separators_are_short_punctuation():
    for sep in (";", ",", "|", "/", "::"):
        assert check_sep(sep, "--label-sep") == sep
    for sep in ("", "e", " ", "x" * 100_000, "[", '"', "\x00"):
        with pytest.raises(DataError, match="--label-sep"):
            check_sep(sep, "--label-sep")


def test_a_set_larger_than_a_person_annotates_is_refused():
    with pytest.raises(DataError, match="250 labels in one cell"):
        parse_set(";".join(f"l{i}" for i in range(250)), ";", "review.csv row 2")


def test_k_fold_applies_the_rule_to_single_label_classes_naming_the_row(tmp_path):
    from finetune.data import load_labeled

    cells = ["dream", "memo", "dream", "=cmd()", "memo", "=cmd()"]
    with pytest.raises(DataError) as e:
        load_labeled(_csv(tmp_path / "d.csv", cells), folds=2)
    assert "data row 4" in str(e.value) and "'=cmd()'" in str(e.value) and "formula" in str(e.value)


def test_the_space_is_read_from_a_model_folder(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"id2label": {"0": "b", "1": "a"}, "problem_type": MULTI_LABEL}))
    assert LabelSpace.from_folder(tmp_path) == LabelSpace(("b", "a"), ";")
    (tmp_path / "thresholds.json").write_text(json.dumps({"label_sep": "|"}))
    assert LabelSpace.from_folder(tmp_path).sep == "|"
    (tmp_path / "config.json").write_text(json.dumps({"id2label": {"0": "b", "1": "a"}}))
    assert LabelSpace.from_folder(tmp_path) == LabelSpace(("b", "a"), None)
    (tmp_path / "config.json").write_text("[1")
    with pytest.raises(ModelError, match="config.json"):
        LabelSpace.from_folder(tmp_path)


@pytest.mark.parametrize("cell, says", [
    ("[" * 5000 + "]" * 5000, "starts like a JSON list but is not one"),  # a RecursionError traceback before
    ('["dream", ["error"]]', "holds ['error'], not a label name"),
    (";".join(f"lab{i}" for i in range(3000)), "3000 labels in one cell"),
    ("x" * 100_000, "is 100000 characters long"),
    ("dream,error;memo", "contains ','"),
])
def test_k_fold_refuses_hostile_label_sets_naming_the_row(tmp_path, cell, says):
    """Issue 40, "not yet tried": k-fold with hostile multi-label files; each is one DataError naming the row."""
    from finetune.data import load_labeled

    with pytest.raises(DataError, match=r"d.csv: data row 4 .*column 'label'") as e:
        load_labeled(_csv(tmp_path / "d.csv", ["dream", "error", "memo", cell, "dream;error", "memo"]), folds=2,
                     multi_label=True)
    assert says in str(e.value) and len(str(e.value)) < 400
