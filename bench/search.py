"""Wall time of one k-fold run with the folds one after another (`--engine local`, torch threads = cores, and again
with one thread) against the folds as Ray tasks (`--engine ray`, one CPU each, as many at once as the machine's
cores), same data, model, seed and settings.

    python bench/search.py                                  # MiniLM (offline package), 600 ko-help rows, 5 folds
    python bench/search.py --rows 1200 --repeats 3 --model path/to/discriminator

Each run is `finetune/kfold.py` in a child process, the engines alternating, so all meet similar machine
load (its load average is recorded). On 2 idle cores they should be about even: local gives one fold both cores
(torch threads), Ray gives two folds one core each, and pays for starting Ray and its workers. On cores shared
with other jobs, torch's threads spin-wait for each other and the one-thread runs gain: the local one-thread row
separates that from running folds side by side. The gain is on a cluster, where each fold gets
its own GPU (docs/finetune.md). Also checks that the engines gave the same fold scores and out-of-fold bytes. Prints a table with
medians and the ratio, and writes bench/results/search.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from textdata.tables import write_json

KO_HELP = ROOT / ".." / "shared" / "data" / "ko-help" / "train.csv"


def sample(path: Path, rows: int, seed: int, out: Path) -> Path:
    """A stratified sample of `rows` rows (every class keeps its share)."""
    from sklearn.model_selection import train_test_split

    df = pd.read_csv(path)
    part, _ = train_test_split(df, train_size=rows, stratify=df["label"], random_state=seed)
    part.to_csv(out, index=False)
    return out


ENGINES = ("local", "local-1-thread", "ray")


def run_kfold(args, data: Path, out: Path, name: str) -> dict:
    engine = name.split("-")[0]
    cmd = [sys.executable, "finetune/kfold.py", "--model", args.model, "--data", str(data), "--folds", str(args.folds),
           "--epochs", str(args.epochs), "--max-length", str(args.max_length), "--batch-size", str(args.batch_size),
           "--blend", "off", "--output", str(out), "--engine", engine]
    if engine == "ray":
        cmd += ["--cpus-per-fold", str(args.cpus_per_fold)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("OMP_NUM_THREADS", None)  # local: torch threads = cores, as users get it
    if name == "local-1-thread":  # Ray's folds run one thread each: this separates threads from parallel folds
        env["OMP_NUM_THREADS"] = "1"
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"{engine} run failed:\n{proc.stderr[-3000:]}")
    report = json.loads((out / "report.json").read_text())
    return {"wall_seconds": round(wall, 1), "load_before": round(load0, 2), "load_after": round(os.getloadavg()[0], 2),
            "fold_macro_f1": [f["macro_f1"] for f in report["folds"]],
            "oof": (out / "oof_predictions.csv").read_bytes()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="minilm")
    p.add_argument("--data", default=str(KO_HELP))
    p.add_argument("--rows", type=int, default=600)
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-length", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--cpus-per-fold", type=int, default=1)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--output", default="bench/results/search.json")
    args = p.parse_args()

    runs: dict[str, list[dict]] = {e: [] for e in ENGINES}
    with tempfile.TemporaryDirectory() as tmp:
        data = sample(Path(args.data), args.rows, args.seed, Path(tmp) / "rows.csv")
        for r in range(args.repeats):
            for engine in ENGINES if r % 2 == 0 else ENGINES[::-1]:
                runs[engine].append(run_kfold(args, data, Path(tmp) / f"{engine}-{r}", engine))
                print(f"round {r}: {engine} {runs[engine][-1]['wall_seconds']} s", file=sys.stderr)
    same = {e: {"fold_scores": all(a["fold_macro_f1"] == b["fold_macro_f1"] for a, b in zip(runs[e], runs["ray"])),
                "oof_bytes": all(a["oof"] == b["oof"] for a, b in zip(runs[e], runs["ray"]))} for e in ENGINES[:2]}
    for rs in runs.values():
        for r in rs:
            del r["oof"]
    median = {e: float(np.median([r["wall_seconds"] for r in rs])) for e, rs in runs.items()}
    ratio = {e: median["local"] / median[e] for e in ENGINES}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"\n{args.folds} folds, {args.rows} rows, {args.model}, {args.epochs} epoch(s), {cores} cores, "
          f"{args.repeats} round(s)")
    names = {"local": f"local (one fold at a time, {cores} threads)", "local-1-thread": "local, OMP_NUM_THREADS=1",
             "ray": f"ray ({args.cpus_per_fold} CPU per fold)"}
    print(f"{'engine':<40} {'wall s (median)':>16} {'speed vs local':>15} {'load avg':>10}")
    for e in ENGINES:
        loads = [r["load_before"] for r in runs[e]]
        print(f"{names[e]:<40} {median[e]:>16.1f} {ratio[e]:>14.2f}x {np.median(loads):>10.1f}")
    for e in ENGINES[:2]:
        print(f"{e} vs ray: same fold macro-F1 {same[e]['fold_scores']}, byte-identical oof_predictions.csv "
              f"{same[e]['oof_bytes']}")
    write_json(args.output, {"args": vars(args), "cores": cores, "platform": platform.platform(),
                             "median_wall_seconds": median, "speed_vs_local": ratio, "same_as_ray": same,
                             "rounds": runs})


if __name__ == "__main__":
    main()
