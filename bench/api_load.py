"""HTTP API load test on loopback: micro-batching on vs off, in one run, per backend.

    python bench/api_load.py [--clients 32] [--duration 30] [--backends onnx,torch] [--shape small|mini]
                             [--rounds 1] [--work /tmp/bench-api] [--server-args "--threads 1"] [--output FILE]
    python bench/api_load.py --swap [--swaps 3] [--backends onnx] [--duration 30]     # model switches under load
    python bench/api_load.py --monitor [--backends onnx] [--rounds 3]    # drift monitoring + 5% audit on vs off

Builds (cached in --work) an ELECTRA-Small-shaped classifier with random weights (hidden 256, 12 layers,
4 heads, FFN 1024, embeddings 128; a WordPiece vocabulary trained on the request texts; the 8 ko-help
labels) and its `serving.export --quantize` folder. Backend `onnx` serves that folder (INT8 on CPU);
`torch` the transformers folder (eager PyTorch, what `python -m app` runs on a model not exported). Random
weights cost what trained ones do, and throughput is all this measures. `--shape mini` (hidden 64, 2 layers) shows a model so small that per-request
overhead dominates.

For each backend and mode, starts `python -m app --model M --no-ui` (`--no-batching` for "off") on a
free loopback port and runs --clients closed-loop clients for --duration seconds, each sending one
ko-help paragraph per request (`{"text": ...}`) and the next as soon as the answer arrives. Reports
requests/s, p50/p99 latency, the mean batch size the server formed (from /metrics), errors (any non-200
or transport failure) and unanswered requests (still open --grace seconds after the end). With
--rounds N the modes alternate N times and the medians are reported.

The engine ceiling (in-process, same run) is the most batching can give here: the engine's texts/s in passes
of --clients/2 texts (the batch a server forms under that load) over one text per pass; a compute-bound
CPU pass costs about the same per text either way (ONNX Runtime: ~1.4x), while eager PyTorch's large fixed
cost per pass is shared. Writes bench/results/api_load.json, load average beside the numbers.

`--swap`: one server (batching on) on a registry holding the model as v1 and a copy as v2, under the same
load, while --swaps activations (`POST /v1/models/{v}/activate`, v2, v1, v2, ...) run at even intervals in
the measured window. A request overlapping an activation (its POST to its answer: load, check, warm-up,
switch) counts "during a swap", else "steady"; p50/p99 and errors of both. Target: 0 failed requests, p99
during a swap <= 2x steady p99. Writes bench/results/api_load_swap.json.

`--monitor`: the two modes are drift monitoring on with a 5% audit sample (`--audit-rate 0.05`) and
`--no-monitor`, both batching on; target: requests/s on >= 0.97x off. Writes bench/results/api_load_monitor.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
from load_clients import load

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "ko-help" / "train.csv"
MAX_LENGTH = 128


def load_texts() -> tuple[list[str], list[str]]:
    if DATA.exists():
        df = pd.read_csv(DATA, dtype=str, keep_default_na=False)
        return df["text"].tolist(), sorted(df["label"].unique())
    # Without the shared data: synthetic Korean-ish sentences of ko-help's typical length.
    rng = random.Random(0)
    syllables = "가나다라마바사아자차카타파하오늘내일회의메모오류기록설정파일저장열기대화상자"
    texts = [" ".join("".join(rng.choices(syllables, k=rng.randint(2, 5))) for _ in range(rng.randint(4, 14)))
             for _ in range(2000)]
    return texts, ["sbasic", "scalc", "schart", "sdraw", "shared", "simpress", "smath", "swriter"]


SHAPES = {  # ELECTRA-Small; and a much smaller one where per-call overhead, not arithmetic, dominates
    "small": {"embedding_size": 128, "hidden_size": 256, "num_hidden_layers": 12, "num_attention_heads": 4,
              "intermediate_size": 1024},
    "mini": {"embedding_size": 64, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
             "intermediate_size": 256},
}


def build_model(work: Path, texts: list[str], labels: list[str], backend: str, shape: str) -> Path:
    work = work / shape
    model_dir, onnx_dir = work / "model", work / "onnx"
    if not (model_dir / "config.json").exists():
        import torch
        from tokenizers import BertWordPieceTokenizer
        from transformers import ElectraConfig, ElectraForSequenceClassification, ElectraTokenizerFast

        model_dir.mkdir(parents=True, exist_ok=True)
        corpus = work / "corpus.txt"
        corpus.write_text("\n".join(texts), encoding="utf-8")
        wp = BertWordPieceTokenizer(clean_text=True, strip_accents=False, lowercase=False)
        wp.train([str(corpus)], vocab_size=8000, min_frequency=2)
        wp.save_model(str(model_dir))
        tok = ElectraTokenizerFast(vocab_file=str(model_dir / "vocab.txt"), do_lower_case=False, strip_accents=False,
                                   model_max_length=MAX_LENGTH)
        tok.save_pretrained(model_dir)
        cfg = ElectraConfig(vocab_size=len(tok), **SHAPES[shape], max_position_embeddings=512,
                            num_labels=len(labels), id2label=dict(enumerate(labels)),
                            label2id={k: i for i, k in enumerate(labels)})
        torch.manual_seed(0)
        ElectraForSequenceClassification(cfg).save_pretrained(model_dir)
    if backend == "torch":
        return model_dir
    if not (onnx_dir / "model_quantized.onnx").exists():
        print("exporting to ONNX (once; cached in --work)...", flush=True)
        # Random weights put the labels in a near-tie, so INT8 may pick other argmaxes; parity is not what
        # this bench measures, hence the minimal agreement gate.
        subprocess.run([sys.executable, "-m", "serving.export", "--model", str(model_dir), "--output", str(onnx_dir),
                        "--quantize", "--min-agreement", "0.001"], check=True, cwd=ROOT)
    return onnx_dir


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: Path | None, extra: list[str], log_path: Path) -> tuple[subprocess.Popen, str]:
    """`python -m app` on `model`, or (None) on the active version of the registry given in `extra`."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("ELECTRA_API_KEY", None)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "app", *(["--model", str(model)] if model else []),
                                 "--no-ui", "--port", str(port),
                                 "--log-level", "warning", *extra], stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}; see {log_path}")
        try:
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise SystemExit(f"server not ready after 300 s; see {log_path}")


def stop_server(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()


def batch_stats(url: str) -> tuple[float, float]:
    text = httpx.get(url + "/metrics", timeout=10).text

    def value(name):
        m = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.MULTILINE)
        return float(m.group(1)) if m else 0.0

    return value("app_batch_size_texts_sum"), value("app_batch_size_texts_count")


def run_mode(name: str, model: Path, extra: list[str], texts: list[str], args) -> dict:
    log = args.work / f"server-{name.replace(' ', '-')}.log"
    proc, url = start_server(model, extra, log)
    try:
        before = batch_stats(url)
        result = asyncio.run(load(url, texts, args.clients, args.duration, args.warmup, args.grace, args.timeout))
        after = batch_stats(url)
        batches = after[1] - before[1]
        result["mean_batch_texts"] = round((after[0] - before[0]) / batches, 2) if batches else None
        result["p99_over_p50"] = round(result["p99_ms"] / result["p50_ms"], 2) if result["p50_ms"] else None
    finally:
        stop_server(proc)
    return {"mode": name, "server_flags": extra, **result}


def engine_ceiling(model: Path, texts: list[str], batch: int, seconds: float, threads: int | None) -> dict:
    """Texts/s through the engine alone (token ids ready, no HTTP), one text per call vs `batch` per call,
    whose passes the engine plans as it does for the server: the most any micro-batcher could gain here."""
    sys.path.insert(0, str(ROOT))
    from serving.engine import Classifier

    clf = Classifier.load(model, batch_tokens=512, threads=threads)  # the server's default engine budget
    overhead = clf.call_overhead_tokens
    seqs = clf.encode(texts[:3000])
    rng = random.Random(2)

    def rate(size: int) -> float:
        done, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            pick = rng.sample(seqs, size)
            clf.predict_encoded(pick)
            done += size
        return done / (time.perf_counter() - start)

    single, batched = rate(1), rate(batch)
    return {"batch": batch, "single_texts_per_s": round(single, 1), "batched_texts_per_s": round(batched, 1),
            "ratio": round(batched / single, 2), "call_overhead_tokens": round(overhead, 1)}


def _latency(samples: list) -> dict:
    ok = np.array([(t1 - t0) * 1000 for t0, t1, good in samples if good])
    return {"requests": len(samples), "errors": sum(1 for *_, good in samples if not good),
            "p50_ms": round(float(np.percentile(ok, 50)), 1) if len(ok) else None,
            "p99_ms": round(float(np.percentile(ok, 99)), 1) if len(ok) else None}


def swap_run(model: Path, texts: list[str], args) -> dict:
    """Requests during activations vs the rest, in one run on one server (see the module docstring)."""
    sys.path.insert(0, str(ROOT))
    from app.versions.registry import Registry

    root = args.work / "swap-registry"
    shutil.rmtree(root, ignore_errors=True)
    reg = Registry(root / "models")
    reg.set_active(reg.register_folder(model)[0])
    copy = root / "copy"
    shutil.copytree(model, copy)
    (copy / "bench-copy.txt").write_text("a second version with the same weights")
    reg.register_folder(copy)
    proc, url = start_server(None, ["--models-dir", str(reg.root), *args.server_args.split()],
                             args.work / "server-swap.log")
    samples, windows = [], []

    async def swaps(measure_from: float, stop_at: float) -> None:
        async with httpx.AsyncClient(timeout=300) as c:
            for i in range(args.swaps):
                await asyncio.sleep(max(0.0, measure_from + (i + 1) * (stop_at - measure_from) / (args.swaps + 1)
                                        - time.perf_counter()))
                version = "v2" if i % 2 == 0 else "v1"
                a = time.perf_counter()
                r = await c.post(f"{url}/v1/models/{version}/activate")
                windows.append({"version": version, "start": a, "seconds": round(time.perf_counter() - a, 2),
                                "status": r.status_code})

    try:
        asyncio.run(load(url, texts, args.clients, args.duration, args.warmup, args.grace, args.timeout,
                         samples, swaps))
    finally:
        stop_server(proc)
    spans = [(w["start"], w["start"] + w["seconds"]) for w in windows]
    during = [s for s in samples if any(s[0] < b and s[1] > a for a, b in spans)]
    steady = [s for s in samples if not any(s[0] < b and s[1] > a for a, b in spans)]
    out = {"activations": [{k: v for k, v in w.items() if k != "start"} for w in windows],
           "steady": _latency(steady), "during_swaps": _latency(during)}
    d, st = out["during_swaps"]["p99_ms"], out["steady"]["p99_ms"]
    out["p99_during_over_steady"] = round(d / st, 2) if d and st else None
    return out


def _median_result(runs: list[dict]) -> dict:
    """The run with the median requests/s (its own latencies, errors and batch size kept together)."""
    runs = sorted(runs, key=lambda r: r["rps"])
    chosen = dict(runs[(len(runs) - 1) // 2])
    chosen["rps_rounds"] = [r["rps"] for r in runs]
    chosen["errors"] = sum(r["errors"] for r in runs)
    chosen["unanswered"] = sum(r["unanswered"] for r in runs)
    return chosen


def print_tables(args, report_backends: dict, load_before) -> None:
    print(f"\n{args.shape} model, {args.clients} clients, {args.duration:g} s per mode x {args.rounds} round(s), "
          f"{os.cpu_count()} CPUs, load avg {load_before[0]:.1f}")
    print(f"{'backend':<8}{'mode':<14}{'req/s':>8}{'p50 ms':>9}{'p99 ms':>9}{'p99/p50':>9}{'batch':>7}{'errors':>8}"
          f"{'unanswered':>12}")
    for backend, rep in report_backends.items():
        for r in rep["results"]:
            print(f"{backend:<8}{r['mode'].removeprefix(backend + ' '):<14}{r['rps']:>8}{r['p50_ms']:>9}{r['p99_ms']:>9}"
                  f"{r['p99_over_p50']:>9}{r['mean_batch_texts']!s:>7}{r['errors']:>8}{r['unanswered']:>12}")
    print(f"\n{'backend':<8}{'API on/off':>11}{'engine ceiling':>16}{'  (texts/s: 1 per pass -> batched)':<36}"
          f"{'p99/p50 on':>11}")
    for backend, rep in report_backends.items():
        c, on = rep["engine_ceiling"], rep["results"][0]
        detail = f"  ({c['single_texts_per_s']} -> {c['batched_texts_per_s']}, {c['batch']} per pass)"
        print(f"{backend:<8}{str(rep['throughput_ratio']) + 'x':>11}{str(c['ratio']) + 'x':>16}{detail:<36}"
              f"{on['p99_over_p50']!s:>11}")
    print("targets: monitor on/off >= 0.97x, zero errors" if args.monitor else
          "targets: API on/off >= 3x, p99/p50 <= 5, zero errors and unanswered below the queue limit")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--duration", type=float, default=30, help="measured seconds per mode")
    ap.add_argument("--warmup", type=float, default=3, help="seconds of load before measuring")
    ap.add_argument("--grace", type=float, default=30, help="seconds to wait for open requests at the end")
    ap.add_argument("--timeout", type=float, default=60, help="client timeout per request")
    ap.add_argument("--backends", default="onnx,torch", help="comma-separated: onnx (INT8 export), torch")
    ap.add_argument("--rounds", type=int, default=1, help="alternate on/off this many times; medians reported")
    ap.add_argument("--ceiling-seconds", type=float, default=8, help="seconds per engine-ceiling measurement")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="small", help="small: ELECTRA-Small (the target)")
    ap.add_argument("--server-args", default="", help="extra flags for both servers, e.g. '--max-wait-ms 2'")
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-api"))
    ap.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "api_load.json")
    ap.add_argument("--swap", action="store_true", help="model switches under load instead of batching on/off")
    ap.add_argument("--swaps", type=int, default=3, help="activations during the measured window (--swap)")
    ap.add_argument("--monitor", action="store_true", help="drift monitoring + 5%% audit on vs off, batching on")
    args = ap.parse_args(argv)
    if args.swap:
        return main_swap(args)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not backends or set(backends) - {"onnx", "torch"}:
        ap.error(f"--backends {args.backends!r}: use onnx, torch or both")
    args.work.mkdir(parents=True, exist_ok=True)

    texts, labels = load_texts()
    common = args.server_args.split()
    threads = next((int(common[i + 1]) for i, f in enumerate(common[:-1]) if f == "--threads"), None)
    load_before = os.getloadavg()
    report_backends = {}
    for backend in backends:
        model = build_model(args.work, texts, labels, backend, args.shape)
        print(f"[{backend}] engine ceiling...", flush=True)
        ceiling = engine_ceiling(model, texts, max(2, args.clients // 2), args.ceiling_seconds, threads)
        modes = ((("monitor on", [*common, "--audit-rate", "0.05", "--data-dir", str(args.work / "app-data")]),
                  ("monitor off", [*common, "--no-monitor"])) if args.monitor else
                 (("batching on", common), ("batching off", [*common, "--no-batching"])))
        runs: dict[str, list[dict]] = {mode: [] for mode, _ in modes}
        for r in range(args.rounds):
            for mode, extra in modes:
                print(f"[{backend}] round {r + 1}/{args.rounds}: {mode}...", flush=True)
                runs[mode].append(run_mode(f"{backend} {mode}", model, extra, texts, args))
        on, off = (_median_result(runs[mode]) for mode, _ in modes)
        report_backends[backend] = {"engine_ceiling": ceiling, "results": [on, off],
                                    "throughput_ratio": round(on["rps"] / off["rps"], 2) if off["rps"] else None}

    print_tables(args, report_backends, load_before)
    if args.monitor and args.output == ROOT / "bench" / "results" / "api_load.json":
        args.output = ROOT / "bench" / "results" / "api_load_monitor.json"

    report = {"clients": args.clients, "duration_s": args.duration, "warmup_s": args.warmup, "rounds": args.rounds,
              "shape": args.shape, "model": {**SHAPES[args.shape], "weights": "random", "labels": len(labels),
                                             "max_length": MAX_LENGTH},
              "texts": "ko-help paragraphs, one per request" if DATA.exists() else "synthetic",
              "server_args": common, "backends": report_backends,
              "compared": "monitor on (audit 5%) / off" if args.monitor else "batching on / off",
              "targets": {"ratio_min": 0.97} if args.monitor else {"ratio_min": 3, "p99_over_p50_max": 5},
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "load_avg_before": [round(x, 2) for x in load_before],
                          "load_avg_after": [round(x, 2) for x in os.getloadavg()]},
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


def main_swap(args) -> int:
    args.work.mkdir(parents=True, exist_ok=True)
    texts, labels = load_texts()
    backend = args.backends.split(",")[0].strip()
    model = build_model(args.work, texts, labels, backend, args.shape)
    load_before = os.getloadavg()
    print(f"[{backend}] {args.swaps} activations under load...", flush=True)
    res = swap_run(model, texts, args)
    print(f"\n{args.shape} model ({backend}), {args.clients} clients, {args.duration:g} s, {args.swaps} activations, "
          f"load avg {load_before[0]:.1f}")
    print(f"{'requests':<14}{'count':>8}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}")
    for name in ("steady", "during_swaps"):
        r = res[name]
        print(f"{name:<14}{r['requests']:>8}{r['p50_ms']!s:>9}{r['p99_ms']!s:>9}{r['errors']:>8}")
    print("activations: " + ", ".join(f"{a['version']} {a['status']} in {a['seconds']} s" for a in res["activations"]))
    print(f"p99 during / steady: {res['p99_during_over_steady']}x (target <= 2x, 0 errors)")
    out = args.output if args.output != ROOT / "bench" / "results" / "api_load.json" else \
        ROOT / "bench" / "results" / "api_load_swap.json"
    report = {"clients": args.clients, "duration_s": args.duration, "warmup_s": args.warmup, "swaps": args.swaps,
              "shape": args.shape, "backend": backend, "server_args": args.server_args.split(), **res,
              "targets": {"errors": 0, "p99_during_over_steady_max": 2},
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "load_avg_before": [round(x, 2) for x in load_before],
                          "load_avg_after": [round(x, 2) for x in os.getloadavg()]},
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
