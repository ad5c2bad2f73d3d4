"""Why a resplit of bench/threshold_transfer.py misses: the fold models' scores (out of fold, and on the unseen
rows) against the final model's (on the same unseen rows), at the served threshold, for one data set and seed.

    python bench/transfer_diag.py --data debtags-implemented-in --seed 7 --output bench/results/transfer-diag-debtags-7.json

Per target: the served threshold (finetune/coverage.py served_threshold), and at it the coverage and precision of
the out-of-fold rows (what chose it), of the fold models' average on the unseen rows, and of the final model on
the unseen rows; the top-score quantiles of each. Where the final model answers more unseen rows than the fold
models do at the same threshold, it is sharper; where the out-of-fold rows already answer as many, it is not.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.resplits import DATASETS, fit_proba, out_of_fold, resplit, started, write_result

QUANTILES = (0.5, 0.75, 0.9, 0.95)


def at(probs, y, t) -> dict:
    sure = probs.max(1) >= t
    return {"coverage": round(float(sure.mean()), 4), "answered": int(sure.sum()),
            "precision": round(float((probs[sure].argmax(1) == y[sure]).mean()), 4) if sure.any() else None}


def diagnose(texts, y, groups, n_classes, folds, seed) -> dict:
    from finetune.calibration import calibrate
    from finetune.coverage import DELTA, bound_threshold, served_threshold
    from textdata.errors import DataError

    tr, un = resplit(y, groups, seed)
    t_texts, t_y, y_un = [texts[i] for i in tr], y[tr], y[un]
    oof, fold_of, fold_unseen = out_of_fold(t_texts, t_y, None if groups is None else groups[tr], n_classes, folds,
                                            seed, [texts[i] for i in un])
    section, chosen, final = calibrate(oof, t_y, fold_of, "model")
    every = np.r_[np.arange(len(tr)), len(tr) + np.arange(len(un))]
    p_all = fit_proba(t_texts + [texts[i] for i in un], np.r_[t_y, y_un], np.arange(len(tr)), every, n_classes, seed)
    scores = {"oof": (final(oof), t_y), "folds_on_unseen": (final(np.mean(fold_unseen, axis=0)), y_un),
              "final_on_unseen": (final(p_all[len(tr):]), y_un), "final_on_train": (final(p_all[: len(tr)]), t_y)}
    out = {"seed": seed, "method": section["method"],
           "top_quantiles": {k: [round(float(q), 4) for q in np.quantile(p.max(1), QUANTILES)] for k, (p, _) in scores.items()},
           "accuracy": {k: round(float((p.argmax(1) == yy).mean()), 4) for k, (p, yy) in scores.items()},
           "accuracy_nested_oof": round(float((chosen.calibrated.argmax(1) == t_y).mean()), 4), "targets": {}}
    for target in (0.8, 0.9):
        try:
            s = served_threshold(chosen, final, oof, t_y, fold_of, list(range(n_classes)), target)
        except DataError as e:
            out["targets"][str(target)] = {"error": str(e)[:160]}
            continue
        t = s["threshold"] if not isinstance(s["threshold"], dict) else min(s["threshold"].values())
        # the same bound on the nested-calibrated out-of-fold scores (no row calibrated by a calibrator fitted on it)
        t_n, _ = bound_threshold(chosen.calibrated.max(1), chosen.calibrated.argmax(1) == t_y, target, DELTA)
        out["targets"][str(target)] = {"threshold": s["threshold"], "scope": s["scope"],
                                       "nested_coverage": round(s["estimated_coverage"], 4),
                                       **{k: at(p, yy, t) for k, (p, yy) in scores.items() if k != "final_on_train"},
                                       "nested_threshold": t_n,
                                       "nested_oof": at(chosen.calibrated, t_y, t_n) if t_n else None,
                                       "nested_final_on_unseen": at(scores["final_on_unseen"][0], y_un, t_n) if t_n else None}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="debtags-implemented-in", choices=list(DATASETS))
    p.add_argument("--seed", type=int, nargs="+", default=[7])
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--cap", type=int, default=1200)
    p.add_argument("--output", type=Path, default=ROOT / "bench/results/transfer-diag.json")
    a = p.parse_args(argv)
    texts, y, groups, labels = DATASETS[a.data](a.cap)
    result = started(sys.argv, data=a.data, resplits=[])
    for seed in a.seed:
        result["resplits"].append(diagnose(texts, y, groups, len(labels), a.folds, seed))
        print(result["resplits"][-1])
        write_result(result, a.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
