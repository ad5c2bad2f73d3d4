"""Which blend of the model and the TF-IDF baseline: measured on a finished k-fold run's out-of-fold rows.

    python bench/blend.py runs/<k-fold output> [--output bench/results/blend-<name>.json]

Reads OUTPUT/oof_predictions.csv (prob_* and baseline_prob_* columns, fold ids) and scores, per fold and
nested (each fold's blend fitted on the other folds' rows only, as finetune/kfold.py reports it):
- model and baseline alone;
- `average`: w · p_model + (1 - w) · p_baseline, w searched on a grid for macro-F1 (the issue's recipe);
- `logpool`: p ∝ exp(a · log p_model + b · log p_baseline), a, b >= 0 by log-loss (baseline/blend.py, served);
- `stacker`: multinomial logistic regression on both models' log-probabilities (2K features).
Seconds, no training. Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from baseline.blend import Blend, fit_blend, nested_blend
from finetune.metrics import fold_metrics


class _Average:
    def __init__(self, w):
        self.w = w

    def __call__(self, pm, pb):
        return self.w * pm + (1 - self.w) * pb


def fit_average(pm, pb, y, labels=None):
    grid = np.linspace(0, 1, 21)
    ids = list(range(pm.shape[1]))
    score = lambda w: fold_metrics(y, _Average(w)(pm, pb).argmax(1), [str(i) for i in ids])["macro_f1"]
    return _Average(max(grid, key=score))


class _Stacker:
    def __init__(self, lr, k):
        self.lr, self.k = lr, k

    def __call__(self, pm, pb):
        out = np.zeros((len(pm), self.k))
        out[:, self.lr.classes_] = self.lr.predict_proba(_features(pm, pb))
        return out


def _features(pm, pb):
    return np.log(np.clip(np.hstack([pm, pb]), 1e-12, 1))


def fit_stacker(pm, pb, y):
    from sklearn.linear_model import LogisticRegression

    return _Stacker(LogisticRegression(C=1.0, max_iter=2000).fit(_features(pm, pb), y), pm.shape[1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", type=Path, help="a finetune/kfold.py output folder")
    ap.add_argument("--output", type=Path, help="JSON file (default: RUN/blend_methods.json)")
    a = ap.parse_args(argv)
    report = json.loads((a.run / "report.json").read_text())
    labels = report["labels"]
    oof = pd.read_csv(a.run / "oof_predictions.csv", keep_default_na=False)
    oof = oof[oof["fold"] >= 0]
    y = oof[report["config"]["label_column"]].astype(str).map(labels.index).to_numpy()
    pm = oof[[f"prob_{c}" for c in labels]].astype(float).to_numpy()
    pb = oof[[f"baseline_prob_{c}" for c in labels]].astype(float).to_numpy()
    fold = oof["fold"].to_numpy()
    methods = {"model": (lambda pm, pb, y: lambda a, b: a), "baseline": (lambda pm, pb, y: lambda a, b: b),
               "average": fit_average, "logpool": fit_blend, "stacker": fit_stacker}
    result = {"run": str(a.run), "rows": len(y), "folds": int(fold.max()) + 1, "methods": {}}
    for name, fit in methods.items():
        blended, _ = nested_blend(pm, pb, y, fold, fit=fit)
        f1 = [fold_metrics(y[fold == k], blended[fold == k].argmax(1), labels)["macro_f1"] for k in np.unique(fold)]
        result["methods"][name] = {"folds": f1, "mean": float(np.mean(f1)), "std": float(np.std(f1))}
    final = fit_blend(pm, pb, y)
    result["logpool_weights_all_rows"] = {"model": final.model_weight, "baseline": final.baseline_weight}
    print(f"{a.run}: {len(y)} rows, nested macro-F1 per fold (blend fitted on the other folds)\n")
    print("| method | " + " | ".join(f"fold {k}" for k in range(result["folds"])) + " | mean ± std |")
    print("|---|" + "---|" * result["folds"] + "---|")
    for name, m in result["methods"].items():
        print(f"| {name} | " + " | ".join(f"{v:.4f}" for v in m["folds"]) + f" | {m['mean']:.4f} ± {m['std']:.4f} |")
    print(f"\nlogpool on all rows: {Blend(final.model_weight, final.baseline_weight)}")
    out = a.output or a.run / "blend_methods.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
