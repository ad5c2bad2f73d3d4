"""The fleet's trainer as a process of its own (a Kubernetes Job, a cron entry): one retrain, then promotion.

    python -m app.fleet.train --database-url URL --models-dir DIR [--train-data base.csv] [any python -m app flag]

It takes the `trainer` lease (app/fleet/jobs.py); when another process holds it, it prints one line,
"training already running on HOST", and exits 0: a second trainer started at once is not an error. Otherwise
it runs one job as a replica's POST /v1/train would (the training child, the commit into the shared store,
champion/challenger) and promotes through the two-phase promotion (app/fleet/promote.py). Exit 0 when the
job succeeded, 1 when it failed, 2 on a usage error.
"""

from __future__ import annotations

import asyncio
import sys
from types import SimpleNamespace


class _Promoter:
    """What Jobs asks of a switcher, for a process that serves nothing: activation is a fleet promotion."""

    def __init__(self, registry, cfg, store):
        self.registry, self.cfg = registry, cfg
        self.state = SimpleNamespace(store=store)  # team datasets, read as of an event id (app/versions/trainset.py)
        self.busy = None

    async def activate(self, version: str, why: str):
        from app.fleet.promote import PromotionError, promote
        from app.versions.swap import ActivationError

        try:
            return await asyncio.to_thread(promote, self.registry, version, why, self.cfg.promote_timeout_s)
        except PromotionError as e:
            raise ActivationError(str(e)) from None


async def _train(cfg, registry, store) -> dict:
    from app.fleet.jobs import LEASE, LEASE_S, RENEW_S, holder
    from app.versions.jobs import Jobs
    from labelstore import fleet_store as fs

    jobs = Jobs(cfg, registry, _Promoter(registry, cfg, store))
    record = await jobs.start({})
    print(f"training job {record['id']} started (log: {jobs.folder(record['id']) / 'train.log'})", flush=True)
    while not jobs._task.done():
        await asyncio.to_thread(fs.renew_lease, store, LEASE, holder(), LEASE_S)
        await asyncio.wait([jobs._task], timeout=RENEW_S)
    return jobs.get(record["id"])


def main(argv: list[str] | None = None) -> int:
    from app.config import parse_args
    from app.fleet.jobs import LEASE, TrainerBusy, holder, take
    from app.fleet.model_store import open_model_store
    from app.fleet.registry import DbRegistry, import_disk
    from app.http import logs
    from labelstore import fleet_store as fs
    from labelstore import open_store

    cfg = parse_args(sys.argv[1:] if argv is None else argv)
    logs.setup(cfg.log_level)
    try:
        store = open_store(cfg.store_url, upgrade=False)  # a fleet member never migrates: app/fleet/db_cli.py
        registry = DbRegistry(cfg.registry_dir, store, object_store=open_model_store(cfg.model_store))
        import_disk(registry)
        if registry.active():  # the champion a retrain is judged against, fetched when the store is remote
            registry.verify(registry.active())
        take(store)
    except TrainerBusy as e:
        print(str(e).split(" (")[0])
        return 0
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        record = asyncio.run(_train(cfg, registry, store))
    except ValueError as e:  # the training table cannot be built (no labels, a bad --train-data)
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        fs.release_lease(store, LEASE, holder())
    decision = record.get("decision") or {}
    print(f"job {record['id']} {record['status']}: version {record.get('version')}, "
          f"{'promoted' if decision.get('promoted') else 'not promoted'} ({decision.get('why') or record.get('error')})")
    return 0 if record["status"] == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
