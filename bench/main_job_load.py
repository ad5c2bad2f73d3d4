"""The README main job on shared cores: its CPU-seconds and wall time with a CPU-bound process beside it against
without, in one run (issue 36's target: loaded <= 1.3x the CPU-seconds of the unloaded run).

    python bench/main_job_load.py                       # the README main job itself, 1 round (about 25 min)
    python bench/main_job_load.py --rows 450 --rounds 2 # a stratified sample of the same data: a quicker proxy

Each round runs the job twice, in turn: `as found` (whatever else the machine runs; idle on an idle machine) and
`+1 busy` (a `while True: pass` process beside it, as bench/shared_cores.py does). CPU-seconds are the job's own
(user + system of the child and its children, from the kernel's rusage), so spin-waiting on a core the job does
not get shows up as CPU-seconds spent, and a slower wall time alone does not. The job's own thread plan
(textdata/cpu_limits.py) is what is measured: OMP_NUM_THREADS is removed from the child's environment.
Writes bench/results/main_job_load[-NAME].json with the load average before each run; medians and the ratio printed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAIN_JOB = ["--model", "minilm", "--folds", "3", "--epochs", "1", "--max-length", "64"]


def sample_csv(rows: int, folder: Path) -> str:
    """`rows` rows of the built-in BBC data, stratified, so a quick run keeps every class."""
    sys.path.insert(0, str(ROOT))
    import pandas as pd

    from finetune.kfold import BUILTIN_DATA

    data = pd.read_csv(BUILTIN_DATA["bbcnews"](folder))
    share = min(1.0, rows / len(data))
    picked = data.groupby("label", group_keys=False).sample(frac=share, random_state=0)
    path = folder / f"bbc-{len(picked)}.csv"
    picked.to_csv(path, index=False)
    return str(path)


def run_job(data: str, out: Path, busy: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    load = os.getloadavg()[0]
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        subprocess.run([sys.executable, str(ROOT / "finetune" / "kfold.py"), *MAIN_JOB, "--data", data,
                        "--output", str(out)], env=env, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        # read before the spinner is reaped: rusage of children counts every child waited for, the spinner too
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        if spinner:
            spinner.kill()
            spinner.wait()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cpu_s": round(cpu, 1), "wall_s": round(wall, 1), "load_before": round(load, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=0, help="a stratified sample of this many rows; 0: all (the main job)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--name", default="")
    args = ap.parse_args()
    runs: dict[str, list[dict]] = {"as found": [], "+1 busy": []}
    with tempfile.TemporaryDirectory() as tmp:
        data = sample_csv(args.rows, Path(tmp)) if args.rows else "bbcnews"
        for r in range(args.rounds):
            for condition, results in runs.items():
                result = run_job(data, Path(tmp) / f"run-{r}-{condition[0]}", condition == "+1 busy")
                results.append(result)
                print(f"round {r + 1} {condition}: {result}", flush=True)
    med = {c: {k: statistics.median(x[k] for x in v) for k in ("cpu_s", "wall_s")} for c, v in runs.items()}
    ratio = {k: round(med["+1 busy"][k] / med["as found"][k], 2) for k in ("cpu_s", "wall_s")}
    print("\n| condition | CPU-s (median) | wall s (median) |\n|---|---|---|")
    for c, m in med.items():
        print(f"| {c} | {m['cpu_s']:.0f} | {m['wall_s']:.0f} |")
    print(f"| +1 busy / as found | {ratio['cpu_s']}x | {ratio['wall_s']}x |")
    out = ROOT / "bench" / "results" / f"main_job_load{'-' + args.name if args.name else ''}.json"
    payload = {"job": MAIN_JOB, "data": args.rows or "bbcnews (all)", "cpus": os.cpu_count(), "runs": runs,
               "median": med, "ratio_busy_over_as_found": ratio, "target_cpu_ratio": 1.3,
               "date": time.strftime("%Y-%m-%d")}
    tmp_out = out.with_suffix(".tmp")
    tmp_out.write_text(json.dumps(payload, indent=1))
    tmp_out.replace(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
