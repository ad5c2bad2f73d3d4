"""The server as an attacker or a careless client would use it (issue 24): texts the engine cannot take,
auth and the UI cookie, what /v1/model tells, and the connection bounds before any route runs.

In-process (Starlette's TestClient on create_app, the real tiny engine) so each check takes milliseconds;
the connection bounds run a real uvicorn with the app's protocol class and sub-second timeouts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
import time

import httpx
import pytest
import uvicorn
from app_testkit import free_port
from starlette.testclient import TestClient

from app.config import Config, parse_args
from app.http.batcher import MicroBatcher
from app.http.gate import SESSION_COOKIE, UiSessions
from app.http.protocol import bounded_protocol
from app.server import create_app

KEY = "sekret-key-1"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
def client(engine):
    with TestClient(base_url="http://127.0.0.1", app=create_app(Config(model="m", ui=False, api_key=KEY), engine)) as c:
        c.app_state = c.app.state.server
        yield c


def rejected_auth(c) -> float:
    line = next((x for x in c.get("/metrics", headers=AUTH).text.splitlines()
                 if x.startswith('app_rejected_total{reason="auth"}')), None)
    return float(line.split()[-1]) if line else 0.0


@pytest.mark.parametrize("body, field, message", [
    ({"text": ""}, "text", "empty text"),
    ({"text": " \n\t "}, "text", "empty text"),
    ({"texts": ["fine", "   "]}, "texts.1", "empty text"),
    ({"text": "\x00\x00\x00"}, "text", "empty text"),  # answered at 0.999 before issue 29
    ({"texts": ["fine", "\u200b\u200d\ufeff \u2060"]}, "texts.1", "empty text"),
    ({"text": "\u3164\u115f"}, "text", "empty text"),  # Hangul fillers: letters by category, blank on screen
])
def test_empty_texts_get_422_not_500(client, body, field, message):
    r = client.post("/v1/classify", json=body, headers=AUTH)
    assert r.status_code == 422 and r.json()["message"] == f"{field}: {message}"


def test_lone_surrogate_gets_422_with_request_id(client):
    r = client.post("/v1/classify", content=b'{"texts": ["ok", "a\\ud800b"]}',
                    headers={**AUTH, "Content-Type": "application/json", "X-Request-ID": "probe-1"})
    assert r.status_code == 422 and r.headers["x-request-id"] == "probe-1"
    assert r.json()["message"].startswith("texts.1: character 2 is an unpaired surrogate")


def test_a_failing_request_does_not_fail_the_others_in_its_batch():
    """One bad request in a shared batch once failed every request in it (25% of other clients' requests)."""

    def predict(texts, lengths):
        if "boom" in texts:
            raise ZeroDivisionError("bad pass")
        return [t.upper() for t in texts]

    async def main():
        b = MicroBatcher(predict, max_wait_ms=50)
        b.start()
        results = await asyncio.gather(b.submit(["a"], [1]), b.submit(["boom"], [1]), b.submit(["c", "d"], [1, 1]),
                                       return_exceptions=True)
        await b.close()
        return results

    a, boom, cd = asyncio.run(main())
    assert a == ["A"] and cd == ["C", "D"] and isinstance(boom, ZeroDivisionError)


def test_empty_api_key_refuses_to_start(monkeypatch):
    monkeypatch.delenv("ELECTRA_API_KEY", raising=False)
    for argv in (["--api-key", ""], ["--api-key", "  "]):
        with pytest.raises(SystemExit):
            parse_args(["--model", "m", *argv])
    monkeypatch.setenv("ELECTRA_API_KEY", "")
    with pytest.raises(SystemExit):
        parse_args(["--model", "m"])
    with pytest.raises(ValueError, match="empty"):
        Config(model="m", api_key="")


def test_ui_cookie_expires_is_per_start_and_ui_only(client, engine):
    login = client.post("/login", data={"key": KEY}, follow_redirects=False)
    assert login.status_code == 303
    set_cookie = login.headers["set-cookie"]
    assert "Max-Age=" in set_cookie and "HttpOnly" in set_cookie and "Secure" not in set_cookie
    token = login.cookies[SESSION_COOKIE]
    cookie = {"Cookie": f"{SESSION_COOKIE}={token}"}
    assert client.get("/ui/x", headers=cookie).status_code == 404  # past the gate (no UI mounted here)
    assert client.get("/v1/labels", headers=cookie).status_code == 401  # not a credential for the API
    behind_tls = client.post("/login", data={"key": KEY}, headers={"X-Forwarded-Proto": "https"},
                             follow_redirects=False)
    assert "Secure" in behind_tls.headers["set-cookie"]
    # Another start of the server (a new secret) does not take this cookie.
    with TestClient(base_url="http://127.0.0.1", app=create_app(Config(model="m", ui=False, api_key=KEY), engine)) as restarted:
        assert restarted.get("/ui/x", headers=cookie).status_code == 401
    # Logout revokes it on the server, not only in the browser.
    out = client.get("/logout", headers=cookie, follow_redirects=False)
    assert out.status_code == 303 and f'{SESSION_COOKIE}=""' in out.headers["set-cookie"]
    assert client.get("/ui/x", headers=cookie).status_code == 401
    expired = UiSessions(ttl_s=-5)
    assert not expired.valid(expired.issue()) and UiSessions().valid(UiSessions().issue()) is False


def test_wrong_keys_are_throttled_and_counted_and_the_right_key_still_passes(client):
    """After 10 wrong keys from one address the right key was refused too for 60 s: everyone behind one proxy
    locked out by one guesser. Now the address is slowed (each check waits, two at once), not locked."""
    client.app_state.throttle.delay_s = 0.05
    before = rejected_auth(client)
    codes = [client.post("/login", data={"key": f"guess-{i}"}).status_code for i in range(12)]
    assert codes[:10] == [401] * 10 and codes[10:] == [429, 429]
    blocked = client.get("/v1/labels", headers={"Authorization": "Bearer wrong"})
    assert blocked.status_code == 429 and int(blocked.headers["retry-after"]) > 0
    assert client.get("/v1/labels", headers=AUTH).status_code == 200  # the right key, from the same address
    assert client.post("/login", data={"key": KEY}, follow_redirects=False).status_code == 303
    assert client.get("/healthz").status_code == 200
    assert rejected_auth(client) - before >= 13


def test_a_blocked_address_gets_two_slowed_checks_at_once():
    from app.http.gate import AuthThrottle

    throttle = AuthThrottle(delay_s=0.2)

    async def main():
        return await asyncio.gather(*(throttle.slowed("10.0.0.9") for _ in range(3)), throttle.slowed("10.0.0.8"))

    start = time.monotonic()
    assert asyncio.run(main()) == [True, True, False, True] and time.monotonic() - start >= 0.2
    for client in ("10.0.0.9", "10.0.0.9", "10.0.0.8"):
        throttle.done(client)
    assert throttle._checking == {}


def _client_address_seen(settings: dict, forwarded_for: str) -> str:
    async def echo(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": scope["client"][0].encode()})

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(echo, host="127.0.0.1", port=port, log_config=None, lifespan="off",
                                           **settings))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        return httpx.get(f"http://127.0.0.1:{port}/", headers={"X-Forwarded-For": forwarded_for}).text
    finally:
        server.should_exit = True
        thread.join(10)


def test_forwarded_headers_are_trusted_only_from_named_proxies(monkeypatch):
    """uvicorn trusted X-Forwarded-For from 127.0.0.1 by default: a client could rotate it to escape the
    throttle, or spoof another address to lock that one out."""
    from app.http.gate import proxy_settings

    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "*")  # uvicorn's own variable must not switch it on either
    assert _client_address_seen(proxy_settings(Config(model="m")), "203.0.113.7") == "127.0.0.1"
    behind = parse_args(["--forwarded-allow-ips", "127.0.0.1"])
    assert _client_address_seen(proxy_settings(behind), "203.0.113.7") == "203.0.113.7"


def test_model_info_does_not_show_server_paths(engine, monkeypatch):
    report = {"source": "/srv/private/runs/model", "eval_csv": "/home/x/eval.csv", "passed": True,
              "files": {"model.onnx": {"checked": True}}}
    monkeypatch.setattr(engine, "model_folder", dataclasses.replace(engine.model_folder, report=report))
    with TestClient(base_url="http://127.0.0.1", app=create_app(Config(model="m", ui=False), engine)) as c:
        report = c.get("/v1/model").json()["export_report"]
    assert report == {"source": "model", "eval_csv": "eval.csv", "passed": True,
                      "files": {"model.onnx": {"checked": True}}}


# ---------------------------------------------------------------- connection bounds (app/http/protocol.py)
async def _echo(scope, receive, send):
    if scope["type"] != "http":
        return
    body, more = b"", True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body += message.get("body", b"")
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": str(len(body)).encode()})


@pytest.fixture(scope="module")
def bounded_url():
    port = free_port()
    config = uvicorn.Config(_echo, host="127.0.0.1", port=port, log_config=None, lifespan="off",
                            http=bounded_protocol(4096, 0.5, 0.5), timeout_keep_alive=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", port
    server.should_exit = True
    thread.join(10)


def _read_all(sock: socket.socket, limit_s: float = 5) -> tuple[bytes, float]:
    start, data = time.monotonic(), b""
    sock.settimeout(limit_s)
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            return data, time.monotonic() - start
        data += chunk


def test_headers_over_the_limit_get_431(bounded_url):
    url, port = bounded_url
    assert httpx.get(url + "/", headers={"X-Big": "a" * 10_000}).status_code == 431
    # A head that never ends is cut at the limit, not buffered.
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000)
        data, _ = _read_all(s)
    assert data.startswith(b"HTTP/1.1 431")
    # A large body under small headers is not a large header.
    r = httpx.post(url + "/", content=b"x" * 200_000)
    assert r.status_code == 200 and r.text == "200000"


def test_slow_or_idle_connections_are_closed(bounded_url):
    _, port = bounded_url
    with socket.create_connection(("127.0.0.1", port)) as s:  # headers trickle and stop
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        data, seconds = _read_all(s)
    assert data.startswith(b"HTTP/1.1 408") and seconds < 3
    with socket.create_connection(("127.0.0.1", port)) as s:  # connects and says nothing
        data, seconds = _read_all(s)
    assert data.startswith(b"HTTP/1.1 408") and seconds < 3
    with socket.create_connection(("127.0.0.1", port)) as s:  # the body stops arriving
        s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
        data, seconds = _read_all(s)
    assert b"200" not in data[:20] and seconds < 3
