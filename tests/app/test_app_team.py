"""Team labeling through the HTTP API (in-process), on SQLite and on a real PostgreSQL: the contract's routes,
one-person mode, tokens and roles, and every bad input's status."""

from __future__ import annotations

import csv
import io
import json

import pytest
from fastapi.testclient import TestClient

from app.config import Config
from app.server import create_app
from labelstore import open_store, users
from serving.engine import Prediction
from textdata.labels import LabelSpace


class FakeClassifier:
    batch_tokens = 512
    call_overhead_tokens = 12.0
    labels = ("a", "b")
    space = LabelSpace.of(labels)  # the engine's label space (serving/engine.py), single-label

    def info(self):
        return {"name": "fake", "labels": self.labels, "provider": "cpu"}

    def encode(self, texts):
        return [[0] * (len(t.split()) + 2) for t in texts]

    def predict_encoded(self, seqs, top_k=None):
        # more words: surer; the queue serves the least sure (shortest) first
        return [Prediction("a", 0.5 + len(s) / 100, {"a": 0.5 + len(s) / 100, "b": 0.5 - len(s) / 100}) for s in seqs]


def client(store_url, tmp_path, **cfg) -> TestClient:
    config = Config(model="m", ui=False, monitor=False, data_dir=tmp_path, database_url=store_url, **cfg)
    return TestClient(create_app(config, FakeClassifier()), base_url="http://127.0.0.1")


TEXTS = ["one two three four", "one", "one two", "one two three", "one"]


def test_one_person_mode_end_to_end(store_url, tmp_path):
    with client(store_url, tmp_path) as c:
        made = c.post("/v1/datasets", json={"name": "news", "texts": TEXTS})
        assert made.status_code == 201 and made.json()["records"] == 4 and made.json()["duplicates"] == 1
        ds = made.json()["id"]
        seen = []
        while (nxt := c.post(f"/v1/datasets/{ds}/next")).status_code == 200:
            rec = nxt.json()
            assert set(rec) == {"record_id", "text", "suggestion"} and rec["suggestion"]["label"] == "a"
            seen.append(rec["text"])
            r = c.post(f"/v1/datasets/{ds}/labels", json={"record_id": rec["record_id"], "label": "b",
                                                          "client_event_id": f"e{len(seen)}"})
            assert r.status_code == 200, r.text
        assert nxt.status_code == 204 and seen == ["one", "one two", "one two three", "one two three four"]
        rows = list(csv.DictReader(io.StringIO(c.get(f"/v1/datasets/{ds}/export?format=csv").text)))
        assert list(rows[0]) == ["record_id", "text", "annotator", "label", "created_at"] and len(rows) == 4
        assert {r["annotator"] for r in rows} == {users.LOCAL} and {r["label"] for r in rows} == {"b"}
        lines = [json.loads(x) for x in c.get(f"/v1/datasets/{ds}/export?format=jsonl").text.splitlines()]
        assert [x["text"] for x in lines] == [r["text"] for r in rows]
        final = c.get(f"/v1/datasets/{ds}/export?format=jsonl&rows=final")  # one row a text: its final label
        assert final.headers["content-disposition"].endswith(f'dataset-{ds}-final.jsonl"')
        got = [json.loads(x) for x in final.text.splitlines()]
        assert sorted(x["text"] for x in got) == sorted(set(TEXTS)) and {x["label"] for x in got} == {"b"}
        assert {(x["decided"], x["answers"], x["agreement"]) for x in got} == {("unanimous", 1, 1.0)}
        final_csv = c.get(f"/v1/datasets/{ds}/export?format=csv&rows=final").content
        assert final_csv.startswith(b"\xef\xbb\xbfrecord_id,text,label,decided,answers,agreement")
        as_csv = list(csv.DictReader(io.StringIO(final_csv.decode("utf-8-sig"))))  # the JSONL's rows, in order
        assert [(int(r["record_id"]), r["text"], r["label"], r["decided"], int(r["answers"]), float(r["agreement"]))
                for r in as_csv] == [tuple(x.values()) for x in got]
        assert c.get(f"/v1/datasets/{ds}/export?rows=all").status_code == 422
        agree = c.get(f"/v1/datasets/{ds}/agreement").json()
        assert {"krippendorff_alpha", "fleiss_kappa", "per_label", "per_annotator", "n_records"} <= set(agree)
        assert agree["n_records"] == 0 and agree["progress"]["complete"] == 4  # one person: nothing to compare


def test_bad_inputs_each_have_their_status(store_url, tmp_path):
    with client(store_url, tmp_path) as c:
        ds = c.post("/v1/datasets", json={"name": "x", "texts": ["p", "q"], "overlap": 2}).json()["id"]
        other = c.post("/v1/datasets", json={"name": "y", "texts": ["r"]}).json()["id"]
        rec = c.post(f"/v1/datasets/{ds}/next").json()["record_id"]
        foreign = c.post(f"/v1/datasets/{other}/next").json()["record_id"]
        r = c.post(f"/v1/datasets/{ds}/labels", json={"record_id": rec, "label": "zebra"})
        assert r.status_code == 422 and "'zebra'" in r.json()["message"]
        assert c.post(f"/v1/datasets/{ds}/labels", json={"record_id": foreign, "label": "a"}).status_code == 404
        assert c.post("/v1/datasets/999/next").status_code == 404
        assert c.post("/v1/datasets", json={"name": "z", "texts": []}).status_code == 422
        assert c.post("/v1/datasets", json={"name": "z", "texts": ["a"], "overlap": 0}).status_code == 422
        assert c.get(f"/v1/datasets/{ds}/export?format=xml").status_code == 422
        first = c.post(f"/v1/datasets/{ds}/labels", json={"record_id": rec, "label": "a", "client_event_id": "k1"})
        again = c.post(f"/v1/datasets/{ds}/labels", json={"record_id": rec, "label": "a", "client_event_id": "k1"})
        assert again.json() == first.json() and again.headers.get("idempotent-replayed") == "true"
        changed = c.post(f"/v1/datasets/{ds}/labels", json={"record_id": rec, "label": "b", "client_event_id": "k1"})
        assert changed.status_code == 422 and changed.json()["detail"][0]["loc"] == ["body", "client_event_id"]
        assert c.post(f"/v1/datasets/{ds}/undo").json()["record_id"] == rec
        assert c.post(f"/v1/datasets/{ds}/undo").status_code == 404


def test_a_client_event_id_reused_for_another_record_is_refused_not_dropped(store_url, tmp_path):
    """Issue 63 L1: the id is the caller's across datasets; reused on another record it answered 200 with the
    first answer's body (Idempotent-Replayed) and saved nothing."""
    with client(store_url, tmp_path) as c:
        one = c.post("/v1/datasets", json={"name": "x", "texts": ["p", "q"]}).json()["id"]
        two = c.post("/v1/datasets", json={"name": "y", "texts": ["r"]}).json()["id"]
        recs = [c.post(f"/v1/datasets/{one}/next").json()["record_id"]]
        assert c.post(f"/v1/datasets/{one}/labels", json={"record_id": recs[0], "label": "a",
                                                          "client_event_id": "e1"}).status_code == 200
        recs.append(c.post(f"/v1/datasets/{one}/next").json()["record_id"])
        recs.append(c.post(f"/v1/datasets/{two}/next").json()["record_id"])
        for ds, rec in ((one, recs[1]), (two, recs[2])):
            r = c.post(f"/v1/datasets/{ds}/labels", json={"record_id": rec, "label": "a", "client_event_id": "e1"})
            assert r.status_code == 422 and "idempotent-replayed" not in r.headers
            assert r.json()["detail"][0]["loc"] == ["body", "client_event_id"] and "e1" in r.json()["message"]
        exported = [r["record_id"] for ds in (one, two)
                    for r in csv.DictReader(io.StringIO(c.get(f"/v1/datasets/{ds}/export").text))]
        assert exported == [str(recs[0])]  # nothing kept from the refused answers
        fresh = c.post(f"/v1/datasets/{two}/labels", json={"record_id": recs[2], "label": "a", "client_event_id": "e2"})
        assert fresh.status_code == 200 and fresh.json()["record_id"] == recs[2]


def test_skip_gives_the_text_back_to_the_queue_and_to_the_skipper_last(store_url, tmp_path):
    with client(store_url, tmp_path) as c:
        ds = c.post("/v1/datasets", json={"name": "s", "texts": ["one", "one two"]}).json()["id"]
        other = c.post("/v1/datasets", json={"name": "t", "texts": ["three"]}).json()["id"]
        first = c.post(f"/v1/datasets/{ds}/next").json()["record_id"]
        r = c.post(f"/v1/datasets/{ds}/skip", json={"record_id": first})
        assert r.status_code == 200 and r.json() == {"record_id": first, "skipped": True}
        assert c.post(f"/v1/datasets/{ds}/skip", json={"record_id": first}).status_code == 409  # not held now
        undone = c.post(f"/v1/datasets/{ds}/undo").json()  # undo takes the skip back: the text is held again
        assert (undone["record_id"], undone["action"], undone["back"]) == (first, "skip", True)
        assert c.post(f"/v1/datasets/{ds}/next").json()["record_id"] == first
        assert c.post(f"/v1/datasets/{ds}/skip", json={"record_id": first}).status_code == 200
        second = c.post(f"/v1/datasets/{ds}/next").json()["record_id"]
        assert second != first
        assert c.post(f"/v1/datasets/{ds}/labels", json={"record_id": second, "label": "a"}).status_code == 200
        assert c.post(f"/v1/datasets/{ds}/next").json()["record_id"] == first  # the skipped one, last
        assert c.post(f"/v1/datasets/{other}/skip", json={"record_id": first}).status_code == 404
        assert c.post(f"/v1/datasets/{ds}/skip", json={"record_id": "x"}).status_code == 422


def test_tokens_and_roles(store_url, tmp_path):
    engine = open_store(store_url)
    ann = users.add_user(engine, "ann", "annotator")
    rev = users.add_user(engine, "rev", "reviewer")
    gone = users.add_user(engine, "gone", "annotator")
    users.revoke(engine, "gone")
    engine.dispose()
    bearer = lambda t: {"Authorization": f"Bearer {t}"}
    with client(store_url, tmp_path, api_key="admin-key") as c:
        assert c.post("/v1/datasets", json={"name": "x", "texts": ["p"]}).status_code == 401
        assert c.post("/v1/datasets", json={"name": "x", "texts": ["p"]}, headers=bearer("lbl_nope")).status_code == 401
        assert c.get("/v1/datasets", headers=bearer(gone)).status_code == 401
        assert c.post("/v1/datasets", json={"name": "x", "texts": ["p"]}, headers=bearer(ann)).status_code == 403
        ds = c.post("/v1/datasets", json={"name": "x", "texts": ["p", "q"], "overlap": 2},
                    headers=bearer("admin-key")).json()["id"]
        for token in (ann, rev):
            rec = c.post(f"/v1/datasets/{ds}/next", headers=bearer(token)).json()
            assert c.post(f"/v1/datasets/{ds}/labels", json={"record_id": rec["record_id"], "label": "a"},
                          headers=bearer(token)).status_code == 200
        assert c.get(f"/v1/datasets/{ds}/agreement", headers=bearer(ann)).status_code == 403  # blind
        assert c.get(f"/v1/datasets/{ds}/export", headers=bearer(ann)).status_code == 403
        rows = list(csv.DictReader(io.StringIO(c.get(f"/v1/datasets/{ds}/export", headers=bearer(rev)).text)))
        assert {r["annotator"] for r in rows} == {"ann", "rev"} and len({r["record_id"] for r in rows}) == 1
        assert c.post("/v1/classify", json={"text": "x"}, headers=bearer(ann)).status_code == 200


def test_users_turn_auth_on_for_a_server_without_a_key(tmp_path):
    url = f"sqlite:///{tmp_path / 'app.db'}"
    with client(url, tmp_path) as c:
        assert c.get("/v1/datasets").status_code == 200  # one-person mode
        engine = open_store(url)
        token = users.add_user(engine, "ann", "annotator")
        engine.dispose()
        from app.team import auth as team_auth

        saved = team_auth.TOKEN_TTL_S, team_auth.MISS_TTL_S
        team_auth.TOKEN_TTL_S = team_auth.MISS_TTL_S = 0.0  # the gate reads the users at once, not within 1 s
        try:
            assert c.get("/v1/datasets").status_code == 401
            assert c.get("/v1/datasets", headers={"Authorization": f"Bearer {token}"}).status_code == 200
            engine = open_store(url)
            users.revoke(engine, "ann")  # while the server runs
            engine.dispose()
            assert c.get("/v1/datasets", headers={"Authorization": f"Bearer {token}"}).status_code == 401
            # the users are held in memory for TOKEN_TTL_S; a token not among them reads them again at once
            team_auth.TOKEN_TTL_S = 3600.0
            assert c.get("/v1/datasets").status_code == 401
            engine = open_store(url)
            second = users.add_user(engine, "bob", "annotator")
            engine.dispose()
            assert c.get("/v1/datasets", headers={"Authorization": f"Bearer {second}"}).status_code == 200
        finally:
            team_auth.TOKEN_TTL_S, team_auth.MISS_TTL_S = saved


def test_the_ui_signs_in_with_a_users_token(tmp_path):
    url = f"sqlite:///{tmp_path / 'app.db'}"
    engine = open_store(url)
    token = users.add_user(engine, "ann", "annotator")
    engine.dispose()
    with client(url, tmp_path) as c:  # no --api-key: the users alone turn sign-in on
        assert c.post("/login", data={"key": "lbl_wrong"}, follow_redirects=False).status_code == 401
        ok = c.post("/login", data={"key": token}, follow_redirects=False)
        assert ok.status_code == 303 and "electra_session" in ok.headers.get("set-cookie", "")
        state = c.app.state.server  # the cookie names the user: the UI's reviews are theirs (app/ui/team.py)
        assert state.identities.by_id(state.sessions.user_of(ok.cookies["electra_session"]))[1:] == ("ann",
                                                                                                   "annotator")


def test_a_retrain_table_takes_the_store_as_of_its_newest_event(tmp_path):
    from app.versions.trainset import build
    from labelstore import queue

    engine = open_store(f"sqlite:///{tmp_path / 'app.db'}")
    uid = users.builtin(engine, users.LOCAL)[0]
    rows = [{"text": f"text number {i}", "priority": i} for i in range(6)]
    ds = queue.get_dataset(engine, queue.create_dataset(engine, "d", ["a", "b"], False, 1, rows, None)[0])
    while (rec := queue.next_record(engine, ds, uid)) is not None:
        queue.submit(engine, ds, uid, rec["record_id"], "b" if rec["text"].endswith(("1", "3")) else "a", None)
    ts = build(tmp_path / "label", None, 0.01, store=engine)
    table = dict(zip(ts.train["text"], ts.train["label"]))
    assert ts.sources["store_event"] == 6 and ts.sources["store_labels"] == 6
    assert table == {f"text number {i}": "b" if i in (1, 3) else "a" for i in range(6)}
    engine.dispose()


def test_agreement_needs_no_scikit_learn(tmp_path, monkeypatch):
    # the slim image (docker/deps.py) has no scikit-learn (nor scipy): agreement, Cohen's kappa included, answers
    for name in ("sklearn", "sklearn.metrics", "scipy"):
        monkeypatch.setitem(__import__("sys").modules, name, None)
    url = f"sqlite:///{tmp_path / 'app.db'}"
    engine = open_store(url)
    tokens = {n: users.add_user(engine, n, role) for n, role in (("ann", "annotator"), ("bob", "annotator"),
                                                                 ("rev", "reviewer"))}
    engine.dispose()

    def as_(name):
        return {"Authorization": f"Bearer {tokens[name]}"}

    with client(url, tmp_path) as c:
        ds = c.post("/v1/datasets", headers=as_("rev"), json={"name": "x", "texts": ["p", "q", "r"], "overlap": 2,
                                                              "labels": ["a", "b"]}).json()["id"]
        for name, votes in (("ann", "aab"), ("bob", "abb")):
            for vote in votes:
                rec = c.post(f"/v1/datasets/{ds}/next", headers=as_(name)).json()
                assert c.post(f"/v1/datasets/{ds}/labels", headers=as_(name),
                              json={"record_id": rec["record_id"], "label": vote}).status_code == 200
        r = c.get(f"/v1/datasets/{ds}/agreement", headers=as_("rev"))
        assert r.status_code == 200, r.text
        # the same order of texts for both: a a b against a b b, kappa (2/3 - 4/9) / (1 - 4/9) = 0.4
        assert r.json()["pairwise_cohen_kappa"][0]["cohen_kappa"] == pytest.approx(0.4, abs=1e-9)


def test_the_csv_export_neutralises_spreadsheet_formulas(store_url, tmp_path):
    texts = ['=HYPERLINK("http://evil.example","click")', "+1 call now", "-5", "-2+3", "@SUM(A1)", "\tx", "plain"]
    from labelstore import queue

    engine = open_store(store_url)  # a formula label: a dataset made before POST /v1/datasets checked its labels
    ds = queue.create_dataset(engine, "f", ["=cmd", "b"], False, 1, [{"text": t} for t in texts], None)[0]
    engine.dispose()
    with client(store_url, tmp_path) as c:
        while (nxt := c.post(f"/v1/datasets/{ds}/next")).status_code == 200:
            assert c.post(f"/v1/datasets/{ds}/labels", json={"record_id": nxt.json()["record_id"],
                                                             "label": "=cmd"}).status_code == 200
        rows = list(csv.DictReader(io.StringIO(c.get(f"/v1/datasets/{ds}/export?format=csv").text)))
        assert {r["text"] for r in rows} == {"'" + texts[0], "'+1 call now", "-5", "'-2+3", "'@SUM(A1)", "'\tx",
                                             "plain"}  # a number stays one
        assert {r["label"] for r in rows} == {"'=cmd"}
        raw = [json.loads(x) for x in c.get(f"/v1/datasets/{ds}/export?format=jsonl").text.splitlines()]
        assert {r["text"] for r in raw} == set(texts) and {r["label"] for r in raw} == {"=cmd"}  # pipelines: as stored


def test_dataset_routes_are_refused_on_an_open_server_without_users(store_url, tmp_path):
    with client(store_url, tmp_path, host="0.0.0.0") as c:
        for method, path in (("post", "/v1/datasets"), ("get", "/v1/datasets"), ("post", "/v1/datasets/1/next"),
                             ("get", "/v1/datasets/1/export")):
            r = c.request(method.upper(), path, json={"name": "x", "texts": ["a"]} if method == "post" else None)
            assert r.status_code == 403 and "users add" in r.json()["detail"], (path, r.text)
        engine = open_store(store_url)
        token = users.add_user(engine, "boss", "admin")
        engine.dispose()
        from app.team import auth as team_auth

        saved, team_auth.TOKEN_TTL_S = team_auth.TOKEN_TTL_S, 0.0
        try:  # with a user, every request says who it is: the routes open
            assert c.post("/v1/datasets", json={"name": "x", "texts": ["a"]}).status_code == 401
            assert c.post("/v1/datasets", json={"name": "x", "texts": ["a"]},
                          headers={"Authorization": f"Bearer {token}"}).status_code == 201
        finally:
            team_auth.TOKEN_TTL_S = saved


def test_a_dataset_holds_more_texts_than_a_classify_request(store_url, tmp_path):
    """The gate counts a body's values against --max-texts; a new dataset may hold --max-upload-rows texts
    (it was refused from ~380 texts on: 422 before any route ran)."""
    texts = [f"text number {i}" for i in range(500)]
    with client(store_url, tmp_path, max_upload_rows=600) as c:
        made = c.post("/v1/datasets", json={"name": "big", "texts": texts})
        assert made.status_code == 201 and made.json()["records"] == 500, made.text[:300]
        over = c.post("/v1/datasets", json={"name": "big", "texts": texts + texts[:200]})
        assert over.status_code == 422 and "600" in over.text


def test_a_long_dataset_body_is_counted_too(tmp_path):
    """The same over 16 KB, where the gate starts counting values as the body arrives (app/http/body_shape.py)."""
    texts = [f"text number {i} " + "word " * 20 for i in range(600)]
    with client(f"sqlite:///{tmp_path / 'app.db'}", tmp_path, max_texts=64, max_upload_rows=1000) as c:
        made = c.post("/v1/datasets", json={"name": "big", "texts": texts})
        assert made.status_code == 201, made.text[:300]
        assert made.json()["records"] == 600
        over = c.post("/v1/classify", json={"texts": texts})
        assert over.status_code == 422
