"""How long one `serving.score --engine ray` model worker takes to start on CPU: with torch kept out (now) vs as before.

    python bench/ray_actor_start.py --model onnx/ [--rounds 5] [--output bench/results/ray_actor_start.json]

Each start is a fresh Python process (as a new Ray actor is) that imports `serving.score_ray` and builds the
actor's `_Scorer` from the config the driver ships: `after` with the CPU worker config (`_worker_config`: ONNX
Runtime's CPU provider, so `TORCH_FREE` applies), `before` with the old one (provider auto: transformers and the GPU
check import torch). Alternated --rounds times; medians, the after/before ratio, and whether torch was imported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ONE_START = """
import json, sys, time
t = time.perf_counter()
from pathlib import Path
from serving import score_ray
cfg = score_ray.RayScoreConfig(model=Path(sys.argv[1]), input=Path("in.csv"), output=Path("out.csv"))
if sys.argv[2] == "after":
    cfg = score_ray._worker_config(cfg, "model.onnx", {"num_cpus": 1})
score_ray._Scorer(cfg, None, 1, ("_read_error", "_read_note"))
print(json.dumps({"seconds": time.perf_counter() - t, "torch": "torch" in sys.modules}))
"""


def start(model: Path, mode: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("USE_TORCH", None)
    done = subprocess.run([sys.executable, "-c", ONE_START, str(model), mode], capture_output=True, text=True,
                          check=True, env=env, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "ray_actor_start.json")
    a = ap.parse_args()
    load_before = os.getloadavg()
    runs = {"before": [], "after": []}
    for _ in range(a.rounds):
        for mode, got in runs.items():
            got.append(start(a.model, mode))
    result = {mode: {"median_s": round(statistics.median(r["seconds"] for r in got), 2),
                     "seconds": [round(r["seconds"], 2) for r in got], "torch_imported": got[0]["torch"]}
              for mode, got in runs.items()}
    result["after_over_before"] = round(result["after"]["median_s"] / result["before"]["median_s"], 2)
    result["load_avg_before_after"] = [load_before, os.getloadavg()]
    result["cpus"] = os.cpu_count()
    print(json.dumps(result, indent=1))
    a.output.parent.mkdir(parents=True, exist_ok=True)
    a.output.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
