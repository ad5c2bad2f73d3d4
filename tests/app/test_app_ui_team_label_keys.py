"""The Label tab on a team dataset without a browser: the key help names only keys that do something (no
Enter where there is no suggestion), S skips (the text comes back last, marked) and U takes a skip back, the
text's title is the person's place in the dataset, and the tab's download is the dataset's export for a
reviewer and one's own answers for an annotator (blind)."""

from __future__ import annotations

import csv
from pathlib import Path
from types import SimpleNamespace

from app.config import Config
from app.labeling.sessions import SessionStore
from app.ui.handouts import Exports
from app.ui.label_view import _render_label
from app.ui.team_label import TeamSessions, dataset_sid
from labelstore import open_store, queue, users


def test_keys_skip_and_the_download_of_a_dataset_with_labels_of_its_own(tmp_path):
    engine = open_store(f"sqlite:///{tmp_path / 'app.db'}")
    who = {}
    for name, role in (("ann", "annotator"), ("rev", "reviewer")):
        uid = users.by_token(engine, users.add_user(engine, name, role))[0]
        who[name] = (uid, name, role)
    rows = [{"text": f"t{i}", "priority": i} for i in range(3)]  # no suggestion: labels of its own
    ds = queue.create_dataset(engine, "own labels", ["x", "y"], False, 2, rows, None)[0]
    team = TeamSessions(Config(model="m"), SimpleNamespace(store=engine))
    store, exports = SessionStore(tmp_path / "label"), Exports()

    def tab(name: str):
        team.user = lambda: who[name]  # the person at the page (the cookie's user in the app)
        session = team.get(dataset_sid(ds))
        out = _render_label(store, ["x", "y"], session)
        team.at.update(text=2, hint=3, accept=6, sessions=len(out) - 5, keys=len(out) - 1)  # _render_label's order
        return session, team.view(out, session)

    session, out = tab("ann")
    assert out[2]["value"] == "t0" and out[6]["visible"] == "hidden"  # no suggestion: no Accept
    assert "Enter" not in out[-1] and "**S** skip" in out[-1] and "**1–9**" in out[-1]
    assert "no model suggestion" in out[3]
    # the title says where the person is, not the store's record id ("Row 8" read as a row of some file)
    assert out[2]["label"] == "Text 1 of 3 in own labels"
    assert session.skip(out[1])  # t0 goes back to the queue: t1 now, t0 after the rest
    session, out = tab("ann")
    assert out[2]["value"] == "t1" and "1</b> skipped" in out[5]
    assert session.undo() is not None  # U takes the skip back: t0 again, no longer skipped
    session, out = tab("ann")
    assert out[2]["value"] == "t0" and "0</b> skipped" in out[5] and "skipped earlier" not in out[2]["label"]
    assert session.skip(out[1])
    session, out = tab("ann")
    assert out[2]["value"] == "t1"
    assert session.decide(out[1], "x")
    session, out = tab("ann")
    assert session.decide(out[1], "y")  # t2
    session, out = tab("ann")
    assert out[2]["value"] == "t0" and out[2]["label"] == "Text 3 of 3 in own labels (skipped earlier)"
    assert not session.skip(out[1])  # nothing else left: it comes straight back (the tab says so)
    session.decide(session.current(), "x")
    rev, _ = tab("rev")
    rev.decide(rev.current(), "y")

    def download(name: str) -> list[dict]:
        team.user = lambda: who[name]
        path = team.export(dataset_sid(ds), exports)
        assert path.endswith("-answers.csv") and Path(path).read_bytes()[:3] == b"\xef\xbb\xbf"  # one row an answer; BOM
        with open(path, encoding="utf-8-sig") as f:
            return list(csv.DictReader(f))
    mine = download("ann")
    assert [(r["text"], r["annotator"], r["label"]) for r in mine] == [("t0", "ann", "x"), ("t1", "ann", "x"),
                                                                        ("t2", "ann", "y")]
    assert list(mine[0]) == ["record_id", "text", "annotator", "label", "created_at"]
    assert sorted(r["annotator"] for r in download("rev")) == ["ann", "ann", "ann", "rev"]  # a reviewer: all
    engine.dispose()


def _annotator(tmp_path, multi_label: bool):
    """(the store, ann's TeamSession) of a 3-text dataset with labels of its own, overlap 1."""
    engine = open_store(f"sqlite:///{tmp_path / 'app.db'}")
    uid = users.by_token(engine, users.add_user(engine, "ann", "annotator"))[0]
    rows = [{"text": f"t{i}", "priority": i} for i in range(3)]
    ds = queue.create_dataset(engine, "d", ["x", "y"], multi_label, 1, rows, None)[0]
    team = TeamSessions(Config(model="m"), SimpleNamespace(store=engine))
    team.user = lambda: (uid, "ann", "annotator")
    return engine, team.get(dataset_sid(ds))


def test_an_answer_for_the_text_before_the_one_on_screen_saves_nothing(tmp_path):
    """The record id the page sends with a key (label-row) against the one the session shows: the second of two
    fast keys carries the text just answered, and saves nothing (issue 59, D2)."""
    from app.ui.label_view import STALE, shown_row, stale_answer

    engine, session = _annotator(tmp_path, multi_label=False)
    first = session.current()
    assert stale_answer(session, first) is None and session.decide(first, "x")
    assert stale_answer(session, first) == STALE  # the second key, pressed on the text just answered
    assert stale_answer(session, session.current()) is None and stale_answer(session, None) is None
    assert [shown_row(v) for v in (3, 3.0, "4", None, "x", True, float("inf"))] == [3, 3, 4, None, None, None, None]
    engine.dispose()


def test_enter_with_nothing_ticked_saves_nothing_where_nothing_was_suggested(tmp_path):
    """A multi-label dataset with labels of its own: nothing is ticked, and Enter (Save) with nothing ticked
    saved "none of these" unasked (issue 59, D4). Now it saves nothing and says so; 0 (None) saves none."""
    from app.ui import multilabel

    engine, session = _annotator(tmp_path, multi_label=True)
    first = session.current()
    assert multilabel.save(session, first, []) == multilabel.NOTHING_TICKED
    assert session.current() == first and session.progress()["labeled"] == 0  # nothing saved
    assert multilabel.none_of_these(session, first) is None and session.progress()["labeled"] == 1
    assert multilabel.save(session, session.current(), ["y"]) is None and session.progress()["labeled"] == 2
    engine.dispose()
