"""The fleet's tables on SQLite and on a real PostgreSQL: the pointer flips with its promotion or not at all,
one lease holder at a time (a dead holder's lease expires), replicas and promotions."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from labelstore import fleet_store as fs
from labelstore import open_store
from labelstore.fleet_schema import model_versions


@pytest.fixture
def engine(store_url):
    engine = open_store(store_url)
    yield engine
    engine.dispose()


def add(engine, name: str) -> None:
    with engine.begin() as conn:
        fs.add_version(conn, name, int(name[1:]), f"{name}-000000000000", "0" * 64, {"version": name}, time.time())


def test_the_pointer_starts_empty_and_each_flip_is_a_new_generation_with_its_event(engine):
    assert fs.pointer(engine) == (None, 0)
    add(engine, "v1")
    add(engine, "v2")
    assert fs.set_active(engine, "v1", "first") == 1
    assert fs.set_active(engine, "v2", "second") == 2
    assert fs.pointer(engine) == ("v2", 2)
    flips = [e for e in fs.events(engine) if e["event"] == "activated"]
    assert [(e["version"], e["generation"], e["why"]) for e in flips] == [("v1", 1, "first"), ("v2", 2, "second")]


def test_one_lease_holder_at_a_time_and_a_dead_holders_lease_expires(engine):
    TTL = 2.0  # 0.5 s ran out between two calls at load 23 (the second take found no holder)
    assert fs.take_lease(engine, "trainer", "a:1", "host-a", 1, ttl_s=TTL) is None
    held = fs.take_lease(engine, "trainer", "b:2", "host-b", 2, ttl_s=TTL)
    assert held["holder"] == "a:1" and held["host"] == "host-a"
    assert fs.take_lease(engine, "trainer", "a:1", "host-a", 1, ttl_s=TTL) is None  # the holder renews
    time.sleep(TTL + 0.2)  # a: killed, renews no more
    assert fs.take_lease(engine, "trainer", "b:2", "host-b", 2, ttl_s=30) is None
    assert any(e["event"] == "lease_expired" and e["holder"] == "a:1" for e in fs.events(engine))
    assert not fs.renew_lease(engine, "trainer", "a:1", 30)  # the old holder cannot take it back by renewing
    fs.release_lease(engine, "trainer", "b:2")
    assert fs.take_lease(engine, "trainer", "c:3", "host-c", 3, ttl_s=30) is None


def test_racing_lease_takers_get_exactly_one_holder(engine):
    won, lock = [], threading.Lock()

    def take(i):
        if fs.take_lease(engine, "trainer", f"h:{i}", "h", i, ttl_s=30) is None:
            with lock:
                won.append(i)

    threads = [threading.Thread(target=take, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1


def test_a_commit_flips_and_evicts_in_one_transaction_and_an_abort_flips_nothing(engine):
    add(engine, "v1")
    add(engine, "v2")
    fs.set_active(engine, "v1", "start")
    fs.register_replica(engine, "r1", "h", 1, "v1")
    fs.register_replica(engine, "r2", "h", 2, "v1")
    pid = fs.start_promotion(engine, "v2", "v1", "try", timeout_s=10)
    assert fs.poll(engine, "r1")["promotion"]["id"] == pid
    assert fs.finish_promotion(engine, pid, False, "no replica ready", {}) is None
    assert fs.pointer(engine)[0] == "v1" and fs.poll(engine)["promotion"] is None
    pid = fs.start_promotion(engine, "v2", "v1", "again", timeout_s=10)
    assert fs.finish_promotion(engine, pid, True, "again", {"r2": "failed to prepare v2: boom"}) == 2
    assert fs.pointer(engine) == ("v2", 2)
    assert fs.poll(engine, "r2")["evicted"] and not fs.poll(engine, "r1")["evicted"]
    assert fs.finish_promotion(engine, pid, True, "twice", {}) is None  # committed once only
    kinds = [(e["event"], e.get("replica")) for e in fs.events(engine)]
    assert ("promotion_aborted", None) in kinds and ("evicted", "r2") in kinds


def test_a_new_promotion_is_refused_while_another_is_within_its_deadline(engine):
    add(engine, "v1")
    first = fs.start_promotion(engine, "v1", None, "running", timeout_s=10)
    with pytest.raises(fs.PromotionRunning, match=f"promotion {first}"):
        fs.start_promotion(engine, "v1", None, "next", timeout_s=10)
    assert fs.current_promotion(engine)["id"] == first


def test_a_new_promotion_aborts_one_its_coordinator_left_preparing_past_its_deadline(engine):
    add(engine, "v1")
    first = fs.start_promotion(engine, "v1", None, "coordinator killed", timeout_s=0.05)
    time.sleep(0.1)
    second = fs.start_promotion(engine, "v1", None, "next", timeout_s=10)
    assert fs.current_promotion(engine)["id"] == second
    assert fs.finish_promotion(engine, first, True, "late", {}) is None
    assert any(e["event"] == "promotion_aborted" and e["promotion"] == first for e in fs.events(engine))


def test_live_replicas_are_those_with_a_recent_heartbeat(engine):
    fs.register_replica(engine, "r1", "h", 1, None)
    fs.register_replica(engine, "r2", "h", 2, None)
    fs.leave(engine, "r2")
    assert [r["id"] for r in fs.live_replicas(engine, 5)] == ["r1"]
    fs.heartbeat(engine, "r2", "v1", {"versions": {"v1": {"n": 3}}})
    assert [r["id"] for r in fs.live_replicas(engine, 5)] == ["r1", "r2"]


def test_version_names_are_never_reused_after_a_delete(engine):
    add(engine, "v1")
    add(engine, "v2")
    fs.delete_version(engine, "v2")
    assert [v["name"] for v in fs.versions(engine)] == ["v1"]
    with engine.connect() as conn:
        assert fs.next_number(conn) == 3
        assert conn.execute(sa.select(sa.func.count()).select_from(model_versions)).scalar() == 2


def test_on_postgresql_a_flip_is_notified_at_commit_and_a_rolled_back_one_never(engine):
    if engine.dialect.name != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's; SQLite replicas poll")
    import psycopg

    add(engine, "v1")
    dsn = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute(f"LISTEN {fs.CHANNEL}")
        with pytest.raises(RuntimeError), engine.begin() as conn:
            fs.flip(conn, "v1", "rolled back")
            raise RuntimeError("the transaction fails after the flip")
        fs.set_active(engine, "v1", "kept")
        got = [n.payload for n in listener.notifies(timeout=2, stop_after=1)]
    assert got == ["flip:1:v1"]  # generation 1: the rolled-back flip neither counted nor was announced


def test_a_poll_never_sees_the_promotion_gone_and_the_old_pointer(engine):
    """A commit between the poll's two reads: on PostgreSQL each statement has its own snapshot, and reading
    the pointer first showed (no promotion, old pointer), so a replica dropped the model it had prepared."""
    add(engine, "v1")
    add(engine, "v2")
    fs.set_active(engine, "v1", "start")
    pid = fs.start_promotion(engine, "v2", "v1", "try", timeout_s=10)
    fired = []

    def commit_between(conn, cursor, statement, *args):
        if not fired and "SELECT" in statement and ("promotions" in statement or "registry_pointer" in statement):
            fired.append(statement)
            fs.finish_promotion(engine, pid, True, "flip", {})

    sa.event.listen(engine, "after_cursor_execute", commit_between)
    try:
        seen = fs.poll(engine)
    finally:
        sa.event.remove(engine, "after_cursor_execute", commit_between)
    assert fired and fs.pointer(engine)[0] == "v2"
    assert not (seen["promotion"] is None and seen["version"] == "v1"), seen
