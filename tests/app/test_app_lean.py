"""The lean path for POST /v1/classify (app/http/lean.py) against the FastAPI route alone (--no-lean-classify):
the same good and bad requests get the same status, the same body byte for byte and the same headers. Both
servers get the same X-Request-Id on each request, so nothing per request needs removing: every header
(x-request-id and x-model-version included) and every error body are compared byte for byte. A 200's body is
compared key by key and value by value, its floats to 1e-4 (and content-length left out): the torch engine's
scores move in the 6th digit between two apps in one test process, whichever path answers."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from app.config import parse_args
from app.http.batcher import Closed, QueueFull
from app.http.lean import LeanClassify
from app.server import create_app
from labelstore import open_store, users
from serving.engine import Classifier

KEY = "k" * 24
AUTH = {"Authorization": f"Bearer {KEY}"}
JSON_TYPE = {"Content-Type": "application/json"}
JSON = {**AUTH, **JSON_TYPE}
LIMITS = ["--max-texts", "3", "--max-chars", "40", "--max-body-bytes", "1500"]

# (name, body bytes, headers): every kind of answer /v1/classify gives a client, good and bad
CASES = [
    ("one text", b'{"text": "memo for tomorrow"}', JSON),
    ("several texts", '{"texts": ["꿈에서 봤다", "메모 기록 내일", "plain words"]}'.encode(), JSON),
    ("top_k and min_confidence", b'{"texts": ["a b c"], "top_k": 1, "min_confidence": 0.99}', JSON),
    ("charset in the type", b'{"text": "x y"}', {**AUTH, "Content-Type": "application/json; charset=utf-8"}),
    ("empty list", b'{"texts": []}', JSON),
    ("too many texts", b'{"texts": ["a", "b", "c", "d"]}', JSON),
    ("too long text", b'{"text": "' + b"x" * 41 + b'"}', JSON),
    ("blank text", b'{"texts": ["ok", "   "]}', JSON),
    ("texts as a string", b'{"texts": "abc"}', JSON),
    ("text as a list", b'{"text": ["abc"]}', JSON),
    ("text as a number", b'{"text": 5}', JSON),
    ("numbers in texts", b'{"texts": [1, null]}', JSON),
    ("top_k zero", b'{"text": "a", "top_k": 0}', JSON),
    ("min_confidence as a string", b'{"text": "a", "min_confidence": "0.5"}', JSON),
    ("min_confidence NaN", b'{"text": "a", "min_confidence": NaN}', JSON),
    ("both text and texts", b'{"text": "a", "texts": ["b"]}', JSON),
    ("neither", b"{}", JSON),
    ("unknown field", b'{"text": "a", "txt": "b"}', JSON),
    ("malformed JSON", b'{"text": ', JSON),
    ("a list body", b'["a"]', JSON),
    ("lone surrogate", b'{"text": "\\ud800"}', JSON),
    ("empty body", b"", JSON),
    ("missing auth", b'{"text": "a"}', {"Content-Type": "application/json"}),
    ("wrong key", b'{"text": "a"}', {"Authorization": "Bearer wrong", "Content-Type": "application/json"}),
    ("no bearer scheme", b'{"text": "a"}', {"Authorization": KEY, "Content-Type": "application/json"}),
    ("text/plain", b'{"text": "a"}', {**AUTH, "Content-Type": "text/plain"}),
    ("no content type", b'{"text": "a"}', AUTH),
    ("form content type", b"text=a", {**AUTH, "Content-Type": "application/x-www-form-urlencoded"}),
    ("oversized body", b'{"text": "' + b"y" * 2000 + b'"}', JSON),
]


@pytest.fixture(scope="module")
def clf(spread_model_dir):
    return Classifier.load(spread_model_dir, provider="torch")


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    """One label store both servers use in turn: an annotator's token (may classify) and a revoked one."""
    url = f"sqlite:///{tmp_path_factory.mktemp('lean-store') / 'app.db'}"
    engine = open_store(url)
    tokens = {name: users.add_user(engine, name, "annotator") for name in ("ann", "gone")}
    users.revoke(engine, "gone")
    engine.dispose()
    body = b'{"text": "memo"}'
    return url, [("annotator's token", body, {"Authorization": f"Bearer {tokens['ann']}", **JSON_TYPE}),
                 ("revoked token", body, {"Authorization": f"Bearer {tokens['gone']}", **JSON_TYPE})]


def client(folder, clf, data_dir, *flags) -> TestClient:
    cfg = parse_args(["--model", str(folder), "--no-ui", "--data-dir", str(data_dir), "--api-key", KEY, *LIMITS,
                      *flags])
    return TestClient(create_app(cfg, clf), base_url="http://127.0.0.1")


def lean_of(app) -> LeanClassify | None:
    """The lean middleware in the app's built stack, or None where it is off."""
    layer = app.middleware_stack
    while layer is not None and not isinstance(layer, LeanClassify):
        layer = getattr(layer, "app", None)
    return layer


def flat(value, key=""):
    """(path, leaf) pairs in order: a body's structure and its values, to compare numbers with a tolerance."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in flat(v, f"{key}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in flat(v, f"{key}[{i}]")]
    return [(key, value)]


def answers(c: TestClient, cases=CASES) -> list:
    out = []
    for i, (name, body, headers) in enumerate(cases):
        r = c.post("/v1/classify", content=body, headers={**headers, "X-Request-Id": f"case{i:04d}"})
        out.append((name, r.status_code, r.content, sorted(r.headers.multi_items())))
    return out


def test_the_lean_path_answers_as_the_route_does(spread_model_dir, clf, tmp_path, team):
    url, user_cases = team
    with client(spread_model_dir, clf, tmp_path / "lean", "--database-url", url) as c:
        lean = answers(c, CASES + user_cases)
        answered = lean_of(c.app).answered
        schema = c.get("/openapi.json", headers=AUTH).json()
    with client(spread_model_dir, clf, tmp_path / "route", "--no-lean-classify", "--database-url", url) as c:
        route = answers(c, CASES + user_cases)
        assert lean_of(c.app) is None
    for (name, status, body, headers), (_, want_status, want_body, want_headers) in zip(lean, route):
        assert status == want_status, name
        if status == 200:  # the torch engine's floats move in the 6th digit between two apps (thread plans), and
            # with them content-length: the numbers to 1e-4, every key, label, flag and other header exactly
            strip = lambda hs: [h for h in hs if h[0] != "content-length"]
            assert strip(headers) == strip(want_headers), name
            got, want = flat(json.loads(body)), flat(json.loads(want_body))
            assert [k for k, _ in got] == [k for k, _ in want], name
            for (k, v), (_, w) in zip(got, want):
                assert v == (pytest.approx(w, rel=1e-4) if isinstance(w, float) else w), (name, k)
        else:
            assert headers == want_headers, name
            assert body == want_body, name
    statuses = {s for _, s, _, _ in route}
    assert {200, 401, 413, 422} <= statuses  # the cases reach every kind of answer
    assert [s for name, s, _, _ in route[-2:]] == [200, 401]  # the annotator classifies; the revoked token may not
    # the valid bodies were answered by the lean path itself (the limits' 422s too: classify_texts gives them to
    # both), the rest were left to the route
    limits = {"empty list", "too many texts", "too long text", "blank text"}
    assert answered == sum(1 for name, s, _, _ in lean if s == 200 or name in limits)
    assert all(s == 422 for name, s, _, _ in lean if name in limits)
    assert "/v1/classify" in schema["paths"] and "ClassifyRequest" in schema["components"]["schemas"]


def test_the_monitor_counts_answers_of_the_lean_path(spread_model_dir, clf, tmp_path):
    with client(spread_model_dir, clf, tmp_path) as c:
        monitor = c.app.state.server.monitor
        for body in (b'{"texts": ["a b", "c d"]}', b'{"text": "e f"}', b'{"texts": ["ok", " "]}'):
            c.post("/v1/classify", content=body, headers=JSON)
        monitor.flush()
        window = monitor.windows[c.app.state.server.served.version]
        assert lean_of(c.app).answered == 3
    assert window.total == 3 and window.empty == 1  # two answers and one text of a 422 (blank) counted


class ShedBatcher:
    """The server's batcher in a state that sheds: full, closed, too slow, or failing."""

    def __init__(self, how: str):
        self.how, self.queued_texts = how, 0

    async def submit(self, *_args, **_kwargs):
        if self.how == "full":
            raise QueueFull("512 texts queued (--max-queue 512)")
        if self.how == "closed":
            raise Closed()
        if self.how == "slow":
            import asyncio

            await asyncio.sleep(5)
        raise RuntimeError("the engine broke")


SHEDS = ["starting", "full", "closed", "slow", "failing"]


def shed_answers(folder, clf, data_dir, *flags) -> list:
    """Each shed's answer to one valid text, the batcher swapped in after start-up (None: 'model is starting')."""
    out = []
    with client(folder, clf, data_dir, "--request-timeout", "0.2", *flags) as c:
        state, real = c.app.state.server, c.app.state.server.batcher
        for how in SHEDS:
            state.batcher = None if how == "starting" else ShedBatcher(how)
            r = c.post("/v1/classify", content=b'{"text": "memo"}', headers={**JSON, "X-Request-Id": how})
            out.append((how, r.status_code, r.content, sorted(r.headers.multi_items())))
        state.batcher = real  # the lifespan's shutdown closes the real one
        lean = lean_of(c.app)
        out.append(("answered here", lean.answered if lean is not None else None))
    return out


def test_sheds_answer_as_the_route_does(spread_model_dir, clf, tmp_path):
    """503 starting, 429 queue full, 503 shutting down, 504 timeout and 500: status, headers and body byte for
    byte, whichever path answers."""
    lean = shed_answers(spread_model_dir, clf, tmp_path / "lean")
    route = shed_answers(spread_model_dir, clf, tmp_path / "route", "--no-lean-classify")
    assert lean[:-1] == route[:-1]
    assert [s for _, s, _, _ in route[:-1]] == [503, 429, 503, 504, 500]
    assert lean[-1] == ("answered here", len(SHEDS)) and route[-1] == ("answered here", None)
    assert all(dict(h).get("retry-after") == "1" for _, s, _, h in route[:-1] if s != 500)
