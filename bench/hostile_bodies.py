"""Other clients during hostile bodies (issue 40, H1 and M1): does a body built to cost the server stall them?

    python -m bench hostile_bodies [--clients 4] [--duration 20] [--hostile 1] [--code TREE] [--ui-body-mb 200]

`python -m app` (UI on) from TREE (default: this checkout) on the tests' tiny random ELECTRA. Two phases of
--duration s: baseline, --clients closed-loop clients sending one short text each and a /healthz probe every
100 ms; hostile, the same while --hostile senders (a process of their own) send bodies under the 2 MB limit that
fail validation in many places (340,000 nulls, 150,000 unknown keys, /predict, `POST /`, --ui-body-mb MB to
Gradio's queue/join). Targets: hostile p99 <= 3x baseline, slowest /healthz < 1 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import sys
import time
from pathlib import Path

import httpx
import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]
from bench import harness as h
from bench.harness import ROOT

TEXTS = ["오늘 회의 메모", "꿈에서 봤다", "에러 발생했다 오류", "내일 약속 기록", "좋은 날씨 일기"]


def tiny_model(work: Path) -> Path:
    folder = work / "tiny-classifier"
    if (folder / "config.json").exists():
        return folder
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import build_tiny_classifier

    return build_tiny_classifier(folder)


def hostile_bodies(ui_body_mb: int) -> list[tuple[str, str, bytes | None, int]]:
    """(kind, path, JSON body or None for a streamed one, bytes to stream)."""
    return [("texts: 340,000 nulls", "/v1/classify", json.dumps({"texts": [None] * 340_000}).encode(), 0),
            ("150,000 unknown keys", "/v1/classify", json.dumps({f"k{i}": 1 for i in range(150_000)}).encode(), 0),
            ("/predict 340,000 nulls", "/predict", json.dumps({"inputs": [None] * 340_000}).encode(), 0),
            ("POST / 150,000 parameters", "/", json.dumps({"inputs": "x", "parameters": {
                f"k{i}": 1 for i in range(150_000)}}).encode(), 0),
            (f"/ui queue/join {ui_body_mb} MB", "/ui/gradio_api/queue/join", None, ui_body_mb << 20)]


class _Answer(asyncio.Protocol):
    """Keeps every byte the server sends, even when it then resets the connection: asyncio's StreamReader
    raises the reset and drops an answer (a 413) that came before it."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closed: asyncio.Future = asyncio.get_running_loop().create_future()
        self.writable = asyncio.Event()
        self.writable.set()

    def data_received(self, data: bytes) -> None:
        self.data += data

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.writable.set()
        if not self.closed.done():
            self.closed.set_result(exc)


async def send_hostile(port: int, kind: str, path: str, body: bytes | None, stream: int) -> dict:
    """One hostile request on a fresh connection: the server's status when it answered (even if it closed
    before the body was sent), else the error kind; answer size and seconds."""
    t0 = time.perf_counter()
    transport, answer = await asyncio.get_running_loop().create_connection(_Answer, "127.0.0.1", port)
    length = len(body) if body is not None else stream
    transport.write((f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {length}\r\nConnection: close\r\n\r\n").encode())
    chunks = [body] if body is not None else [b" " * (1 << 20)] * -(-stream // (1 << 20))
    sent = 0
    for chunk in chunks:  # stop writing once the server answered or closed: the answer may come first
        await answer.writable.wait()
        if answer.closed.done() or answer.data:
            break
        transport.write(chunk)
        sent += len(chunk)
    try:
        error = await asyncio.wait_for(answer.closed, 120)
    except asyncio.TimeoutError as e:
        error = e
    finally:
        transport.close()
    got = {"kind": kind, "sent_bytes": sent, "seconds": round(time.perf_counter() - t0, 3)}
    if answer.data[:5] != b"HTTP/":
        return {**got, "status": None if error is None else type(error).__name__, "answer_bytes": len(answer.data)}
    return {**got, "status": int(answer.data[9:12]), "answer_bytes": len(answer.data)}


def attack(port: int, senders: int, ui_body_mb: int, start_at: float, stop_at: float, out) -> None:
    """In a process of its own (the clients' loop does not carry the attackers' writes): send hostile bodies
    back to back from `start_at` to `stop_at` (time.time()), and put the outcomes on `out`."""
    hostile = hostile_bodies(ui_body_mb)

    async def sender(offset: int, outcomes: list):
        i = offset
        while time.time() < stop_at:
            outcomes.append(await send_hostile(port, *hostile[i % len(hostile)]))
            i += 1

    async def main():
        await asyncio.sleep(max(0.0, start_at - time.time()))
        outcomes: list[dict] = []
        await asyncio.gather(*(sender(k, outcomes) for k in range(senders)))
        return outcomes

    out.put(asyncio.run(main()))


async def phase(port: int, args, hostile: bool) -> dict:
    health: list[float] = []
    attacker, results = None, None
    if hostile:
        ctx = multiprocessing.get_context("spawn")
        results = ctx.Queue()
        # from the end of the clients' warm-up to the end of their measured window
        attacker = ctx.Process(target=attack, args=(port, args.hostile, args.ui_body_mb, time.time() + 2.0,
                                                    time.time() + 2.0 + args.duration, results))
        attacker.start()

    async def beside(measure_from: float, stop_at: float):
        await asyncio.sleep(max(0.0, measure_from - time.perf_counter()))
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            try:
                async with httpx.AsyncClient(timeout=30) as c:
                    await c.get(f"http://127.0.0.1:{port}/healthz")
                health.append(time.perf_counter() - t0)
            except httpx.TransportError:
                health.append(float("inf"))
            await asyncio.sleep(0.1)

    result = await h.load(f"http://127.0.0.1:{port}", TEXTS, args.clients, args.duration, 2.0, 30.0, 30.0,
                        beside=beside)
    result["healthz_max_ms"] = round(max(health) * 1000, 1) if health else None
    result["healthz_p99_ms"] = round(float(np.percentile(health, 99)) * 1000, 1) if health else None
    if attacker is not None:
        outcomes = await asyncio.to_thread(results.get, True, 300)
        attacker.join(30)
        by_kind: dict[str, list[dict]] = {}
        for o in outcomes:
            by_kind.setdefault(o["kind"], []).append(o)
        result["hostile"] = {k: {"sent": len(v), "statuses": sorted({str(o["status"]) for o in v}),
                                 "answer_bytes_max": max(o.get("answer_bytes", 0) for o in v),
                                 "seconds_median": round(float(np.median([o["seconds"] for o in v])), 3),
                                 "seconds_max": max(o["seconds"] for o in v)} for k, v in by_kind.items()}
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--hostile", type=int, default=1, help="hostile senders at once")
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--ui-body-mb", type=int, default=200)
    ap.add_argument("--code", type=Path, default=ROOT, help="the tree whose app/ serves")
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-hostile"))
    ap.add_argument("--output", type=Path, default=h.RESULTS / "hostile_bodies.json")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    proc, url = h.start_server(tiny_model(args.work), ["--ui", "--data-dir", str(args.work / "data")],
                               args.work / "server.log", code=args.code.resolve())
    port = int(url.rsplit(":", 1)[1])
    try:
        base = asyncio.run(phase(port, args, False))
        under = asyncio.run(phase(port, args, True))
    finally:
        h.stop_server(proc)
    ratio = h.ratio(under["p99_ms"], base["p99_ms"], 2)
    for name, r in (("baseline", base), ("hostile", under)):
        print(f"{name}: {r['rps']} req/s, p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms, /healthz max "
              f"{r['healthz_max_ms']} ms, errors {r['errors']}")
    print(f"hostile / baseline p99: {ratio}x (target <= 3x, /healthz < 1 s); hostile kinds: "
          + json.dumps(under.get("hostile"), ensure_ascii=False))
    h.write_record(args.output, {"code": str(args.code), "baseline": base, "hostile": under, "p99_ratio": ratio,
                                 "target": "hostile p99 <= 3x baseline, /healthz < 1 s"})


if __name__ == "__main__":
    main()
