"""Existing Hugging Face clients against a real `python -m app` (conftest.py): `InferenceClient`'s
text_classification (`POST /`) and text-embeddings-inference's `POST /predict`, on the same engine,
limits and auth as /v1/classify."""

from __future__ import annotations

import httpx
import pytest
from app_testkit import API_KEY, metric
from huggingface_hub import InferenceClient
from huggingface_hub.errors import HfHubHTTPError

TEXTS = ["꿈에서 봤다 오늘", "에러 발생했다 회의", "메모 약속 내일"]


def ranked(engine, text: str) -> list[tuple[str, float]]:
    probs = engine.predict([text])[0].probabilities
    return sorted(probs.items(), key=lambda kv: -kv[1])


def test_inference_client_text_classification(server, engine):
    client = InferenceClient(model=server.url, timeout=30)
    for text in TEXTS:
        out = client.text_classification(text)
        want = ranked(engine, text)
        assert [o.label for o in out] == [label for label, _ in want]
        assert [o.score for o in out] == pytest.approx([score for _, score in want], abs=5e-4)
    top = client.text_classification(TEXTS[1], top_k=2)
    assert [o.label for o in top] == [label for label, _ in ranked(engine, TEXTS[1])[:2]]


def test_inference_api_list_and_bad_parameters(server, engine):
    r = httpx.post(server.url + "/", json={"inputs": TEXTS, "parameters": {"top_k": 1}}, timeout=30)
    assert r.status_code == 200, r.text
    assert [[p["label"] for p in row] for row in r.json()] == [[engine.predict([t])[0].label] for t in TEXTS]
    r = httpx.post(server.url + "/", json={"inputs": "x", "parameters": {"function_to_apply": "sigmoid"}})
    assert r.status_code == 422 and "function_to_apply" in r.json()["message"]


def test_tei_predict_single_and_batch(server, engine):
    r = httpx.post(server.url + "/predict", json={"inputs": TEXTS[0]}, timeout=30)
    assert r.status_code == 200, r.text
    want = ranked(engine, TEXTS[0])
    assert [p["label"] for p in r.json()] == [label for label, _ in want]
    assert [p["score"] for p in r.json()] == pytest.approx([s for _, s in want], abs=5e-4)
    batched = 'app_batch_size_texts_sum'
    before = metric(httpx.get(server.url + "/metrics").text, batched)
    r = httpx.post(server.url + "/predict", json={"inputs": TEXTS, "truncate": True}, timeout=30)
    assert r.status_code == 200, r.text
    # through the same micro-batcher as /v1/classify: its batch histogram counted these texts
    assert metric(httpx.get(server.url + "/metrics").text, batched) >= before + len(TEXTS)
    assert [row[0]["label"] for row in r.json()] == [engine.predict([t])[0].label for t in TEXTS]
    assert httpx.post(server.url + "/predict", json={"inputs": "x", "raw_scores": True}).status_code == 422


def test_same_limits_as_classify(server):
    r = httpx.post(server.url + "/predict", json={"inputs": ["x"] * 65})
    assert r.status_code == 422 and "--max-texts" in r.json()["message"] and "inputs" in r.json()["message"]
    r = httpx.post(server.url + "/", json={"inputs": "x" * 5001})
    assert r.status_code == 422 and "--max-chars" in r.json()["message"]
    assert httpx.post(server.url + "/predict", json={"inputs": []}).status_code == 422
    assert httpx.post(server.url + "/predict", json={"inputs": "x", "typo": 1}).status_code == 422


def test_same_auth_as_classify(strict_server):
    with pytest.raises(HfHubHTTPError) as e:
        InferenceClient(model=strict_server.url, timeout=30).text_classification("x")
    assert e.value.response.status_code == 401
    assert httpx.post(strict_server.url + "/predict", json={"inputs": "x"}).status_code == 401
    # With the key the request passes the gate and reaches the batcher, which on this server holds a
    # forming batch 1.5 s against a 1 s --request-timeout: 504 or, when it joins a batch already due, 200.
    try:
        out = InferenceClient(model=strict_server.url, token=API_KEY, timeout=30).text_classification("x")
        assert out and out[0].score >= out[-1].score
    except HfHubHTTPError as e:
        assert e.response.status_code == 504, e
