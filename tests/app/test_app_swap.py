"""Switching versions on a running server (app/versions/swap.py): under load no request fails and every answer names
the old or the new version; a version that cannot load is not switched to and the old one keeps serving."""

from __future__ import annotations

import shutil
import sys
import threading
import time

import httpx
import pytest
from app_testkit import Server, free_port, metric

from app.versions.models import main as models_cli
from app.versions.registry import Registry


@pytest.fixture(scope="module")
def swap_server(spread_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("swap")
    reg = Registry(root / "models")
    reg.set_active(reg.register_folder(spread_model_dir)[0])
    for name, change in (("v2", None), ("v3", "truncated")):
        folder = root / f"src-{name}"
        shutil.copytree(spread_model_dir, folder)
        (folder / "note.txt").write_text(name)
        if change == "truncated":  # an ONNX file cut short, as a crashed copy would leave it
            (folder / "model.onnx").write_bytes(b"\x08\x07\x12\x04onnx" + b"\x00" * 50)
        assert reg.register_folder(folder) == (name, True)
    port = free_port()
    server = Server([sys.executable, "-m", "app", "--models-dir", str(reg.root), "--port", str(port), "--no-ui"],
                    root, port)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def test_swap_under_load_never_fails_a_request(swap_server):
    url = swap_server.url
    stop, results, lock = threading.Event(), [], threading.Lock()

    def client(i):
        with httpx.Client(timeout=30) as c:
            while not stop.is_set():
                sent = time.monotonic()
                r = c.post(url + "/v1/classify", json={"texts": [f"꿈에서 봤다 {i}", "서버 오류 발생"]})
                version = r.json().get("model_version") if r.status_code == 200 else None
                with lock:
                    results.append((r.status_code, version, sent))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.0)
        switched = []
        for version in ("v2", "v1", "v2"):
            r = httpx.post(url + f"/v1/models/{version}/activate", timeout=120)
            assert r.status_code == 200, r.text
            switched.append(time.monotonic())
            time.sleep(0.7)
    finally:
        stop.set()
        for t in threads:
            t.join()
    statuses = {s for s, _, _ in results}
    assert statuses == {200}, f"statuses seen: {statuses}"
    assert {v for _, v, _ in results} == {"v1", "v2"}
    # every request sent after the last switch returned was answered by v2 (one sent before may finish on v1)
    late = [v for _, v, t in results if t > switched[-1]]
    assert late and set(late) == {"v2"}
    assert len(results) > 100
    body = httpx.get(url + "/v1/model").json()
    assert body["version"] == "v2"
    assert metric(httpx.get(url + "/metrics").text, "app_model_info", version="v2") == 1
    assert metric(httpx.get(url + "/metrics").text, "app_model_info", version="v1") == 0
    r = httpx.post(url + "/predict", json={"inputs": "꿈에서 봤다"})
    assert r.status_code == 200 and r.headers["x-model-version"] == "v2"


def test_corrupt_version_fails_to_activate_and_the_old_keeps_serving(swap_server):
    url = swap_server.url
    before = httpx.get(url + "/v1/model").json()["version"]
    r = httpx.post(url + "/v1/models/v3/activate", timeout=120)
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert detail.startswith("v3 was not activated:") and detail.endswith(f"{before} keeps serving")
    r = httpx.post(url + "/v1/classify", json={"text": "꿈에서 봤다"})
    assert r.status_code == 200 and r.json()["model_version"] == before
    listing = httpx.get(url + "/v1/models").json()
    assert listing["active"] == before and listing["serving"] == before
    assert (swap_server.cwd / "models" / "active").read_text().strip() == before
    r = httpx.delete(url + f"/v1/models/{before}")
    assert r.status_code == 409 and "active version" in r.json()["detail"]
    assert httpx.post(url + "/v1/models/v9/activate").status_code == 404


def test_cli_activation_switches_the_running_server_or_is_put_back(swap_server):
    url, models = swap_server.url, swap_server.cwd / "models"
    serving = httpx.get(url + "/v1/model").json()["version"]
    other = "v1" if serving == "v2" else "v2"

    def wait_serving(version):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if httpx.get(url + "/v1/model").json()["version"] == version:
                return
            time.sleep(0.3)
        raise AssertionError(f"not serving {version}")

    assert models_cli(["activate", other, "--models-dir", str(models)]) == 0
    wait_serving(other)
    assert httpx.post(url + "/v1/classify", json={"text": "꿈에서 봤다"}).json()["model_version"] == other
    assert models_cli(["activate", "v3", "--models-dir", str(models)]) == 2  # the truncated ONNX: checked first
    assert (models / "active").read_text().strip() == other
    assert models_cli(["activate", "v3", "--no-check", "--models-dir", str(models)]) == 0  # moved unchecked
    deadline = time.monotonic() + 60
    while (models / "active").read_text().strip() != other and time.monotonic() < deadline:
        time.sleep(0.3)
    assert (models / "active").read_text().strip() == other  # put back
    assert httpx.get(url + "/v1/model").json()["version"] == other
    assert any(e["event"] == "activated" and e["version"] == other and e["why"].startswith("put back: v3 was not")
               for e in Registry(models).events())
