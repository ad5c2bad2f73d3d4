"""Bodies under --max-body-bytes built to cost the server (issue 40, H1 and M1): a list of 340,000 nulls,
150,000 unknown keys, deep nesting, a 1.9 MB key, and 200 MB bodies on Gradio's routes. Each is refused
before anything parses it, with a small answer; a body failing in a few hundred places names the first
errors and counts them. Timings are bench/hostile_bodies.py's; these assert what is answered.
"""

from __future__ import annotations

import json
import random
import select
import socket
import threading
import time

import httpx
import pytest
import uvicorn
from app_testkit import free_port
from starlette.testclient import TestClient

from app.config import Config
from app.http.protocol import bounded_protocol
from app.server import create_app

JSON = {"Content-Type": "application/json"}
HOSTILE = {
    "nulls": ("/v1/classify", {"texts": [None] * 340_000}),
    "unknown keys": ("/v1/classify", {f"k{i}": 1 for i in range(150_000)}),
    "predict nulls": ("/predict", {"inputs": [None] * 340_000}),
    "hf parameters": ("/", {"inputs": "x", "parameters": {f"k{i}": 1 for i in range(150_000)}}),
    "nested lists": ("/v1/classify", {"texts": [[]] * 400_000}),
    "floats": ("/predict", {"inputs": [1.5e300] * 150_000}),
}


@pytest.fixture(scope="module")
def client(engine, tmp_path_factory):
    # a module's fixture runs before the per-test chdir (tests/app/conftest.py): its data dir is named, or the
    # default app-data/ lands in the project root (issue 45)
    cfg = Config(model="m", ui=False, data_dir=tmp_path_factory.mktemp("hostile-app"))
    with TestClient(base_url="http://127.0.0.1", app=create_app(cfg, engine)) as c:
        yield c


def rejected(c, reason: str) -> float:
    line = next((x for x in c.get("/metrics").text.splitlines()
                 if x.startswith(f'app_rejected_total{{reason="{reason}"}}')), None)
    return float(line.split()[-1]) if line else 0.0


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_body_of_many_values_is_refused_before_parsing_with_a_small_answer(client, name):
    """Before: 16 s and a 46.7 MB answer for the nulls, 5-8 s and 19.6 MB for the keys, on every JSON route."""
    path, body = HOSTILE[name]
    raw = json.dumps(body).encode()
    assert 1_000_000 < len(raw) <= Config().max_body_bytes
    before = rejected(client, "body_values")
    r = client.post(path, content=raw, headers=JSON)
    assert r.status_code == 422 and len(r.content) < 1000
    assert r.json()["error_count"] == 1 and "--max-texts" in r.json()["message"]
    assert rejected(client, "body_values") == before + 1  # refused by the gate: no route parsed it


def test_deep_nesting_and_chunked_bodies_are_counted_too(client):
    r = client.post("/v1/classify", content=b"[" * 100_000, headers=JSON)
    assert r.status_code == 422 and r.json()["detail"][0]["type"] == "too_long"
    chunks = (json.dumps({"texts": [None] * 50_000}).encode()[i:i + 4096] for i in range(0, 250_001, 4096))
    r = client.post("/v1/classify", content=chunks, headers=JSON)  # no Content-Length
    assert r.status_code == 422 and r.json()["error_count"] == 1


def test_a_few_hundred_errors_show_the_first_ten_and_a_count(client):
    r = client.post("/v1/classify", json={"texts": [None] * 300})
    body = r.json()
    assert r.status_code == 422 and len(body["detail"]) == 10 and body["error_count"] == 300
    assert body["message"].endswith("(and 290 more errors)") and len(r.content) < 2000
    r = client.post("/predict", json={"inputs": [7] * 200})
    assert r.status_code == 422 and len(r.json()["detail"]) == 10 and r.json()["error_count"] > 200


def test_a_huge_key_is_not_echoed_back(client):
    """Before: a 1.9 MB key came back twice (3.8 MB)."""
    r = client.post("/v1/classify", json={"x" * 1_900_000: 1})
    assert r.status_code == 422 and len(r.content) < 1000 and "…" in r.json()["detail"][0]["loc"][1]


def test_texts_full_of_commas_quotes_and_backslashes_still_pass(client):
    """The count is of values, not of characters: 64 texts of 4,000 separators each are one value each."""
    texts = [("오늘, [메모] {a}, \"q\" \\\\ \\\" ," * 400)[:4000] for _ in range(64)]
    r = client.post("/v1/classify", json={"texts": texts})
    assert r.status_code == 200 and len(r.json()["predictions"]) == 64


def _separators_outside_strings(text: str) -> int:
    """The reference: a character-by-character scan of a JSON text."""
    n, inside, escaped = 0, False, False
    for ch in text:
        if inside:
            inside = escaped or ch != '"'
            escaped = not escaped and ch == "\\"
        elif ch == '"':
            inside = True
        elif ch in ",[{":
            n += 1
    return n


def test_the_count_agrees_with_a_character_scan_on_random_bodies():
    from app.http.body_shape import json_values

    rng = random.Random(4)
    pieces = ['"', "\\", ",", "[", "{", "a", "é", "\n"]

    def value(depth=0):
        kind = rng.random()
        if depth < 4 and kind < 0.2:
            return [value(depth + 1) for _ in range(rng.randint(0, 30))]
        if depth < 4 and kind < 0.35:
            return {"".join(rng.choices(pieces, k=rng.randint(0, 8))): value(depth + 1) for _ in range(rng.randint(0, 9))}
        return "".join(rng.choices(pieces, k=rng.randint(0, 3000)))

    for _ in range(40):
        text = json.dumps(value(), ensure_ascii=rng.random() < 0.5)
        want = _separators_outside_strings(text)
        for limit in {want, max(want - 1, 0), want // 2, want + 1}:  # the separators in strings do not count
            assert (json_values(text.encode(), limit) > limit) == (want > limit), (limit, want)


# ---------------------------------------------------------------- M1: Gradio's routes, on a real server
@pytest.fixture(scope="module")
def real_server(engine, tmp_path_factory):
    port = free_port()
    app = create_app(Config(model="m", ui=False, data_dir=tmp_path_factory.mktemp("hostile-real")), engine)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None,
                                           http=bounded_protocol(64 * 1024, 10, 10)))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    yield port
    server.should_exit = True
    thread.join(10)


def _send_until_answered(port: int, head: bytes, chunk: bytes, limit: int) -> tuple[bytes, int]:
    """Send `head`, then `chunk` over and over until the server answers (or `limit` bytes went): (answer, sent)."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(head)
        sent = 0
        while sent < limit and not select.select([s], [], [], 0)[0]:
            try:
                s.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(chunk)
        s.settimeout(5)
        try:
            return s.recv(4096), sent
        except ConnectionResetError:
            return b"", sent


@pytest.mark.parametrize("path", ["/ui/gradio_api/queue/join", "/ui/gradio_api/call/classify",
                                  "/ui/gradio_api/run/predict"])
def test_a_large_ui_body_gets_413_without_being_read(real_server, path):
    """Before: two 200 MB bodies on /ui/gradio_api/queue/join took the server from 712 MB to 3.35 GB."""
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {200 << 20}\r\n\r\n").encode()
    answer, sent = _send_until_answered(real_server, head, b" " * 65536, 200 << 20)
    assert answer.startswith(b"HTTP/1.1 413") and sent < 50 << 20
    chunked = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               "Transfer-Encoding: chunked\r\n\r\n").encode()
    before = _refused_for_size(real_server)
    answer, sent = _send_until_answered(real_server, chunked, b"10000\r\n" + b" " * 65536 + b"\r\n", 200 << 20)
    # Cut at --max-body-bytes, not buffered whole (what was sent past it sits in the sockets' buffers): answered
    # 413 and closed while the client still sends (its system may report the close as a reset before the
    # answer is read, so the server's count says it too).
    assert sent < 50 << 20 and (answer.startswith(b"HTTP/1.1 413") or answer == b"")
    assert _refused_for_size(real_server) == before + 1


def _refused_for_size(port: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    line = next((x for x in text.splitlines() if x.startswith('app_rejected_total{reason="body_size"}')), None)
    return float(line.split()[-1]) if line else 0.0


def test_a_ui_event_of_many_values_is_refused(real_server):
    body = json.dumps({"data": [None] * 100_000, "fn_index": 0, "session_hash": "x"}).encode()
    head = (f"POST /ui/gradio_api/queue/join HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", real_server)) as s:
        s.sendall(head + body)
        s.settimeout(5)
        answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 422") and b"UI event" in answer
