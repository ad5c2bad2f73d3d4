"""Another process holding the label store's SQLite write lock (the `sqlite3` shell, a backup, VACUUM): does the
server stay answering (issue 63, M3)?

    python -m bench sqlite_lock --model EXPORTED_FOLDER [--lock-s 15]

One server on the default SQLite store; `/healthz` and `/v1/classify` one after the other for --lock-s seconds, first
with the database free (the baseline), then while this process holds `BEGIN EXCLUSIVE` on `app.db`, with one
`POST /v1/datasets` write in the middle. Targets: `/healthz` p99 <= 100 ms locked; the write 503 + Retry-After.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]
from bench import harness as h

KEY = "bench-sqlite-lock-key-0123456789"


def window(url: str, seconds: float, during=None) -> dict:
    """Sequential /healthz and /v1/classify for `seconds`; `during()` runs once in a thread at the middle."""
    auth = {"authorization": f"Bearer {KEY}"}
    lat = {"healthz": [], "classify": []}
    errors = 0
    side: dict = {}
    with httpx.Client(base_url=url, timeout=60) as c:
        end = time.monotonic() + seconds
        fired = during is None
        while time.monotonic() < end:
            if not fired and time.monotonic() > end - seconds / 2:
                threading.Thread(target=lambda: side.update(during(url)), daemon=True).start()
                fired = True
            for route, call in (("healthz", lambda: c.get("/healthz")),
                                ("classify", lambda: c.post("/v1/classify", json={"text": "a locked store"},
                                                            headers=auth))):
                start = time.perf_counter()
                status = call().status_code
                lat[route].append((time.perf_counter() - start) * 1000)
                errors += status != 200
    out = {r: {"requests": len(v), "p50_ms": round(float(np.percentile(v, 50)), 2),
               "p99_ms": round(float(np.percentile(v, 99)), 2), "max_ms": round(max(v), 2)} for r, v in lat.items()}
    return {**out, "errors": errors, **({"write": side} if side else {})}


def write(url: str) -> dict:
    start = time.perf_counter()
    r = httpx.post(url + "/v1/datasets", json={"name": "under the lock", "texts": ["one", "two"],
                                               "labels": ["a", "b"], "overlap": 1},
                   headers={"authorization": f"Bearer {KEY}"}, timeout=60)
    return {"status": r.status_code, "retry_after": r.headers.get("retry-after"),
            "seconds": round(time.perf_counter() - start, 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--lock-s", type=float, default=15.0)
    p.add_argument("--work", type=Path, default=Path("/tmp/bench-sqlite-lock"))
    p.add_argument("--output", type=Path, default=h.RESULTS / "sqlite_lock.json")
    args = p.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    data = args.work / "data"
    proc, url = h.start_server(args.model, ["--data-dir", str(data), "--api-key", KEY], args.work / "server.log")
    try:
        free = window(url, args.lock_s)
        db = sqlite3.connect(data / "app.db", timeout=0, isolation_level=None)
        db.execute("BEGIN EXCLUSIVE")  # what the sqlite3 shell, a backup or VACUUM holds
        try:
            locked = window(url, args.lock_s, write)
        finally:
            db.execute("ROLLBACK")
            db.close()
        after_write = write(url)
    finally:
        h.stop_server(proc)
    ratio = h.ratio(locked["healthz"]["p99_ms"], free["healthz"]["p99_ms"], 2)
    report = {"model": str(args.model), "lock_s": args.lock_s, "free": free, "locked": locked,
              "write_after_the_lock": after_write, "healthz_p99_ratio_locked_to_free": ratio,
              "target": "healthz p99 <= 100 ms while locked; the write 503 + Retry-After, not a hang",
              "target_met": locked["healthz"]["p99_ms"] <= 100 and locked.get("write", {}).get("status") == 503}
    h.write_record(args.output, report)
    for name in ("healthz", "classify"):
        f, lk = free[name], locked[name]
        print(f"{name}: p50/p99 ms free {f['p50_ms']}/{f['p99_ms']}, locked {lk['p50_ms']}/{lk['p99_ms']} "
              f"(max {lk['max_ms']}); p99 ratio {round(lk['p99_ms'] / f['p99_ms'], 2)}x")
    print(f"write while locked: {locked.get('write')}; after: {after_write}; errors free {free['errors']}, locked "
          f"{locked['errors']}; target {'met' if report['target_met'] else 'not met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
