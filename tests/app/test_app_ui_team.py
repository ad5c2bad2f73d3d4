"""The Team tab's content: progress per annotator, agreement, the disagreements a reviewer settles."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from app.config import Config
from app.ui_team import summary, team_tab
from labelstore import open_store, queue, review, users


def test_progress_agreement_and_disagreements_to_settle(tmp_path):
    engine = open_store(f"sqlite:///{tmp_path / 'app.db'}")
    ids = {name: users.by_token(engine, users.add_user(engine, name, "annotator"))[0] for name in ("ann", "bob")}
    rows = [{"text": f"t{i}", "priority": i} for i in range(3)]
    ds = queue.get_dataset(engine, queue.create_dataset(engine, "news", ["a", "b"], False, 2, rows, None)[0])
    for name, votes in (("ann", "aab"), ("bob", "abb")):
        for vote in votes:
            rec = queue.next_record(engine, ds, ids[name])
            queue.submit(engine, ds, ids[name], rec["record_id"], vote, None)
    text = summary(engine, ds)
    assert "3 of 3 texts" in text and "| ann | 3 |" in text and "| bob | 3 |" in text
    split = review.disagreements(engine, ds)
    assert [r["text"] for r in split] == ["t1"] and split[0]["answers"] == {"ann": "a", "bob": "b"}
    review.adjudicate(engine, ds, ids["ann"], split[0]["record_id"], "b")
    assert review.disagreements(engine, ds) == []
    with gr.Blocks():  # the tab builds on a store
        team_tab(Config(model="m"), SimpleNamespace(store=engine))
    engine.dispose()
