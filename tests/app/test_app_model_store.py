"""A fleet's versions in an object store through fsspec (app/fleet/model_store.py): published by one process,
fetched into another's cache with its sha256 checked; a version changed in the store refused with the old
one still serving. fsspec's `memory://` plays the store in-process, `file://` across processes."""

from __future__ import annotations

import shutil
import sys
import time
import uuid

import httpx
import pytest
from app_testkit import Server, free_port

from app.config import parse_args
from app.fleet.model_store import ModelStore
from app.fleet.promote import PromotionError, promote
from app.fleet.registry import DbRegistry
from app.versions.registry import RegistryError, folder_sha256
from labelstore import open_store
from textdata.errors import UsageError


@pytest.fixture
def objects():
    store = ModelStore(f"memory://models-{uuid.uuid4().hex}")
    yield store
    store.fs.rm(store.root, recursive=True)


@pytest.fixture
def hosts(store_url, tmp_path, objects):
    """Two processes' registries on one database and one object store, each with its own local cache."""
    engine = open_store(store_url)
    yield DbRegistry(tmp_path / "cache-a", engine, object_store=objects), \
        DbRegistry(tmp_path / "cache-b", engine, object_store=objects)
    engine.dispose()


def test_a_version_published_by_one_host_is_fetched_and_checked_by_another(hosts, objects, spread_model_dir):
    from serving.engine import Classifier

    a, b = hosts
    name, new = a.register_folder(spread_model_dir)
    folder = a.path(name).name
    assert new and objects.fs.exists(f"{objects.root}/{folder}/config.json")
    assert not b.path(name).exists()  # nothing on b's disk until it is asked for
    fetched = b.verify(name)
    assert fetched == b.path(name) and folder_sha256(fetched) == folder_sha256(a.path(name))
    assert Classifier.load(fetched).labels == Classifier.load(a.path(name)).labels
    assert not list(b.root.glob(".fetch-*"))


def test_a_version_changed_in_the_store_is_refused_and_nothing_is_kept(hosts, objects, spread_model_dir):
    a, b = hosts
    name, _ = a.register_folder(spread_model_dir)
    folder = a.path(name).name
    objects.fs.pipe(f"{objects.root}/{folder}/config.json", b'{"tampered": true}')
    with pytest.raises(RegistryError) as err:
        b.verify(name)
    message = str(err.value)
    assert "sha256" in message and folder in message and "changed in the model store" in message
    assert "\n" not in message
    assert not b.path(name).exists() and not list(b.root.glob(".fetch-*"))


def test_a_cached_copy_that_changed_on_disk_is_fetched_again(hosts, spread_model_dir):
    a, b = hosts
    name, _ = a.register_folder(spread_model_dir)
    config = b.verify(name) / "config.json"
    original = config.read_bytes()
    config.write_bytes(original + b" ")
    assert b.verify(name) == b.path(name) and config.read_bytes() == original


def test_a_failed_upload_registers_nothing(store_url, tmp_path, spread_model_dir):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    engine = open_store(store_url)
    reg = DbRegistry(tmp_path / "cache", engine, object_store=ModelStore(f"file://{blocker}/models"))
    with pytest.raises(RegistryError) as err:
        reg.register_folder(spread_model_dir)
    assert "cannot publish" in str(err.value) and "\n" not in str(err.value)
    assert reg.names() == [] and not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith("v")]
    engine.dispose()


def test_a_store_url_that_cannot_work_is_refused_at_start(tmp_path):
    with pytest.raises(UsageError) as err:
        ModelStore("nosuchprotocol://bucket/models")
    assert "--model-store nosuchprotocol://bucket/models" in str(err.value)
    with pytest.raises(SystemExit):  # a single server's registry is a folder: the flag needs fleet mode
        parse_args(["--model-store", "memory://x", "--data-dir", str(tmp_path)])
    assert parse_args(["--model-store", "memory://x", "--fleet"]).model_store == "memory://x"


def _classify(server: Server) -> str:
    r = httpx.post(server.url + "/v1/classify", json={"texts": ["a text"]}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["model_version"]


def test_a_replica_refuses_a_version_changed_in_the_store_and_keeps_serving(tmp_path, spread_model_dir):
    """A replica with its own cache (no shared volume) on a file:// store: a version whose stored files
    changed fails its prepare, the promotion flips nothing and the old version keeps serving; a good one
    is fetched and served."""
    url, store_url = f"file://{tmp_path / 'bucket'}", f"sqlite:///{tmp_path / 'app.db'}"
    port = free_port()
    (tmp_path / "replica").mkdir()
    server = Server([sys.executable, "-m", "app", "--model", str(spread_model_dir), "--port", str(port), "--no-ui",
                     "--database-url", store_url, "--fleet", "--replica-id", "r1", "--model-store", url,
                     "--models-dir", str(tmp_path / "replica" / "cache"), "--data-dir", str(tmp_path / "replica"),
                     "--promote-timeout", "60"], tmp_path / "replica", port)
    try:
        server.wait_ready(900)
        assert _classify(server) == "v1"
        engine = open_store(store_url)
        coordinator = DbRegistry(tmp_path / "coordinator-cache", engine, object_store=ModelStore(url))
        for tag in ("b", "c"):
            variant = shutil.copytree(spread_model_dir, tmp_path / f"src-{tag}")
            (variant / "note.txt").write_text(tag)
            coordinator.register_folder(variant)
        stored = tmp_path / "bucket" / coordinator.path("v2").name / "note.txt"
        stored.write_text("changed in the bucket")  # the coordinator's own cache still holds the good copy
        with pytest.raises(PromotionError) as err:
            promote(coordinator, "v2", "test", timeout_s=60)
        assert "sha256" in str(err.value) and coordinator.active() == "v1"
        assert _classify(server) == "v1"
        assert promote(coordinator, "v3", "test", timeout_s=60)["ready"] == ["r1"]
        assert _wait_for_version(server, "v3")
        assert (tmp_path / "replica" / "cache" / coordinator.path("v3").name).is_dir()
        engine.dispose()
    finally:
        server.stop()


def _wait_for_version(server: Server, version: str, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _classify(server) == version:
            return True
        time.sleep(0.1)
    return False


def test_activating_a_version_changed_in_the_store_is_a_409_naming_it_not_the_store(store_url, tmp_path,
                                                                                     spread_model_dir):
    """Issue 63 L7: `POST /v1/models/v2/activate` answered 404 with `file:///<store path>/v2-...: its files'
    sha256 is ...`: the store's URL (a bucket, a server path, credentials) to the client, and "not found"
    for a version that exists."""
    from fastapi import FastAPI
    from starlette.testclient import TestClient

    from app.config import Config
    from app.versions.admin import add_admin_routes

    url = f"file://{tmp_path / 'bucket'}"
    engine = open_store(store_url)
    coordinator = DbRegistry(tmp_path / "coordinator", engine, object_store=ModelStore(url))
    replica = DbRegistry(tmp_path / "replica", engine, object_store=ModelStore(url))  # no copy of its own yet
    name, _ = coordinator.register_folder(spread_model_dir)
    folder = coordinator.path(name).name
    (tmp_path / "bucket" / folder / "config.json").write_text('{"tampered": true}')

    class Switcher:  # the fleet's: activating is a promotion (app/fleet/replica.py)
        busy = None

        async def activate(self, version, why):
            return promote(replica, version, why, timeout_s=1.0)

    app = FastAPI()
    add_admin_routes(app, Config(model="m"), None, replica, Switcher())
    with TestClient(app) as c:
        r = c.post(f"/v1/models/{name}/activate")
        missing = c.post("/v1/models/v9/activate")
    detail = r.json()["detail"]
    assert r.status_code == 409 and "sha256" in detail and folder in detail and f"{name} refused" in detail
    assert "://" not in detail and str(tmp_path) not in detail and "bucket" not in detail
    assert missing.status_code == 404 and str(tmp_path) not in missing.json()["detail"]
    engine.dispose()
