"""A replica of a fleet: registered in the database, it prepares promotions and follows the active pointer.

Two-phase promotion (the coordinator is app/fleet/promote.py):
  prepare  every live replica loads the new version next to the one it serves (its folder's hash checked,
           app/fleet/registry.py), runs it through the whole path on a parity batch and writes `ready` with the
           batch's digest, or `failed` with the reason. It keeps serving the old version meanwhile.
  commit   the pointer flips in one transaction; each replica sees it (PostgreSQL LISTEN/NOTIFY, and a poll
           every `poll_s` as the fallback) and switches to the model it already holds: one assignment.
A replica that has not prepared the version it finds active (it failed, was evicted, or started late) loads
it then; meanwhile it answers 503 on the classify routes and /readyz (a load balancer tries another replica),
so no client gets an answer from a demoted version once the replica has seen the flip.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import socket
import threading
import time

from app.fleet.registry import DbRegistry
from app.versions.registry import RegistryError
from app.versions.swap import ActivationBusy, ActivationError, ServedVersion, Switcher
from labelstore import fleet_store as fs

log = logging.getLogger("app")
PARITY_TEXTS = ["the match ended in a draw after extra time", "shares fell sharply after the results",
                "the new phone has a faster chip", "parliament votes on the bill today",
                "a film festival opens in the city", "", "x" * 300, "ok"]
RETRY_FAILED_S = 30.0  # a version this replica could not load is tried again after this long, not every tick


def replica_id(cfg) -> str:
    return cfg.replica_id or os.environ.get("REPLICA_ID") or f"{socket.gethostname()}:{cfg.port}"


def parity_digest(clf) -> str:
    """The labels the model gives a fixed batch: every replica loading the same folder must agree."""
    labels = [p.label for p in clf.predict([t or " " for t in PARITY_TEXTS])]
    return hashlib.sha256(json.dumps(labels).encode()).hexdigest()[:16]


class FleetSwitcher(Switcher):
    """The server's switcher in a fleet: `activate` runs a two-phase promotion across every live replica, and
    `follow_pointer` is this replica's part in it (the Replica loop)."""

    def __init__(self, registry: DbRegistry, state, metrics, load, describe, cfg):
        super().__init__(registry, state, metrics, self._verified_load(registry, load), describe)
        self.cfg = cfg
        self.replica = Replica(registry, state, metrics, self, replica_id(cfg))

    @staticmethod
    def _verified_load(registry: DbRegistry, load):
        def verified(folder):
            name = folder.name.split("-")[0]
            return load(registry.verify(name))  # a folder whose files changed is refused before it is read
        return verified

    async def activate(self, version: str, why: str) -> ServedVersion:
        from app.fleet.promote import PromotionBusy, PromotionError, promote

        self.registry.path(version)  # RegistryError for an unknown name
        if self.busy:  # this replica coordinates one already (other replicas': the store refuses, PromotionBusy)
            raise ActivationBusy(f"{version} was not promoted: a promotion is running ({self.busy}); try again "
                                 "when it is done")
        self.busy = version
        try:
            await asyncio.to_thread(promote, self.registry, version, why, self.cfg.promote_timeout_s)
        except PromotionBusy as e:
            raise ActivationBusy(str(e)) from None
        except PromotionError as e:
            raise ActivationError(str(e)) from None
        finally:
            self.busy = None
        self.replica.wake()
        for _ in range(200):  # this replica switches within a tick of the flip; the answer shows it
            if self.state.served.version == version:
                break
            await asyncio.sleep(0.05)
        return self.state.served

    async def follow_pointer(self, interval_s: float = 1.0) -> None:
        await self.replica.run()

    @property
    def jobs_class(self):
        from app.fleet.jobs import FleetJobs  # one trainer across the fleet (a lease row)

        return FleetJobs


class Replica:
    def __init__(self, registry: DbRegistry, state, metrics, switcher: Switcher, rid: str,
                 poll_s: float = 0.25, heartbeat_s: float = 1.0):
        self.registry, self.engine, self.state, self.metrics = registry, registry.engine, state, metrics
        self.switcher, self.id = switcher, rid
        self.poll_s, self.heartbeat_s = poll_s, heartbeat_s
        self.prepared: dict[str, ServedVersion] = {}
        self.preparing: dict[str, asyncio.Task] = {}
        self.handled: int | None = None  # the promotion last prepared
        self.failed: dict[str, float] = {}  # version -> when loading it failed
        self.stale = False  # serving a version that is not the active one: refuses work (app/fleet/gate.py)
        self.rows: list[dict] = []  # every replica's row, refreshed with the heartbeat (/metrics, /v1/monitor)
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._beat = 0.0

    def wake(self) -> None:
        if self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def run(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        await asyncio.to_thread(self.register)
        if self.engine.dialect.name == "postgresql":
            threading.Thread(target=self._listen, name="fleet-listen", daemon=True).start()
        try:
            while True:
                try:
                    await self.tick()
                except Exception:  # the database away for a moment must not end the loop: the next tick retries
                    log.exception("fleet: tick failed")
                try:
                    await asyncio.wait_for(self._wake.wait(), self.poll_s)
                except asyncio.TimeoutError:
                    pass
                self._wake.clear()
        finally:
            await asyncio.to_thread(fs.leave, self.engine, self.id)

    def register(self) -> None:
        old = fs.register_replica(self.engine, self.id, socket.gethostname(), os.getpid(), self.state.served.version)
        if old and old["pid"] != os.getpid() and old["heartbeat_at"] > time.time() - 5:
            log.warning("replica id %s was alive a moment ago in process %s on %s: two replicas share an id "
                        "(give each its own --replica-id)", self.id, old["pid"], old["host"])
        if self.engine.dialect.name == "sqlite":
            others = [r for r in fs.live_replicas(self.engine, 5.0) if r["id"] != self.id]
            if others:
                log.warning("%d other replica(s) share the SQLite file %s (%s): SQLite serves one host only; use "
                            "PostgreSQL (--database-url postgresql+psycopg://...) for replicas on several hosts",
                            len(others), self.engine.url.database, ", ".join(r["id"] for r in others))
        log.info("fleet: replica %s registered, serving %s", self.id, self.state.served.version,
                 extra={"fields": {"event": "replica_registered", "replica": self.id}})

    async def tick(self) -> None:
        seen = await asyncio.to_thread(fs.poll, self.engine, self.id)
        if time.monotonic() - self._beat >= self.heartbeat_s:
            self._beat = time.monotonic()
            mon = self.state.monitor
            monitor = await asyncio.to_thread(lambda: compact(mon.snapshot())) if mon is not None else None
            await asyncio.to_thread(fs.heartbeat, self.engine, self.id, self.state.served.version, monitor)
            self.rows = await asyncio.to_thread(fs.all_replicas, self.engine)
        promo = seen["promotion"]
        if promo and promo["id"] != self.handled and time.time() < promo["deadline"]:
            # a task: the heartbeat goes on while the model loads (a silent replica is taken for dead)
            self.handled = promo["id"]
            self.preparing[promo["version"]] = asyncio.create_task(self.prepare(promo))
        wanted = seen["version"]
        if wanted and wanted != self.state.served.version:
            await self.switch(wanted)
        elif wanted and seen["evicted"]:
            await asyncio.to_thread(fs.rejoin, self.engine, self.id)
        keep = {wanted, promo["version"] if promo else None}
        for version in [v for v in self.prepared if v not in keep]:  # an aborted or superseded promotion's model
            del self.prepared[version]

    async def prepare(self, promo: dict) -> None:
        version, pid = promo["version"], promo["id"]
        await asyncio.to_thread(fs.report_prepare, self.engine, self.id, pid, "loading")
        try:
            new = self.prepared.get(version) or (self.state.served if self.state.served.version == version else None)
            if new is None:
                new = await self._load(version)
            digest = await asyncio.to_thread(parity_digest, new.clf)
        except (ActivationError, RegistryError) as e:
            self.preparing.pop(version, None)
            await asyncio.to_thread(fs.report_prepare, self.engine, self.id, pid, "failed", None, str(e))
            log.warning("fleet: prepare of %s failed: %s", version, e,
                        extra={"fields": {"event": "prepare_failed", "version": version, "replica": self.id}})
            return
        self.prepared[version] = new
        self.preparing.pop(version, None)
        await asyncio.to_thread(fs.report_prepare, self.engine, self.id, pid, "ready", digest)
        log.info("fleet: %s prepared (parity %s)", version, digest,
                 extra={"fields": {"event": "prepared", "version": version, "replica": self.id}})

    async def _load(self, version: str) -> ServedVersion:
        folder = await asyncio.to_thread(self.registry.path, version)
        return await self.switcher._prepare(version, folder, self.state.served)  # loaded, checked, warmed

    async def switch(self, version: str) -> None:
        old = self.state.served
        task = self.preparing.get(version)
        if task is not None and not task.done():  # committed without this replica: its prepare may still finish
            self.stale, self.state.ready = True, False
            await asyncio.wait([task])
        new = self.prepared.pop(version, None)
        if new is None:
            self.stale, self.state.ready = True, False  # out of rotation until it serves the active version
            if time.time() - self.failed.get(version, 0.0) < RETRY_FAILED_S:
                return
            try:
                new = await self._load(version)
            except (ActivationError, RegistryError) as e:
                self.failed[version] = time.time()
                log.error("fleet: cannot serve the active version %s (%s); refusing requests until it can", version, e,
                          extra={"fields": {"event": "stale", "version": version, "replica": self.id}})
                return
        self.state.served = new
        self.metrics.set_model(version)
        if self.state.monitor is not None:
            self.state.monitor.attach(new)
        self.stale, self.state.ready = False, True
        self.failed.pop(version, None)
        await asyncio.to_thread(fs.heartbeat, self.engine, self.id, version)
        log.info("fleet: switched %s -> %s", old.version, version,
                 extra={"fields": {"event": "switched", "version": version, "previous": old.version,
                                   "replica": self.id}})

    def _listen(self) -> None:
        """LISTEN on the fleet channel (psycopg, autocommit); each notification wakes the loop at once."""
        import psycopg

        url = self.engine.url.set(drivername="postgresql")
        while True:
            try:
                dsn = url.render_as_string(hide_password=False)
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute(f"LISTEN {fs.CHANNEL}")
                    for _ in conn.notifies():
                        self.wake()
            except Exception as e:  # noqa: BLE001 - the poll keeps the replica right; listening resumes
                log.warning("fleet: LISTEN failed (%s); polling every %.2f s meanwhile", str(e).splitlines()[0][:200],
                            self.poll_s)
                time.sleep(2.0)


def compact(snapshot: dict) -> dict:
    """What the database keeps of a monitor snapshot: counts and levels per version, no history."""
    keep = ("total", "n", "drift", "levels", "alerts", "empty")
    return {"dropped": snapshot.get("dropped", 0),
            "versions": {v: {k: s.get(k) for k in keep if k in s} for v, s in snapshot.get("versions", {}).items()}}
