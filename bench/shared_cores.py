"""Threads and spin-waiting on shared cores: rows/s, tokens/s and CPU-seconds of each thread setting, with and without
a CPU-bound process beside the job, against the old default (a thread per core, spinning on).

    python bench/shared_cores.py --onnx /tmp/roofline/small/onnx [--rounds 2] [--rows 1500] [--steps 12]

Each measurement is a child process (threads are fixed per process), run in turn with the others, round after
round, so that load from other work hits every setting alike; medians reported. Workloads:
- score: the engine on ko-help rows, tokenized once (`Classifier._logits`), ONNX Runtime with `threads` intra-op
  threads and `session.intra_op.allow_spinning` on or off (through the same session options the engine sets);
- train: ELECTRA-Small-shaped fine-tuning steps (forward, backward, AdamW; batch 32 x 64 tokens) with
  `torch.set_num_threads(threads)`, as k-fold and pretraining run on CPU.
`plan` is what textdata/cpu_limits.py chooses in that child at that moment (the new default).
Conditions: `as found` (whatever else runs on the machine) and `+1 busy` (a `while True: pass` process beside it).
Writes bench/results/shared_cores[-NAME].json; the load average before and after is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = Path(os.environ.get("BENCH_DATA", ROOT.parent / "shared" / "data"))
SETTINGS = {"score": [("old default: 2 threads, spinning", 2, True), ("2 threads, no spinning", 2, False),
                      ("1 thread", 1, False), ("plan", None, None)],
            "train": [("old default: 2 threads", 2, None), ("1 thread", 1, None), ("plan", None, None)]}


def child_score(onnx: str, rows: int, threads: int | None, spinning: bool | None) -> dict:
    import pandas as pd

    from serving import onnx_runner
    from serving.engine import Classifier
    from textdata.cpu_limits import ThreadPlan, plan_threads

    if threads is not None:  # a fixed setting: the engine's own session options, with this plan
        fixed = ThreadPlan(threads, bool(spinning), "fixed by the bench")
        onnx_runner.plan_threads = lambda requested=None: fixed
    clf = Classifier.load(onnx, blend=False)
    df = pd.read_csv(DATA / "ko-help" / "train.csv", dtype=str, keep_default_na=False).sample(rows, random_state=0)
    seqs = clf.encode(df["text"].tolist())
    clf._logits(seqs[:64])
    t, c = time.perf_counter(), time.process_time()
    clf._logits(seqs)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    plan = clf.info()["cpu_threads"] or plan_threads().as_dict()
    return {"units": len(seqs), "wall": wall, "cpu": cpu, "threads": plan["threads"], "spinning": plan["spinning"]}


def child_train(steps: int, threads: int | None) -> dict:
    import torch
    from transformers import ElectraConfig, ElectraForSequenceClassification

    from textdata.cpu_limits import plan_threads

    torch.set_num_threads(threads or plan_threads().threads)
    cfg = ElectraConfig(vocab_size=32000, embedding_size=128, hidden_size=256, num_hidden_layers=12,
                        num_attention_heads=4, intermediate_size=1024, num_labels=5)
    torch.manual_seed(0)
    model = ElectraForSequenceClassification(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(5, 32000, (32, 64))
    labels = torch.randint(0, 5, (32,))

    def step():
        model(input_ids=ids, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()

    step()
    t, c = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    return {"units": steps * ids.numel(), "wall": wall, "cpu": cpu, "threads": torch.get_num_threads(), "spinning": None}


def run_child(args, workload: str, threads, spinning) -> dict:
    cmd = [sys.executable, __file__, "--child", workload, "--onnx", str(args.onnx), "--rows", str(args.rows),
           "--steps", str(args.steps)]
    if threads is not None:
        cmd += ["--threads", str(threads), "--spinning", str(int(bool(spinning)))]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("OMP_NUM_THREADS", None)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--onnx", type=Path, required=True, help="an exported folder (bench/roofline.py's small/onnx)")
    ap.add_argument("--rows", type=int, default=1500)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workloads", default="score,train")
    ap.add_argument("--conditions", default="as found,+1 busy",
                    help="comma-separated: 'as found' and/or '+1 busy' (already loaded machine: 'as found' alone)")
    ap.add_argument("--name", default="")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--spinning", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child == "score":
        print(json.dumps(child_score(str(args.onnx), args.rows, args.threads, args.spinning)))
        return
    if args.child == "train":
        print(json.dumps(child_train(args.steps, args.threads)))
        return

    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
              "command": "python bench/shared_cores.py " + " ".join(sys.argv[1:]), "loadavg_before": os.getloadavg(),
              "runs": []}
    dest = ROOT / "bench" / "results" / f"shared_cores{'-' + args.name if args.name else ''}.json"
    for r in range(args.rounds):
        for condition in args.conditions.split(","):
            busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if condition == "+1 busy" else None
            try:
                for workload in args.workloads.split(","):
                    for label, threads, spinning in SETTINGS[workload]:
                        got = run_child(args, workload, threads, spinning)
                        got.update(round=r, condition=condition, workload=workload, setting=label,
                                   loadavg=os.getloadavg()[0])
                        result["runs"].append(got)
                        print(f"{r} {condition:8s} {workload:5s} {label:32s} threads {got['threads']} "
                              f"{got['units'] / got['wall']:8.0f}/s wall, {got['cpu']:.1f} CPU-s", flush=True)
            finally:
                if busy:
                    busy.kill()
                    busy.wait()
        result["loadavg_after"] = os.getloadavg()
        dest.write_text(json.dumps(summarize(result), indent=2) + "\n")
    print_table(summarize(result))
    print(f"wrote {dest}")


def summarize(result: dict) -> dict:
    groups: dict = {}
    for run in result["runs"]:
        groups.setdefault((run["workload"], run["condition"], run["setting"]), []).append(run)
    table = []
    for (workload, condition, setting), runs in groups.items():
        table.append({"workload": workload, "condition": condition, "setting": setting,
                      "threads": sorted({r["threads"] for r in runs}),
                      "per_second": statistics.median(r["units"] / r["wall"] for r in runs),
                      "cpu_seconds_per_1k": statistics.median(1000 * r["cpu"] / r["units"] for r in runs)})
    for row in table:
        old = next(t for t in table if t["workload"] == row["workload"] and t["condition"] == row["condition"]
                   and t["setting"].startswith("old default"))
        row["speed_over_old_default"] = row["per_second"] / old["per_second"]
        row["cpu_over_old_default"] = row["cpu_seconds_per_1k"] / old["cpu_seconds_per_1k"]
    return {**result, "table": table}


def print_table(result: dict) -> None:
    print("\n| workload | condition | setting | threads | per second (wall) | × old default | CPU-s per 1k | × old default |")
    print("|---|---|---|---|---|---|---|---|")
    for t in result["table"]:
        unit = "rows" if t["workload"] == "score" else "tokens"
        print(f"| {t['workload']} | {t['condition']} | {t['setting']} | {'/'.join(map(str, t['threads']))} | "
              f"{t['per_second']:.0f} {unit}/s | {t['speed_over_old_default']:.2f} | {t['cpu_seconds_per_1k']:.3f} | "
              f"{t['cpu_over_old_default']:.2f} |")
    print(f"load average before/after: {result['loadavg_before']} / {result.get('loadavg_after')}")


if __name__ == "__main__":
    main()
