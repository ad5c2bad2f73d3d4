"""The fleet overloaded behind nginx: which answers clients get, with the fleet's nginx configuration against the
one bench/fleet.py used until issue 63 (238 of 29,108 requests answered 502 at load 20-50), in the same run.

    nice -n 10 python bench/fleet_overload.py [--clients 96] [--duration 60] [--rounds 1] [--hog 8] [--max-queue 4]
                                              [--flip-every 8] [--promote-timeout 20] [--bursty 0.5] [--no-kill]
                                              [--output bench/results/fleet_overload.json]

Three replicas (`python -m app`, one SQLite fleet store, bench/api_load.py's random ELECTRA `--shape mini`) with a
small `--max-queue`, so that they shed (429) rather than only queue; `--hog` busy processes at nice 19 beside
them (load >= 8 on 2 cores, for at most 9 minutes); every `--flip-every` s a promotion (`python -m
app.fleet.promote`, v1 <-> v2), whose replicas not ready within --promote-timeout are evicted and answer 503
until they load it; a third into each phase
`kill -9` of one replica, restarted at once (refused connections, then 503 while it loads). --clients
closed-loop clients send one text per request through nginx, a `--bursty` share of them pausing 4-6 s now and
then (nginx's pooled connections then reach the replicas' 5 s keep-alive). The two configurations alternate
--rounds times, each for --duration s, on the same replicas.

Figures per configuration: every status, 502s (target: 0 with docker/nginx-fleet.conf), non-200 answers without
Retry-After (target: 0), the 200s' p50/p99 latency, and the causes nginx's error log gives. The machine's load
average is written beside them.
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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]
from api_load import build_model, free_port, load_texts
from fleet import ENV, Replica
from nginx_fixture import local_conf, running_nginx

from labelstore import open_store

# bench/fleet.py's nginx configuration until issue 63: the baseline (one upstream, no backups, nginx's defaults
# for max_fails (1), fail_timeout (10 s) and the upstream keepalive_timeout (60 s))
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
HOG = "import time\nend = time.time() + {s}\nwhile time.time() < end:\n    pass\n"


def configs(replicas: list[Replica], work: Path) -> dict:
    """name -> (nginx.conf text, its folder, its port)."""
    out = {}
    for name in ("before", "docker/nginx-fleet.conf"):
        w, port = work / ("nginx-" + name.split("/")[0]), free_port()
        if name == "before":
            servers = " ".join(f"server 127.0.0.1:{r.port};" for r in replicas)
            text = BEFORE.format(w=w, servers=servers, port=port, user="user root;" if os.geteuid() == 0 else "")
        else:
            text = local_conf([r.port for r in replicas], port, w)
        out[name] = (text, w, port)
    return out


async def clients(url: str, texts: list[str], n: int, seconds: float, bursty: float) -> list[tuple]:
    """(status, Retry-After, seconds) per answer; a transport error's status is its exception's name. A `bursty`
    share of the clients pauses 4-6 s after a third of its requests, so that nginx's pooled connections to the
    replicas age to the replicas' --keep-alive (5 s) and are then needed again at once."""
    out, stop = [], time.monotonic() + seconds
    rng = random.Random(0)

    async def one(i: int):
        async with httpx.AsyncClient(timeout=60) as c:
            k = i
            while time.monotonic() < stop:
                k += n
                t0 = time.monotonic()
                try:
                    r = await c.post(url + "/v1/classify", json={"text": texts[k % len(texts)]})
                    out.append((r.status_code, r.headers.get("retry-after"), time.monotonic() - t0))
                except httpx.HTTPError as e:
                    out.append((type(e).__name__, None, time.monotonic() - t0))
                if i < bursty * n and rng.random() < 1 / 3:
                    await asyncio.sleep(rng.uniform(4.0, 6.0))
    await asyncio.gather(*(one(i) for i in range(n)))
    return out


def crash(victim: Replica, after: float, log: list) -> None:
    """`kill -9` of a replica `after` s into the phase, restarted at once on its port: it refuses connections,
    then answers 503 while it loads."""
    time.sleep(after)
    victim.proc.kill()
    victim.proc.wait()
    t0 = time.monotonic()
    victim.start()
    log.append({"replica": victim.id, "killed_at_s": after, "ready_after_s": round(victim.wait_ready(), 1),
                "restart_s": round(time.monotonic() - t0, 1)})


def flipper(url: str, models: Path, every: float, stop: float, log: list, timeout: float) -> None:
    """Promotions v2, v1, v2, ... until `stop` (monotonic), each its own process, as bench/fleet.py's; a replica
    not ready within `timeout` is evicted, and answers 503 until it has loaded the version."""
    k = 0
    while time.monotonic() + every < stop:
        time.sleep(every)
        k += 1
        version = "v2" if k % 2 else "v1"
        done = subprocess.run([sys.executable, "-m", "app.fleet.promote", "promote", version, "--database-url", url,
                               "--models-dir", str(models), "--timeout", str(timeout), "--why", "bench/fleet_overload.py"],
                              env=ENV, capture_output=True, text=True, check=False)
        log.append({"version": version, "rc": done.returncode, "said": (done.stdout + done.stderr).strip()[-200:]})


def causes(error_log: Path) -> dict[str, int]:
    """nginx's error lines by what they say, the request and addresses left out."""
    if not error_log.exists():
        return {}
    said = (re.sub(r"^\S+ \S+ \[\w+\] \d+#\d+: (\*\d+ )?", "", line).split(",")[0]
            for line in error_log.read_text(errors="replace").splitlines())
    return dict(collections.Counter(re.sub(r"\d+", "N", s) for s in said).most_common(8))


def summary(answers: list[tuple]) -> dict:
    ok = [s for status, _, s in answers if status == 200]
    statuses = collections.Counter(str(status) for status, _, _ in answers)
    pct = lambda q: round(float(np.percentile(ok, q)) * 1000, 1) if ok else None
    return {"requests": len(answers), "statuses": dict(sorted(statuses.items())), "502": statuses.get("502", 0),
            "non_200_without_retry_after": sum(1 for status, retry, _ in answers if status != 200 and not retry),
            "p50_ms_200": pct(50), "p99_ms_200": pct(99)}


def phase(args, text: str, work: Path, port: int, url: str, run_dir: Path, replicas: list[Replica], texts) -> dict:
    """One configuration for --duration s: clients, promotions and the crash at once; what they saw."""
    flips, crashes, load0 = [], [], os.getloadavg()[0]
    with running_nginx(text, work, port):
        stop = time.monotonic() + args.duration
        movers = [asyncio.to_thread(flipper, url, run_dir / "models", args.flip_every, stop, flips, args.promote_timeout)
                  if args.flip_every else asyncio.sleep(0)]
        if args.kill:
            movers.append(asyncio.to_thread(crash, replicas[-1], args.duration / 3, crashes))

        async def both():
            return (await asyncio.gather(clients(f"http://127.0.0.1:{port}", texts, args.clients, args.duration,
                                                 args.bursty), *movers))[0]
        answers = asyncio.run(both())
    return {**summary(answers), "nginx_errors": causes(work / "error.log"), "promotions": len(flips),
            "promotions_failed": [f for f in flips if f["rc"]], "crashes": crashes,
            "load_1min": [round(load0, 2), round(os.getloadavg()[0], 2)]}


def start_replicas(args, run_dir: Path, url: str, replicas: list[Replica]) -> None:
    """Three replicas on the fleet store, appended to `replicas` as each starts (the caller stops them)."""
    for k in range(3):
        port, rid = free_port(), f"r{k + 1}"
        replicas.append(Replica(rid, port, [
            sys.executable, "-m", "app", "--models-dir", str(run_dir / "models"), "--database-url", url, "--fleet",
            "--replica-id", rid, "--port", str(port), "--no-ui", "--promote-timeout", "20", "--threads", "1",
            "--max-queue", str(args.max_queue), "--data-dir", str(run_dir / f"data-{rid}")], run_dir / f"{rid}.log"))
        replicas[-1].start()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=96)
    p.add_argument("--duration", type=float, default=60.0, help="seconds per configuration and round")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--hog", type=int, default=8, help="busy processes (nice 19) beside the fleet")
    p.add_argument("--max-queue", type=int, default=4, help="each replica's --max-queue: past it, 429")
    p.add_argument("--flip-every", type=float, default=8.0, help="seconds between promotions (0: none)")
    p.add_argument("--promote-timeout", type=float, default=20.0,
                   help="the promotions' --timeout: replicas not ready by then are evicted (stale, 503)")
    p.add_argument("--bursty", type=float, default=0.5, help="share of the clients that pause now and then")
    p.add_argument("--kill", action=argparse.BooleanOptionalAction, default=True,
                   help="kill -9 one replica a third into each phase and restart it")
    p.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench-fleet-overload")
    p.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "fleet_overload.json")
    args = p.parse_args(argv)
    texts, labels = load_texts()
    model = build_model(args.work, texts, labels, "torch", "mini")
    run_dir = args.work / f"run-{int(time.time())}"
    run_dir.mkdir(parents=True)
    url = f"sqlite:///{run_dir / 'app.db'}"
    from app.fleet.registry import DbRegistry

    engine = open_store(url)
    registry = DbRegistry(run_dir / "models", engine)
    for i in range(2):  # two versions to flip between: the same weights, distinct folders
        src = shutil.copytree(model, run_dir / f"src-{i}")
        (src / "note.txt").write_text(f"copy {i}")
        registry.register_folder(src)
    registry.set_active("v1", "bench start")
    engine.dispose()
    hog_s = 540  # the time box: ended in `finally`, and on their own if this process is killed
    hogs = [subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", HOG.format(s=hog_s)]) for _ in range(args.hog)]
    replicas = []
    result: dict = {"load_before": [round(x, 2) for x in os.getloadavg()], "runs": []}
    try:
        start_replicas(args, run_dir, url, replicas)
        for r in replicas:
            r.wait_ready()
        for _ in range(args.rounds):
            for name, (text, work, port) in configs(replicas, run_dir).items():
                run = {"config": name, **phase(args, text, work, port, url, run_dir, replicas, texts)}
                result["runs"].append(run)
                print(json.dumps(run), flush=True)
                time.sleep(5)  # the other configuration starts on replicas that finished this one's requests
    finally:
        for proc in hogs:
            proc.kill()
        for r in replicas:
            if r.proc and r.proc.poll() is None:
                r.proc.terminate()
        for r in replicas:
            if r.proc:
                r.proc.wait(60)
    by = collections.defaultdict(list)
    for run in result["runs"]:
        by[run["config"]].append(run)
    result["median_502"] = {name: float(np.median([r["502"] for r in runs])) for name, runs in by.items()}
    result.update(load_after=[round(x, 2) for x in os.getloadavg()], cpus=os.cpu_count(), clients=args.clients,
                  duration_s=args.duration, rounds=args.rounds, hog=args.hog, max_queue=args.max_queue,
                  flip_every_s=args.flip_every, promote_timeout_s=args.promote_timeout, bursty=args.bursty, kill=args.kill,
                  date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  command=" ".join(["python bench/fleet_overload.py", *(argv if argv is not None else sys.argv[1:])]))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
