"""CORS when asked for, in-process (a configuration check; the real-process tests cover the default)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.config import Config, parse_args
from app.server import create_app
from serving.engine import Prediction


class FakeClassifier:
    batch_tokens = 512  # what the engine settled at load
    call_overhead_tokens = 12.0  # what the engine measured; it plans its own passes

    def __init__(self):
        self.labels = ["a", "b"]

    def info(self):
        return {"name": "fake", "labels": self.labels, "provider": "cpu"}

    def encode(self, texts):
        return [[0] * (len(t.split()) + 2) for t in texts]

    def predict_encoded(self, seqs, top_k=None):
        return [Prediction("a", 0.75, {"a": 0.75, "b": 0.25}) for _ in seqs]


def test_allowed_origin_gets_cors_headers_and_preflight_skips_auth():
    cfg = Config(model="m", ui=False, api_key="k", cors_origins=("https://app.example",))
    with TestClient(base_url="http://127.0.0.1", app=create_app(cfg, FakeClassifier())) as client:
        pre = client.options("/v1/classify", headers={"Origin": "https://app.example",
                                                      "Access-Control-Request-Method": "POST",
                                                      "Access-Control-Request-Headers": "authorization,content-type"})
        assert pre.status_code == 200  # browsers send preflights without credentials
        assert pre.headers["access-control-allow-origin"] == "https://app.example"
        r = client.post("/v1/classify", json={"text": "x"},
                        headers={"Origin": "https://app.example", "Authorization": "Bearer k"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"
        assert r.json()["predictions"][0]["label"] == "a"
        other = client.post("/v1/classify", json={"text": "x"},
                            headers={"Origin": "https://evil.example", "Authorization": "Bearer k"})
        assert "access-control-allow-origin" not in other.headers
        assert client.post("/v1/classify", json={"text": "x"}).status_code == 401


@pytest.mark.parametrize("origin, says", [
    ("*", "would let every web page read"),
    ("null", "every sandboxed frame and local file"),
    ("NULL", "every sandboxed frame and local file"),
    ("app.example", "is not an origin"),
    ("https://app.example/path", "has a path"),
    ("https://user:pw@app.example", "is not an origin"),
    ("https://app.example:99999", "a port that is not one"),
])
def test_an_origin_that_is_not_one_site_is_refused_at_start(origin, says, capsys):
    """Issue 40, "not yet tried": `--cors-origin '*'` let every web page read a loopback server's GET answers
    (the registry, the jobs); `null` let any sandboxed frame or local file write (POST 200)."""
    with pytest.raises(SystemExit):
        parse_args(["--model", "m", "--cors-origin", "https://ok.example", "--cors-origin", origin])
    assert says in capsys.readouterr().err
    with pytest.raises(ValueError, match=says):  # a server built in code: the same rule
        create_app(Config(model="m", ui=False, cors_origins=(origin,)), FakeClassifier())


def test_an_origin_written_with_capitals_or_a_slash_matches_what_browsers_send():
    cfg = parse_args(["--model", "m", "--cors-origin", "HTTPS://App.Example/"])
    with TestClient(base_url="http://127.0.0.1", app=create_app(cfg, FakeClassifier())) as client:
        r = client.post("/v1/classify", json={"text": "x"}, headers={"Origin": "https://app.example"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"
        null = client.post("/v1/classify", json={"text": "x"}, headers={"Origin": "null"})
        assert null.status_code == 403 and "access-control-allow-origin" not in null.headers
