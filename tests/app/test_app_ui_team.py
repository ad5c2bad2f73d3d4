"""The Team tab's content: progress per annotator, agreement, the disagreements a reviewer settles."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest

from app.config import Config
from app.http.gate import SESSION_COOKIE
from app.ui.team import summary, team_tab
from labelstore import open_store, queue, review, users
from textdata.labels import LabelSpace


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
    from app.http.gate import UiSessions
    from app.team.auth import Identities
    from app.ui.team import reviewer_of

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


def _tab_fn(blocks, name: str):
    """The function a Team-tab event runs (Gradio keeps them by index)."""
    (fn,) = [f.fn for f in blocks.fns.values() if getattr(f.fn, "__name__", "") == name]
    return fn


def test_a_reviewer_creates_a_dataset_from_an_uploaded_file_and_an_annotator_cannot(tmp_path):
    """The Team tab makes a dataset from an upload, as POST /v1/datasets does (issue 46: "created from an upload
    (UI) or the API"): the served model's answers as suggestions, overlap k, empty rows skipped and said, repeated
    texts kept once; an annotator is refused, and a file not uploaded through the page is refused."""
    from gradio.utils import get_upload_folder

    from app.http.gate import UiSessions
    from app.team.auth import Identities

    engine = open_store(f"sqlite:///{tmp_path / 'app.db'}")
    tokens = {name: users.add_user(engine, name, role) for name, role in (("ann", "annotator"), ("rev", "reviewer"))}
    ids = {name: users.by_token(engine, t)[0] for name, t in tokens.items()}

    class Clf:  # the served model: its labels, its kind and one answer per text
        labels = ("a", "b")
        space = LabelSpace.of(("a", "b"))

        def encode(self, texts):
            return texts

        def predict_encoded(self, texts):
            return [SimpleNamespace(label="b" if "b" in t else "a", score=0.9 if "b" in t else 0.6) for t in texts]

    state = SimpleNamespace(store=engine, identities=Identities(engine), sessions=UiSessions(),
                            served=SimpleNamespace(clf=Clf(), version="v7"))
    cookie = {name: state.sessions.issue(uid) for name, uid in ids.items()}
    with gr.Blocks() as blocks:
        team_tab(Config(model="m"), state)
    create = _tab_fn(blocks, "create")
    folder = Path(get_upload_folder()) / f"team-test-{tmp_path.name}"
    folder.mkdir(parents=True, exist_ok=True)
    upload = folder / "notes.csv"
    upload.write_text("text,other\nbig b day,1\nsmall day,2\n,3\nbig b day,4\n", encoding="utf-8")

    def request(name):
        return SimpleNamespace(cookies={SESSION_COOKIE: cookie[name]})

    with pytest.raises(gr.Error, match="reviewers and admins"):
        create(str(upload), "text", "", 2, request("ann"))
    said, menu = create(str(upload), "text", "", 2, request("rev"))
    ds = queue.get_dataset(engine, menu["value"])
    assert (ds.name, ds.overlap, ds.labels, ds.multi_label) == ("notes", 2, ["a", "b"], False)
    assert "2 texts" in said and "1 empty rows skipped" in said and "1 repeated texts kept once" in said
    assert menu["choices"] == [(f"{ds.id}: notes (0/2)", ds.id)]
    first = queue.next_record(engine, ds, ids["ann"])  # least confident first, the model's answer as suggestion
    assert first["text"] == "small day" and first["suggestion"] == {"label": "a", "score": 0.6}
    outside = tmp_path / "secret.csv"
    outside.write_text("text\nhello\n", encoding="utf-8")
    with pytest.raises(gr.Error, match="Only files uploaded"):
        create(str(outside), "text", "x", 1, request("rev"))
    engine.dispose()


def test_adjudicating_a_record_id_beyond_64_bits_is_refused_in_words(tmp_path):
    """Issue 63 L9 on the Team tab: the record id box took 10^20, which failed in SQLite's integer conversion."""
    from app.http.gate import UiSessions
    from app.team.auth import Identities

    engine = open_store(f"sqlite:///{tmp_path / 'app.db'}")
    rev = users.by_token(engine, users.add_user(engine, "rev", "reviewer"))[0]
    ds = queue.create_dataset(engine, "d", ["a", "b"], False, 1, [{"text": "t"}], None)[0]
    state = SimpleNamespace(store=engine, identities=Identities(engine), sessions=UiSessions())
    with gr.Blocks() as blocks:
        team_tab(Config(model="m"), state)
    settle = _tab_fn(blocks, "settle")
    request = SimpleNamespace(cookies={SESSION_COOKIE: state.sessions.issue(rev)})
    for big in (10**20, 2**63, 0):
        with pytest.raises(gr.Error, match="record_id must be 1 to"):
            settle(ds, big, "a", request)
    engine.dispose()
