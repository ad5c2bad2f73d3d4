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

from app.label_kinds import SINGLE, LabelSets, OneLabel, kind_of, space_fields, space_from
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
# Left, each with its reason; the list only shrinks (an entry no longer found fails the test).
KNOWN = {
    # a filter by the kind each row records (the label store's rows, the review queue's answers), not a branch
    "app/versions/trainset.py": 1, "app/labeling/review_queue.py": 1,
    # whether label_issues.csv has its label_sep column (files written before it had none), in its one reader
    "app/labeling/review.py": 2,
    # a team dataset's own kind (a label store column) and the API's default for it: the Team tab's files,
    # changed by another helper this session (team50)
    "app/team/routes.py": 4, "app/ui/team.py": 1,
    # checkboxes instead of label buttons, the key help, Accept: the Label tab, which also shows a team dataset's
    # queue (app/ui/team_label.py, another helper's this session) through sessions that carry no label space
    "app/ui/label_view.py": 3, "app/ui/page.py": 1,
    # the Label tab over a team dataset's queue (team50, merged after this work): its session is the label
    # store's dataset, which records its kind as a column and carries no label space yet
    "app/ui/team_label.py": 2,
}
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
    return sorted((ROOT / "app").glob("*.py"))


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
