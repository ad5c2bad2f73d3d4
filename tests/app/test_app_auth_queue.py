"""Auth, the bounded queue and the per-request timeout, on the "strict" server: --api-key, a forming batch
held for 1.5 s, a queue of 4 texts and a 1 s timeout (conftest.py)."""

from __future__ import annotations

import threading
import time

import httpx
from app_testkit import API_KEY

AUTH = {"Authorization": f"Bearer {API_KEY}"}


def test_api_needs_the_key(strict_server):
    url = strict_server.url
    for path in ("/v1/labels", "/v1/model", "/metrics", "/docs"):
        r = httpx.get(url + path)
        assert r.status_code == 401, path
        assert r.headers["www-authenticate"] == "Bearer"
    assert httpx.post(url + "/v1/classify", json={"text": "x"}).status_code == 401
    assert httpx.get(url + "/v1/labels", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(url + "/v1/labels", headers={"Authorization": API_KEY}).status_code == 401  # no scheme
    assert httpx.get(url + "/v1/labels", headers=AUTH).status_code == 200
    assert httpx.get(url + "/healthz").status_code == 200  # liveness probes carry no secrets
    # nor readiness probes (compose.fleet.yaml, deploy/k8s): a replica behind a key was never ready (issue 43)
    assert httpx.get(url + "/readyz").json() == {"status": "ready"}


def test_ui_needs_the_key_too(strict_server):
    url = strict_server.url
    r = httpx.get(url + "/ui/", headers={"Accept": "text/html"})
    assert r.status_code == 401 and 'action="/login"' in r.text
    assert httpx.get(url + "/ui/config").status_code == 401
    assert httpx.get(url + "/ui/gradio_api/info").status_code == 401
    assert httpx.get(url + "/ui/", headers=AUTH).status_code == 200
    bad = httpx.post(url + "/login", data={"key": "wrong"})
    assert bad.status_code == 401 and not bad.cookies
    good = httpx.post(url + "/login", data={"key": API_KEY})
    assert good.status_code == 303 and good.headers["location"] == "/ui/"
    cookie = good.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and API_KEY not in cookie
    with httpx.Client(cookies=good.cookies) as browser:
        assert browser.get(url + "/ui/").status_code == 200
        assert browser.get(url + "/ui/config").status_code == 200


def test_full_queue_gets_429_and_slow_answers_504(strict_server):
    url = strict_server.url
    first: dict = {}

    def hold_the_queue():
        start = time.monotonic()
        first["response"] = httpx.post(url + "/v1/classify", json={"texts": ["a", "b", "c"]}, headers=AUTH,
                                       timeout=30)
        first["seconds"] = time.monotonic() - start

    t = threading.Thread(target=hold_the_queue)
    t.start()
    time.sleep(0.4)  # the 3 texts now wait in a forming batch (1 s); the queue holds 4
    depth = httpx.get(url + "/metrics", headers=AUTH).text
    assert "app_queue_depth_texts 3.0" in depth
    r = httpx.post(url + "/v1/classify", json={"texts": ["d", "e"]}, headers=AUTH, timeout=30)
    assert r.status_code == 429
    assert r.headers["retry-after"] == "1" and "queue" in r.json()["detail"]
    assert httpx.get(url + "/healthz").status_code == 200  # the server itself stays responsive
    t.join()
    # The forming batch starts at 1 s and answers after its pass; the caller's 1 s timeout comes first.
    assert first["response"].status_code == 504 and "request-timeout" in first["response"].json()["detail"]
    assert first["response"].headers["retry-after"] == "1"
    assert 0.9 < first["seconds"] < 1.45
    # The queue empties once the batch runs, and the server takes work again.
    deadline = time.monotonic() + 5
    while "app_queue_depth_texts 0.0" not in httpx.get(url + "/metrics", headers=AUTH).text:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    metrics = httpx.get(url + "/metrics", headers=AUTH).text
    assert 'app_rejected_total{reason="queue_full"} 1.0' in metrics
    assert 'app_rejected_total{reason="timeout"}' in metrics
    assert 'app_requests_total{endpoint="/v1/classify",status="429"} 1.0' in metrics
