"""Batch scoring past one process: `serving.score` local vs `--engine ray` with 1 and 2 workers, same file.

    python -m bench scoring_scale [--rounds 3] [--rows N]

An ELECTRA-Small-shaped classifier, random init, on bench/serving.py's Korean WordPiece tokenizer, exported with
`--quantize`; ko-help's texts (--rows: a seeded sample). Per round, interleaved: local (the baseline of the
ratios), ray 1 worker x all cores, ray 2 workers x 1 thread, each a fresh CLI run (Ray started and stopped, as a
user would). Medians of end-to-end rows/s (Ray's start included) and of the scoring loop's.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import harness as h

DATA = h.DATA


def build_model(work: Path) -> Path:
    onnx_dir = work / "onnx"
    if (onnx_dir / "model_quantized.onnx").exists():
        return onnx_dir
    import torch
    from transformers import ElectraConfig, ElectraForSequenceClassification

    from bench.serving import build_tokenizer
    from serving.export import ExportConfig, run

    tok = build_tokenizer(work)
    labels = sorted(pd.read_csv(DATA / "ko-help" / "train.csv", usecols=["label"])["label"].unique())
    cfg = ElectraConfig(vocab_size=len(tok), **h.SHAPES["small"], max_position_embeddings=512, num_labels=len(labels),
                        id2label=dict(enumerate(labels)), label2id={k: i for i, k in enumerate(labels)})
    torch.manual_seed(0)
    model_dir = work / "model"
    ElectraForSequenceClassification(cfg).eval().save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    # Random weights: INT8 agreement with fp32 is not the point here, so the gate is nearly off.
    run(ExportConfig(model=model_dir, output=onnx_dir, quantize=True, min_agreement=0.01))
    return onnx_dir


def one_run(name: str, model: Path, inp: Path, work: Path, **kw) -> dict:
    from serving import score, score_ray

    out = work / f"out-{name}.parquet"
    load = os.getloadavg()[0]
    t = time.perf_counter()
    config = score_ray.RayScoreConfig if kw.get("engine") == "ray" else score.ScoreConfig
    s = score.run(config(model=model, input=inp, output=out, progress=False, **kw))
    wall = time.perf_counter() - t
    assert len(pd.read_parquet(out, columns=["pred_label"])) == s["rows"]
    return {"run": name, "rows": s["rows"], "wall_s": round(wall, 2), "rows_per_s_end_to_end": round(s["rows"] / wall, 1),
            "rows_per_s_scoring_loop": s["rows_per_second"], "load_avg_1m_before": round(load, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-scale"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rows", type=int, default=None, help="a seeded sample of this many rows (default: all)")
    ap.add_argument("--output", type=Path, default=h.RESULTS / "scoring_scale.json")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    from serving.onnx_runner import usable_cores

    model = build_model(args.work)
    df = pd.read_csv(DATA / "ko-help" / "train.csv", dtype=str, keep_default_na=False)[["text"]]
    if args.rows:
        df = df.sample(n=min(args.rows, len(df)), random_state=0)
    inp = args.work / "input.parquet"
    df.reset_index(drop=True).to_parquet(inp, index=False)
    cores = usable_cores()
    configs = {
        "local": {"threads": cores},
        f"ray_1x{cores}": {"engine": "ray", "num_workers": 1, "threads": cores},
        "ray_2x1": {"engine": "ray", "num_workers": 2, "threads": 1},
    }
    runs = []
    for r in range(args.rounds):
        for name, kw in configs.items():
            # a fresh process each, as a CLI run is: a second Ray session in one process is refused (its
            # worker setup hook is already set by the first)
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                runs.append(pool.submit(one_run, name, model, inp, args.work, **kw).result() | {"round": r})
            print(json.dumps(runs[-1]), flush=True)

    def median(name, key):
        return statistics.median(x[key] for x in runs if x["run"] == name)

    table = {}
    for name in configs:
        e2e, loop = median(name, "rows_per_s_end_to_end"), median(name, "rows_per_s_scoring_loop")
        table[name] = {"rows_per_s_end_to_end": e2e, "rows_per_s_scoring_loop": loop,
                       "ratio_end_to_end_over_local": round(e2e / median("local", "rows_per_s_end_to_end"), 3),
                       "ratio_scoring_loop_over_local": round(loop / median("local", "rows_per_s_scoring_loop"), 3)}
    print(f"\n{len(df)} rows, {cores} usable cores, medians of {args.rounds} rounds (baseline: local)")
    print(f"{'run':<10} {'e2e rows/s':>11} {'ratio':>6} {'loop rows/s':>12} {'ratio':>6}")
    for name, t in table.items():
        print(f"{name:<10} {t['rows_per_s_end_to_end']:>11.1f} {t['ratio_end_to_end_over_local']:>6.2f} "
              f"{t['rows_per_s_scoring_loop']:>12.1f} {t['ratio_scoring_loop_over_local']:>6.2f}")
    h.write_record(args.output, {
        "usable_cores": cores, "model": "ELECTRA-Small shape, random init, INT8 ONNX, max_length 128", "rows": len(df),
        "rounds": args.rounds, "baseline": "local", "medians": table, "runs": runs,
        "note": "2 CPU cores shared with other jobs: compare ratios within this run, see load_avg_1m_before"})


if __name__ == "__main__":
    main()
