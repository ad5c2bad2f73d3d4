"""The fleet's registry (app/fleet/registry.py) and the promotion's coordinator (app/fleet/promote.py), on
SQLite and on a real PostgreSQL, with replicas played by threads writing their rows."""

from __future__ import annotations

import shutil
import threading
import time

import pytest

from app.fleet.promote import PromotionBusy, PromotionError, promote
from app.fleet.registry import DbRegistry, import_disk
from app.versions.registry import Registry, RegistryError, folder_sha256
from labelstore import fleet_store as fs
from labelstore import open_store


@pytest.fixture
def registry(store_url, tmp_path):
    engine = open_store(store_url)
    yield DbRegistry(tmp_path / "models", engine)
    engine.dispose()


def _variant(src, root, name):
    folder = root / f"src-{name}"
    shutil.copytree(src, folder)
    (folder / "note.txt").write_text(name)
    return folder


def test_the_on_disk_registry_is_imported_once_every_version_and_event_counted(spread_model_dir, store_url, tmp_path):
    old = Registry(tmp_path / "models")
    old.set_active(old.register_folder(spread_model_dir)[0])
    old.register_folder(_variant(spread_model_dir, tmp_path, "b"))
    old.set_active("v2", why="by hand")
    before = [e["event"] for e in old.events()]
    n_events = len(before)
    engine = open_store(store_url)
    reg = DbRegistry(tmp_path / "models", engine)
    counts = import_disk(reg)
    assert counts == {"versions": 2, "events": n_events, "active": "v2"}
    assert reg.names() == ["v1", "v2"] and reg.active() == "v2"
    for name in ("v1", "v2"):  # content-addressed: the folder's name carries its digest, checked at load
        folder = reg.verify(name)
        assert folder.name == f"{name}-{folder_sha256(folder)[:12]}"
    assert [e["event"] for e in reg.events()][:n_events] == before
    assert not (tmp_path / "models" / "active").exists() and (tmp_path / "models" / "active.imported").exists()
    assert import_disk(reg) is None  # once
    assert reg.meta("v2")["source"] == "imported" and reg.listing()[0]["active"]
    engine.dispose()


def test_a_folder_whose_files_changed_is_refused_in_one_line(registry, spread_model_dir):
    name, new = registry.register_folder(spread_model_dir)
    assert new and registry.register_folder(spread_model_dir) == (name, False)
    folder = registry.path(name)
    (folder / "config.json").write_text((folder / "config.json").read_text() + " ")
    with pytest.raises(RegistryError) as err:
        registry.verify(name)
    assert "sha256" in str(err.value) and folder.name in str(err.value) and "\n" not in str(err.value)


def _replica(registry, rid, answer, stop, parity="p"):
    """A replica's part in a promotion: it answers each new one as told (None: it never answers)."""
    fs.register_replica(registry.engine, rid, "h", 1, registry.active())
    seen = None
    while not stop.is_set():
        fs.heartbeat(registry.engine, rid, registry.active())
        promo = fs.current_promotion(registry.engine)
        if promo and promo["id"] != seen and answer is not None:
            seen = promo["id"]
            fs.report_prepare(registry.engine, rid, seen, answer, parity, "boom" if answer == "failed" else None)
        time.sleep(0.02)


@pytest.fixture
def fleet(registry, spread_model_dir, tmp_path):
    registry.set_active(registry.register_folder(spread_model_dir)[0])
    registry.register_folder(_variant(spread_model_dir, tmp_path, "b"))
    stop, threads = threading.Event(), []

    def start(rid, answer, parity="p"):
        t = threading.Thread(target=_replica, args=(registry, rid, answer, stop, parity), daemon=True)
        t.start()
        threads.append(t)

    yield registry, start
    stop.set()
    for t in threads:
        t.join()


def _wait_registered(registry, n):
    while len(fs.live_replicas(registry.engine, 5)) < n:
        time.sleep(0.02)


def test_commit_flips_once_every_live_replica_is_ready_and_rollback_is_the_same_flip(fleet):
    registry, start = fleet
    start("r1", "ready")
    start("r2", "ready")
    _wait_registered(registry, 2)
    done = promote(registry, "v2", "test", timeout_s=10)
    assert done["ready"] == ["r1", "r2"] and done["evicted"] == {} and registry.active() == "v2"
    assert promote(registry, "v1", "rollback", timeout_s=10)["previous"] == "v2" and registry.active() == "v1"


def test_a_replica_that_fails_prepare_is_evicted_said_in_the_events(fleet):
    registry, start = fleet
    start("r1", "ready")
    start("r2", "failed")
    _wait_registered(registry, 2)
    done = promote(registry, "v2", "test", timeout_s=10)
    assert done["evicted"] == {"r2": "failed to prepare v2: boom"} and registry.active() == "v2"
    assert any(e["event"] == "evicted" and e["replica"] == "r2" for e in registry.events())


def test_a_silent_replica_is_evicted_after_the_timeout_and_a_parity_outlier_too(fleet):
    registry, start = fleet
    for rid in ("r1", "r2"):
        start(rid, "ready")
    start("r3", "ready", parity="other")
    start("r4", None)
    _wait_registered(registry, 4)
    t0 = time.monotonic()
    done = promote(registry, "v2", "test", timeout_s=1.0)
    assert time.monotonic() - t0 >= 1.0 and done["ready"] == ["r1", "r2"]
    assert set(done["evicted"]) == {"r3", "r4"} and "parity" in done["evicted"]["r3"]


def test_when_no_replica_is_ready_nothing_flips(fleet):
    registry, start = fleet
    start("r1", "failed")
    _wait_registered(registry, 1)
    with pytest.raises(PromotionError) as err:
        promote(registry, "v2", "test", timeout_s=5)
    assert "v1 keeps serving" in str(err.value) and registry.active() == "v1"
    assert fs.current_promotion(registry.engine) is None


def test_a_coordinator_killed_between_the_phases_leaves_the_old_pointer(fleet):
    registry, start = fleet
    start("r1", "ready")
    _wait_registered(registry, 1)

    class Killed(Exception):
        pass

    def die(_pid):
        raise Killed

    with pytest.raises(Killed):
        promote(registry, "v2", "test", timeout_s=2, on_prepared=die)
    assert registry.active() == "v1"
    with pytest.raises(PromotionBusy, match="a promotion is running"):  # within its deadline it may still commit
        promote(registry, "v2", "next", timeout_s=5)
    time.sleep(2.1)
    assert promote(registry, "v2", "next", timeout_s=5)["version"] == "v2"  # past it, the left one is aborted
    assert registry.active() == "v2"


def test_a_second_promotion_while_one_runs_is_refused_at_once_and_blames_no_replica(fleet):
    """Issue 63, L6: four activations at once; two waited out --promote-timeout and then said the healthy
    replica was 'not ready'. The second now gets PromotionBusy (HTTP 409) at once, and the first commits."""
    registry, start = fleet
    start("r1", "ready")
    _wait_registered(registry, 1)
    between, release, done = threading.Event(), threading.Event(), {}

    def hold(_pid):
        between.set()
        release.wait(10)

    first = threading.Thread(target=lambda: done.update(promote(registry, "v2", "first", timeout_s=10,
                                                                on_prepared=hold)))
    first.start()
    assert between.wait(10)
    t0 = time.monotonic()
    with pytest.raises(PromotionBusy, match="a promotion is running: v2") as err:
        promote(registry, "v1", "second", timeout_s=10)
    assert time.monotonic() - t0 < 2 and "r1" not in str(err.value)
    release.set()
    first.join(10)
    assert done["version"] == "v2" and done["evicted"] == {} and registry.active() == "v2"


def test_a_second_trainer_exits_0_with_one_line(store_url, tmp_path, capsys):
    from app.fleet.train import main as train_main

    engine = open_store(store_url)
    assert fs.take_lease(engine, "trainer", "other-host:77", "other-host", 77, 30) is None
    rc = train_main(["--database-url", store_url, "--models-dir", str(tmp_path / "models"), "--fleet",
                     "--data-dir", str(tmp_path)])
    assert rc == 0 and capsys.readouterr().out == "training already running on other-host\n"
    engine.dispose()


def test_a_busy_promotion_answers_409_on_the_api(spread_model_dir, tmp_path, monkeypatch):
    """The route's side of L6: ActivationBusy is 409 with its reason, not the 422 of a version that failed."""
    from app_testkit import two_version_registry
    from fastapi.testclient import TestClient

    from app.config import Config
    from app.server import create_app, load_classifier
    from app.versions.swap import ActivationBusy, Switcher

    async def busy(self, version, why):
        raise ActivationBusy(f"{version} was not promoted: a promotion is running (v1); try again when it is done")

    monkeypatch.setattr(Switcher, "activate", busy)
    reg = two_version_registry(spread_model_dir, tmp_path)
    cfg = Config(model="m", ui=False, monitor=False, data_dir=tmp_path, models_dir=reg.root)
    with TestClient(create_app(cfg, load_classifier(cfg, reg.path("v1")), registry=reg, version="v1"),
                    base_url="http://127.0.0.1") as c:
        r = c.post("/v1/models/v2/activate", json={})
    assert r.status_code == 409 and "a promotion is running" in r.json()["detail"]
