"""--server-timing (app/http/server_timing.py): each answer says where its time went inside the server, stages that
nest as the request path does; off by default."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from app.config import parse_args
from app.http.server_timing import STAGES, header
from app.server import create_app
from serving.engine import Classifier


def stages(response) -> dict[str, float]:
    out = {}
    for part in response.headers["server-timing"].split(","):
        name, _, dur = part.strip().partition(";dur=")
        out[name] = float(dur)
    return out


@pytest.fixture(scope="module")
def clf(spread_model_dir):
    return Classifier.load(spread_model_dir, provider="torch")


def client(folder, clf, tmp_path, *flags) -> TestClient:
    cfg = parse_args(["--model", str(folder), "--no-ui", "--data-dir", str(tmp_path), *flags])
    return TestClient(create_app(cfg, clf), base_url="http://127.0.0.1")


def test_each_classify_answer_times_its_stages_inside_the_server(spread_model_dir, clf, tmp_path):
    with client(spread_model_dir, clf, tmp_path, "--server-timing") as c:
        got = [stages(c.post("/v1/classify", json={"texts": ["꿈에서 봤다", "메모 기록 내일"]})) for _ in range(5)]
        health = c.get("/healthz")
    for s in got:
        assert list(s) == [*STAGES, "app"] and all(v >= 0 for v in s.values())
        # they nest: the passes inside the engine's call, that inside its batch, all inside the request
        assert s["pass"] > 0 and s["pass"] <= s["engine"] <= s["batch"]
        assert s["tok"] + s["queue"] + s["batch"] <= s["app"] + 0.01  # header rounding: 3 decimals of a ms
    assert list(stages(health)) == ["app"]  # a route that does not classify: the request's whole time only


def test_no_header_by_default(spread_model_dir, clf, tmp_path):
    with client(spread_model_dir, clf, tmp_path) as c:
        r = c.post("/v1/classify", json={"texts": ["꿈에서 봤다"]})
    assert r.status_code == 200 and "server-timing" not in r.headers


def test_the_header_is_milliseconds_in_stage_order():
    assert header({"pass": 0.002, "tok": 0.0005}, 0.01) == b"tok;dur=0.500, pass;dur=2.000, app;dur=10.000"
