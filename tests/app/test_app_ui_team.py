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
    assert first["text"] == "small day"  # the model has no calibration: its suggestion says so (issue 59)
    assert first["suggestion"] == {"label": "a", "score": 0.6, "no_threshold": "not calibrated"}
    outside = tmp_path / "secret.csv"
    outside.write_text("text\nhello\n", encoding="utf-8")
    with pytest.raises(gr.Error, match="Only files uploaded"):
        create(str(outside), "text", "x", 1, request("rev"))
    engine.dispose()


def _team(tmp_path, names=("ann", "bob", "cy")):
    from app.http.gate import UiSessions
    from app.team.auth import Identities

    engine = open_store(f"sqlite:///{tmp_path / 'app.db'}")
    tokens = {name: users.add_user(engine, name, "annotator") for name in names}
    tokens["rev"] = users.add_user(engine, "rev", "reviewer")
    ids = {name: users.by_token(engine, t)[0] for name, t in tokens.items()}
    state = SimpleNamespace(store=engine, identities=Identities(engine), sessions=UiSessions())
    with gr.Blocks() as blocks:
        team_tab(Config(model="m"), state)
    rev = SimpleNamespace(cookies={SESSION_COOKIE: state.sessions.issue(ids["rev"])})
    ann = SimpleNamespace(cookies={SESSION_COOKIE: state.sessions.issue(ids["ann"])})
    return engine, ids, blocks, rev, ann


def _answer(engine, ds, uid, text, label):
    rec = queue.next_record(engine, ds, uid)
    while rec["text"] != text:  # the queue's order is the dataset's; give back what is not wanted here
        queue.skip(engine, ds, uid, rec["record_id"])
        rec = queue.next_record(engine, ds, uid)
    queue.submit(engine, ds, uid, rec["record_id"], label, None)
    return rec["record_id"]


def test_the_final_labels_export_is_what_the_next_retrain_trains_on(tmp_path):
    """One row a text: the adjudicated label, else the majority; a tie left out (and counted) as the training
    table leaves it out; how it was decided and the share of answers agreeing. CSV with a UTF-8 BOM (Korean
    opens in a spreadsheet on Windows) and no formula cell, JSONL as stored; both equal, text for text, the
    training table's rows of this dataset (app/versions/trainset.py build, as a retrain reads it)."""
    import csv
    import json

    from app.versions.trainset import build

    engine, ids, blocks, rev, ann = _team(tmp_path)
    texts = ["모두 같은 답 메모", "둘 대 하나 일기", "동점 오류", "동점 판정 회의", "=1+1 약속"]
    rows = [{"text": t, "priority": i} for i, t in enumerate(texts)]
    ds = queue.get_dataset(engine, queue.create_dataset(engine, "팀", ["a", "b"], False, 3, rows, None)[0])
    votes = {texts[0]: "aaa", texts[1]: "abb", texts[2]: "ab", texts[3]: "ab", texts[4]: "bbb"}
    rid = {}
    for text, vs in votes.items():
        for name, v in zip(("ann", "bob", "cy"), vs):
            rid[text] = _answer(engine, ds, ids[name], text, v)
    review.adjudicate(engine, ds, ids["rev"], rid[texts[3]], "b")
    final = {"csv": _tab_fn(blocks, "final_csv"), "jsonl": _tab_fn(blocks, "final_jsonl")}
    path, said = final["jsonl"](ds.id, rev)
    got = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]
    assert "4 texts with their final label" in said and "1 texts left out" in said, said
    by_text = {r["text"]: r for r in got}
    assert sorted(by_text) == sorted(set(texts) - {texts[2]})  # the tie nobody settled has no final label
    assert (by_text[texts[0]]["label"], by_text[texts[0]]["decided"], by_text[texts[0]]["agreement"]) == ("a", "unanimous", 1.0)
    assert (by_text[texts[1]]["label"], by_text[texts[1]]["decided"], by_text[texts[1]]["answers"],
            by_text[texts[1]]["agreement"]) == ("b", "majority", 3, 0.6667)
    assert (by_text[texts[3]]["label"], by_text[texts[3]]["decided"]) == ("b", "adjudicated")
    table = build(tmp_path / "label", None, 0.0, store=engine).train  # share 0: every row trains
    assert sorted(zip(table["text"], table["label"])) == sorted((r["text"], r["label"]) for r in got)
    path, _ = final["csv"](ds.id, rev)
    raw = Path(path).read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf") and "모두".encode() in raw
    cells = list(csv.DictReader(raw.decode("utf-8-sig").splitlines()))
    assert list(cells[0]) == ["record_id", "text", "label", "decided", "answers", "agreement"]
    assert {r["text"]: r["label"] for r in cells} == {("'" if t.startswith("=") else "") + t: r["label"]
                                                      for t, r in by_text.items()}
    assert _csv_rows(cells, "") == _jsonl_rows(got, "")  # row for row, in the same order: every field
    with pytest.raises(gr.Error, match="reviewers and admins"):  # blind: an annotator exports nothing
        final["csv"](ds.id, ann)
    engine.dispose()


def _csv_rows(cells: list[dict], sep: str) -> list[tuple]:
    """The final-labels CSV's rows as values: a label set's cell split by the separator."""
    return [(int(c["record_id"]), c["text"], c["label"].split(sep) if sep and c["label"] else
             [] if sep else c["label"], c["decided"], int(c["answers"]), float(c["agreement"])) for c in cells]


def _jsonl_rows(got: list[dict], sep: str) -> list[tuple]:
    """The JSONL's, with a formula-like text quoted as the CSV quotes it (no cell runs in a spreadsheet)."""
    return [(r["record_id"], ("'" if r["text"][:1] in "=+-@" else "") + r["text"], r["label"], r["decided"],
             r["answers"], r["agreement"]) for r in got]


def test_the_final_labels_csv_and_jsonl_are_the_same_rows_for_a_label_set(tmp_path):
    """D7 asks for both files: on a multi-label dataset the JSONL holds each text's final set as a list (the
    empty list: "none of these"), the CSV the same set in one cell, row for row; what a retrain takes too."""
    import csv
    import json

    from app.label_kinds import dataset_space
    from app.versions.trainset import build

    engine, ids, blocks, rev, _ = _team(tmp_path)
    texts = ["둘 다 맞는 글", "아무것도 아님", "@sum 하나만", "반반"]
    rows = [{"text": t, "priority": i} for i, t in enumerate(texts)]
    ds = queue.get_dataset(engine, queue.create_dataset(engine, "셋", ["x", "y", "z"], True, 2, rows, None)[0])
    votes = {texts[0]: (["x", "y"], ["y", "x"]), texts[1]: ([], []), texts[2]: (["z"], ["z", "x"]),
             texts[3]: (["x"], ["y"])}
    for text, (first, second) in votes.items():
        _answer(engine, ds, ids["ann"], text, first)
        _answer(engine, ds, ids["bob"], text, second)
    final = {"csv": _tab_fn(blocks, "final_csv"), "jsonl": _tab_fn(blocks, "final_jsonl")}
    got = [json.loads(line) for line in Path(final["jsonl"](ds.id, rev)[0]).read_text(encoding="utf-8").splitlines()]
    raw = Path(final["csv"](ds.id, rev)[0]).read_bytes()
    cells = list(csv.DictReader(raw.decode("utf-8-sig").splitlines()))
    assert raw.startswith(b"\xef\xbb\xbf") and len(got) == len(cells) >= 3
    assert {r["text"]: r["label"] for r in got}[texts[1]] == [] and \
        {r["text"]: r["label"] for r in got}[texts[0]] == ["x", "y"]
    assert _csv_rows(cells, dataset_space(ds).sep) == _jsonl_rows(got, dataset_space(ds).sep)
    table = build(tmp_path / "label", None, 0.0, dataset_space(ds), store=engine).train  # a multi-label model's
    assert sorted(zip(table["text"], table["label"])) == sorted((r["text"], dataset_space(ds).sep.join(r["label"]))
                                                                for r in got)
    engine.dispose()


def test_a_reviewer_sees_the_answers_picks_a_row_and_is_told_what_is_settled(tmp_path):
    """The disagreements show each answer and who gave it before the text; a click on a row fills its record id
    (the first disagreement is already filled in); adjudicating says how many are settled and how many are left."""
    engine, ids, blocks, rev, _ = _team(tmp_path, ("ann", "bob"))
    rows = [{"text": f"t{i}", "priority": i} for i in range(3)]
    ds = queue.get_dataset(engine, queue.create_dataset(engine, "news", ["a", "b"], False, 2, rows, None)[0])
    for name, votes in (("ann", "aaa"), ("bob", "bab")):
        for text, vote in zip(("t0", "t1", "t2"), votes):
            _answer(engine, ds, ids[name], text, vote)
    show, settle, pick = (_tab_fn(blocks, n) for n in ("show", "settle", "pick"))
    _summary_md, table, _, first, said, *keys = show(ds.id, rev)
    assert [r[1:] for r in table] == [["ann: a · bob: b", "t0"], ["ann: a · bob: b", "t2"]] and said == ""
    assert first == table[0][0] and [k.get("value") for k in keys[:3]] == ["[1] a", "[2] b", None]  # keys 1, 2
    clicked = pick(gr.SelectData(None, {"index": [1, 2], "value": "t2", "row_value": table[1]}))
    assert clicked == table[1][0]
    _, table2, _, next_id, said, *_ = settle(ds.id, clicked, "b", rev)
    assert f"Record {clicked} settled as **b**" in said and "1 texts adjudicated" in said
    assert "1 disagreements left" in said and [r[2] for r in table2] == ["t0"] and next_id == table[0][0]
    key_1 = next(f.fn for f in blocks.fns.values() if getattr(f.fn, "__name__", "") == "settle_key")  # the first label's (key 1)
    _, table3, _, next_id, said, *_ = key_1(ds.id, next_id, rev)
    assert f"Record {table[0][0]} settled as **a**" in said and "0 disagreements left" in said and table3 == []
    assert next_id is None and review.adjudicated(engine, ds) == {table[0][0]: "a", clicked: "b"}
    engine.dispose()


def test_an_admin_adds_people_gives_a_new_token_and_revokes_in_the_team_tab(tmp_path, caplog):
    """People were added only on the command line (issue 59): the Team tab's People panel adds a person (their
    token shown once, and it signs in), gives a new token (the old one stops working) and revokes; each change
    a log line naming the admin; the rule is admin only (a reviewer is refused by app/ui/guard.py)."""
    import logging

    from app.team import roles

    caplog.set_level(logging.INFO, logger="app")
    engine, _ids, blocks, _rev, _ = _team(tmp_path, ("ann",))
    add, rotate, revoke, listed = (_tab_fn(blocks, n) for n in ("add_person", "rotate_token", "revoke_person",
                                                                 "list_people"))
    said, table = add(" dana ", "reviewer")
    token = said.split("`")[1]
    assert users.by_token(engine, token)[1:] == ("dana", "reviewer") and ["dana", "reviewer"] == table[1][:2]
    assert "Shown once" in said and any(getattr(r, "fields", {}).get("event") == "user_added" for r in caplog.records)
    with pytest.raises(gr.Error, match="exists"):
        add("dana", "annotator")
    said, _ = rotate("dana")
    assert users.by_token(engine, token) is None and users.by_token(engine, said.split("`")[1])[1] == "dana"
    _, table = revoke("dana")
    assert [r[3] for r in table if r[0] == "dana"] != ["active"] and users.by_token(engine, said.split("`")[1]) is None
    assert [r[0] for r in listed()] == ["ann", "dana", "rev"]
    for name in ("add_person", "rotate_token", "revoke_person", "list_people"):
        rule = roles.ui_rule("team", name)
        assert rule.allows("admin") and not rule.allows("reviewer") and not rule.open
    engine.dispose()


def test_an_admin_changes_a_role_named_in_the_log_and_the_last_admin_stays_one(tmp_path, caplog):
    """Issue 59: the People panel had add, token, revoke but no role. *Set role* changes it (the person's next
    request has it: the token table is read again), the log line names the admin who did it and both roles, and
    the last active admin cannot be demoted (nobody would be left to add people in the UI), a revoked one aside."""
    import logging

    from gradio.context import LocalContext

    from app.team import roles

    caplog.set_level(logging.INFO, logger="app")
    engine, _ids, blocks, _rev, _ = _team(tmp_path, ("ann",))
    boss_token = users.add_user(engine, "boss", "admin")
    boss = users.by_token(engine, boss_token)[0]
    change, add = _tab_fn(blocks, "change_role"), _tab_fn(blocks, "add_person")
    # the event's request as the gate leaves it for boss's token (app/team/auth.py ui_request_user)
    token = LocalContext.request.set(SimpleNamespace(cookies={}, scope={"state": {"user": (boss, "boss", "admin")}}))
    try:
        said, table = change(" ann ", "reviewer")
        assert users.by_token(engine, users.new_token(engine, "ann"))[2] == "reviewer"
        assert "annotator → reviewer" in said and ["ann", "reviewer"] == table[0][:2]
        line = next(r.fields for r in caplog.records if getattr(r, "fields", {}).get("event") == "user_role")
        assert line == {"event": "user_role", "user": "ann", "by": "boss", "role": "reviewer", "was": "annotator"}
        with pytest.raises(gr.Error, match="last active admin"):
            change("boss", "annotator")
        assert {u["name"]: u["role"] for u in users.list_users(engine)}["boss"] == "admin"
        with pytest.raises(gr.Error, match="no user 'nobody'"):
            change("nobody", "admin")
        with pytest.raises(gr.Error, match="is not one of"):
            change("ann", "owner")
        add("cleo", "admin")
        users.revoke(engine, "cleo")  # a revoked admin signs nobody in: boss is still the last active one
        with pytest.raises(gr.Error, match="last active admin"):
            change("boss", "reviewer")
        change("ann", "admin")  # now there are two: boss may step down, and is told who did it
        said, _ = change("boss", "reviewer")
        assert "admin → reviewer" in said
        assert {u["name"]: u["role"] for u in users.list_users(engine)}["boss"] == "reviewer"
    finally:
        LocalContext.request.reset(token)
    rule = roles.ui_rule("team", "change_role")
    assert rule.allows("admin") and not rule.allows("reviewer") and not rule.open
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


@pytest.mark.parametrize("thresholds", [None, [0.8, 0.8]])
def test_a_team_datasets_suggestion_says_not_sure_or_no_threshold_as_the_label_tab_does(tmp_path, thresholds):
    """Issue 59 (minor): a 12.8% guess got a big `Accept [Enter]` in a team dataset: the stored suggestion kept no
    sign of how sure the model was. It now keeps `confident` (or `no_threshold`), and the annotator's session
    marks the record as the Label tab's view reads it (label_view.unsure_rows, meta "no_threshold")."""
    from app.team.routes import _label_suggestions
    from app.ui.label_view import unsure_rows
    from app.ui.team_label import TeamSession

    clf = SimpleNamespace(calibration=SimpleNamespace(applied=thresholds is not None, thresholds=thresholds))
    preds = [SimpleNamespace(label="a", score=0.128, confident=False), SimpleNamespace(label="b", score=0.95)]
    rows = [{**r, "text": t} for r, t in zip(_label_suggestions(clf, preds), ("unsure one", "sure one"))]
    engine = open_store(f"sqlite:///{tmp_path / 'app.db'}")
    uid = users.by_token(engine, users.add_user(engine, "ann", "annotator"))[0]
    ds_id, _, _ = queue.create_dataset(engine, "d", ["a", "b"], False, 1, rows, uid)
    session = TeamSession(engine, queue.get_dataset(engine, ds_id), (uid, "ann", "annotator"))
    first = session.current()  # least sure first
    assert session.texts[first] == "unsure one"
    if thresholds is None:
        assert session.meta["no_threshold"] == "not calibrated" and not unsure_rows(session)
    else:
        assert first in unsure_rows(session) and "no_threshold" not in session.meta
    engine.dispose()


def _key(blocks, i: int):
    """The i-th label button's function (key i+1): the key_settler closures, in their buttons' order."""
    return [f.fn for f in blocks.fns.values() if getattr(f.fn, "__name__", "") == "settle_key"][i]


def test_a_key_for_a_record_settled_meanwhile_settles_nothing(tmp_path):
    """Two keys fast: the second comes with the record the first just settled (the page had not drawn the next
    yet) and changes nothing; the record on screen after it is the next one, its answers said (issue 59, D2)."""
    from app.ui.team import SETTLED_ALREADY

    engine, ids, blocks, rev, _ = _team(tmp_path, ("ann", "bob"))
    rows = [{"text": f"t{i}", "priority": i} for i in range(2)]
    ds = queue.get_dataset(engine, queue.create_dataset(engine, "news", ["a", "b"], False, 2, rows, None)[0])
    for name, vote in (("ann", "a"), ("bob", "b")):
        for text in ("t0", "t1"):
            _answer(engine, ds, ids[name], text, vote)
    out = _tab_fn(blocks, "show")(ds.id, rev)
    first, current = out[3], out[14]
    assert f"Record {first}" in current and "ann: a</span>" in current and "bob: b</span>" in current
    assert out[15]["visible"] == "hidden" and out[16]["visible"] == "hidden"  # one label: no checkboxes
    out = _key(blocks, 0)(ds.id, first, rev)
    second = out[3]
    assert second != first and f"Record {second}" in out[14]
    out = _key(blocks, 1)(ds.id, first, rev)  # key 2, sent with the record key 1 settled
    assert out[4] == SETTLED_ALREADY.format(record=first, label="a") and out[3] == second
    assert review.adjudicated(engine, ds) == {first: "a"}
    out = _tab_fn(blocks, "settle")(ds.id, first, "b", rev)  # Adjudicate changes a settled label
    assert review.adjudicated(engine, ds) == {first: "b"} and out[3] == second
    engine.dispose()


def test_a_multi_label_disagreement_is_settled_by_ticks_and_nothing_ticked_settles_nothing(tmp_path):
    """A dataset of label sets: checkboxes instead of one-key buttons; Enter (Settle) with nothing ticked is no
    answer and says so (issue 59, D4's twin for reviewers), the ticked set is stored sorted, None stores the empty
    set, and the dropdown's one name is that name alone (it was stored as its letters)."""
    from app.ui.team import NOTHING_TICKED

    engine, ids, blocks, rev, _ = _team(tmp_path, ("ann", "bob"))
    rows = [{"text": f"t{i}", "priority": i} for i in range(3)]
    ds = queue.get_dataset(engine, queue.create_dataset(engine, "tags", ["ab", "cd"], True, 2, rows, None)[0])
    for name, vote in (("ann", ["ab"]), ("bob", ["cd"])):
        for text in ("t0", "t1", "t2"):
            _answer(engine, ds, ids[name], text, vote)
    out = _tab_fn(blocks, "show")(ds.id, rev)
    assert out[15]["visible"] is True and out[15]["choices"] == [("[1] ab", "ab"), ("[2] cd", "cd")]
    assert all(k["visible"] == "hidden" for k in out[5:14])  # no one-key buttons
    first = out[3]
    out = _tab_fn(blocks, "settle_ticked")(ds.id, first, [], rev)
    assert out[4] == NOTHING_TICKED and out[3] == first and review.adjudicated(engine, ds) == {}
    second = _tab_fn(blocks, "settle_ticked")(ds.id, first, ["cd", "ab"], rev)[3]
    third = _tab_fn(blocks, "settle_none")(ds.id, second, rev)[3]
    out = _tab_fn(blocks, "settle_none")(ds.id, second, rev)  # a second 0, for the record just settled
    assert "Nothing settled" in out[4] and out[3] == third
    _tab_fn(blocks, "settle")(ds.id, third, "ab", rev)
    assert review.adjudicated(engine, ds) == {first: ["ab", "cd"], second: [], third: ["ab"]}
    engine.dispose()
