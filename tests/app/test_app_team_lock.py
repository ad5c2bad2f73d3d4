"""Another process holding SQLite's write lock (the sqlite3 shell, a backup, VACUUM) never freezes the server:
the event loop never waits on SQLite, and a save that cannot get the lock answers 503 with Retry-After
(security round 4, M3)."""

from __future__ import annotations

import sqlite3
import threading
import time

import sqlalchemy as sa
from test_app_team import client

from app.team import auth
from labelstore import open_store, users
from labelstore.engine import SERVER_BUSY_TIMEOUT_MS


def test_a_write_lock_held_elsewhere_leaves_healthz_fast_and_saves_answer_503(tmp_path):
    db = tmp_path / "app.db"
    with client(f"sqlite:///{db}", tmp_path) as c:
        ds = c.post("/v1/datasets", json={"name": "d", "texts": ["one", "one two", "one two three"]}).json()["id"]
        first = c.post(f"/v1/datasets/{ds}/next").json()  # the dataset is read and cached: the hot path
        holder = sqlite3.connect(db, isolation_level=None, timeout=0)
        holder.execute("BEGIN EXCLUSIVE")  # what `sqlite3 app.db` + BEGIN EXCLUSIVE holds
        held_s = SERVER_BUSY_TIMEOUT_MS / 1000 + 2
        saves: list = []

        def save():
            t0 = time.perf_counter()
            r = c.post(f"/v1/datasets/{ds}/labels", json={"record_id": first["record_id"], "label": "b",
                                                          "client_event_id": "e1"})
            saves.append((r, time.perf_counter() - t0))

        try:
            writers = [threading.Thread(target=save) for _ in range(3)]
            t_start = time.perf_counter()
            for w in writers:
                w.start()
            health = []
            while time.perf_counter() - t_start < held_s - 0.5:
                t0 = time.perf_counter()
                assert c.get("/healthz").status_code == 200
                health.append(time.perf_counter() - t0)
                time.sleep(0.05)
            for w in writers:
                w.join(held_s)
        finally:
            holder.execute("COMMIT")
            holder.close()
        assert len(health) > 10 and max(health) < 1.0, max(health)  # the loop never waited on the lock
        assert [r.status_code for r, _ in saves] == [503] * 3, [r.text for r, _ in saves]
        assert all(r.headers["retry-after"] == "2" and "locked" in r.json()["detail"] for r, _ in saves)
        assert max(s for _, s in saves) < held_s  # bounded: none waited out the lock
        after = c.post(f"/v1/datasets/{ds}/labels", json={"record_id": first["record_id"], "label": "b",
                                                          "client_event_id": "e1"})
        assert after.status_code == 200 and after.headers.get("idempotent-replayed") is None  # nothing was kept


def test_no_statement_of_the_store_runs_on_the_event_loop(tmp_path, monkeypatch):
    """The users' tokens are read again every TOKEN_TTL_S, by the gate of every request: in a thread, and
    never for /healthz. (The label saves' inline transactions use the raw driver, bounded by busy_timeout=0.)"""
    monkeypatch.setattr(auth, "TOKEN_TTL_S", 0.0)  # every request reads them again
    url = f"sqlite:///{tmp_path / 'app.db'}"
    engine = open_store(url)
    token = users.add_user(engine, "ann", "annotator")
    engine.dispose()
    bearer = {"Authorization": f"Bearer {token}"}
    with client(url, tmp_path, api_key="k") as c:
        store, ran = c.app.state.server.store, []
        sa.event.listen(store, "before_cursor_execute", lambda *a: ran.append(threading.get_ident()))
        loop = c.portal.call(threading.get_ident)
        ds = c.post("/v1/datasets", json={"name": "d", "texts": ["one", "one two", "one two three"]},
                    headers={"Authorization": "Bearer k"}).json()["id"]
        ran.clear()
        assert c.get("/healthz").status_code == 200 and ran == []  # /healthz never touches the store
        for _ in range(3):
            rec = c.post(f"/v1/datasets/{ds}/next", headers=bearer).json()
            assert c.post(f"/v1/datasets/{ds}/labels", json={"record_id": rec["record_id"], "label": "a"},
                          headers=bearer).status_code == 200
            assert c.post("/v1/classify", json={"text": "x"}, headers=bearer).status_code == 200
        assert ran and loop not in ran, "a store statement ran on the event loop's thread"
