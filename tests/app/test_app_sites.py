"""Cross-site requests (issue 29, app/http/origin.py): a page on another site, or one reached through DNS
rebinding, may not retrain or switch a loopback server with no key, nor read it under a foreign name."""

from __future__ import annotations

import pytest
from app_testkit import two_version_registry
from starlette.testclient import TestClient

from app.config import Config, parse_args
from app.http.origin import SiteRule
from app.server import create_app, load_classifier

EVIL = "http://evil.example"


@pytest.fixture
def two_versions(spread_model_dir, tmp_path):
    return two_version_registry(spread_model_dir, tmp_path)


def _client(reg, tmp_path, base="http://127.0.0.1:8000", **kw):
    cfg = Config(ui=False, data_dir=tmp_path, models_dir=reg.root, train_model="m", **kw)
    app = create_app(cfg, load_classifier(cfg, reg.path("v1")), registry=reg, version="v1")
    return TestClient(app, base_url=base)


def test_a_foreign_page_cannot_switch_or_retrain_the_model(two_versions, tmp_path):
    reg = two_versions
    with _client(reg, tmp_path) as c:
        # the probe from the issue: a foreign Host, a foreign Origin, text/plain
        r = c.post("/v1/models/v2/activate", content=b"{}", headers={
            "Host": "evil.example:8000", "Origin": EVIL, "Content-Type": "text/plain"})
        assert r.status_code == 421 and "--allowed-host" in r.json()["detail"]
        # a page on another site, the right Host (a plain cross-site form or no-cors fetch)
        r = c.post("/v1/models/v2/activate", headers={"Origin": EVIL})
        assert r.status_code == 403 and "evil.example" in r.json()["detail"]
        r = c.post("/v1/train", content=b'{"folds": 2}', headers={"Origin": EVIL, "Content-Type": "text/plain"})
        assert r.status_code == 403
        r = c.post("/v1/train", headers={"Sec-Fetch-Site": "cross-site"})
        assert r.status_code == 403
        assert c.delete("/v1/models/v2", headers={"Origin": "http://127.0.0.1:3000"}).status_code == 403  # another port
        assert c.post("/v1/models/v2/activate", headers={"Origin": "null"}).status_code == 403
        # JSON only on API writes, whoever sends them
        r = c.post("/v1/train", content=b'{"folds": 2}', headers={"Content-Type": "text/plain"})
        assert r.status_code == 415 and "application/json" in r.json()["detail"]
        assert c.post("/v1/classify", content=b"text=x",
                      headers={"Content-Type": "application/x-www-form-urlencoded"}).status_code == 415
        assert reg.active() == "v1" and c.get("/v1/model").json()["version"] == "v1"
        assert c.get("/v1/model", headers={"Host": "evil.example"}).status_code == 421  # rebinding: no reads either
        assert c.get("/healthz", headers={"Host": "10.0.0.7:8000"}).status_code == 200  # probes by pod IP
        # the server's own pages, and clients that are not browsers, go on as before
        r = c.post("/v1/models/v2/activate", headers={"Origin": "http://127.0.0.1:8000",
                                                      "Sec-Fetch-Site": "same-origin"})
        assert r.status_code == 200 and r.json()["active"] == "v2"
        assert c.post("/v1/models/v1/activate").status_code == 200
        assert c.post("/v1/classify", json={"text": "꿈에서 봤다"}, headers={"Host": "localhost:8000"}).status_code == 200


def test_named_hosts_and_cors_origins(two_versions, tmp_path):
    with _client(two_versions, tmp_path, base="http://models.internal", host="0.0.0.0",
                 allowed_hosts=("models.internal",), cors_origins=("https://app.example",), allow_admin=True) as c:
        assert c.get("/v1/model").status_code == 200
        assert c.get("/v1/model", headers={"Host": "evil.example"}).status_code == 421
        assert c.post("/v1/models/v2/activate", headers={"Origin": "https://app.example"}).status_code == 200
        assert c.post("/v1/models/v1/activate", headers={"Origin": EVIL}).status_code == 403
    with _client(two_versions, tmp_path, base="http://203.0.113.5:8000", host="0.0.0.0", allow_admin=True) as c:
        assert c.get("/v1/model").status_code == 200  # a wildcard address without --allowed-host: any name
        assert c.post("/v1/models/v2/activate", headers={"Origin": EVIL}).status_code == 403  # still no cross-site
    assert parse_args(["--allowed-host", "a.example", "--allowed-host", "b.example"]).allowed_hosts == (
        "a.example", "b.example")


@pytest.mark.parametrize("origin, host, same", [
    ("http://127.0.0.1:8000", "127.0.0.1:8000", True),
    ("http://localhost", "localhost", True),
    ("http://localhost", "localhost:80", True),
    ("https://app.example", "app.example", True),
    ("https://app.example", "app.example:80", False),
    ("http://[::1]:8000", "[::1]:8000", True),
    ("http://127.0.0.1:3000", "127.0.0.1:8000", False),
    ("http://evil.example:8000", "127.0.0.1:8000", False),
    ("null", "127.0.0.1:8000", False),
])
def test_same_origin_rule(origin, host, same):
    assert SiteRule._same_origin(origin, host) is same
