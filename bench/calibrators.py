"""Which calibrator, if any, lowers the nested calibration error of what a k-fold run serves: every candidate
scored nested on the run's out-of-fold rows, beside the ECE a perfectly calibrated model would show on as many rows.

    python bench/calibrators.py RUN_FOLDER [--bootstrap 200] [--output bench/results/calibrators-bbc-main.json]

RUN_FOLDER is a finetune/kfold.py output (report.json, oof_predictions.csv). The served scores are the blend's
nested out-of-fold probabilities where the blend was kept, else the model's. Candidates, each fitted on the other
folds and scored on the held-out one (finetune/calibration.py's `nested`): none, temperature scaling, vector
scaling, and per-class isotonic regression renormalised (scikit-learn's CalibratedClassifierCV(method="isotonic")
on fixed scores). Reported per candidate: mean ± std over folds of top-label ECE (15 bins), log-loss, Brier, and in
how many folds its ECE is below the scores' own. The floor: the scores' ECE when each row's label is drawn from
its own probabilities (calibrated by construction), mean and 95th percentile over --bootstrap draws per fold: an
ECE at or under it cannot be told from perfect calibration on this many rows. Prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from finetune.calibration import FITTERS, ece_floor, scores


def isotonic(probs: np.ndarray, y: np.ndarray):
    """Per-class isotonic regression of p_c against [y == c], rows renormalised."""
    from sklearn.isotonic import IsotonicRegression

    fits = [IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1).fit(probs[:, c], y == c)
            for c in range(probs.shape[1])]

    def apply(p):
        q = np.column_stack([f.predict(p[:, c]) for c, f in enumerate(fits)]) + 1e-12
        return q / q.sum(1, keepdims=True)

    return apply


CANDIDATES = {"none": lambda p, y: (lambda q: q), **FITTERS, "isotonic": isotonic}


def nested_scores(probs, y, fold_of, fit) -> list[dict]:
    out = []
    for k in np.unique(fold_of):
        held, rest = fold_of == k, fold_of != k
        out.append(scores(np.asarray(fit(probs[rest], y[rest])(probs[held]), np.float64), y[held]))
    return out


def load(run: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    report = json.loads((run / "report.json").read_text())
    labels = report["labels"] if "labels" in report else report["config"]["labels"]
    table = pd.read_csv(run / "oof_predictions.csv", keep_default_na=False)
    table = table[table["fold"].astype(int) >= 0]
    kept = bool((report.get("blend") or {}).get("kept"))
    prefix = "blend_" if kept else ""
    probs = table[[f"{prefix}prob_{n}" for n in labels]].astype(float).to_numpy()
    column = report["config"]["label_column"]
    y = table[column].astype(str).map({n: i for i, n in enumerate(labels)}).to_numpy()
    return probs, y, table["fold"].astype(int).to_numpy(), "blend" if kept else "model"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path)
    p.add_argument("--bootstrap", type=int, default=200)
    p.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "calibrators-bbc-main.json")
    a = p.parse_args(argv)
    probs, y, fold_of, served = load(a.run)
    before = nested_scores(probs, y, fold_of, CANDIDATES["none"])
    rows = {}
    print(f"{len(y)} out-of-fold rows of the {served}, {len(np.unique(fold_of))} folds, nested\n")
    print(f"{'calibrator':>12} {'ECE':>14} {'log-loss':>14} {'Brier':>14} {'ECE below none':>15}")
    for name, fit in CANDIDATES.items():
        folds = nested_scores(probs, y, fold_of, fit)
        row = {k: (float(np.mean([f[k] for f in folds])), float(np.std([f[k] for f in folds])))
               for k in ("ece", "log_loss", "brier", "accuracy")}
        row["ece_below_none_folds"] = int(sum(f["ece"] < b["ece"] for f, b in zip(folds, before)))
        row["folds"] = folds
        rows[name] = row
        pm = {k: f"{row[k][0]:.4f}±{row[k][1]:.4f}" for k in ("ece", "log_loss", "brier")}
        print(f"{name:>12} {pm['ece']:>14} {pm['log_loss']:>14} {pm['brier']:>14} "
              f"{row['ece_below_none_folds']:>10} of {len(folds)}")
    fl = ece_floor(probs, fold_of, a.bootstrap)
    print(f"\nECE of perfectly calibrated scores on as many rows (labels drawn from the scores): mean {fl['mean']:.4f}, "
          f"95th percentile {fl['p95']:.4f}")
    result = {"date": str(date.today()), "machine": platform.machine(), "command": "python bench/calibrators.py "
              + " ".join(sys.argv[1:] if argv is None else argv), "run": str(a.run), "served": served,
              "rows": len(y), "candidates": rows, "perfect_calibration_ece": fl}
    a.output.parent.mkdir(parents=True, exist_ok=True)
    a.output.write_text(json.dumps(result, indent=1))
    print(f"wrote {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
