"""Closed-loop HTTP load on loopback (bench/api_load.py): a minimal keep-alive client and N clients that each
send the next request as soon as the answer arrives, with latencies, errors and unanswered requests counted."""

from __future__ import annotations

import asyncio
import json
import random
import re
import time

import numpy as np


class Connection:
    """A minimal HTTP/1.1 keep-alive client: the load generator shares the 2 cores with the server, and
    httpx spends about as much CPU per request as the server does, which would cap what is measured."""

    def __init__(self, host: str, port: int, timeout: float):
        self.host, self.port, self.timeout = host, port, timeout
        self.reader = self.writer = None
        self.last_headers = b""  # the last response's head (bench/stage_report.py reads Server-Timing)

    async def post_json(self, path: str, body: bytes, headers: str = "") -> int:
        """`headers`: extra header lines, each ending in CRLF."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n{headers}"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        self.writer.write(head + body)
        try:
            return await asyncio.wait_for(self._response(), self.timeout)
        except BaseException:
            self.close()  # a half-read response would corrupt the next one
            raise

    async def _response(self) -> int:
        headers = self.last_headers = await self.reader.readuntil(b"\r\n\r\n")
        status = int(headers[9:12])
        m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", headers)
        await self.reader.readexactly(int(m.group(1)) if m else 0)
        if re.search(rb"(?i)\r\nconnection: *close", headers):
            self.close()
        return status

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def load(url: str, texts: list[str], clients: int, duration: float, warmup: float, grace: float,
               timeout: float, samples: list | None = None, beside=None) -> dict:
    """Closed-loop clients for `duration` after `warmup`. `samples` gets (start, end, ok) of every measured
    request; `beside(measure_from, stop_at)` is a coroutine run alongside (the swaps)."""
    host, port = url.removeprefix("http://").split(":")
    bodies = [json.dumps({"text": t}, ensure_ascii=False).encode() for t in texts]
    latencies: list[float] = []
    errors: dict[str, int] = {}
    sent = answered = 0
    rng = random.Random(1)
    start = time.perf_counter()
    measure_from, stop_at = start + warmup, start + warmup + duration

    async def client():
        nonlocal sent, answered
        conn = Connection(host, int(port), timeout)
        while time.perf_counter() < stop_at:
            body = rng.choice(bodies)
            t0 = time.perf_counter()
            sent += 1
            try:
                status = await conn.post_json("/v1/classify", body)
                kind = None if status == 200 else f"HTTP {status}"
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError) as e:
                kind = type(e).__name__
            t1 = time.perf_counter()
            answered += 1
            if kind:
                errors[kind] = errors.get(kind, 0) + 1
            elif measure_from <= t0 and t1 <= stop_at:
                latencies.append(t1 - t0)
            if samples is not None and (kind or (measure_from <= t0 and t1 <= stop_at)):
                samples.append((t0, t1, kind is None))
        conn.close()

    tasks = [asyncio.create_task(client()) for _ in range(clients)]
    if beside is not None:
        tasks.append(asyncio.create_task(beside(measure_from, stop_at)))
    await asyncio.sleep(max(0.0, stop_at - time.perf_counter()))
    _, pending = await asyncio.wait(tasks, timeout=grace)
    for t in pending:
        t.cancel()
    lat = np.array(latencies) * 1000
    return {"requests": len(lat), "rps": round(len(lat) / duration, 1),
            "p50_ms": round(float(np.percentile(lat, 50)), 1) if len(lat) else None,
            "p99_ms": round(float(np.percentile(lat, 99)), 1) if len(lat) else None,
            "errors": sum(errors.values()), "error_kinds": errors, "unanswered": sent - answered}
