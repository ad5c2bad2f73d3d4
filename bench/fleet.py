"""A fleet under load: PostgreSQL, replicas as local `python -m app` processes, nginx in front, promotions.

    python -m bench fleet [--replicas 3] [--clients 32] [--promotions 20] [--rollbacks 5] [--backend torch]
    python -m bench fleet --throughput [--rounds 2] [--duration 20]   # one replica against one plain process
    python -m bench fleet --overload --clients 96 [--duration 20] [--rounds 2] [--max-queue 4] [--flip-every 8]
                                     [--promote-timeout 20] [--hog 8] [--bursty 0.5] [--no-kill]

A PostgreSQL (tests/postgres_fixture.py), the model (harness.build_model's `mini`) and one copy per promotion
registered, the replicas, and nginx on docker/nginx-fleet.conf itself (tests/nginx_fixture.py). --clients
closed-loop clients through nginx while --promotions + --rollbacks flips run (`python -m app.fleet.promote`, every
fifth a rollback), then two crashes: `kill -9` of a replica while a promotion prepares (restarted), and of the
promoting process between prepare and commit. Figures: failed requests; per flip, the last answer from the demoted
version after the commit (target <= 2 s); p99 of requests overlapping a promotion over the others (target <=
1.5x); afterwards every replica serves the one listed version the pointer names. `--throughput`: one replica with
the database behind it against `python -m app --model M`, alternated --rounds times; target >= 0.95x.
`--overload`: three replicas on one SQLite store with a small --max-queue (they shed 429s), --hog busy processes at
nice 19 beside them, a promotion every --flip-every s, a third into each phase `kill -9` of one replica (restarted at
once), --clients clients (a --bursty share pausing 4-6 s now and then, past the replicas' 5 s keep-alive); the
fleet's nginx configuration and the one used until issue 63 (BEFORE) alternate --rounds times on the same replicas.
Figures per configuration: every status, 502s (target: 0 with docker/nginx-fleet.conf), non-200 answers without
Retry-After (target: 0), p50/p99 of the 200s, nginx's error causes.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from nginx_fixture import local_conf, running_nginx
from postgres_fixture import running_postgres

from bench import harness as h
from labelstore import fleet_store as fs
from labelstore import open_store

ENV = h.app_env(OMP_NUM_THREADS="1")


class Replica:
    def __init__(self, rid: str, port: int, extra: list[str], log: Path):
        self.id, self.port, self.extra, self.log = rid, port, extra, log
        self.proc: subprocess.Popen | None = None

    def start(self) -> float:
        """Seconds until it answers /readyz."""
        t0 = time.monotonic()
        self.proc, _ = h.start_server(None, self.extra, self.log, port=self.port, env=ENV)
        return time.monotonic() - t0

    def serving(self) -> str | None:
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/readyz", timeout=5).headers.get("x-model-version")
        except httpx.TransportError:
            return None


def promote_cmd(url: str, models: Path, version: str, timeout: float = 20) -> list[str]:
    return [sys.executable, "-m", "app.fleet.promote", "promote", version, "--database-url", url,
            "--models-dir", str(models), "--timeout", str(timeout), "--why", "bench/fleet.py"]


def header(head: bytes, name: str) -> str | None:
    m = re.search(rb"(?im)^" + name.encode() + rb": *([^\r\n]*)", head)
    return m.group(1).decode() if m else None


async def clients(url: str, texts: list[str], n: int, running, log: list, ports=None, bursty: float = 0.0) -> None:
    """n closed-loop clients until running() is false, each answer appended to `log` as (start, end, replica,
    version, status, has Retry-After), a transport error's status its name. A `bursty` share pauses 4-6 s after a
    third of its requests, so nginx's pooled connections age past the replicas' 5 s keep-alive."""
    bodies, rng = [json.dumps({"text": t}, ensure_ascii=False).encode() for t in texts], random.Random(0)

    async def one(i: int):
        conn, k = h.Connection.to(url, timeout=60), i
        while running():
            k += n
            t0 = time.time()
            try:
                status, head = await conn.post_json("/v1/classify", bodies[k % len(bodies)]), conn.last_headers
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError) as e:
                status, head = type(e).__name__, b""
            upstream = (header(head, "x-upstream") or "").split(",")[-1].strip()
            log.append((t0, time.time(), (ports or {}).get(upstream.rsplit(":", 1)[-1], upstream),
                        header(head, "x-model-version"), status, header(head, "retry-after") is not None))
            if i < bursty * n and rng.random() < 1 / 3:
                await asyncio.sleep(rng.uniform(4.0, 6.0))
        conn.close()
    await asyncio.gather(*(one(i) for i in range(n)))


def flips(engine, since: float) -> list[dict]:
    return [e for e in fs.events(engine) if e["event"] == "activated" and e["time"] >= since]


def drive(url: str, models: Path, engine, replicas: list[Replica], args, order: list[str], out: dict) -> None:
    """The promotions and rollbacks, then the two crashes; what happened goes into `out`."""
    runs, active, history = [], order[0], [order[0]]
    nxt = 1
    for i in range(args.promotions + args.rollbacks):
        rollback = (i + 1) % 5 == 0 and len(history) > 1
        version = history[-2] if rollback else order[nxt]
        if not rollback:
            nxt += 1
        t0 = time.time()
        done = subprocess.run(promote_cmd(url, models, version), env=ENV, capture_output=True, text=True, check=False)
        runs.append({"version": version, "previous": active, "rollback": rollback, "start": t0, "end": time.time(),
                     "rc": done.returncode, "said": (done.stdout + done.stderr).strip()[-300:]})
        if done.returncode == 0:
            active = version
            history.append(version)
        time.sleep(args.gap)
    out["runs"] = runs
    out["crash_replica"] = crash_replica(url, models, engine, replicas[-1], order[nxt], replicas)
    out["crash_coordinator"] = crash_coordinator(url, models, engine, order[nxt + 1], replicas)


def crash_replica(url, models, engine, victim: Replica, version: str, replicas) -> dict:
    proc = subprocess.Popen(promote_cmd(url, models, version), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    while fs.current_promotion(engine) is None and proc.poll() is None:
        time.sleep(0.01)
    victim.proc.send_signal(signal.SIGKILL)  # while it prepares
    killed = time.time()
    victim.proc.wait()
    said = proc.communicate()[0].decode()[-300:]
    restart = time.monotonic()
    ready_s = victim.start()
    serving = victim.serving()
    return {"version": version, "killed": killed, "promote_rc": proc.returncode, "said": said.strip(),
            "restart_to_ready_s": round(ready_s, 2), "restart_to_serving_active_s": round(time.monotonic() - restart, 2),
            "serving_after_restart": serving, "active": fs.pointer(engine)[0], **agreement(engine, replicas)}


def crash_coordinator(url, models, engine, version: str, replicas) -> dict:
    proc = subprocess.Popen(promote_cmd(url, models, version), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    while proc.poll() is None:  # every live replica ready: the coordinator is about to commit
        promo = fs.current_promotion(engine)
        live = fs.live_replicas(engine, 5.0)
        if promo and live and all(r["promotion_id"] == promo["id"] and r["prepare_state"] == "ready" for r in live):
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    proc.wait()
    time.sleep(2.0)
    return {"version": version, "killed": proc.returncode == -signal.SIGKILL, "flipped": fs.pointer(engine)[0] == version,
            **agreement(engine, replicas)}


def agreement(engine, replicas) -> dict:
    active = fs.pointer(engine)[0]
    listed = {v["name"] for v in fs.versions(engine)}
    serving = {r.id: r.serving() for r in replicas}
    return {"active_after": active, "active_listed": active in listed, "serving": serving,
            "all_serve_active": all(v == active for v in serving.values()),
            "unlisted_served": sorted({v for v in serving.values() if v not in listed})}


def analyse(log: list, runs: list[dict], engine, t_start: float) -> dict:
    ok = [x for x in log if x[4] == 200]
    failed = [x for x in log if x[4] != 200]
    commits = {}
    for e in flips(engine, t_start):
        commits.setdefault(e["version"], []).append(e["time"])
    windows, late = [], []
    for run in runs:
        if run["rc"] != 0:
            continue
        commit = min((t for t in commits.get(run["version"], []) if run["start"] <= t <= run["end"] + 1), default=None)
        if commit is None:
            continue
        windows.append((run["start"], commit + 2.0))
        nxt = min((r["start"] for r in runs if r["start"] > run["start"]), default=float("inf"))
        demoted = [x[1] - commit for x in ok if x[3] == run["previous"] and commit < x[1] < nxt]
        late.append(max(demoted, default=0.0))
    during = [x[1] - x[0] for x in ok if any(a <= x[1] and x[0] <= b for a, b in windows)]
    steady = [x[1] - x[0] for x in ok if not any(a <= x[1] and x[0] <= b for a, b in windows)]
    p99 = lambda v: float(np.percentile(v, 99)) * 1000 if v else None
    per_replica = {}
    for x in ok:
        per_replica[x[2]] = per_replica.get(x[2], 0) + 1
    return {"requests": len(log), "failed": len(failed), "failed_kinds": sorted({str(x[4]) for x in failed}),
            "answers_per_replica": per_replica, "flips_committed": len(late),
            "last_demoted_answer_after_commit_s": {"max": round(max(late, default=0), 3),
                                                   "median": round(float(np.median(late)), 3) if late else None},
            "p99_ms": {"during_promotion": p99(during), "steady": p99(steady),
                       "ratio": h.ratio(p99(during), p99(steady), 2)},
            "n_during": len(during), "n_steady": len(steady),
            "throughput_rps": round(len(ok) / (max(x[1] for x in log) - min(x[0] for x in log)), 1) if log else 0}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--promotions", type=int, default=20)
    p.add_argument("--rollbacks", type=int, default=5)
    p.add_argument("--gap", type=float, default=1.0, help="seconds between flips")
    p.add_argument("--backend", default="torch", choices=("torch", "onnx"))
    p.add_argument("--work", type=Path, default=Path("/tmp/bench-fleet"))
    p.add_argument("--output", type=Path, help="default bench/results/fleet[_throughput].json")
    p.add_argument("--throughput", action="store_true", help="one replica against a single process (see above)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--duration", type=float, default=20.0)
    p.add_argument("--overload", action="store_true", help="shedding replicas, two nginx configurations (see above)")
    p.add_argument("--max-queue", type=int, default=4, help="--overload: each replica's --max-queue; past it, 429")
    p.add_argument("--flip-every", type=float, default=8.0, help="--overload: seconds between promotions (0: none)")
    p.add_argument("--promote-timeout", type=float, default=20.0,
                   help="--overload: the promotions' --timeout; replicas not ready by then are evicted (503)")
    p.add_argument("--hog", type=int, default=8, help="--overload: busy processes (nice 19) beside the fleet")
    p.add_argument("--bursty", type=float, default=0.5, help="--overload: share of the clients that pause now and then")
    p.add_argument("--kill", action=argparse.BooleanOptionalAction, default=True,
                   help="--overload: kill -9 one replica a third into each phase and restart it")
    args = p.parse_args(argv)
    texts, labels = h.load_texts()
    model = h.build_model(args.work, texts, labels, args.backend, "mini")
    run_dir = args.work / f"run-{int(time.time())}"
    run_dir.mkdir(parents=True)
    if args.overload:
        return overload(args, model, run_dir, texts)
    with running_postgres() as pg:
        import sqlalchemy as sa

        admin = sa.create_engine(pg["admin"], isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.exec_driver_sql("CREATE DATABASE fleet")
        url = pg["url"].format(db="fleet")
        result = throughput(args, url, model, run_dir, texts) if args.throughput else run(args, url, model, run_dir, texts)
    result.update(backend=args.backend, replicas=args.replicas, clients=args.clients)
    print(json.dumps({k: v for k, v in result.items() if k not in ("runs",)}, indent=1, default=str))
    if args.throughput:
        print(f"replica / single process requests/s: {result['ratio']}x (target >= 0.95x)")
    else:
        print(f"p99 during a promotion / steady: {result['p99_ms']['ratio']}x (target <= 1.5x); failed "
              f"{result['failed']}; last demoted answer {result['last_demoted_answer_after_commit_s']['max']} s")
    h.write_record(args.output or h.RESULTS / f"fleet{'_throughput' if args.throughput else ''}.json", result)
    return 0


def throughput(args, url: str, model: Path, run_dir: Path, texts: list[str]) -> dict:
    from bench.api_load import run_mode

    args.work, args.warmup, args.grace, args.timeout = run_dir, 3.0, 10.0, 60.0
    modes = {"single process": ["--data-dir", str(run_dir / "single")],
             "replica": ["--data-dir", str(run_dir / "replica"), "--database-url", url, "--replica-id", "t1",
                         "--models-dir", str(run_dir / "models")]}
    runs = {name: [] for name in modes}
    for _ in range(args.rounds):
        for name, extra in modes.items():
            runs[name].append(run_mode(name, model, extra, texts, args))
    rps = {name: float(np.median([r["rps"] for r in rs])) for name, rs in runs.items()}
    return {"requests_per_s_median": rps, "ratio": h.ratio(rps["replica"], rps["single process"]),
            "runs": runs, "duration_s": args.duration, "rounds": args.rounds}


def run(args, url: str, model: Path, run_dir: Path, texts: list[str]) -> dict:
    models = run_dir / "models"
    engine = open_store(url)
    from app.fleet.registry import DbRegistry

    registry = DbRegistry(models, engine)
    n_versions = args.promotions + 3
    sources = []
    for i in range(n_versions):  # one copy per version: the same weights, distinct folders (content)
        src = run_dir / f"src-{i}"
        shutil.copytree(model, src)
        (src / "note.txt").write_text(f"copy {i}")
        sources.append(src)
    order = [registry.register_folder(s)[0] for s in sources]
    registry.set_active(order[0], "bench start")
    replicas, ports = [], {}
    for k in range(args.replicas):
        port, rid = h.free_port(), f"r{k + 1}"
        ports[str(port)] = rid
        replicas.append(Replica(rid, port, ["--models-dir", str(models), "--database-url", url, "--replica-id", rid,
                                            "--promote-timeout", "20", "--data-dir", str(run_dir / f"data-{rid}"),
                                            "--threads", "1"], run_dir / f"{rid}.log"))
        replicas[-1].start()
    lb_port = h.free_port()
    conf = local_conf([r.port for r in replicas], lb_port, run_dir / "nginx")
    try:
        with running_nginx(conf, run_dir / "nginx", lb_port):
            return asyncio.run(load_and_drive(f"http://127.0.0.1:{lb_port}", url, models, engine, replicas, args,
                                              order, texts, ports))
    finally:
        for r in replicas:
            h.stop_server(r.proc)
        engine.dispose()


async def load_and_drive(lb: str, url, models, engine, replicas, args, order, texts, ports) -> dict:
    async with httpx.AsyncClient(timeout=2) as c:
        while True:
            try:
                if (await c.get(lb + "/readyz")).status_code == 200:
                    break
            except httpx.TransportError:
                await asyncio.sleep(0.1)
    stop, log, out = asyncio.Event(), [], {}
    load = asyncio.create_task(clients(lb, texts, args.clients, lambda: not stop.is_set(), log, ports))
    await asyncio.sleep(10)  # steady state before the first flip
    t_start = time.time()
    await asyncio.to_thread(drive, url, models, engine, replicas, args, order, out)
    await asyncio.sleep(5)
    stop.set()
    await load
    return {**analyse(log, out["runs"], engine, t_start), "crash_replica": out["crash_replica"],
            "crash_coordinator": out["crash_coordinator"], "runs": out["runs"],
            "promote_failures": [r for r in out["runs"] if r["rc"] != 0]}


# the nginx configuration of this benchmark until issue 63, the baseline of --overload: one upstream, no backups,
# nginx's defaults for max_fails (1), fail_timeout (10 s) and the upstream keepalive_timeout (60 s)
BEFORE = """worker_processes 1; {user} pid {w}/nginx.pid; error_log {w}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {w}/tmp; proxy_temp_path {w}/tmp; fastcgi_temp_path {w}/tmp;
  uwsgi_temp_path {w}/tmp; scgi_temp_path {w}/tmp;
  upstream fleet {{ {servers} keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://fleet; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_next_upstream error timeout http_502 http_503 non_idempotent; proxy_next_upstream_tries 3;
      proxy_read_timeout 60s;
      add_header X-Upstream $upstream_addr always;
    }}
  }}
}}
"""


def nginx_causes(error_log: Path) -> dict[str, int]:
    said = (re.sub(r"^\S+ \S+ \[\w+\] \d+#\d+: (\*\d+ )?", "", line).split(",")[0]
            for line in (error_log.read_text(errors="replace").splitlines() if error_log.exists() else []))
    return dict(collections.Counter(re.sub(r"\d+", "N", s) for s in said).most_common(8))


def overload_phase(args, conf: str, work: Path, port: int, url: str, models: Path, replicas, texts) -> dict:
    """One configuration for --duration s: clients, promotions (v2, v1, ...) and the crash at once."""
    flips, crashes, load0 = [], [], os.getloadavg()[0]
    stop = time.monotonic() + args.duration

    def flipper():
        k = 0
        while args.flip_every and time.monotonic() + args.flip_every < stop:
            time.sleep(args.flip_every)
            k += 1
            done = subprocess.run(promote_cmd(url, models, "v2" if k % 2 else "v1", args.promote_timeout), env=ENV,
                                  capture_output=True, text=True, check=False)
            flips.append({"rc": done.returncode, "said": (done.stdout + done.stderr).strip()[-200:]})

    def crash():
        time.sleep(args.duration / 3)
        replicas[-1].proc.kill()
        replicas[-1].proc.wait()
        crashes.append({"replica": replicas[-1].id, "restart_to_ready_s": round(replicas[-1].start(), 1)})

    async def together(answers: list):
        await asyncio.gather(clients(f"http://127.0.0.1:{port}", texts, args.clients, lambda: time.monotonic() < stop,
                                     answers, bursty=args.bursty),
                             asyncio.to_thread(flipper), *([asyncio.to_thread(crash)] if args.kill else []))
        return answers
    with running_nginx(conf, work, port):
        answers = asyncio.run(together([]))
    ok = [x[1] - x[0] for x in answers if x[4] == 200]
    statuses = collections.Counter(str(x[4]) for x in answers)
    return {"requests": len(answers), "statuses": dict(sorted(statuses.items())), "502": statuses.get("502", 0),
            "non_200_without_retry_after": sum(1 for x in answers if x[4] != 200 and not x[5]),
            **{f"{k}_200": v for k, v in h.percentiles(ok, (50, 99)).items()},
            "nginx_errors": nginx_causes(work / "error.log"), "promotions": len(flips),
            "promotions_failed": [f for f in flips if f["rc"]], "crashes": crashes,
            "load_1min": [round(load0, 2), round(os.getloadavg()[0], 2)]}


def overload(args, model: Path, run_dir: Path, texts: list[str]) -> int:
    url, models = f"sqlite:///{run_dir / 'app.db'}", run_dir / "models"
    from app.fleet.registry import DbRegistry

    engine = open_store(url)
    registry = DbRegistry(models, engine)
    for i in range(2):  # two versions to flip between: the same weights, distinct folders
        (shutil.copytree(model, run_dir / f"src-{i}") / "note.txt").write_text(f"copy {i}")
        registry.register_folder(run_dir / f"src-{i}")
    registry.set_active("v1", "bench start")
    engine.dispose()
    hog = "import time\nend = time.time() + 540\nwhile time.time() < end:\n    pass\n"  # ends on its own too
    hogs = [subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", hog]) for _ in range(args.hog)]
    replicas, runs = [], []
    try:
        for k in range(3):
            port, rid = h.free_port(), f"r{k + 1}"
            replicas.append(Replica(rid, port, [
                "--models-dir", str(models), "--database-url", url, "--fleet", "--replica-id", rid, "--threads", "1",
                "--promote-timeout", "20", "--max-queue", str(args.max_queue), "--data-dir", str(run_dir / f"data-{rid}")],
                run_dir / f"{rid}.log"))
            replicas[-1].start()
        for _ in range(args.rounds):
            for name in ("before", "docker/nginx-fleet.conf"):
                work, port = run_dir / f"nginx-{name.split('/')[0]}", h.free_port()
                conf = (local_conf([r.port for r in replicas], port, work) if name != "before" else BEFORE.format(
                    w=work, port=port, user="user root;" if os.geteuid() == 0 else "",
                    servers=" ".join(f"server 127.0.0.1:{r.port};" for r in replicas)))
                runs.append({"config": name, **overload_phase(args, conf, work, port, url, models, replicas, texts)})
                print(json.dumps(runs[-1]), flush=True)
                time.sleep(5)  # the next configuration starts on replicas done with this one's requests
    finally:
        for proc in hogs:
            proc.kill()
        for r in replicas:
            if r.proc and r.proc.poll() is None:
                h.stop_server(r.proc)
    total = {name: [sum(r[k] for r in runs if r["config"] == name) for k in ("502", "requests")]
             for name in ("before", "docker/nginx-fleet.conf")}
    print("502s / answers: " + "; ".join(f"{name} {a} of {b}" for name, (a, b) in total.items())
          + " (target: 0 with docker/nginx-fleet.conf)")
    h.write_record(args.output or h.RESULTS / "fleet_overload.json", {
        "runs": runs, "total_502_of_requests": total, **{k: getattr(args, k) for k in (
            "clients", "duration", "rounds", "hog", "max_queue", "flip_every", "promote_timeout", "bursty", "kill")}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
