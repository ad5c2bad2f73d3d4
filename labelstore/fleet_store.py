"""Reading and writing the fleet's tables (labelstore/fleet_schema.py): versions, events, the pointer, leases,
replicas, promotions. Every write is one transaction (labelstore/tx.py); the pointer flips with its
promotion's state and its events, or not at all.

On PostgreSQL a commit also sends NOTIFY on the `fleet` channel inside the same transaction: PostgreSQL
delivers it at commit, never for a rolled-back flip. Replicas poll as well, so SQLite fleets (one host) and
missed notifications are covered.
"""

from __future__ import annotations

import time

import sqlalchemy as sa

from labelstore import tx
from labelstore.fleet_schema import (
    leases,
    model_versions,
    promotions,
    registry_events,
    registry_pointer,
    replicas,
)

CHANNEL = "fleet"


def _notify(conn, payload: str) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_notify(:c, :p)"), {"c": CHANNEL, "p": payload})


# ------------------------------------------------------------------ versions and events
def add_event(conn, event: str, version: str | None = None, **fields) -> None:
    conn.execute(registry_events.insert().values(time=round(time.time(), 3), event=event, version=version,
                                                 fields=fields))


def log(engine, event: str, version: str | None = None, **fields) -> None:
    tx.run(engine, lambda conn: add_event(conn, event, version, **fields))


def events(engine) -> list[dict]:
    rows = tx.read(engine, lambda c: c.execute(sa.select(registry_events).order_by(registry_events.c.id)).all())
    return [{"event": r.event, "time": r.time, **({"version": r.version} if r.version else {}), **r.fields}
            for r in rows]


def versions(engine, with_deleted: bool = False) -> list[dict]:
    q = sa.select(model_versions).order_by(model_versions.c.number)
    if not with_deleted:
        q = q.where(model_versions.c.deleted_at.is_(None))
    return [dict(r._mapping) for r in tx.read(engine, lambda c: c.execute(q).all())]


def version(engine, name: str) -> dict | None:
    q = sa.select(model_versions).where(model_versions.c.name == name, model_versions.c.deleted_at.is_(None))
    row = tx.read(engine, lambda c: c.execute(q).first())
    return dict(row._mapping) if row else None


def next_number(conn) -> int:
    return (conn.execute(sa.select(sa.func.max(model_versions.c.number))).scalar() or 0) + 1


def add_version(conn, name: str, number: int, folder: str, sha256: str, meta: dict, created_at: float) -> None:
    conn.execute(model_versions.insert().values(name=name, number=number, folder=folder, sha256=sha256, meta=meta,
                                                created_at=created_at))


def delete_version(engine, name: str) -> None:
    def do(conn):
        conn.execute(model_versions.update().where(model_versions.c.name == name).values(deleted_at=time.time()))
        add_event(conn, "deleted", name)
    tx.run(engine, do)


# ------------------------------------------------------------------ the pointer
def pointer(engine) -> tuple[str | None, int]:
    """(active version, generation); (None, 0) before the first activation."""
    row = tx.read(engine, lambda c: c.execute(sa.select(registry_pointer).where(registry_pointer.c.id == 1)).first())
    return (row.version, row.generation) if row else (None, 0)


def flip(conn, version: str, why: str, **fields) -> int:
    """Move the pointer inside the caller's transaction; the new generation."""
    now = time.time()
    row = conn.execute(sa.select(registry_pointer).where(registry_pointer.c.id == 1).with_for_update()).first()
    if row is None:
        conn.execute(registry_pointer.insert().values(id=1, version=version, generation=1, changed_at=now))
        gen = 1
    else:
        gen = row.generation + 1
        conn.execute(registry_pointer.update().where(registry_pointer.c.id == 1)
                     .values(version=version, generation=gen, changed_at=now))
    add_event(conn, "activated", version, why=why, generation=gen, **fields)
    _notify(conn, f"flip:{gen}:{version}")
    return gen


def set_active(engine, version: str, why: str) -> int:
    return tx.run(engine, lambda conn: flip(conn, version, why))


# ------------------------------------------------------------------ leases
def take_lease(engine, name: str, holder: str, host: str, pid: int, ttl_s: float) -> dict | None:
    """None when taken (or renewed by the same holder); else the live lease of someone else."""
    def do(conn):
        now = time.time()
        row = conn.execute(sa.select(leases).where(leases.c.name == name).with_for_update()).first()
        if row is not None and row.holder != holder and row.expires_at > now:
            return dict(row._mapping)
        values = {"holder": holder, "host": host, "pid": pid, "acquired_at": now, "expires_at": now + ttl_s}
        if row is None:
            conn.execute(leases.insert().values(name=name, **values))
        else:
            if row.holder != holder:
                add_event(conn, "lease_expired", None, lease=name, holder=row.holder, host=row.host)
            conn.execute(leases.update().where(leases.c.name == name).values(**values))
        return None
    return tx.run(engine, do)


def renew_lease(engine, name: str, holder: str, ttl_s: float) -> bool:
    q = (leases.update().where(leases.c.name == name, leases.c.holder == holder)
         .values(expires_at=time.time() + ttl_s))
    return tx.run(engine, lambda conn: conn.execute(q).rowcount == 1)


def release_lease(engine, name: str, holder: str) -> None:
    tx.run(engine, lambda conn: conn.execute(leases.delete().where(leases.c.name == name, leases.c.holder == holder)))


# ------------------------------------------------------------------ replicas
def register_replica(engine, rid: str, host: str, pid: int, serving: str | None) -> dict | None:
    """Insert or take over the replica's row; the row it replaces when that one was alive (another process
    with the same id, or on the same SQLite file), for a warning."""
    def do(conn):
        now = time.time()
        old = conn.execute(sa.select(replicas).where(replicas.c.id == rid)).first()
        values = {"host": host, "pid": pid, "started_at": now, "heartbeat_at": now, "serving": serving,
                  "promotion_id": None, "prepare_state": None, "parity": None, "reason": None, "evicted_at": None}
        if old is None:
            conn.execute(replicas.insert().values(id=rid, **values))
        else:
            conn.execute(replicas.update().where(replicas.c.id == rid).values(**values))
        return dict(old._mapping) if old is not None else None
    return tx.run(engine, do)


def heartbeat(engine, rid: str, serving: str | None, monitor: dict | None = None) -> None:
    values = {"heartbeat_at": time.time(), "serving": serving}
    if monitor is not None:
        values["monitor"] = monitor
    tx.run(engine, lambda conn: conn.execute(replicas.update().where(replicas.c.id == rid).values(**values)))


def report_prepare(engine, rid: str, promotion_id: int, state: str, parity: str | None = None,
                   reason: str | None = None) -> None:
    q = replicas.update().where(replicas.c.id == rid).values(
        promotion_id=promotion_id, prepare_state=state, parity=parity, reason=reason, heartbeat_at=time.time())
    tx.run(engine, lambda conn: conn.execute(q))


def rejoin(engine, rid: str) -> None:
    """An evicted replica that serves the active version again."""
    q = replicas.update().where(replicas.c.id == rid).values(evicted_at=None)
    tx.run(engine, lambda conn: conn.execute(q))


def live_replicas(engine, live_s: float) -> list[dict]:
    q = sa.select(replicas).where(replicas.c.heartbeat_at > time.time() - live_s).order_by(replicas.c.id)
    return [dict(r._mapping) for r in tx.read(engine, lambda c: c.execute(q).all())]


def all_replicas(engine) -> list[dict]:
    return [dict(r._mapping) for r in tx.read(engine, lambda c: c.execute(sa.select(replicas)
                                                                         .order_by(replicas.c.id)).all())]


def leave(engine, rid: str) -> None:
    """A replica that stops: no promotion waits for it."""
    q = replicas.update().where(replicas.c.id == rid).values(heartbeat_at=0.0)
    tx.run(engine, lambda conn: conn.execute(q))


# ------------------------------------------------------------------ promotions
class PromotionRunning(Exception):
    """Another promotion is preparing and its deadline has not passed: its coordinator may still commit it."""


def start_promotion(engine, version: str, previous: str | None, why: str, timeout_s: float) -> int:
    def do(conn):
        now = time.time()
        # one promotion at a time: one within its deadline refuses this one at once (issue 63, L6: the second
        # waited out --promote-timeout for replicas busy with the first, then blamed them); an older one still
        # preparing past its deadline (its coordinator died) is aborted, said so
        preparing = conn.execute(sa.select(promotions.c.id, promotions.c.version, promotions.c.deadline)
                                 .where(promotions.c.state == "preparing")).all()
        for old in preparing:
            if old.deadline is not None and old.deadline > now:
                raise PromotionRunning(f"a promotion is running: {old.version} (promotion {old.id}, for up to "
                                       f"{old.deadline - now:.0f} s more); try again when it is done")
        for old in preparing:
            conn.execute(promotions.update().where(promotions.c.id == old.id)
                         .values(state="aborted", finished_at=now))
            add_event(conn, "promotion_aborted", old.version, promotion=old.id, why="superseded by a newer promotion")
        pid = conn.execute(promotions.insert().values(version=version, previous=previous, state="preparing", why=why,
                                                      started_at=now, deadline=now + timeout_s)).inserted_primary_key[0]
        add_event(conn, "prepare", version, promotion=pid, previous=previous, why=why)
        _notify(conn, f"prepare:{pid}:{version}")
        return pid
    return tx.run(engine, do)


def current_promotion(engine) -> dict | None:
    """The promotion being prepared, if any (its coordinator may have died: see `deadline`)."""
    q = sa.select(promotions).where(promotions.c.state == "preparing").order_by(promotions.c.id.desc()).limit(1)
    row = tx.read(engine, lambda c: c.execute(q).first())
    return dict(row._mapping) if row else None


def poll(engine, rid: str | None = None) -> dict:
    """What a replica needs each tick, in one read: the pointer and the promotion being prepared."""
    def do(c):
        # The promotion first, then the pointer: on PostgreSQL (read committed) each statement sees its own
        # snapshot, and a commit between them read in the other order showed "no promotion, old pointer", so
        # the replica dropped the model it had just prepared and loaded it again after the flip.
        pro = c.execute(sa.select(promotions).where(promotions.c.state == "preparing")
                        .order_by(promotions.c.id.desc()).limit(1)).first()
        ptr = c.execute(sa.select(registry_pointer).where(registry_pointer.c.id == 1)).first()
        me = c.execute(sa.select(replicas.c.evicted_at).where(replicas.c.id == rid)).first() if rid else None
        return {"version": ptr.version if ptr else None, "generation": ptr.generation if ptr else 0,
                "promotion": dict(pro._mapping) if pro else None, "evicted": bool(me and me.evicted_at)}
    return tx.read(engine, do)


def finish_promotion(engine, pid: int, commit: bool, why: str, evict: dict[str, str]) -> int | None:
    """Commit (flip the pointer, evict the replicas named with their reasons) or abort, in one transaction;
    the new generation, or None when aborted or when the promotion is no longer the one preparing."""
    def do(conn):
        now = time.time()
        row = conn.execute(sa.select(promotions).where(promotions.c.id == pid).with_for_update()).first()
        if row is None or row.state != "preparing":
            return None
        conn.execute(promotions.update().where(promotions.c.id == pid)
                     .values(state="committed" if commit else "aborted", finished_at=now))
        if not commit:
            add_event(conn, "promotion_aborted", row.version, promotion=pid, why=why)
            _notify(conn, f"abort:{pid}:{row.version}")
            return None
        for rid, reason in evict.items():
            conn.execute(replicas.update().where(replicas.c.id == rid).values(evicted_at=now, reason=reason))
            add_event(conn, "evicted", row.version, promotion=pid, replica=rid, why=reason)
        return flip(conn, row.version, why, promotion=pid, previous=row.previous)
    return tx.run(engine, do)
