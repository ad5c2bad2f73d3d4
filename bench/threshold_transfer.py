"""Does the served "confident" threshold keep its precision on texts the model never saw? Candidates measured
against each other over random train/unseen resplits, the TF-IDF + LR baseline as the model (the k-fold pipeline's
calibration and threshold code on its out-of-fold scores).

    python -m bench threshold_transfer --resplits 10 [--cap 2500] [--data NAME ...]

Per resplit 60% of the rows train (grouped data: whole groups), 40% are unseen; k-fold out-of-fold scores, nested
calibration, the final model on every train row. Candidates, scored on the unseen rows at targets 0.8 and 0.9:
point (the point threshold: the baseline), bound (Learn-then-Test, what --target-precision serves) and, on grouped
data, prediction (the page prediction bound k-fold serves with --group-column: finetune/group_bound.py). Reported
per candidate: unseen precision and coverage (median, min) and the share of resplits holding >= target - 0.01.
Each resplit's fitted scores are kept in --scores and read back by a later run with the same data, cap and folds.
The other candidates measured until issue 60 (page bootstraps, per-class rules, a Bonferroni grid, a quantile, a
calibration share, the fold ensemble, delta 0.025, the class-mix split) are in docs/notes/log.md and git history.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import harness as h
from bench.resplits import DATASETS, fit_proba, out_of_fold, resplit
from finetune.group_bound import PredictionBound

DELTA = 0.1
TARGETS = (0.8, 0.9)
CANDIDATES = ("point", "bound", "prediction")


def served_bound(chosen, final, oof, y, fold_of, n_classes, target, p_unseen, y_un, groups=None,
                 group_rule=None) -> dict:
    """The bound as --target-precision serves it (finetune/coverage.py served_threshold at its DELTA: global, or
    per class at delta / classes where that won nested; `groups`: as with --group-column, over unseen groups),
    scored on the unseen rows."""
    from finetune.coverage import served_threshold
    from textdata.calibration import confident, threshold_vector
    from textdata.errors import DataError

    try:
        served = served_threshold(chosen, final, oof, y, fold_of, list(range(n_classes)), target, DELTA, groups=groups,
                                  group_column=None if groups is None else "group", group_rule=group_rule)
    except DataError as e:  # unreachable or too few rows: nothing is answered confident
        return {"precision": None, "coverage": 0.0, "error": str(e)[:160]}
    t = served["threshold"]
    sure = confident(p_unseen, threshold_vector({int(k): v for k, v in t.items()} if isinstance(t, dict) else t,
                                                list(range(n_classes))))
    return {"precision": float((p_unseen[sure].argmax(1) == y_un[sure]).mean()) if sure.any() else None,
            "coverage": float(sure.mean()), "estimated": served["estimated_coverage"], "scope": served["scope"],
            "threshold": t, "estimated_precision": served["estimated_precision"], "grouped": served.get("grouped")}


def fitted(texts, y, groups, n_classes, folds, seed, cache: Path | None = None) -> dict:
    """Every model fit a resplit needs (k fold models, the final model), as arrays: the train / unseen rows, the
    out-of-fold scores and folds, the final model's uncalibrated scores of every row. Saved to (and, when there,
    read from) `cache`, so that rules are compared again on the same scores without refitting."""
    if cache is not None and cache.exists():
        print(f"seed {seed}: fitted scores read from {cache} (no refitting)", flush=True)
        with np.load(cache) as f:
            return {k: f[k] for k in f.files}
    tr, un = resplit(y, groups, seed)
    t_texts, t_y = [texts[i] for i in tr], y[tr]
    oof, fold_of = out_of_fold(t_texts, t_y, None if groups is None else groups[tr], n_classes, folds, seed)
    every = np.r_[np.arange(len(tr)), len(tr) + np.arange(len(un))]
    p_all = fit_proba(t_texts + [texts[i] for i in un], np.r_[t_y, y[un]], np.arange(len(tr)), every, n_classes, seed)
    out = {"train": tr, "unseen": un, "oof": oof, "fold_of": fold_of, "final": p_all}
    if cache is not None:
        from textdata.tables import atomic_path

        with atomic_path(cache) as tmp, open(tmp, "wb") as fh:  # a killed run leaves no half file
            np.savez_compressed(fh, **out)
    return out


def one_resplit(texts, y, groups, n_classes, folds, seed, cache: Path | None = None) -> dict:
    from finetune.calibration import calibrate, scores
    from finetune.coverage import served_threshold
    from textdata.calibration import threshold_vector

    f = fitted(texts, y, groups, n_classes, folds, seed, cache)
    tr, un, oof, fold_of, p_all = f["train"], f["unseen"], f["oof"], f["fold_of"], f["final"]
    t_y, y_un = y[tr], y[un]
    section, chosen, final = calibrate(oof, t_y, fold_of, "model")
    p_unseen = final(p_all[len(tr):])
    out = {"seed": seed, "train": len(tr), "unseen": len(un),
           "accuracy": {"oof": float((oof.argmax(1) == t_y).mean()),
                        "final_unseen": float((p_unseen.argmax(1) == y_un).mean())},
           "ece_unseen": {"calibrated": scores(p_unseen, y_un)["ece"], "nested": section["after"]["ece_mean"]},
           "targets": {}}
    for target in TARGETS:
        row = {}
        try:
            served = served_threshold(chosen, final, oof, t_y, fold_of, list(range(n_classes)), target, None)
            t = served["threshold"]
            tv = threshold_vector({int(k): v for k, v in t.items()} if isinstance(t, dict) else t, list(range(n_classes)))
            sure = p_unseen[np.arange(len(y_un)), p_unseen.argmax(1)] >= tv[p_unseen.argmax(1)]
            row["point"] = {"precision": float((p_unseen[sure].argmax(1) == y_un[sure]).mean()) if sure.any() else None,
                            "coverage": float(sure.mean()), "estimated": served["estimated_coverage"]}
        except Exception as e:  # noqa: BLE001 - an unreachable target is a result here
            row["point"] = {"error": str(e)[:120]}
        row["bound"] = served_bound(chosen, final, oof, t_y, fold_of, n_classes, target, p_unseen, y_un)
        if groups is not None:  # what k-fold serves with --group-column
            row["prediction"] = served_bound(chosen, final, oof, t_y, fold_of, n_classes, target, p_unseen, y_un,
                                             groups[tr], PredictionBound())
        out["targets"][str(target)] = row
    return out


def summarize(runs: list[dict]) -> dict:
    out = {}
    for key in map(str, TARGETS):
        for cand in (c for c in CANDIDATES if c in runs[0]["targets"][key]):
            prec = [r["targets"][key][cand].get("precision") for r in runs]
            cov = [r["targets"][key][cand].get("coverage", 0.0) for r in runs]
            held = [p is not None and p >= float(key) - 0.01 for p in prec]
            valid = [p for p in prec if p is not None]
            out[f"{key}/{cand}"] = {
                "held_share": float(np.mean(held)), "held_of_stated": f"{sum(held)} of {len(valid)}",
                "precision_median": float(np.median(valid)) if valid else None,
                "precision_min": float(np.min(valid)) if valid else None,
                "coverage_median": float(np.median(cov)), "coverage_min": float(np.min(cov))}
    for k in ("oof", "final_unseen"):
        out[f"accuracy/{k}"] = float(np.median([r["accuracy"][k] for r in runs]))
    for k in ("calibrated", "nested"):
        out[f"ece/{k}"] = float(np.median([r["ece_unseen"][k] for r in runs]))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--resplits", type=int, default=10)
    p.add_argument("--first-seed", type=int, default=0, help="resplit seeds first .. first + resplits - 1 (one "
                   "process per part on a shared machine)")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--cap", type=int, default=2500, help="rows per data set (a random sample)")
    p.add_argument("--data", nargs="*", default=list(DATASETS))
    p.add_argument("--output", type=Path, default=h.RESULTS / "threshold_transfer.json")
    p.add_argument("--scores", default=str(ROOT / "runs/threshold_transfer"), help="folder of each resplit's "
                   "fitted scores (npz, read where there: rules compared again without refitting); '' for none")
    a = p.parse_args(argv)
    result = {"delta": DELTA, "data": {}}
    for name in a.data:
        texts, y, groups, labels = DATASETS[name](a.cap)
        t0, runs = time.time(), []
        for seed in range(a.first_seed, a.first_seed + a.resplits):  # written after each resplit: a slow machine still leaves what it did
            cache = Path(a.scores) / f"{name}-{a.cap}-{a.folds}-{seed}.npz" if a.scores else None
            runs.append(one_resplit(texts, y, groups, len(labels), a.folds, seed, cache))
            result["data"][name] = {"rows": len(y), "classes": len(labels), "seconds": round(time.time() - t0, 1),
                                    "summary": summarize(runs), "resplits": runs}
            h.write_record(a.output, result)
        s = result["data"][name]["summary"]
        print(f"\n{name}: {len(y)} rows, {len(labels)} classes; accuracy oof {s['accuracy/oof']:.3f}, final on unseen "
              f"{s['accuracy/final_unseen']:.3f}; ECE unseen {s['ece/calibrated']:.4f} (nested {s['ece/nested']:.4f})")
        for k, v in s.items():
            if "/" in k and k.split("/")[0] in map(str, TARGETS):
                pm = "n/a" if v["precision_median"] is None else f"{v['precision_median']:.3f} (min {v['precision_min']:.3f})"
                point = s.get(f"{k.split('/')[0]}/point", {}).get("coverage_median")
                print(f"  {k:<16} held {v['held_share']:.1f}  precision {pm}  coverage {v['coverage_median']:.3f} "
                      f"({h.ratio(v['coverage_median'], point, 2)}x the point threshold's)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
