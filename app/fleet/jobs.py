"""Training jobs in a fleet: one trainer at a time across every replica, held by a lease row in the database.

The lease names its holder (host:pid) and expires `LEASE_S` after its last renewal; the job renews it every
`RENEW_S` while the child trains and releases it when the job ends. A holder killed with -9 renews no more,
so its lease expires and the next start takes it (said in the events).
"""

from __future__ import annotations

import asyncio
import os
import socket

from app.versions.jobs import JobConflict, Jobs
from labelstore import fleet_store as fs

LEASE = "trainer"
LEASE_S, RENEW_S = 30.0, 5.0


class TrainerBusy(JobConflict):
    """Another process of the fleet holds the trainer lease."""


def holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def take(engine, ttl_s: float = LEASE_S) -> None:
    held = fs.take_lease(engine, LEASE, holder(), socket.gethostname(), os.getpid(), ttl_s)
    if held is not None:
        raise TrainerBusy(f"training already running on {held['host']} (process {held['pid']}; its lease expires "
                          f"unless renewed)")


class FleetJobs(Jobs):
    async def start(self, given: dict) -> dict:
        engine = self.registry.engine
        await asyncio.to_thread(take, engine)
        try:
            record = await super().start(given)
        except BaseException:
            await asyncio.to_thread(fs.release_lease, engine, LEASE, holder())
            raise
        asyncio.get_running_loop().create_task(self._hold(engine))
        return record

    async def _hold(self, engine) -> None:
        """Renew while the job runs (training, commit, promotion); release when it is over."""
        try:
            while self._task is not None and not self._task.done():
                await asyncio.to_thread(fs.renew_lease, engine, LEASE, holder(), LEASE_S)
                await asyncio.wait([self._task], timeout=RENEW_S)
        finally:
            await asyncio.to_thread(fs.release_lease, engine, LEASE, holder())
