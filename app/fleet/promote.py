"""The coordinator of a two-phase promotion, and the fleet's command line.

    python -m app.fleet.promote promote v7 --database-url URL --models-dir DIR [--timeout 30]
    python -m app.fleet.promote status --database-url URL --models-dir DIR

`promote` asks every live replica (a heartbeat within `live_s`) to prepare the version, waits until each has
answered ready or failed, or the timeout passes, and then commits: the pointer flips in one transaction with
the promotion's state and the events, evicting the live replicas that were not ready (each named, with its
reason). Replicas whose parity digest differs from the majority's are evicted the same way. When no replica
is ready the promotion is aborted and nothing flips. Rollback is a promotion of the previous version.

A coordinator killed mid-way leaves either the old pointer (before the commit transaction) or the new one
(after it), never a half: the next promotion past its deadline aborts the one it left preparing; one within
its deadline (its coordinator may be alive) refuses the next at once (PromotionBusy, HTTP 409).
"""

from __future__ import annotations

import sys
import time
from collections import Counter

from app.fleet.registry import DbRegistry
from app.versions.registry import RegistryError
from labelstore import fleet_store as fs
from textdata.errors import UsageError

LIVE_S = 5.0


class PromotionError(UsageError):
    """The promotion did not flip the pointer; the message says why and which version keeps serving."""


class PromotionBusy(PromotionError):
    """Another promotion is running (HTTP 409): nothing was started."""


def promote(registry: DbRegistry, version: str, why: str, timeout_s: float = 30.0, live_s: float = LIVE_S,
            on_prepared=None) -> dict:
    """Prepare on every live replica, then commit; what happened (ready, evicted, generation)."""
    engine = registry.engine
    previous = registry.active()
    registry.verify(version)  # a folder that changed on disk is refused here already, with its name
    try:
        pid = fs.start_promotion(engine, version, previous, why, timeout_s)
    except fs.PromotionRunning as e:
        raise PromotionBusy(f"{version} was not promoted: {e}") from None
    deadline = time.time() + timeout_s
    while True:
        live = fs.live_replicas(engine, live_s)
        answered = {r["id"]: r for r in live if r["promotion_id"] == pid and r["prepare_state"] in ("ready", "failed")}
        waiting = [r["id"] for r in live if r["id"] not in answered]
        if not waiting or time.time() > deadline:
            break
        time.sleep(0.05)
    ready = {rid: r for rid, r in answered.items() if r["prepare_state"] == "ready"}
    evict = {rid: f"failed to prepare {version}: {r['reason']}" for rid, r in answered.items() if rid not in ready}
    evict.update({rid: f"not ready within {timeout_s:g} s (--promote-timeout)" for rid in waiting})
    if ready:
        majority, _ = Counter(r["parity"] for r in ready.values()).most_common(1)[0]
        for rid in [rid for rid, r in ready.items() if r["parity"] != majority]:
            evict[rid] = f"its parity batch answered differently ({ready.pop(rid)['parity']} vs {majority})"
    if live and not ready:
        reasons = "; ".join(f"{rid}: {why}" for rid, why in sorted(evict.items()))
        fs.finish_promotion(engine, pid, False, f"no replica ready ({reasons})", {})
        raise PromotionError(f"{version} was not promoted: no replica could serve it ({reasons}); "
                             f"{previous or 'nothing'} keeps serving")
    if on_prepared is not None:  # tests and bench/fleet.py: the moment between the two phases
        on_prepared(pid)
    generation = fs.finish_promotion(engine, pid, True, why, evict)
    if generation is None:
        raise PromotionError(f"{version} was not promoted: a newer promotion superseded it")
    return {"version": version, "previous": previous, "promotion": pid, "generation": generation,
            "ready": sorted(ready), "evicted": evict}


def main(argv: list[str] | None = None) -> int:
    import argparse

    from labelstore import open_store

    p = argparse.ArgumentParser(prog="python -m app.fleet.promote", description="Promote a version across a fleet.")
    p.add_argument("command", choices=("promote", "status"))
    p.add_argument("version", nargs="?")
    p.add_argument("--database-url", required=True)
    p.add_argument("--models-dir", required=True, help="the model store; with --model-store, a local cache")
    p.add_argument("--model-store", help="the fleet's fsspec URL holding the versions (as the replicas' flag)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for every live replica to prepare")
    p.add_argument("--why", default="python -m app.fleet.promote")
    a = p.parse_args(argv)
    try:
        from app.fleet.model_store import open_model_store

        registry = DbRegistry(a.models_dir, open_store(a.database_url, upgrade=False),  # app/fleet/db_cli.py migrates
                              object_store=open_model_store(a.model_store))
        if a.command == "status":
            version, generation = fs.pointer(registry.engine)
            print(f"active {version} (generation {generation})")
            for r in fs.all_replicas(registry.engine):
                age = time.time() - r["heartbeat_at"]
                print(f"  {r['id']}: serving {r['serving']}, heartbeat {age:.1f} s ago"
                      + (", evicted" if r["evicted_at"] else ""))
            return 0
        if not a.version:
            p.error("promote needs a VERSION")
        done = promote(registry, a.version, a.why, a.timeout)
    except (ValueError, RegistryError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    evicted = "".join(f"; evicted {rid}: {why}" for rid, why in done["evicted"].items())
    print(f"{a.version} active (generation {done['generation']}), ready on {len(done['ready'])} replica(s){evicted}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
