"""The one authorization rule (app/team/roles.py), walked: every route of the running app (the OpenAPI schema's
and the rest: sign-in, the UI's mount) and every UI event, with each role's token, the key, a revoked token and
nothing, against the table (issue 63, H1 and H2)."""

from __future__ import annotations

import asyncio
import inspect
from types import SimpleNamespace

import gradio as gr
import pytest
from app_testkit import two_version_registry
from fastapi import FastAPI
from fastapi.testclient import TestClient
from gradio.context import LocalContext

from app.config import Config
from app.http.api import ServerState
from app.http.gate import SESSION_COOKIE, AuthThrottle
from app.server import create_app, load_classifier
from app.team import roles
from labelstore import open_store, users

KEY = "k" * 24
PARAMS = {"dataset_id": "1", "version": "v2", "job_id": "nojob"}
ROLE_OF = {"ann": roles.ANNOTATOR, "rev": roles.REVIEWER, "adm": roles.ADMIN, "key": roles.ADMIN}


@pytest.fixture(scope="module")
def team(spread_model_dir, tmp_path_factory):
    """A keyed team server with every part on: registry and jobs, monitor with audit, review queue, UI, users
    of each role and one revoked."""
    root = tmp_path_factory.mktemp("roles")
    reg = two_version_registry(spread_model_dir, root)
    engine = open_store(f"sqlite:///{root / 'app.db'}")
    tokens = {name: users.add_user(engine, name, role) for name, role in
              (("ann", "annotator"), ("rev", "reviewer"), ("adm", "admin"), ("gone", "annotator"))}
    ids = {name: users.by_token(engine, t)[0] for name, t in tokens.items()}
    users.revoke(engine, "gone")
    engine.dispose()
    cfg = Config(model="m", data_dir=root, models_dir=reg.root, api_key=KEY, audit_rate=1.0, review_queue=True,
                 database_url=f"sqlite:///{root / 'app.db'}")
    state = ServerState()
    state.throttle = AuthThrottle(failures=10**6)  # the walk sends many refused tokens on purpose
    app = create_app(cfg, load_classifier(cfg, reg.path("v1")), state=state, registry=reg, version="v1")
    with TestClient(app, base_url="http://127.0.0.1") as c:
        c.post("/v1/datasets", json={"name": "d", "texts": ["x1", "x2"]}, headers={"authorization": f"Bearer {KEY}"})
        yield SimpleNamespace(app=app, client=c, tokens={**tokens, "key": KEY}, ids=ids, state=state, cfg=cfg)


def _routes(app) -> list[tuple[str, str]]:
    """Every (method, path) the app serves: the OpenAPI schema's, then those it leaves out, then the mounts."""
    schema = app.openapi()["paths"]
    found = [(m.upper(), p) for p, ops in schema.items() for m in ops]
    for route in app.routes:
        for m in sorted(getattr(route, "methods", None) or {"GET"}):
            if m != "HEAD" and (m, route.path) not in found:
                found.append((m, route.path if getattr(route, "methods", None) else route.path + "/"))
    return found


def _rule(method, path) -> roles.Rule:
    return roles.RouteTable().rule(method, path)


def _call(c, method, path, token):
    headers = {"authorization": f"Bearer {token}"} if token else {}
    url = path.format(**PARAMS)
    if method in ("POST", "DELETE"):
        return c.request(method, url, headers=headers, json={} if method == "POST" else None)
    return c.request(method, url, headers=headers)


def test_every_route_has_a_rule_and_a_route_without_one_refuses_to_start(team):
    assert roles.unruled(team.app) == []
    served = {(m, p) for m, p in _routes(team.app)}
    assert set(roles.ROUTES) - {(m, p) for m, p in served} == set()  # no rule for a route that is not there
    extra = FastAPI()
    extra.get("/v1/new-thing")(lambda: {})  # noqa: PIE807 - FastAPI reads a signature; dict has none
    with pytest.raises(RuntimeError, match="GET /v1/new-thing"):
        roles.check_routes(extra)


def test_every_route_answers_each_identity_as_the_table_says(team):
    routes = _routes(team.app)
    assert len(routes) >= 35 and ("POST", "/v1/models/{version}/activate") in routes and ("GET", "/ui/") in routes
    order = sorted(routes, key=lambda r: (r[0] == "DELETE", r[1] == "/logout"))  # deletions last
    for method, path in order:
        rule = _rule(method, path)
        assert rule is not None, (method, path)
        for who in ("none", "gone", "ann", "rev", "adm", "key"):
            if method == "DELETE" and who in ("adm", "key") and "models" in path:
                continue  # an admin's delete is allowed: one check below, not a registry emptied
            r = _call(team.client, method, path, team.tokens.get(who))
            gate_401 = r.status_code == 401 and "missing or invalid API key" in r.text
            if rule.role is None:
                assert r.status_code != 403 and not gate_401, (method, path, who, r.status_code)
            elif who in ("none", "gone"):
                assert gate_401, (method, path, who, r.status_code)
            elif rule.allows(ROLE_OF[who]):
                assert r.status_code not in (401, 403), (method, path, who, r.status_code, r.text[:200])
            else:
                assert r.status_code == 403 and f"this needs {rule.role}" in r.json()["detail"], (method, path, who)
    adm = {"authorization": f"Bearer {team.tokens['adm']}"}
    other = ({"v1", "v2"} - {team.client.get("/v1/models", headers=adm).json()["active"]}).pop()
    assert team.client.delete(f"/v1/models/{other}", headers=adm).status_code == 200


def test_h1_an_annotator_is_refused_the_admin_routes_with_its_token(team):
    """The reproduction of H1: 200 on /v1/models, /v1/jobs and an activation, before the table."""
    ann = {"authorization": f"Bearer {team.tokens['ann']}"}
    c = team.client
    assert c.get("/v1/models", headers=ann).status_code == 403
    assert c.get("/v1/jobs", headers=ann).status_code == 403
    assert c.post("/v1/models/v1/activate", headers=ann, json={}).status_code == 403
    assert c.post("/v1/train", headers=ann, json={}).status_code == 403
    assert c.get("/v1/monitor", headers=ann).status_code == 403
    assert c.post("/v1/classify", headers=ann, json={"texts": ["a"]}).status_code == 200


def _blocks(app):
    return next(r.app for r in app.routes if getattr(r, "path", None) == "/ui").get_blocks()


def _request(team, who: str, how: str):
    """A Gradio event's request as the gate leaves it: a sign-in cookie, or a token in the header."""
    from starlette.requests import Request

    headers, state = [], {}
    if how == "cookie":
        uid = None if who == "key" else team.ids[who]
        headers.append((b"cookie", f"{SESSION_COOKIE}={team.state.sessions.issue(uid)}".encode()))
    elif who == "key":
        state["user"] = "api-key"
    else:
        state["user"] = (team.ids[who], who, ROLE_OF.get(who, "annotator"))  # what the gate recorded
    scope = {"type": "http", "method": "POST", "path": "/ui/gradio_api/queue/join", "headers": headers,
             "state": state, "query_string": b""}
    return gr.Request(request=Request(scope))


def test_every_ui_event_has_a_rule_and_refuses_each_identity_the_table_refuses(team):
    blocks = _blocks(team.app)
    events = {i: f for i, f in blocks.fns.items() if f.fn is not None}
    assert len(events) >= 40 and set(blocks.rules) == set(events)  # every event that runs on the server is ruled
    seen = set()
    for index, block_fn in events.items():
        rule = blocks.rules[index]
        refused = getattr(block_fn.fn, "refused", None)
        if refused is None:
            assert rule.role == roles.ANNOTATOR and rule.open, index  # unwrapped: anyone the gate let in
            continue
        for who in ("ann", "rev", "adm", "key", "gone"):
            for how in ("cookie", "header"):
                if who == "gone" and how == "cookie":
                    continue  # the gate refuses a revoked user's cookie (test_app_team's revocation tests)
                token = LocalContext.request.set(_request(team, who, how))
                try:
                    why = refused()
                    allowed = who != "gone" and rule.allows(ROLE_OF[who])
                    assert (why is None) == allowed, (block_fn.fn.__name__, rule, who, how, why)
                    if not allowed:  # the event itself refuses, its work never starts
                        quiet = any(t[1] == "tick" for t in block_fn.targets)
                        args = [None] * len(block_fn.inputs)
                        if quiet:
                            out = block_fn.fn(*args)
                            assert out is not None
                        else:
                            with pytest.raises(gr.Error, match="Refused"):
                                result = block_fn.fn(*args)
                                if inspect.isawaitable(result):
                                    asyncio.run(result)
                        seen.add(rule.role)
                finally:
                    LocalContext.request.reset(token)
    assert seen == {roles.REVIEWER, roles.ADMIN}  # the Team tab's and the Train, Monitor tabs' refusals ran


def test_h2_an_annotators_bearer_token_on_the_ui_is_the_annotator(team):
    """H2: a user's token sent as a header to /ui made its holder the key holder there (every answer shown,
    adjudication as `api-key`). The Team tab's handlers, as Gradio calls them with that request."""
    ident = team.state.identities
    header = _request(team, "ann", "header")
    assert ident.ui_request_user(team.cfg, team.state.sessions, header) == (team.ids["ann"], "ann", "annotator")
    assert ident.ui_request_user(team.cfg, team.state.sessions, _request(team, "key", "header"))[1] == users.API_KEY
    blocks = _blocks(team.app)
    (show,) = [f.fn for f in blocks.fns.values() if getattr(f.fn, "__name__", "") == "show"]
    token = LocalContext.request.set(header)
    try:
        with pytest.raises(gr.Error, match="ann is annotator; this needs reviewer"):
            show(1, header)
    finally:
        LocalContext.request.reset(token)
    # the Label tab's team session is the annotator's own (blind), saved under their name
    from app.ui.team_label import TeamSessions

    sessions = TeamSessions(team.cfg, team.state)
    token = LocalContext.request.set(header)
    try:
        assert sessions.user() == (team.ids["ann"], "ann", "annotator")
    finally:
        LocalContext.request.reset(token)
