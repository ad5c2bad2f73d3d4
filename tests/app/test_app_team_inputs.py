"""What the team routes refuse (app/team/inputs.py): every bad input is a 422 naming the field, nothing is kept,
never a 500 (security round 4: M2, M4, L1, L5, L9)."""

from __future__ import annotations

import json

import pytest
from test_app_team import client

from labelstore import open_store, queue, users

BAD_LABELS = {"formula": '=HYPERLINK("http://evil")', "newline": "a\nb", "empty": "", "none": "(none)",
              "bidi": "\u202eevil", "surrogate": "\ud800", "long": "x" * 61}


def post(c, path: str, body: dict, **kw):
    """A JSON body sent as escaped ASCII: a lone surrogate travels as `\\ud800`, as any client sends it."""
    return c.post(path, content=json.dumps(body), headers={"content-type": "application/json", **kw})


def _names(c) -> list[str]:
    return [d["name"] for d in c.get("/v1/datasets").json()["datasets"]]


@pytest.mark.parametrize("label", BAD_LABELS.values(), ids=BAD_LABELS.keys())
def test_a_dataset_label_that_fails_the_label_name_rule_is_refused(store_url, tmp_path, label):
    with client(store_url, tmp_path) as c:
        r = post(c, "/v1/datasets", {"name": "d", "texts": ["x1", "x2"], "labels": ["fine", label]})
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"][:2] == ["body", "labels"]
        assert _names(c) == []  # nothing kept


@pytest.mark.parametrize("label", ["a;b", "a,b", "a|b", "[y]"])
def test_a_multi_label_dataset_refuses_names_that_read_back_as_other_sets(store_url, tmp_path, label):
    with client(store_url, tmp_path) as c:
        body = {"name": "ml", "texts": ["t1"], "multi_label": True, "labels": ["c", label]}
        r = c.post("/v1/datasets", json=body)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "labels", 1], r.text
        assert c.post("/v1/datasets", json={**body, "multi_label": False}).status_code == 201  # one label: a name


def test_the_training_table_reads_dataset_labels_through_the_label_name_rule(tmp_path):
    from app.versions.trainset import TrainingDataError, build

    engine = open_store(f"sqlite:///{tmp_path / 'app.db'}")
    uid = users.builtin(engine, users.LOCAL)[0]
    rows = [{"text": f"text {i}"} for i in range(4)]  # made before the route checked labels
    ds = queue.get_dataset(engine, queue.create_dataset(engine, "old", ["=x", "b"], False, 1, rows, None)[0])
    while (rec := queue.next_record(engine, ds, uid)) is not None:
        queue.submit(engine, ds, uid, rec["record_id"], "=x", None)
    with pytest.raises(TrainingDataError, match=rf"dataset {ds.id} record \d+: label '=x'.*formula"):
        build(tmp_path / "label", None, 0.01, store=engine)
    engine.dispose()


BAD_TEXTS = {"a million characters": ("x" * 1_000_000, "--max-chars"), "NUL only": ("\x00\x00\x00", "empty text"),
             "zero-width only": ("\u200b\u200c\ufeff", "empty text"), "whitespace": (" \t\n", "empty text"),
             "surrogate": ("ok \ud800", "unpaired surrogate")}


@pytest.mark.parametrize("text,says", BAD_TEXTS.values(), ids=BAD_TEXTS.keys())
def test_a_dataset_text_is_held_to_the_text_rules_of_classify(store_url, tmp_path, text, says):
    """Issue 63 L5: a 1,000,000-character text (--max-chars is 5,000) and NUL- or zero-width-only texts were
    kept (the UI then showed them whole), where /v1/classify answers 422."""
    with client(store_url, tmp_path, max_chars=5000) as c:
        r = post(c, "/v1/datasets", {"name": "d", "texts": ["fine", text]})
        assert r.status_code == 422, r.text[:300]
        assert r.json()["detail"][0]["loc"] == ["body", "texts", 1] and says in r.json()["message"]
        classify = post(c, "/v1/classify", {"texts": ["fine", text]})
        assert classify.status_code == 422 and classify.json()["detail"][0]["loc"] == ["body", "texts", 1]
        assert _names(c) == []  # nothing kept


BAD_USER_NAMES = {"newline": "ann\nbob", "quotes": 'x"y', "formula": "=cmd|' /C calc'!A0", "at start": "@ann",
                  "bidi": "ann\u202e", "zero-width": "a\u200bnn", "reserved": "api-key", "long": "a" * 101}


@pytest.mark.parametrize("name", BAD_USER_NAMES.values(), ids=BAD_USER_NAMES.keys())
def test_users_add_refuses_a_name_outside_the_user_name_rule(tmp_path, capsys, name):
    """Issue 63 L5: `users add` took a newline, quotes and a formula start."""
    from app.__main__ import main

    assert main(["users", "add", name, "--role", "annotator", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: user name")
    engine = open_store(f"sqlite:///{tmp_path / 'app.db'}")
    assert users.list_users(engine) == []
    engine.dispose()


@pytest.mark.parametrize("name", ["ann", "김민수", "ann.lee@corp", "Ann Lee", "r2-d2_x", "हिन्दी"])
def test_ordinary_user_names_pass(tmp_path, name):
    engine = open_store(f"sqlite:///{tmp_path / 'app.db'}")
    assert users.by_token(engine, users.add_user(engine, name, "annotator"))[1] == name
    engine.dispose()


HUGE_IDS = {"2^63": 2**63, "10^20": 10**20, "-2^63-1": -(2**63) - 1}


@pytest.mark.parametrize("big", HUGE_IDS.values(), ids=HUGE_IDS.keys())
def test_ids_beyond_64_bits_are_422_naming_the_field(store_url, tmp_path, big):
    """Issue 63 L9: such ids passed `int` and failed in the database's integer conversion: 500 with a traceback."""
    with client(store_url, tmp_path) as c:
        ds = c.post("/v1/datasets", json={"name": "d", "texts": ["p", "q"]}).json()["id"]
        rec = c.post(f"/v1/datasets/{ds}/next").json()["record_id"]
        for path in ("next", "undo"):
            r = c.post(f"/v1/datasets/{big}/{path}")
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["path", "dataset_id"], r.text
        for path in ("agreement", "export"):
            assert c.get(f"/v1/datasets/{big}/{path}").status_code == 422
        for path, body in (("labels", {"label": "a"}), ("skip", {}), ("adjudicate", {"label": "a"})):
            r = c.post(f"/v1/datasets/{ds}/{path}", json={"record_id": big, **body})
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "record_id"], (path, r.text)
            r = c.post(f"/v1/datasets/{big}/{path}", json={"record_id": rec, **body})
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["path", "dataset_id"], (path, r.text)
        assert c.post(f"/v1/datasets/{ds}/skip", json={"record_id": rec}).status_code == 200  # nothing else changed


def test_a_stored_row_with_a_lone_surrogate_leaves_the_dataset_list_answering(tmp_path):
    """M4: a label kept before the door refused it (or written by another tool) made GET /v1/datasets 500 for
    every user, for good; now that row is shown escaped and names its bad fields."""
    url = f"sqlite:///{tmp_path / 'app.db'}"
    engine = open_store(url)
    queue.create_dataset(engine, "good", ["a", "b"], False, 1, [{"text": "t"}], None)
    queue.create_dataset(engine, "bad", ["\ud800", "b"], False, 1, [{"text": "t"}], None)
    engine.dispose()
    with client(url, tmp_path) as c:
        r = c.get("/v1/datasets")
        assert r.status_code == 200, r.text
        good, bad = r.json()["datasets"]
        assert good["name"] == "good" and "invalid" not in good
        assert bad["labels"] == ["\\ud800", "b"] and bad["invalid"] == ["labels"]  # (SQLite's text columns refuse it)


def test_only_an_admin_deletes_a_dataset_with_its_records_and_answers(tmp_path):
    url = f"sqlite:///{tmp_path / 'app.db'}"
    engine = open_store(url)
    tokens = {role: users.add_user(engine, role, role) for role in ("annotator", "reviewer", "admin")}
    engine.dispose()
    auth = {role: {"authorization": f"Bearer {t}"} for role, t in tokens.items()}
    with client(url, tmp_path) as c:
        ds = c.post("/v1/datasets", json={"name": "d", "texts": ["x1", "x2"]}, headers=auth["reviewer"]).json()["id"]
        keep = c.post("/v1/datasets", json={"name": "k", "texts": ["x1"]}, headers=auth["reviewer"]).json()["id"]
        rec = c.post(f"/v1/datasets/{ds}/next", headers=auth["annotator"]).json()
        assert c.post(f"/v1/datasets/{ds}/labels", json={"record_id": rec["record_id"], "label": "a"},
                      headers=auth["annotator"]).status_code == 200
        for role in ("annotator", "reviewer"):
            r = c.delete(f"/v1/datasets/{ds}", headers=auth[role])
            assert r.status_code == 403 and "this needs admin" in r.json()["detail"], (role, r.text)
        r = c.delete(f"/v1/datasets/{ds}", headers=auth["admin"])
        assert r.status_code == 200 and r.json() == {"id": ds, "deleted": True, "records": 2}, r.text
        assert [d["id"] for d in c.get("/v1/datasets", headers=auth["admin"]).json()["datasets"]] == [keep]
        assert c.delete(f"/v1/datasets/{ds}", headers=auth["admin"]).status_code == 404
        assert c.post(f"/v1/datasets/{ds}/next", headers=auth["annotator"]).status_code == 404  # not cached on
        assert c.get(f"/v1/datasets/{ds}/export", headers=auth["admin"]).status_code == 404
    import sqlite3

    db = sqlite3.connect(tmp_path / "app.db")
    assert [db.execute(f"select count(*) from {t}").fetchone()[0] for t in
            ("records", "answers", "label_events", "slots")] == [1, 0, 0, 0]
