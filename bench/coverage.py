"""Calibration and coverage at a precision where no k-fold run with an encoder is at hand: the TF-IDF baseline's
out-of-fold probabilities (k-fold's own folds, grouped with --group-column), through k-fold's calibration step.

    python bench/coverage.py --data ../shared/data/ko-help/train.csv --group-column page --folds 5 \\
        --output bench/results/coverage-ko-help-tfidf.json

The folds are k-fold's (finetune/data.py: StratifiedGroupKFold with --group-column, seed 42); each fold's
baseline is the char TF-IDF + logistic regression k-fold reports beside the model (finetune/baseline.py),
fitted on the other folds; calibration and the coverage table are finetune/confidence.py's (nested). This
is what k-fold would serve where the model were the TF-IDF alone: a stand-in for a run with an encoder.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--group-column")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--target-precision", type=float, default=0.9)
    p.add_argument("--output", type=Path, required=True)
    a = p.parse_args(argv)
    from baseline.folds import baseline_predict
    from bench.resplits import write_result
    from finetune.confidence import cv_calibration, table_lines
    from finetune.data import fixed_folds, load_labeled
    from textdata.normalize import Normalizer

    started, load_before = time.time(), os.getloadavg()
    data = load_labeled(a.data, "text", "label", a.group_column, a.folds, "drop", Normalizer("none"), "utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        folds = fixed_folds(Path(tmp), data, a.folds, a.seed, reuse=False)
    oof = np.full((len(data.y), len(data.labels)), np.nan)
    fold_of = np.full(len(data.y), -1)
    for k, (train, val) in enumerate(folds):
        oof[val] = baseline_predict(data.texts, data.y, train, val, a.seed * 1000 + k)
        fold_of[val] = k
        print(f"fold {k}: accuracy {(oof[val].argmax(1) == data.y[val]).mean():.4f}", file=sys.stderr)
    section, _, _ = cv_calibration(oof, None, None, data, fold_of, a.target_precision)
    print("\n".join(table_lines(section)))
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "data": str(a.data),
        "rows": len(data.y),
        "folds": a.folds,
        "group_column": a.group_column,
        "scores": "char TF-IDF + logistic regression, out-of-fold",
        "accuracy": float((oof.argmax(1) == data.y).mean()),
        "calibration": section,
        "wall_seconds": round(time.time() - started, 1),
        "loadavg_before": load_before,
    }
    write_result(result, a.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
