"""The JSON API against a real `python -m app` process on 127.0.0.1 (see conftest.py)."""

from __future__ import annotations

import json
import random
import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from app_testkit import metric

TEXTS = ["꿈에서 봤다 오늘", "에러 발생했다 회의", "메모 약속 내일", "dream diary", "error memo", "좋은 날씨 일기"]


def classify(server, body, **kw) -> httpx.Response:
    return httpx.post(server.url + "/v1/classify", json=body, timeout=30, **kw)


def assert_matches_engine(pred: dict, expected) -> None:
    # Padding to a batch's longest text moves float32 sums by ~1e-5; another text's answer is ~1e-2 away.
    assert pred["label"] == expected.label
    assert pred["score"] == pytest.approx(expected.score, abs=5e-4)
    assert pred["probabilities"] == pytest.approx(expected.probabilities, abs=5e-4)


def test_classify_answers_every_text_in_order(server, engine):
    r = classify(server, {"texts": TEXTS})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == engine.info()["name"]
    assert len(body["predictions"]) == len(TEXTS)
    for pred, text in zip(body["predictions"], TEXTS):
        assert_matches_engine(pred, engine.predict([text])[0])
        assert set(pred["probabilities"]) == set(engine.labels)
        assert sum(pred["probabilities"].values()) == pytest.approx(1, abs=1e-4)


def test_single_text_and_top_k(server, engine):
    r = classify(server, {"text": TEXTS[1], "top_k": 2})
    assert r.status_code == 200, r.text
    (pred,) = r.json()["predictions"]
    probs = list(pred["probabilities"].items())
    assert len(probs) == 2 and probs[0][0] == pred["label"] and probs[0][1] >= probs[1][1]
    assert pred["label"] == engine.predict([TEXTS[1]])[0].label


def test_labels_model_health_ready(server, engine):
    assert httpx.get(server.url + "/v1/labels").json() == {"labels": engine.labels}
    model = httpx.get(server.url + "/v1/model").json()
    assert model["labels"] == engine.labels and model["backend"] == "torch" and model["provider"] == "cpu"
    assert model["limits"] == {"max_texts": 64, "max_chars": 5000, "max_body_bytes": 2 * 1024 * 1024,
                               "max_queue": 512, "request_timeout_s": 30.0}
    assert model["batching"]["enabled"] is True
    assert model["batching"]["engine_batch_tokens"] == 512  # no flag, CPU: the CPU default
    assert model["batching"]["call_overhead_tokens"] >= 0  # measured before /readyz said ready
    assert httpx.get(server.url + "/healthz").json() == {"status": "ok"}
    assert httpx.get(server.url + "/readyz").json() == {"status": "ready"}
    assert httpx.get(server.url + "/docs").status_code == 200
    assert "/v1/classify" in httpx.get(server.url + "/openapi.json").json()["paths"]


def test_metrics_count_requests_batches_and_queue(server):
    before = httpx.get(server.url + "/metrics").text
    assert classify(server, {"texts": TEXTS[:3]}).status_code == 200
    assert classify(server, {"texts": 5}).status_code == 422
    after = httpx.get(server.url + "/metrics").text
    ok = {"name": "app_requests_total", "endpoint": "/v1/classify", "status": "200"}
    bad = {"name": "app_requests_total", "endpoint": "/v1/classify", "status": "422"}
    assert metric(after, **ok) == metric(before, **ok) + 1
    assert metric(after, **bad) == metric(before, **bad) + 1
    assert metric(after, "app_batch_size_texts_sum") >= metric(before, "app_batch_size_texts_sum") + 3
    assert metric(after, "app_request_duration_seconds_count", endpoint="/v1/classify") >= 2
    assert "app_batch_tokens_bucket" in after and "app_request_duration_seconds_bucket" in after
    assert metric(after, "app_queue_depth_texts") == 0
    assert after.count("app_requests_total{") < 40  # arbitrary paths must not create series
    httpx.get(server.url + "/no/such/path/" + "x" * 20)
    assert 'endpoint="/no/such' not in httpx.get(server.url + "/metrics").text


@pytest.mark.parametrize("body, field", [
    ({"texts": "one string"}, "texts"),
    ({"texts": ["ok", 3]}, "texts.1"),
    ({"texts": ["ok"], "top_k": "2"}, "top_k"),
    ({"texts": ["ok"], "top_k": 0}, "top_k"),
    ({"txt": ["typo"]}, "txt"),
    ({"texts": ["a"], "text": "b"}, "body"),
    ({}, "body"),
    ({"texts": []}, "texts"),
    ({"text": None}, "body"),
    (["a", "b"], "body"),
])
def test_invalid_fields_get_422_naming_the_field(server, body, field):
    r = classify(server, body)
    assert r.status_code == 422, r.text
    assert r.json()["message"].startswith(field + ":"), r.json()


def test_invalid_json_and_wrong_content(server):
    r = httpx.post(server.url + "/v1/classify", content=b'{"texts": ["a",', headers={"content-type": "application/json"})
    assert r.status_code == 422 and "invalid JSON" in r.json()["message"]
    r = httpx.post(server.url + "/v1/classify", content="\xff\xfe garbage".encode("latin-1"),
                   headers={"content-type": "application/json"})
    assert r.status_code == 422
    # a body that is not a JSON object says what it should be, not pydantic's "valid dictionary"
    for body, route, example in (('["a", "b"]', "/v1/classify", '{"texts": ["..."]}'),
                                 ("plain text", "/v1/classify", '{"texts": ["..."]}'),
                                 ('"one text"', "/predict", '{"inputs": "..."}')):
        r = httpx.post(server.url + route, content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422 and f"the body must be a JSON object like {example}" in r.json()["message"]
        assert "valid dictionary" not in r.text
    assert httpx.get(server.url + "/v1/classify").status_code == 405
    assert httpx.get(server.url + "/v2/whatever").status_code == 404


def test_limit_texts_per_request(server):
    assert classify(server, {"texts": ["메모"] * 64}).status_code == 200
    r = classify(server, {"texts": ["메모"] * 65})
    assert r.status_code == 422 and r.json()["message"].startswith("texts:") and "64" in r.json()["message"]


def test_limit_characters_per_text(server):
    assert classify(server, {"text": "꿈" * 5000}).status_code == 200
    r = classify(server, {"texts": ["ok", "꿈" * 5001]})
    assert r.status_code == 422 and r.json()["message"].startswith("texts.1:") and "5000" in r.json()["message"]


def test_limit_body_size_413(server):
    limit = 2 * 1024 * 1024
    big = json.dumps({"texts": ["a" * 1000] * (limit // 1000)}).encode()
    assert len(big) > limit
    r = httpx.post(server.url + "/v1/classify", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and "max-body-bytes" in r.json()["detail"]

    # no Content-Length: the limit must hold for streamed bodies too (a few long values, so that the byte limit
    # and not the count of JSON values, app/hostile bodies, is what refuses it)
    long = json.dumps({"texts": ["a" * (limit // 2)] * 3}).encode()

    def chunks():
        for i in range(0, len(long), 65536):
            yield long[i : i + 65536]

    r = httpx.post(server.url + "/v1/classify", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert classify(server, {"text": "still alive"}).status_code == 200


def test_concurrent_requests_get_their_own_answers(server, engine):
    rng = random.Random(0)
    words = ["꿈", "에러", "메모", "회의", "내일", "오늘", "dream", "error", "memo", "일기", "약속", "날씨"]
    texts = list(dict.fromkeys(" ".join(rng.sample(words, rng.randint(1, 5))) for _ in range(50)))
    expected = {t: engine.predict([t])[0] for t in texts}
    # Routing can only be checked if answers differ from text to text.
    assert len({round(p.score, 2) for p in expected.values()}) > len(texts) // 4
    requests = [rng.sample(texts, rng.randint(1, 4)) for _ in range(64)]
    before = httpx.get(server.url + "/metrics").text

    def send(batch):
        with httpx.Client(timeout=60) as c:
            return batch, c.post(server.url + "/v1/classify", json={"texts": batch})

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(send, requests))
    for batch, r in results:
        assert r.status_code == 200, r.text
        for text, pred in zip(batch, r.json()["predictions"]):
            assert_matches_engine(pred, expected[text])
    after = httpx.get(server.url + "/metrics").text
    n_texts = metric(after, "app_batch_size_texts_sum") - metric(before, "app_batch_size_texts_sum")
    n_batches = metric(after, "app_batch_size_texts_count") - metric(before, "app_batch_size_texts_count")
    assert n_texts == sum(map(len, requests))
    assert n_batches < len(requests)  # requests were coalesced, not run one forward each


def test_request_id_and_structured_log(server):
    r = classify(server, {"texts": ["메모"]}, headers={"X-Request-ID": "trace-abc-123"})
    assert r.headers["x-request-id"] == "trace-abc-123"
    assert re.fullmatch(r"[0-9a-f]{16}", httpx.get(server.url + "/healthz").headers["x-request-id"])
    records = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    mine = [x for x in records if x.get("request_id") == "trace-abc-123"]
    assert mine and mine[0]["path"] == "/v1/classify" and mine[0]["status"] == 200
    assert mine[0]["texts"] == 1 and mine[0]["ms"] > 0 and mine[0]["method"] == "POST"


def test_cors_is_off_by_default(server):
    r = httpx.options(server.url + "/v1/classify", headers={
        "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in r.headers
    r = classify(server, {"text": "x"}, headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in r.headers


def test_docs_load_nothing_from_outside(server):
    """/docs and /redoc work air-gapped: every script, stylesheet and icon they reference is served here."""
    for page in ("/docs", "/redoc"):
        html = httpx.get(server.url + page).text
        refs = re.findall(r"""(?:src|href|url)\s*[=:]\s*['"]([^'"]+)['"]""", html)
        assert any(r.endswith(".js") for r in refs), (page, refs)
        outside = [u for u in re.findall(r"""https?://[^\s'"<>)]+""", html) if "127.0.0.1" not in u]
        assert not outside, (page, outside)
        for ref in refs:
            r = httpx.get(server.url + ref if ref.startswith("/") else f"{server.url}/{ref}")
            assert r.status_code == 200 and len(r.content) > 100, (page, ref, r.status_code)


def test_a_list_under_text_points_to_texts(server):
    r = classify(server, {"text": ["hello"]})
    assert r.status_code == 422
    assert r.json()["message"] == "text: a list of texts goes under 'texts'; 'text' takes one string"
    r = classify(server, {"texts": "hello"})
    assert r.status_code == 422 and "goes under 'text'" in r.json()["message"]
    assert classify(server, {"text": 5}).json()["message"] == "text: Input should be a valid string"
