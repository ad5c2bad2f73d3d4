"""Batch scoring with the engine's pass plans (serving/passes.py) against the plan they replaced, in one run.

    python bench/passes.py [--work /tmp/bench-passes] [--shape small] [--rows 2048] [--rounds 5]

Before issue 30, `Classifier._logits` sorted a call's texts longest first and cut a pass only at the pass size
(`batch_tokens // longest` rows); the server alone cut by cost first. Now every call is planned once by
serving/passes.py. Three plans, timed on `Classifier.predict_proba` over chunks of `serving.score`'s --batch-rows
(2,048 rows, what score_frame hands the engine) of ko-help/train.csv, interleaved over --rounds, medians, the
planning inside the timing (rows per wall second, and per CPU second of this process: steadier where other work
shares the cores):
- before: the old plan;
- after: what batch scoring runs now, the cost model with `passes.FIXED` (cut at the pass size only, shortest
  first), so that a file's bytes never follow the machine's timing;
- cost: the API's plan, also cut where padding would cost more than a pass (`call_overhead_tokens`, measured).
Also counts passes and the share of padded tokens each plan runs.

The model: a random-init ELECTRA of --shape (bench/serving.py's shapes and tokenizer), exported to ONNX fp32 (rows/s
do not depend on the weights). Writes bench/results/passes.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def bench_serving():
    """bench/serving.py's tokenizer and model builders (its file name shadows the `serving` package)."""
    spec = importlib.util.spec_from_file_location("bench_serving", ROOT / "bench" / "serving.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def old_plan(lengths: list[int], budget: int) -> list[np.ndarray]:
    """The plan `_logits` made before: longest first, a pass cut only at `budget // longest` rows."""
    lengths = np.asarray(lengths, np.int64)
    order = np.argsort(-lengths, kind="stable")
    out, start = [], 0
    while start < len(order):
        size = max(1, budget // max(1, int(lengths[order[start]])))
        out.append(order[start : start + size])
        start += size
    return out


def build(work: Path, shape: str) -> Path:
    from serving.export import ExportConfig
    from serving.export import run as export

    onnx_dir = work / "onnx"
    if not (onnx_dir / "export_report.json").exists():
        bs = bench_serving()
        tok = bs.build_tokenizer(work)
        train = pd.read_csv(bs.DATA / "ko-help" / "train.csv")
        model = bs.finetune(work, tok, train, 0, shape)  # random init: rows/s only
        export(ExportConfig(model=model, output=onnx_dir))
    return onnx_dir


def padding_share(seqs, plan) -> float:
    real = sum(len(s) for s in seqs)
    padded = sum(len(p) * max(len(seqs[i]) for i in p) for p in plan)
    return round(1 - real / padded, 4)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-passes"))
    ap.add_argument("--shape", choices=("small", "tiny"), default="small")
    ap.add_argument("--rows", type=int, default=2048, help="rows per call (serving.score's --batch-rows)")
    ap.add_argument("--chunks", type=int, default=2, help="chunks of --rows timed per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "passes.json")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    from serving import passes
    from serving.engine import Classifier

    clf = Classifier.load(build(args.work, args.shape), provider="cpu")
    df = pd.read_csv(bench_serving().DATA / "ko-help" / "train.csv").sample(frac=1.0, random_state=0)
    texts = df["text"].astype(str).tolist()
    chunks = [texts[i * args.rows : (i + 1) * args.rows] for i in range(args.chunks)]
    overhead = clf.call_overhead_tokens  # measured once, before any timing
    engine_plan = clf.plan
    plans = {"before": lambda seqs, _overhead=None: old_plan([len(s) for s in seqs], clf.batch_tokens),
             "after": lambda seqs, _overhead=None: engine_plan(seqs, passes.FIXED),  # what predict_proba runs now
             "cost": lambda seqs, _overhead=None: engine_plan(seqs)}  # the API's plan: cut by the measured cost too
    rates: dict[str, list[float]] = {k: [] for k in plans}
    cpu_rates: dict[str, list[float]] = {k: [] for k in plans}  # rows per CPU-second: steadier on shared cores
    load_before = os.getloadavg()
    for _ in range(args.rounds):
        for name, plan in plans.items():
            clf.plan = plan  # what predict_proba asks for its passes
            start, cpu = time.perf_counter(), time.process_time()
            for chunk in chunks:
                clf.predict_proba(chunk)
            rates[name].append(sum(map(len, chunks)) / (time.perf_counter() - start))
            cpu_rates[name].append(sum(map(len, chunks)) / (time.process_time() - cpu))
    seqs = [clf.encode(c) for c in chunks]
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(), "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "command": " ".join(["python", "bench/passes.py", *sys.argv[1:]]), "shape": args.shape,
        "model_file": clf.info()["model_file"], "batch_tokens": clf.batch_tokens,
        "call_overhead_tokens": round(overhead, 1), "rows_per_call": args.rows, "calls_per_round": len(chunks),
        "rounds": args.rounds,
    }
    for name, plan in plans.items():
        made = [plan(s) for s in seqs]
        result[name] = {"rows_per_s": round(statistics.median(rates[name]), 1),
                        "rows_per_s_all": [round(r, 1) for r in rates[name]],
                        "rows_per_cpu_s": round(statistics.median(cpu_rates[name]), 1),
                        "passes": sum(map(len, made)),
                        "padding_share": padding_share([x for s in seqs for x in s],
                                                       [p + sum(map(len, seqs[:k])) for k, m in enumerate(made) for p in m])}
    for name in ("after", "cost"):
        result[f"ratio_{name}_over_before"] = round(result[name]["rows_per_s"] / result["before"]["rows_per_s"], 3)
        result[f"ratio_{name}_over_before_per_round"] = [round(a / b, 3) for a, b in zip(rates[name], rates["before"])]
        result[f"cpu_ratio_{name}_over_before"] = round(result[name]["rows_per_cpu_s"] / result["before"]["rows_per_cpu_s"], 3)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"{'plan':8s} {'rows/s':>9s} {'rows/cpu-s':>11s} {'passes':>7s} {'padding':>8s}")
    for name in plans:
        r = result[name]
        print(f"{name:8s} {r['rows_per_s']:9.1f} {r['rows_per_cpu_s']:11.1f} {r['passes']:7d} {r['padding_share']:8.1%}")
    print(f"after / before: {result['ratio_after_over_before']:.3f}x (CPU {result['cpu_ratio_after_over_before']:.3f}x), "
          f"cost / before: {result['ratio_cost_over_before']:.3f}x (CPU {result['cpu_ratio_cost_over_before']:.3f}x)  "
          f"(call_overhead_tokens {overhead:.1f}, "
          f"batch_tokens {clf.batch_tokens}, {args.shape}, load {load_before[0]:.1f}); wrote {args.output}")


if __name__ == "__main__":
    main()
