"""Wall time of one k-fold run with the folds one after another (`--engine local`) against the folds as Ray tasks
(`--engine ray`, one CPU each, as many at once as the machine's cores), same data, model, seed and settings.

    python bench/search.py                                  # MiniLM (offline package), 600 ko-help rows, 5 folds
    python bench/search.py --rows 1200 --repeats 3 --model path/to/discriminator

Each run is `finetune/kfold.py` in a child process, the engines alternating, so both meet the same machine
load. On 2 cores the two should be about even: local gives one fold both cores (torch threads), Ray gives two
folds one core each, and pays for starting Ray and its workers. The gain is on a cluster, where each fold gets
its own GPU (docs/finetune.md). Also checks that both engines gave the same fold scores. Prints a table with
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


def run_kfold(args, data: Path, out: Path, engine: str) -> dict:
    cmd = [sys.executable, "finetune/kfold.py", "--model", args.model, "--data", str(data), "--folds", str(args.folds),
           "--epochs", str(args.epochs), "--max-length", str(args.max_length), "--batch-size", str(args.batch_size),
           "--blend", "off", "--output", str(out), "--engine", engine]
    if engine == "ray":
        cmd += ["--cpus-per-fold", str(args.cpus_per_fold)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
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

    runs: dict[str, list[dict]] = {"local": [], "ray": []}
    with tempfile.TemporaryDirectory() as tmp:
        data = sample(Path(args.data), args.rows, args.seed, Path(tmp) / "rows.csv")
        for r in range(args.repeats):
            for engine in ("local", "ray") if r % 2 == 0 else ("ray", "local"):
                runs[engine].append(run_kfold(args, data, Path(tmp) / f"{engine}-{r}", engine))
                print(f"round {r}: {engine} {runs[engine][-1]['wall_seconds']} s", file=sys.stderr)
    same_scores = all(a["fold_macro_f1"] == b["fold_macro_f1"] for a, b in zip(runs["local"], runs["ray"]))
    same_oof = all(a["oof"] == b["oof"] for a, b in zip(runs["local"], runs["ray"]))
    for rs in runs.values():
        for r in rs:
            del r["oof"]
    median = {e: float(np.median([r["wall_seconds"] for r in rs])) for e, rs in runs.items()}
    ratio = median["local"] / median["ray"]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"\n{args.folds} folds, {args.rows} rows, {args.model}, {args.epochs} epoch(s), {cores} cores, "
          f"{args.repeats} round(s)")
    print(f"{'engine':<34} {'wall s (median)':>16} {'speed vs local':>15}")
    print(f"{'local (one fold at a time)':<34} {median['local']:>16.1f} {1.0:>14.2f}x")
    print(f"{'ray (' + str(args.cpus_per_fold) + ' CPU per fold)':<34} {median['ray']:>16.1f} {ratio:>14.2f}x")
    print(f"same fold macro-F1 on both engines: {same_scores}; byte-identical oof_predictions.csv: {same_oof}")
    write_json(args.output, {"args": vars(args), "cores": cores, "platform": platform.platform(),
                             "median_wall_seconds": median, "speed_ray_vs_local": ratio,
                             "same_fold_scores": same_scores, "same_oof_bytes": same_oof, "rounds": runs})


if __name__ == "__main__":
    main()
