"""app/team/hot.py answers `next` and `labels` in their plain case without FastAPI: the same answers as the
FastAPI routes, request by request, errors included (those it hands on to the routes)."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient
from test_app_team import FakeClassifier

from app.config import Config
from app.server import create_app
from app.team.hot import HotRoutes
from labelstore import open_store, users


def hot_of(app) -> HotRoutes | None:
    layer = app.middleware_stack
    while layer is not None and not isinstance(layer, HotRoutes):
        layer = getattr(layer, "app", None)
    return layer


def script(c: TestClient, tokens: dict) -> list:
    """Every kind of next/labels request, good and bad; what came back (times and event ids left out)."""
    def h(name, **extra):
        return {"Authorization": f"Bearer {tokens[name]}", **extra}

    out = []

    def keep(r):
        body = r.json() if r.content else None
        if isinstance(body, dict):
            body = {k: v for k, v in body.items() if k not in ("created_at", "event_id", "request_id")}
        out.append((r.status_code, body, r.headers.get("content-type"), r.headers.get("idempotent-replayed"),
                    "content-length" in r.headers))
        return r

    ds = c.post("/v1/datasets", headers=h("rev"), json={"name": "d", "texts": ["p q", "q", "r s t"], "overlap": 1})
    ds = ds.json()["id"]
    other = c.post("/v1/datasets", headers=h("rev"), json={"name": "o", "texts": ["z"]}).json()["id"]
    rec = keep(c.post(f"/v1/datasets/{ds}/next", headers=h("ann"))).json()["record_id"]
    foreign = keep(c.post(f"/v1/datasets/{other}/next", headers=h("ann"))).json()["record_id"]
    url = f"/v1/datasets/{ds}/labels"
    keep(c.post(url, headers=h("ann"), json={"record_id": rec, "label": "zebra"}))  # 422 naming it
    keep(c.post(url, headers=h("ann"), json={"record_id": rec}))  # no label
    keep(c.post(url, headers=h("ann"), json={"record_id": "1", "label": "a"}))  # strict int
    keep(c.post(url, headers=h("ann"), json={"record_id": rec, "label": "a", "extra": 1}))
    keep(c.post(url, headers=h("ann", **{"Content-Type": "application/json"}), content=b"{not json"))
    keep(c.post(url, headers=h("ann", **{"Content-Type": "text/plain"}),
                content=json.dumps({"record_id": rec, "label": "a"})))
    keep(c.post(url, headers=h("ann"), json=[rec]))
    keep(c.post(url, headers=h("ann"), json={"record_id": foreign, "label": "a"}))  # 404
    keep(c.post("/v1/datasets/999/next", headers=h("ann")))  # 404
    keep(c.post("/v1/datasets/999/labels", headers=h("ann"), json={"record_id": rec, "label": "a"}))
    keep(c.post(f"/v1/datasets/{ds}/next", headers={"Authorization": "Bearer lbl_wrong"}))  # 401 (the gate)
    first = {"record_id": rec, "label": "a", "client_event_id": "e1"}
    keep(c.post(url, headers=h("ann"), json=first))
    keep(c.post(url, headers=h("ann"), json=first))  # replayed: the first answer
    keep(c.post(url, headers=h("ann"), json={**first, "label": "b"}))  # 422: the id sent with another label
    keep(c.post(url, headers=h("bob"), json={"record_id": rec, "label": "b"}))  # 409: its one answer is in
    while keep(c.post(f"/v1/datasets/{ds}/next", headers=h("bob"))).status_code == 200:
        keep(c.post(url, headers=h("bob"), json={"record_id": out[-1][1]["record_id"], "label": "b"}))
    return out


def test_the_lean_path_answers_as_the_routes_do(tmp_path):
    answers = {}
    for lean in (True, False):
        folder = tmp_path / str(lean)
        url = f"sqlite:///{folder / 'app.db'}"
        engine = open_store(url)
        # the same users in both stores, in the same order: the same ids
        tokens = {n: users.add_user(engine, n, r) for n, r in (("ann", "annotator"), ("bob", "annotator"),
                                                               ("rev", "reviewer"))}
        engine.dispose()
        config = Config(model="m", ui=False, monitor=False, data_dir=folder, database_url=url)
        app = create_app(config, FakeClassifier())
        if not lean:
            app.user_middleware = [m for m in app.user_middleware if m.cls is not HotRoutes]
        with TestClient(app, base_url="http://127.0.0.1") as c:
            answers[lean] = script(c, tokens)
            hot = hot_of(app)
            assert (hot is not None) == lean
            if lean:  # the plain cases went the lean way; the others on to the routes
                assert hot.answered >= 7  # the first next of a dataset (not read yet) and errors: the routes
    assert answers[True] == answers[False]
    statuses = [a[0] for a in answers[True]]
    assert {200, 204, 401, 404, 409, 422} <= set(statuses)
    replayed = [a for a in answers[True] if a[3] == "true"]
    assert len(replayed) == 1 and replayed[0][1]["label"] == "a"
