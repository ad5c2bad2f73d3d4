"""docker/nginx-fleet.conf under overload (issue 63: 238 of 29,108 requests answered 502 through nginx at load 20-50):
replicas that shed (503/429 with Retry-After), fail or drop a request mid-way never make nginx answer 502; a
request that finds no replica to take it gets 503 with Retry-After. Read as text, and run by Debian's nginx in
front of stub replicas (tests/nginx_fixture.py; skipped without an nginx binary)."""

from __future__ import annotations

import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from nginx_fixture import FLEET_CONF, REPLICAS, local_conf, nginx_binary, running_nginx

from app.config import Config


def _conf() -> str:
    return FLEET_CONF.read_text(encoding="utf-8")


def _upstreams() -> dict[str, str]:
    return dict(re.findall(r"upstream (\w+) \{(.*?)\}", _conf(), re.DOTALL))


def _seconds(value: str) -> float:
    m = re.fullmatch(r"(\d+)(ms|s)?", value)
    return int(m.group(1)) / (1000 if m.group(2) == "ms" else 1)


def test_nginx_drops_an_idle_connection_before_the_replica_does():
    """A request sent on a connection the replica is closing (uvicorn's --keep-alive) fails mid-way: a 502 for a
    POST that nginx may not retry, and a healthy replica rested."""
    for name, body in _upstreams().items():
        assert re.search(r"keepalive \d+;", body), name
        idle = re.search(r"keepalive_timeout (\w+);", body)
        assert idle and _seconds(idle.group(1)) < Config.keep_alive_s, name


def test_every_replica_is_also_a_backup_that_is_never_rested():
    """Open-source nginx answers 502 "no live upstreams" while every server rests (fail_timeout after one 503):
    the round-robin pool lists each replica again as a backup with max_fails=0."""
    body = _upstreams()["replicas"]
    primary = re.findall(r"server (\w+):8000 max_fails=1 fail_timeout=\w+;", body)
    backup = re.findall(r"server (\w+):8000 backup max_fails=0;", body)
    assert primary == backup == list(REPLICAS)
    tries = [int(n) for n in re.findall(r"proxy_next_upstream_tries (\d+);", _conf())]
    assert tries and all(n <= len(REPLICAS) for n in tries)  # more tries than peers end in nginx's own 502


def test_every_location_on_the_replicas_answers_its_own_502_as_a_503_with_retry_after():
    conf = _conf()
    locations = re.findall(r"location ([^{]+)\{(.*?)\n        \}", conf, re.DOTALL)
    to_replicas = [(where.strip(), body) for where, body in locations if "proxy_pass http://replicas" in body]
    assert len(to_replicas) == 3
    for where, body in to_replicas:
        assert "error_page 502 =503 @shed;" in body, where
        assert ("non_idempotent" in body) == (where == "~ ^/(v1/classify|predict)$"), where  # only what changes nothing
    shed = {w.strip(): b for w, b in locations}["@shed"]
    assert "return 503 " in shed and "add_header Retry-After 1 always;" in shed


class _Stub(BaseHTTPRequestHandler):
    """A replica as nginx sees it: answers as its server's `mode` says ("ok", "shed" 503, "full" 429, "drop": closes
    the connection without an answer, as a replica killed mid-request)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _answer(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.server.seen += 1
        mode = self.server.mode
        if mode == "drop":
            self.close_connection = True
            return
        status, extra = {"ok": (200, {}), "shed": (503, {"Retry-After": "1"}), "full": (429, {"Retry-After": "1"})}[mode]
        body = b'{"model_version": "v1"}' if status == 200 else b'{"detail": "busy; retry"}'
        self.send_response(status)
        for k, v in {"content-type": "application/json", "content-length": str(len(body)), **extra}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):  # nginx closing a kept-alive connection is no error here
        pass


@pytest.fixture
def fleet(tmp_path):
    """Three stub replicas behind docker/nginx-fleet.conf; yields (nginx's URL, the three stub servers)."""
    if nginx_binary() is None:
        pytest.skip("no nginx binary (Debian: apt-get install nginx-light): the nginx runs are skipped")
    stubs = []
    for _ in REPLICAS:
        s = _Server(("127.0.0.1", 0), _Stub)
        s.mode, s.seen = "ok", 0
        threading.Thread(target=s.serve_forever, daemon=True).start()
        stubs.append(s)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        listen = free.getsockname()[1]
    conf = local_conf([s.server_address[1] for s in stubs], listen, tmp_path)
    try:
        with running_nginx(conf, tmp_path, listen):
            yield f"http://127.0.0.1:{listen}", stubs
    finally:
        for s in stubs:
            s.shutdown()
            s.server_close()


REQUESTS = [("POST", "/v1/classify", {"text": "a text"}), ("POST", "/v1/datasets/1/labels", {"record_id": 1}),
            ("GET", "/v1/models", None), ("GET", "/ui/", None)]


def _send(url: str, n: int) -> list[tuple[str, int, str | None]]:
    with httpx.Client(base_url=url, timeout=30) as c:
        return [(path, (r := c.request(method, path, json=body)).status_code, r.headers.get("retry-after"))
                for _ in range(n) for method, path, body in REQUESTS]


@pytest.mark.parametrize("modes", [("shed", "shed", "shed"), ("shed", "full", "drop"), ("drop", "drop", "drop")])
def test_replicas_that_shed_or_fail_get_503_or_429_with_retry_after_never_502(fleet, modes):
    """Before: ("shed",) * 3 answered 503 once, then 502 "no live upstreams" to everything for fail_timeout."""
    url, stubs = fleet
    for s, mode in zip(stubs, modes):
        s.mode = mode
    answers = _send(url, 8)
    assert {status for _, status, _ in answers} <= {429, 503}, answers
    assert all(retry == "1" for _, _, retry in answers), answers
    assert all(s.seen for s in stubs)  # every replica was tried, backups included, none left out as "resting"


def test_a_stale_replica_is_passed_over_and_a_full_queue_answers_429(fleet):
    """A stale replica's 503 moves a classify request on; a full queue's 429 reaches the client as it is (moving
    on would rest that replica as if dead); a write is never sent twice."""
    url, stubs = fleet
    for s, mode in zip(stubs, ("full", "shed", "ok")):
        s.mode = mode
    with httpx.Client(base_url=url, timeout=30) as c:
        classify = [c.post("/v1/classify", json={"text": "a"}).status_code for _ in range(6)]
    assert 200 in classify and 429 in classify and set(classify) <= {200, 429}, classify  # never the stale one's 503
    answers = _send(url, 8)
    assert {status for _, status, _ in answers} <= {200, 429, 503}, answers
    assert all(retry == "1" for _, status, retry in answers if status != 200), answers
    before = sum(s.seen for s in stubs)
    stubs[2].mode = "drop"  # a replica killed mid-write: the label is not sent to another one
    with httpx.Client(base_url=url, timeout=30) as c:
        for s in stubs[:2]:
            s.mode = "ok"
        answers = []
        while sum(s.seen for s in stubs) - before < 12:
            r = c.post("/v1/datasets/1/labels", json={"record_id": 1})
            answers.append((r.status_code, r.headers.get("retry-after")))
    assert {status for status, _ in answers} <= {200, 503} and (503, "1") in answers, answers
    assert sum(s.seen for s in stubs) - before == len(answers)  # one replica saw each write, the dropped ones too
