"""One small client beside 16 clients sending 64 texts each (issue 40, L: each address's share of the queue).

    python bench/queue_share.py [--heavy 16] [--texts 64] [--duration 20] [--work /tmp/bench-hostile]
                                [--output bench/results/queue_share.json]

Starts `python -m app` on the tests' tiny model (bench/hostile_bodies.py's helpers) behind a trusted "proxy"
(`--forwarded-allow-ips 127.0.0.1`), so each client names its address in `X-Forwarded-For`. --heavy clients
each send `{"texts": [--texts texts]}` back to back; one small client sends one text at a time. Two phases
of --duration seconds in one run:
- one address: every client sends the same X-Forwarded-For, so the queue is first come, first served, as
  it was before each address had a share (the baseline);
- own addresses: each client its own address (app/http/fair_share.py gives each a share).
Reports the small client's 429 share and p50/p99 of its answered requests in each phase, and the heavy
clients' texts/s. Target (issue 40): the small client is not refused because others fill the queue.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import numpy as np
from api_load import stop_server
from hostile_bodies import ROOT, TEXTS, start, tiny_model, write_result
from load_clients import Connection


async def phase(port: int, heavy: int, texts: int, duration: float, own: bool) -> dict:
    stop_at = time.perf_counter() + duration
    small: dict = {"ok": [], "codes": {}}
    heavy_texts = [0]
    big = json.dumps({"texts": [TEXTS[i % len(TEXTS)] for i in range(texts)]}, ensure_ascii=False).encode()
    one = json.dumps({"text": TEXTS[0]}, ensure_ascii=False).encode()

    async def client(address: str, body: bytes, record):
        conn = Connection("127.0.0.1", port, 60)
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            try:
                status = await conn.post_json("/v1/classify", body, f"X-Forwarded-For: {address}\r\n")
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
                status = type(e).__name__
            record(status, time.perf_counter() - t0)
            if status == 429:
                await asyncio.sleep(0.05)  # as a client would back off a little
        conn.close()

    def small_record(status, seconds):
        small["codes"][str(status)] = small["codes"].get(str(status), 0) + 1
        if status == 200:
            small["ok"].append(seconds)

    def heavy_record(status, seconds):
        if status == 200:
            heavy_texts[0] += texts

    await asyncio.gather(client("10.0.1.1" if own else "10.0.0.1", one, small_record),
                         *(client(f"10.0.0.{i + 1}" if own else "10.0.0.1", big, heavy_record) for i in range(heavy)))
    sent = sum(small["codes"].values())
    ok = small["ok"]
    return {"small_requests": sent, "small_statuses": small["codes"],
            "small_429_share": round(small["codes"].get("429", 0) / sent, 3) if sent else None,
            "small_p50_ms": round(float(np.percentile(ok, 50)) * 1000, 1) if ok else None,
            "small_p99_ms": round(float(np.percentile(ok, 99)) * 1000, 1) if ok else None,
            "heavy_texts_per_s": round(heavy_texts[0] / duration, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heavy", type=int, default=16)
    ap.add_argument("--texts", type=int, default=64)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-hostile"))
    ap.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "queue_share.json")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    proc, port = start(ROOT, tiny_model(args.work), args.work, ("--forwarded-allow-ips", "127.0.0.1"))
    try:
        same = asyncio.run(phase(port, args.heavy, args.texts, args.duration, own=False))
        own = asyncio.run(phase(port, args.heavy, args.texts, args.duration, own=True))
    finally:
        stop_server(proc)
    write_result(args.output, one_address=same, own_addresses=own,
                 target="the small client's 429 share near 0 with own addresses")


if __name__ == "__main__":
    main()
