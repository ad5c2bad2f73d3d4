"""Label sessions: queue order, decisions on disk at once, undo, resume, the kfold CSV format."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from app.labeling.sessions import LabelSession, SessionError, SessionStore, valid_session_id
from serving.engine import Prediction

LABELS = ["dream", "error", "memo"]
TEXTS = ["a dream", 'an "error", with a comma', "memo\non two lines", "꿈 메모", "plain"]
SCORES = [0.9, 0.4, 0.7, 0.35, 0.8]


def preds():
    return [Prediction(label=LABELS[i % 3], score=s, probabilities={lab: s if lab == LABELS[i % 3] else (1 - s) / 2
                                                                    for lab in LABELS})
            for i, s in enumerate(SCORES)]


@pytest.fixture
def store(tmp_path):
    return SessionStore(tmp_path / "label")


def read_labeled(session) -> pd.DataFrame:
    return pd.read_csv(session.labeled_path, dtype=str, keep_default_na=False, encoding="utf-8")


def test_least_confident_first_and_other_orders(store):
    s = store.create("notes.csv", TEXTS, preds(), LABELS)
    assert s.current() == 3  # 0.35
    s.set_order("most confident first")
    assert s.current() == 0
    s.set_order("file order")
    assert s.current() == 0
    s.set_order("random")
    first_random = s.current()
    assert store.get(s.id) is s
    assert LabelSession(s.folder).current() == first_random  # the same shuffle after a resume
    with pytest.raises(SessionError):
        s.set_order("alphabetical")


def test_decisions_reach_disk_at_once_in_kfold_format(store):
    s = store.create("notes.csv", TEXTS, preds(), LABELS)
    assert s.decide(3, "memo")  # accept the suggestion
    assert read_labeled(s).to_dict("records") == [{"text": "꿈 메모", "label": "memo"}]
    assert s.decide(1, "dream")  # correct it
    assert s.decide(2, "memo")
    df = read_labeled(s)
    assert list(df.columns) == ["text", "label"]
    assert df.text.tolist() == ["꿈 메모", 'an "error", with a comma', "memo\non two lines"]
    assert s.labeled_path.read_bytes().startswith(b"text,label\n")  # no BOM, plain UTF-8
    assert s.progress() == {"total": 5, "labeled": 3, "skipped": 0, "todo": 2}


def test_stale_clicks_are_ignored(store):
    s = store.create("notes.csv", TEXTS, preds(), LABELS)
    assert s.decide(3, "memo")
    assert not s.decide(3, "dream")  # a double click on a row already done
    assert not s.decide(0, "dream")  # not the row on screen
    with pytest.raises(SessionError):
        s.decide(s.current(), "no-such-label")
    assert len(read_labeled(s)) == 1


def test_skip_goes_to_the_end_and_undo_restores(store):
    s = store.create("notes.csv", TEXTS, preds(), LABELS)
    assert s.skip(3)
    assert s.current() == 1
    assert s.decide(1, "error")
    assert s.undo() == 1
    assert s.current() == 1 and len(read_labeled(s)) == 0
    assert s.undo() == 3  # the skip
    assert s.current() == 3
    assert s.undo() is None
    for row in (3, 1, 2, 4, 0):
        assert s.current() == row
        s.skip(row)
    assert s.current() == 3  # skipped rows come back once the rest are done
    assert not s.skip(3)


def test_resume_rebuilds_state_and_repairs_a_torn_journal(store):
    s = store.create("notes.csv", TEXTS, preds(), LABELS)
    s.decide(3, "memo")
    s.add_label("todo")
    s.decide(1, "todo")
    s.skip(2)
    s.decide(4, "dream")
    s.undo()
    with open(s.folder / "journal.jsonl", "a", encoding="utf-8") as f:
        f.write('{"op": "label", "row": 0, "lab')  # killed mid-write
    s.labeled_path.write_text("text,label\n", encoding="utf-8")  # killed between the two writes
    again = SessionStore(store.root).get(s.id)
    assert again is not s
    assert again.labels == [*LABELS, "todo"]
    assert again.progress() == {"total": 5, "labeled": 2, "skipped": 1, "todo": 2}
    assert read_labeled(again).to_dict("records") == [{"text": "꿈 메모", "label": "memo"},
                                                      {"text": TEXTS[1], "label": "todo"}]
    assert again.current() == 4


def test_new_labels_are_checked(store):
    s = store.create("notes.csv", TEXTS, preds(), LABELS)
    assert s.add_label("  needs   review ") == "needs review"
    for bad in ("", "   ", "dream", "x" * 61, '=HYPERLINK("http://x","y")', "+1+cmd", "-cmd", "@SUM(A1)",
                "a\x00b", "\u202eevil", "(none)"):
        with pytest.raises(SessionError):
            s.add_label(bad)
    assert s.add_label("a=b") == "a=b"
    assert s.add_label("-1") == "-1"  # a number is no formula (app/ui/uploads.py leaves numbers as they are too)
    assert s.add_label("[x]") == "[x]"  # a single-label cell is its text


def test_session_ids_cannot_name_other_paths(store, tmp_path):
    s = store.create("notes.csv", TEXTS, preds(), LABELS)
    assert valid_session_id(s.id)
    for bad in ("../../etc", "/etc/passwd", "", None, s.id + "/..", s.id.upper(), s.id + "\n"):
        assert store.get(bad) is None
    listed = store.list()
    assert [m["id"] for m in listed] == [s.id] and listed[0]["source"] == "notes.csv"
    assert json.loads((s.folder / "meta.json").read_text())["rows"] == 5


def test_a_torn_journal_line_does_not_swallow_the_next_decision(store):
    """A crash that cut the last line: the next decision starts on a fresh line and survives a restart."""
    s = store.create("notes.csv", TEXTS, preds(), LABELS)
    s.decide(s.current(), "memo")
    journal = s.folder / "journal.jsonl"
    journal.write_bytes(journal.read_bytes()[:-7])  # killed mid-write
    again = SessionStore(store.root).get(s.id)
    row = again.current()
    again.decide(row, "dream")
    third = SessionStore(store.root).get(s.id)
    assert third.progress()["labeled"] == 1 and read_labeled(third).to_dict("records") == [
        {"text": TEXTS[row], "label": "dream"}]


def test_a_carriage_return_in_a_text_survives_the_csv(store):
    texts = ["line one\rline two", "crlf\r\nkept", "plain"]
    s = store.create("cr.csv", texts, preds()[:3], LABELS)
    for _ in texts:
        row = s.current()
        s.decide(row, LABELS[0])
    assert sorted(read_labeled(s)["text"]) == sorted(texts)
