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
        team_tab(Config(model="m"), SimpleNamespace(store=engine, identities=None, sessions=None))
    engine.dispose()


def test_the_team_tab_is_for_reviewers_and_names_who_signed_in(tmp_path):
    """A UI cookie names the user who signed in with their token; the Team tab (everyone's answers) is for
    reviewers and admins only, the key holder included; a revoked user's cookie names nobody."""
    from app.gate import UiSessions
    from app.team_auth import Identities
    from app.ui_team import reviewer_of

    engine = open_store(f"sqlite:///{tmp_path / 'app.db'}")
    tokens = {name: users.add_user(engine, name, role) for name, role in (("ann", "annotator"), ("rev", "reviewer"))}
    ids = {name: users.by_token(engine, t)[0] for name, t in tokens.items()}
    state = SimpleNamespace(store=engine, identities=Identities(engine), sessions=UiSessions())
    cookie = {name: state.sessions.issue(uid) for name, uid in ids.items()}
    assert state.sessions.user_of(cookie["ann"]) == ids["ann"] and state.sessions.valid(cookie["ann"])
    forged = cookie["ann"].replace(f".{ids['ann']}.", f".{ids['rev']}.")
    assert not state.sessions.valid(forged) and state.sessions.user_of(forged) is None  # the user is signed too
    assert reviewer_of(Config(model="m"), state, cookie["ann"]) is None  # blind
    assert reviewer_of(Config(model="m"), state, cookie["rev"]) == (ids["rev"], "rev", "reviewer")
    key_holder = reviewer_of(Config(model="m", api_key="k"), state, state.sessions.issue())
    assert key_holder[1:] == (users.API_KEY, "admin")
    users.revoke(engine, "rev")
    state.identities = Identities(engine)
    assert reviewer_of(Config(model="m"), state, cookie["rev"]) is None
    engine.dispose()
