"""The kind of labels in the app (issue 41): the label space is carried as a value (the engine's `clf.space`, a
session's `space`), what differs per kind is app/label_kinds.py's, picked once, and the app's modules hold no
kind branches; the label space's fields in the app's JSON are written and read in one place."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pandas as pd
import pytest

from app.label_kinds import (
    SINGLE,
    LabelSets,
    OneLabel,
    asked_space,
    dataset_space,
    kind_of,
    space_fields,
    space_from,
)
from app.labeling.sessions import SessionError, SessionStore
from textdata.labels import LabelSpace

ROOT = Path(__file__).resolve().parents[2]
# A test of the kind in code (strings and comments left out): a condition or a boolean on multi_label / multi /
# label_sep / is_multi..., or getattr of the kind or of an answer's source. Picking by the label space
# (`space.pick`, `kind_of(space)`) is not one.
KIND_TEST = re.compile(r"(\bif\b|\belse\b|\band\b|\bor\b|\bnot\b)[^\n]*(multi_label|\bml\b|\bmulti\b|label_sep|"
                       r"is_multi\w*)|getattr\([^)]*(multi_label|label_sep|source)")
KIND_WORDS = ("multi_label", "label_sep", "source")
PROBLEM_TYPES = re.compile(r"^[rbuf]*['\"](multi|single)_label_classification['\"]$")
# None left: a filter by the kind a record holds (a label store's rows, a review queue's answers) is the kind
# object's `own`, a team dataset's kind its `dataset_space`, the Label tab's per-kind views are picked by the
# session's space; label_issues.csv's column is read by name (SEP_COLUMN), its presence not a kind test.
KNOWN: dict[str, int] = {}
# The modules where the app's label data names its kind ("multi_label", "label_sep"): each format once.
FORMATS = {
    "app/label_kinds.py": "a session's meta.json, an audit's items, a retrain's k-fold config and spec.json",
    "app/labeling/review.py": "label_issues.csv's label_sep column",
    "app/labeling/audit.py": "the audit queue's items (written), /v1/monitor's live precision of label sets",
    "app/monitoring/monitor.py": "the drift reference's kind (reference.json, written by k-fold)",
    "app/team/routes.py": "POST /v1/datasets' field and answer",
    "app/versions/trainset.py": "the label store's final labels (labelstore/snapshot.labels_as_of)",
}


def _code(path: Path) -> tuple[dict[int, str], list[tuple[int, str]]]:
    """Per line, its code tokens (comments and strings dropped, but for a string naming the kind or an answer's
    source: `meta.get("multi_label")`, `getattr(pred, "source")`); and its string literals."""
    lines: dict[int, list[str]] = {}
    strings = []
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
        if tok.type == tokenize.STRING:
            strings.append((tok.start[0], tok.string))
            if tok.string.strip("\"'") in KIND_WORDS:
                lines.setdefault(tok.start[0], []).append(tok.string)
        elif tok.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            lines.setdefault(tok.start[0], []).append(tok.string)
    return {n: " ".join(t) for n, t in lines.items()}, strings


def kind_tests(path: Path) -> list[str]:
    lines, strings = _code(path)
    return ([f"{n}: {line}" for n, line in sorted(lines.items()) if KIND_TEST.search(line)]
            + [f"{n}: {s}" for n, s in strings if PROBLEM_TYPES.match(s)])


def app_modules() -> list[Path]:
    return sorted((ROOT / "app").rglob("*.py"))  # the subpackages too (issue 46 regrouped app/)


def test_no_module_in_app_tests_the_kind():
    found = {}
    for path in app_modules():
        name = path.relative_to(ROOT).as_posix()
        hits = kind_tests(path)
        if len(hits) != KNOWN.get(name, 0):
            found[name] = hits
    assert not found, f"kind tests in app/ (KNOWN allows {KNOWN}): {found}"


def test_the_pattern_sees_a_kind_branch():
    for line in ("if session.multi_label:", "x = a if multi else b", "sep = clf.label_sep if clf.multi_label else None",
                 'getattr(clf, "multi_label", False)', 'getattr(pred, "source", None)', "if label_sep is None:"):
        assert KIND_TEST.search(line), line
    assert not KIND_TEST.search("session = start_session(store, queue, labels, n, clf.space)")
    assert not KIND_TEST.search("return space.pick(label_scores, multi_label_scores)(clf, df, space)")


def test_the_label_spaces_fields_are_named_in_the_formats_modules_only():
    outside = {}
    for path in app_modules():
        name = path.relative_to(ROOT).as_posix()
        named = [n for n, s in _code(path)[1] if s.strip("\"'") in ("multi_label", "label_sep")]
        if named and name not in FORMATS:
            outside[name] = named
    assert not outside, f"the kind's JSON fields outside their formats' modules: {outside}"


def test_the_fields_read_back_as_the_space_they_were_written_from():
    sets = LabelSpace.of(["a", "b"], multi_label=True, sep="|")
    assert space_fields(SINGLE) == {} and space_fields(sets) == {"multi_label": True, "label_sep": "|"}
    assert space_from(space_fields(sets), ["a", "b"]) == sets and space_from({}) == SINGLE
    assert space_from({"label_sep": ";"}).sep == ";"  # a spec.json written before it named the kind
    assert space_from({"multi_label": True}).sep == ";"  # an audit item: the default separator


def test_the_kind_is_picked_once_and_answers_for_its_cells():
    one, sets = kind_of(SINGLE), kind_of(LabelSpace.of(multi_label=True, sep="|"))
    assert type(one) is OneLabel and type(sets) is LabelSets
    assert one.names("a|b") == ["a|b"] and sets.names("a|b") == ["a", "b"] and sets.names("") == []
    assert one.decision("x", ["a"]) == ("x", None, ["x"])
    assert sets.decision(["b", "a", "z"], ["a", "b"]) == ("a|b", ["a", "b"], ["z"])  # the session's label order
    assert sets.decision("b", ["a", "b"]) == ("b", ["b"], [])  # one name: that one alone
    cells = pd.Series(["a|b", "", "b"])
    assert sets.counts(cells).to_dict() == {"b": 2, "a": 1} and one.counts(cells).to_dict() == {"a|b": 1, "": 1, "b": 1}
    assert sets.labeled(cells).all() and one.labeled(pd.Series(["a", None])).tolist() == [True, False]
    assert "one class only" in one.check_counts(pd.Series({"a": 3}), 3) and sets.check_counts(pd.Series({"a": 3}), 3) is None
    assert "all 'none of these'" in sets.check_counts(pd.Series(dtype=int), 3)


def test_a_session_carries_its_label_space(tmp_path):
    store = SessionStore(tmp_path / "label")
    sets = LabelSpace.of(["a", "b"], multi_label=True, sep="|")
    s = store.create_blind("audit", ["x", "y"], ["a", "b"], sets)
    reopened = SessionStore(tmp_path / "label").get(s.id)
    assert reopened.space.sep == "|" and reopened.multi_label and reopened.kind.names("a|b") == ["a", "b"]
    assert reopened.decide(reopened.current(), ["b", "a"]) and reopened.stack[-1]["label"] == "a|b"
    with pytest.raises(SessionError, match="contains the separator"):
        reopened.add_label("c|d")
    single = store.create_blind("audit", ["x"], ["a", "b"])
    assert single.space == SINGLE and not single.multi_label and single.add_label("c|d") == "c|d"


def test_a_team_dataset_and_a_records_kind_are_the_kind_objects():
    from types import SimpleNamespace

    one, sets = kind_of(SINGLE), kind_of(dataset_space(SimpleNamespace(labels=["a", "b"], multi_label=True)))
    assert sets.space.sep == ";" and sets.space.labels == ("a", "b")  # a dataset's CSV cell joins by ";"
    records = [{"multi_label": True, "label": ["a"]}, {"multi_label": False, "label": "a"}]
    assert one.own(records, lambda r: r["multi_label"]) == records[1:]
    assert sets.own(records, lambda r: r["multi_label"]) == records[:1]
    assert one.answer("a") == {"label": "a"} and sets.answer("a") == {"labels": ["a"]}
    assert sets.answer(("b", "a")) == {"labels": ["b", "a"]} and (one.answer_field, sets.answer_field) == ("label", "labels")
    assert one.store_choice("b") == "b" and sets.store_choice(["b", "a"]) == ["a", "b"]
    assert sets.store_choice("ab") == ["ab"]  # the Team tab's dropdown: one name, not its letters
    assert one.keyed_labels(["a", "b"]) == ["a", "b"] and one.ticked_labels(["a", "b"]) == []
    assert sets.keyed_labels(["a", "b"]) == [] and sets.ticked_labels(["a", "b"]) == ["a", "b"]
    assert sets.store_cell(["a", "b"]) == "a;b" and one.store_cell("a") == "a"
    session = SimpleNamespace(suggestion={0: "a;b"}, suggested_set=lambda row: ["a", "b"])
    assert one.accepted(session, 0) == "a;b" and sets.accepted(session, 0) == ["a", "b"]
    served = LabelSpace.of(["x"], multi_label=True)
    assert asked_space(None, served) == served and asked_space(False, served) == SINGLE
    assert asked_space(True, SINGLE).multi_label
