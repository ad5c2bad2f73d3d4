"""Replicas as processes sharing one database and one model store (app/fleet/replica.py), on SQLite (--fleet, one
host) and on a real PostgreSQL: a promotion every replica makes at once, a changed folder refused, a killed
replica back on the active version, one trainer across the fleet, the monitor per replica."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time

import httpx
import pytest
from app_testkit import ROOT, Server, free_port

from app.fleet.registry import DbRegistry
from labelstore import fleet_store as fs
from labelstore import open_store


def replica(store_url: str, models, cwd, rid: str, model=None) -> Server:
    port = free_port()
    own = cwd / f"replica-{rid}-{port}"  # its own folder: Server writes server.log in it
    own.mkdir()
    argv = [sys.executable, "-m", "app", "--models-dir", str(models), "--port", str(port), "--no-ui",
            "--database-url", store_url, "--replica-id", rid, "--fleet", "--promote-timeout", "20",
            "--data-dir", str(own / "data")]
    return Server(argv + (["--model", str(model)] if model else []), own, port)


def promote_cli(store_url, models, version) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.fleet.promote", "promote", version, "--database-url", store_url,
                           "--models-dir", str(models), "--timeout", "20"], check=False, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)


def served(server) -> str:
    r = httpx.post(server.url + "/v1/classify", json={"texts": ["a text"]}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["x-model-version"] == r.json()["model_version"]
    return r.json()["model_version"]


def wait_for(fn, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fn():
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def fleet(request, spread_model_dir, tmp_path_factory):
    """Two replicas, started once per database (a replica start takes seconds on a loaded machine): the tests
    run in file order and the last one kills and restarts a replica."""
    from postgres_fixture import new_database

    tmp_path = tmp_path_factory.mktemp(f"fleet-{request.param}")
    store_url = (f"sqlite:///{tmp_path / 'app.db'}" if request.param == "sqlite"
                 else new_database(request.getfixturevalue("postgres_server")))
    models = tmp_path / "models"
    a = replica(store_url, models, tmp_path, "ra", spread_model_dir)
    started = [a]
    try:
        a.wait_ready(900)
        b = replica(store_url, models, tmp_path, "rb", spread_model_dir)
        started.append(b)
        b.wait_ready(900)
        yield store_url, models, a, b, started, tmp_path
    finally:
        for s in started:
            if s.proc.poll() is None:
                s.stop()


def test_every_route_names_the_model_version_and_the_monitor_shows_each_replica(fleet):
    _, _, a, b, _, _ = fleet
    for path in ("/healthz", "/readyz", "/metrics", "/v1/model", "/v1/labels", "/v1/monitor", "/v1/models", "/nope"):
        r = httpx.get(a.url + path, timeout=30)
        assert r.headers.get("x-model-version") == "v1", path
    served(a)
    served(b)

    def both_counted():
        fleet_part = httpx.get(a.url + "/v1/monitor", timeout=30).json()["fleet"]
        return set(fleet_part["replicas"]) == {"ra", "rb"} and fleet_part["fleet"].get("v1", {}).get("n", 0) >= 2
    assert wait_for(both_counted, 10)
    text = httpx.get(a.url + "/metrics", timeout=30).text
    assert 'app_fleet_replica_serving{replica="rb",version="v1"} 1.0' in text


def test_a_team_dataset_is_one_queue_across_the_processes(fleet):
    """Server processes on one database (docs/app.md, "Several server processes"): a text leased through one is
    the same text through the other (resume), a retry through the other process returns the first answer, and
    each text ends with one answer, whichever process took it."""
    _, _, a, b, _, _ = fleet
    made = httpx.post(a.url + "/v1/datasets", json={"name": "shared", "texts": ["one", "two", "three"]}, timeout=60)
    assert made.status_code == 201, made.text
    ds = made.json()["id"]
    for i in range(3):
        x, y = (a, b) if i % 2 else (b, a)
        held = httpx.post(f"{x.url}/v1/datasets/{ds}/next", timeout=30).json()
        assert httpx.post(f"{y.url}/v1/datasets/{ds}/next", timeout=30).json() == held
        body = {"record_id": held["record_id"], "label": held["suggestion"]["label"], "client_event_id": f"e{i}"}
        first = httpx.post(f"{y.url}/v1/datasets/{ds}/labels", json=body, timeout=30)
        again = httpx.post(f"{x.url}/v1/datasets/{ds}/labels", json=body, timeout=30)
        assert first.status_code == again.status_code == 200, (first.text, again.text)
        assert again.json() == first.json() and again.headers.get("idempotent-replayed") == "true"
    assert [httpx.post(f"{s.url}/v1/datasets/{ds}/next", timeout=30).status_code for s in (a, b)] == [204, 204]
    rows = [json.loads(line) for line in httpx.get(f"{b.url}/v1/datasets/{ds}/export?format=jsonl", timeout=30)
            .text.splitlines()]
    assert sorted(r["text"] for r in rows) == ["one", "three", "two"]


def test_one_trainer_across_the_fleet(fleet):
    store_url, _, _, b, _, _ = fleet
    engine = open_store(store_url)
    assert fs.take_lease(engine, "trainer", "other-host:77", "other-host", 77, 30) is None
    r = httpx.post(b.url + "/v1/train", json={}, timeout=30)
    assert r.status_code == 409 and "training already running on other-host" in r.json()["detail"]
    fs.release_lease(engine, "trainer", "other-host:77")
    engine.dispose()
    assert json.loads(r.text)["detail"].count("\n") == 0


def test_replicas_promote_together_refuse_a_changed_folder_and_a_killed_one_comes_back(fleet, spread_model_dir):
    store_url, models, a, b, started, tmp_path = fleet
    if store_url.startswith("sqlite"):  # said at start: SQLite serves one host only
        assert "share the SQLite file" in b.log()
    assert served(a) == served(b) == "v1"
    engine = open_store(store_url)
    registry = DbRegistry(models, engine)
    for name in ("b", "c"):
        folder = shutil.copytree(spread_model_dir, tmp_path / f"src-{name}")
        (folder / "note.txt").write_text(name)
        registry.register_folder(folder)
    assert registry.names() == ["v1", "v2", "v3"]  # the second replica's --model added nothing

    done = promote_cli(store_url, models, "v2")
    assert done.returncode == 0 and "ready on 2 replica(s)" in done.stdout, done.stdout + done.stderr
    # both switch to the model they prepared (how fast is bench/fleet.py's figure, not a timed test)
    assert wait_for(lambda: served(a) == served(b) == "v2", 20.0)

    target = registry.path("v3") / "config.json"
    target.write_text(target.read_text() + " ")  # the shared volume's copy changed after registration
    refused = promote_cli(store_url, models, "v3")
    assert refused.returncode == 2 and "sha256" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert served(a) == served(b) == "v2" and registry.active() == "v2"

    b.proc.send_signal(signal.SIGKILL)  # rollback while one replica is dead: the promotion goes on without it
    b.proc.wait()
    rolled = promote_cli(store_url, models, "v1")
    assert rolled.returncode == 0, rolled.stderr
    assert served(a) == "v1"
    again = replica(store_url, models, tmp_path, "rb")  # restarted without --model: the active version
    started.append(again)
    again.wait_ready(900)
    assert served(again) == "v1"
    assert {r["id"]: r["serving"] for r in fs.live_replicas(engine, 5)} == {"ra": "v1", "rb": "v1"}
    events = [e["event"] for e in registry.events()]
    assert events.count("activated") >= 3 and "prepare" in events
    engine.dispose()


def test_concurrent_activations_answer_409_at_once_and_blame_no_replica(fleet):
    """Issue 63, L6: four activations at once (two on each replica) waited out --promote-timeout and answered 422
    "r1: not ready within ... s" of a healthy replica. Now one promotion runs and the others answer 409 "a
    promotion is running" at once: the same replica's from its switcher, the other's from the promotions row."""
    from concurrent.futures import ThreadPoolExecutor

    store_url, _, a, _, started, _ = fleet
    b = started[-1]  # the previous test restarted rb
    assert served(a) == served(b) == "v1"

    def activate(target):
        server, version = target
        t0 = time.monotonic()
        r = httpx.post(f"{server.url}/v1/models/{version}/activate", json={}, timeout=60)
        return r.status_code, r.json().get("detail", ""), time.monotonic() - t0

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(activate, [(a, "v2"), (a, "v1"), (b, "v2"), (b, "v1")]))
    codes = sorted(code for code, _, _ in answers)
    assert set(codes) <= {200, 409} and 200 in codes and 409 in codes, answers
    for code, detail, took in answers:
        if code == 409:
            assert "a promotion is running" in detail and "not ready" not in detail and took < 10, (detail, took)
    engine = open_store(store_url)
    active = fs.pointer(engine)[0]
    assert wait_for(lambda: served(a) == served(b) == active, 20.0)
    assert {r["id"]: r["evicted_at"] for r in fs.live_replicas(engine, 5)} == {"ra": None, "rb": None}
    engine.dispose()
