"""Other clients during hostile bodies (issue 40, H1 and M1): does a body built to cost the server stall them?

    python bench/hostile_bodies.py [--clients 4] [--duration 20] [--hostile 1] [--code TREE] [--ui-body-mb 200]
                                   [--work /tmp/bench-hostile] [--output bench/results/hostile_bodies.json]

Starts `python -m app` (UI on: Gradio's routes are among the targets) on the tests' tiny random ELECTRA
classifier (tests/conftest.py, built in --work), from TREE (default: this checkout; give the main checkout
to measure the code before a change). Two phases of --duration seconds, in one run:
- baseline: --clients closed-loop clients, each sending one short text to /v1/classify and the next as soon
  as the answer arrives (bench/load_clients.py), and a probe calling /healthz every 100 ms;
- hostile: the same, while --hostile senders (in a process of their own) send, back to back, bodies under --max-body-bytes (2 MB) that
  fail validation in many places: `{"texts": [null]*340000}` on /v1/classify, 150,000 unknown keys,
  `{"inputs": [null]*340000}` on /predict, 150,000 unknown `parameters` on `POST /`, and --ui-body-mb MB to
  /ui/gradio_api/queue/join (declared, then chunked).
Reports the clients' p50/p99 in both phases and their ratio (target: hostile p99 <= 3x baseline), the slowest
/healthz answer (target: < 1 s), and per hostile kind its status, answer size and time. Writes JSON with the
load average beside the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
from load_clients import load

ROOT = Path(__file__).resolve().parents[1]
TEXTS = ["오늘 회의 메모", "꿈에서 봤다", "에러 발생했다 오류", "내일 약속 기록", "좋은 날씨 일기"]


def tiny_model(work: Path) -> Path:
    folder = work / "tiny-classifier"
    if (folder / "config.json").exists():
        return folder
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import build_tiny_classifier

    return build_tiny_classifier(folder)


def start(code: Path, model: Path, work: Path, extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen, int]:
    """`python -m app` from `code` on `model` (plus `extra` flags), once /readyz answers: (process, port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "ELECTRA_API_KEY"}
    env.update(PYTHONPATH=str(code), GRADIO_ANALYTICS_ENABLED="False")
    log = open(work / "server.log", "wb")  # noqa: SIM115 - open for the process lifetime
    proc = subprocess.Popen([sys.executable, "-m", "app", "--model", str(model), "--port", str(port),
                             "--data-dir", str(work / "data"), "--log-level", "warning", *extra], cwd=work, env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 900  # a loaded machine: imports and warm-up took over 5 minutes at load 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}; see {work / 'server.log'}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return proc, port
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise SystemExit("server not ready after 900 s")


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
    if answer.data[:5] != b"HTTP/" and error is not None:
        return {"kind": kind, "status": type(error).__name__, "sent_bytes": sent,
                "seconds": round(time.perf_counter() - t0, 3)}
    return _outcome(kind, bytes(answer.data), t0, sent)


def _outcome(kind: str, answer: bytes, t0: float, sent: int) -> dict:
    status = int(answer[9:12]) if answer[:5] == b"HTTP/" else None
    return {"kind": kind, "status": status, "answer_bytes": len(answer), "sent_bytes": sent,
            "seconds": round(time.perf_counter() - t0, 3)}


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

    result = await load(f"http://127.0.0.1:{port}", TEXTS, args.clients, args.duration, 2.0, 30.0, 30.0,
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
    ap.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "hostile_bodies.json")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    proc, port = start(args.code.resolve(), tiny_model(args.work), args.work)
    try:
        base = asyncio.run(phase(port, args, False))
        under = asyncio.run(phase(port, args, True))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    ratio = under["p99_ms"] / base["p99_ms"] if base["p99_ms"] and under["p99_ms"] else None
    out = {"command": " ".join(sys.argv), "code": str(args.code), "machine": platform.processor() or platform.machine(),
           "cpus": os.cpu_count(), "load_average": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M"),
           "baseline": base, "hostile": under, "p99_ratio": round(ratio, 2) if ratio else None,
           "target": "hostile p99 <= 3x baseline, /healthz < 1 s"}
    print(json.dumps(out, indent=1, ensure_ascii=False))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
