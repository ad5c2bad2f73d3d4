"""The out-of-domain gate's serving cost with the length score (COMBINE "centroid*length") against the
centroid typicality served before it, on the same fitted index and texts: microseconds a text, medians of
interleaved rounds (in a shuffled order), alone (the gate reads the texts) and on a read it shares with the served baseline.

    python bench/ood_length_cost.py --rows 1200 --texts 1000 --output bench/results/ood-length-cost.json
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.resplits import DATASETS, started, write_result


def main(argv=None) -> int:
    from baseline.ood import fit_typicality

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="bbc-first-sentences", choices=list(DATASETS))
    p.add_argument("--rows", type=int, default=1200, help="training rows (the rest, up to --texts, are timed)")
    p.add_argument("--texts", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--output", type=Path, default=ROOT / "bench/results/ood-length-cost.json")
    a = p.parse_args(argv)
    result = started(sys.argv, data=a.data)
    texts, y, _, labels = DATASETS[a.data](a.rows + a.texts)
    order = np.random.default_rng(0).permutation(len(texts))
    train, timed = order[:a.rows], order[a.rows:a.rows + a.texts]
    typ, _ = fit_typicality([texts[i] for i in train], y[train], np.arange(len(train)) % 5, len(labels))
    old = dataclasses.replace(typ, combine="centroid", rank=None)
    batch = [texts[i] for i in timed]
    read = typ.index.tfidf.read(batch)
    jobs = {"centroid": lambda: old.in_domain(batch), "centroid*length": lambda: typ.in_domain(batch),
            "centroid_shared_read": lambda: old.in_domain(batch, read),
            "centroid*length_shared_read": lambda: typ.in_domain(batch, read)}
    times = {k: [] for k in jobs}
    rng = np.random.default_rng(1)
    for _ in range(a.rounds):
        for k in rng.permutation(list(jobs)):  # a fresh order each round: no job always runs after another
            f = jobs[k]
            t0 = time.perf_counter()
            f()
            times[k].append((time.perf_counter() - t0) / len(batch) * 1e6)
    us = {k: float(np.median(v)) for k, v in times.items()}
    result.update(us_per_text=us, rounds=times, texts=len(batch), rows=len(train),
                  ratio=us["centroid*length"] / us["centroid"],
                  ratio_shared_read=us["centroid*length_shared_read"] / us["centroid_shared_read"],
                  flagged={"centroid": float((~old.in_domain(batch)).mean()),
                           "centroid*length": float((~typ.in_domain(batch)).mean())})
    write_result(result, a.output)
    print({k: round(v, 1) for k, v in us.items()}, f"ratio {result['ratio']:.3f}",
          f"shared read {result['ratio_shared_read']:.3f}", result["flagged"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
