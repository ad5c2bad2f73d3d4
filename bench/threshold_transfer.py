"""Does the served "confident" threshold keep its precision on texts the model never saw? Candidates measured
against each other over random train/unseen resplits, the TF-IDF + LR baseline as the model (the k-fold pipeline's
calibration and threshold code on its out-of-fold scores).

    python -m bench threshold_transfer --resplits 10 [--cap 2500] [--data NAME ...] [--grouped RULE ...]

Per resplit 60% of the rows train (grouped data: whole groups), 40% are unseen; k-fold out-of-fold scores, nested
calibration, the final model on every train row. Candidates, scored on the unseen rows at targets 0.8 and 0.9:
point (today's served point threshold: the baseline), bound (Learn-then-Test, what --target-precision serves;
bound_975 at delta 0.025), grouped data's page bounds (group_bound[_95], page_bootstrap[_95], prediction[_unseen,
_bootstrap, _95]: finetune/group_bound.py) and per-class bounds, grid (Bonferroni over 20 coverages), quantile
(the point's coverage carried to the final model's own scores), share (a 20% calibration share) and ensemble (the
fold models averaged). Reported per candidate: unseen precision and coverage (median, min) and the share of
resplits holding >= target - 0.01. Each resplit's fitted scores are kept in --scores and read back by a later
run with the same data, cap and folds: rules compared again without refitting.
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
from finetune.group_bound import DESIGN, PageBootstrap, PredictionBound

DELTA = 0.1
TARGETS = (0.8, 0.9)
SHARE = 0.2
# grouped data: (column, delta, rule of the unseen / train row ratio): the page bound at 90% and 95%, the page
# bootstrap at 90% and 95%, the prediction bound (design effect; page bootstrap) for a batch as large as the
# out-of-fold rows and for one as large as this resplit's unseen rows (r x the out-of-fold rows: what is measured)
GROUPED = (("group_bound", DELTA, lambda r: DESIGN), ("group_bound_95", 0.05, lambda r: DESIGN),
           ("page_bootstrap", DELTA, lambda r: PageBootstrap()), ("page_bootstrap_95", 0.05, lambda r: PageBootstrap()),
           ("prediction", DELTA, lambda r: PredictionBound()), ("prediction_unseen", DELTA, PredictionBound),
           ("prediction_bootstrap", DELTA, lambda r: PredictionBound(bootstrap=True)),
           ("prediction_bootstrap_unseen", DELTA, lambda r: PredictionBound(r, bootstrap=True)),
           ("prediction_bootstrap_95", 0.05, lambda r: PredictionBound(bootstrap=True)),
           ("prediction_95", 0.05, lambda r: PredictionBound()))
# grouped data: a threshold per predicted class, each class's precision bounded by the served page bound's rule
# (DESIGN), forced (not only where it wins nested): (column, delta, split delta / classes as pick_per_class does).
# A pooled threshold's precision is the predicted classes' precisions weighted by their mix, which a page split
# moves; every class held holds any mix of them.
PER_CLASS = (("per_class_bound", DELTA, True), ("per_class_bound_pooled_delta", DELTA, False),
             ("per_class_point", None, False))


def scored(probs, y, t):
    """(precision, coverage) of the rows at or above threshold t (one number) on calibrated probs."""
    if t is None:
        return None, 0.0
    sure = probs.max(1) >= t
    return (float((probs[sure].argmax(1) == y[sure]).mean()) if sure.any() else None), float(sure.mean())


def grid_bound_threshold(
    conf: np.ndarray, correct: np.ndarray, target: float, delta: float, levels: int = 20
) -> tuple[float | None, dict]:
    """`bound_threshold`'s alternative: Bonferroni over `levels` thresholds at fixed coverages (1/levels ...
    1 of the rows, the order of the scores only), each tested at delta / levels; the lowest that passes."""
    from finetune import coverage as cov

    conf, correct = np.asarray(conf, float), np.asarray(correct, bool)
    need = cov.needed_rows(target, delta / levels)
    info = {"needed_rows": need, "rows": len(conf)}
    if len(conf) < need:
        return None, info
    order = np.sort(conf)[::-1]
    at = np.unique(np.clip(np.ceil(np.arange(1, levels + 1) / levels * len(conf)).astype(int), need, len(conf))) - 1
    thresholds = order[at]
    n = cov._counts(conf, thresholds)
    right = np.array([correct[conf >= t].sum() for t in thresholds])
    ok = cov.lower_bounds(right, n, delta / levels) >= target
    return (float(thresholds[ok].min()) if ok.any() else None), info


def served_bound(chosen, final, oof, y, fold_of, n_classes, target, p_unseen, y_un, groups=None,
                 delta: float = DELTA, group_rule=DESIGN) -> dict:
    """The bound as --target-precision serves it (finetune/coverage.py served_threshold at its DELTA: global, or
    per class at delta / classes where that won nested; `groups`: as with --group-column, over unseen groups),
    scored on the unseen rows."""
    from finetune.coverage import served_threshold
    from textdata.calibration import confident, threshold_vector
    from textdata.errors import DataError

    try:
        served = served_threshold(chosen, final, oof, y, fold_of, list(range(n_classes)), target, delta, groups=groups,
                                  group_column=None if groups is None else "group", group_rule=group_rule)
    except DataError as e:  # unreachable or too few rows: nothing is answered confident
        return {"precision": None, "coverage": 0.0, "error": str(e)[:160]}
    t = served["threshold"]
    sure = confident(p_unseen, threshold_vector({int(k): v for k, v in t.items()} if isinstance(t, dict) else t,
                                                list(range(n_classes))))
    return {"precision": float((p_unseen[sure].argmax(1) == y_un[sure]).mean()) if sure.any() else None,
            "coverage": float(sure.mean()), "estimated": served["estimated_coverage"], "scope": served["scope"],
            "threshold": t,
            "estimated_precision": served["estimated_precision"], "grouped": served.get("grouped")}


def per_class_bound(final, oof, y, groups, target, p_unseen, y_un, delta: float | None, split: bool) -> dict:
    """Per-class page bounds forced (finetune/coverage.py pick_per_class with `groups`, DESIGN, no fallback; a
    class whose bound never reaches the target is never confident), scored on the unseen rows. `delta` None:
    per-class point thresholds (a class under MIN_ANSWERED rows takes the pooled point threshold): whether
    holding each class's precision transfers where the pooled point does not, the bound's width aside."""
    from finetune.coverage import answered, pick_per_class, pick_threshold

    probs = final(np.asarray(oof, np.float64))
    pooled = None if delta is not None else pick_threshold(probs.max(1), probs.argmax(1) == y, target)[0]
    th = pick_per_class(probs, y, target, pooled, delta, groups, DESIGN, split)
    got = answered(p_unseen, y_un, None if (th >= 1.0).all() else th)
    return {"precision": got["precision"], "coverage": got["coverage"], "scope": "per_class",
            "stated_classes": int((th < 1.0).sum()), "thresholds": [round(float(v), 6) for v in th]}


def mix_split(cal_oof, y, p_unseen, y_un, threshold: float | None) -> dict | None:
    """A pooled threshold's unseen - out-of-fold precision split in two: the predicted-class mix of the answered
    rows (sum (w_unseen - w_oof) x p_oof, each class's out-of-fold precision) and the classes' own precisions
    (sum w_unseen x (p_unseen - p_oof)); classes answered on one side only count in the second."""
    if threshold is None:
        return None
    side = []
    for p, t in ((cal_oof, y), (p_unseen, y_un)):
        sure = p.max(1) >= threshold
        pred, right = p[sure].argmax(1), p[sure].argmax(1) == t[sure]
        w = np.bincount(pred, minlength=p.shape[1]) / max(sure.sum(), 1)
        prec = np.array([right[pred == c].mean() if (pred == c).any() else np.nan for c in range(p.shape[1])])
        side.append((w, prec))
    (w_o, p_o), (w_u, p_u) = side
    both = ~np.isnan(p_o) & ~np.isnan(p_u)
    oof_prec, unseen_prec = float(np.nansum(w_o * p_o)), float(np.nansum(w_u * p_u))
    mix = float(np.sum((w_u - w_o)[both] * p_o[both]))
    return {"oof": oof_prec, "unseen": unseen_prec, "mix": mix, "within": unseen_prec - oof_prec - mix,
            "mix_tv": float(np.abs(w_u - w_o).sum() / 2)}


def fitted(texts, y, groups, n_classes, folds, seed, cache: Path | None = None) -> dict:
    """Every model fit a resplit needs (k fold models, the final model, the calibration share's model), as
    arrays: the train / unseen rows, the out-of-fold scores and folds, the fold models' and the final model's
    uncalibrated scores of the unseen rows, the share model's. Saved to (and, when there, read from) `cache`,
    so that rules are compared again on the same scores without refitting (~2 of a resplit's ~7 minutes)."""
    if cache is not None and cache.exists():
        print(f"seed {seed}: fitted scores read from {cache} (no refitting)", flush=True)
        with np.load(cache) as f:
            return {k: f[k] for k in f.files}
    tr, un = resplit(y, groups, seed)
    t_texts, t_y = [texts[i] for i in tr], y[tr]
    t_groups = None if groups is None else groups[tr]
    oof, fold_of, fold_unseen = out_of_fold(t_texts, t_y, t_groups, n_classes, folds, seed, [texts[i] for i in un])
    every = np.r_[np.arange(len(tr)), len(tr) + np.arange(len(un))]
    p_all = fit_proba(t_texts + [texts[i] for i in un], np.r_[t_y, y[un]], np.arange(len(tr)), every, n_classes, seed)
    # the calibration share: a final model on 80% of the train rows, its own scores on the other 20%
    share = np.zeros(len(tr), bool)
    share[np.random.default_rng(seed).permutation(len(tr))[: int(SHARE * len(tr))]] = True
    fit_rows, held_rows = np.flatnonzero(~share), np.flatnonzero(share)
    p_share = fit_proba(t_texts + [texts[i] for i in un], np.r_[t_y, y[un]], fit_rows,
                        np.r_[held_rows, len(tr) + np.arange(len(un))], n_classes, seed)
    out = {"train": tr, "unseen": un, "oof": oof, "fold_of": fold_of, "fold_unseen": np.asarray(fold_unseen),
           "final": p_all, "held_rows": held_rows, "share": p_share}
    if cache is not None:
        from textdata.tables import atomic_path

        with atomic_path(cache) as tmp, open(tmp, "wb") as fh:  # a killed run leaves no half file
            np.savez_compressed(fh, **out)
    return out


def one_resplit(texts, y, groups, n_classes, folds, seed, cache: Path | None = None, grouped=None) -> dict:
    from finetune.calibration import calibrate, scores
    from finetune.coverage import bound_threshold, served_threshold
    from textdata.calibration import threshold_vector

    f = fitted(texts, y, groups, n_classes, folds, seed, cache)
    tr, un, oof, fold_of, p_all, held_rows = f["train"], f["unseen"], f["oof"], f["fold_of"], f["final"], f["held_rows"]
    t_y = y[tr]
    t_groups = None if groups is None else groups[tr]
    section, chosen, final = calibrate(oof, t_y, fold_of, "model")
    p_train, p_unseen = final(p_all[: len(tr)]), final(p_all[len(tr):])
    y_un = y[un]
    cal_oof = final(oof)
    p_share = final(f["share"])
    p_held, p_share_unseen = p_share[: len(held_rows)], p_share[len(held_rows):]
    p_ens = final(np.mean(f["fold_unseen"], axis=0))
    out = {"seed": seed, "train": len(tr), "unseen": len(un),
           "sharpness": {"oof_mean_top": float(cal_oof.max(1).mean()), "final_unseen_mean_top": float(p_unseen.max(1).mean())},
           "accuracy": {"oof": float((oof.argmax(1) == t_y).mean()), "final_unseen": float((p_unseen.argmax(1) == y_un).mean()),
                        "share_unseen": float((p_share_unseen.argmax(1) == y_un).mean()),
                        "ensemble_unseen": float((p_ens.argmax(1) == y_un).mean())},
           "ece_unseen": {"uncalibrated": scores(p_all[len(tr):], y_un)["ece"], "calibrated": scores(p_unseen, y_un)["ece"],
                          "method": section["method"], "nested": section["after"]["ece_mean"]},
           "targets": {}}
    for target in TARGETS:
        row = {}
        try:
            served = served_threshold(chosen, final, oof, t_y, fold_of, list(range(n_classes)), target, None)
            tv = threshold_vector(served["threshold"] if not isinstance(served["threshold"], dict) else
                                  {int(k): v for k, v in served["threshold"].items()}, list(range(n_classes)))
            sure = p_unseen[np.arange(len(y_un)), p_unseen.argmax(1)] >= tv[p_unseen.argmax(1)]
            row["point"] = {"precision": float((p_unseen[sure].argmax(1) == y_un[sure]).mean()) if sure.any() else None,
                            "coverage": float(sure.mean()), "estimated": served["estimated_coverage"]}
            t_point = float(np.min(tv))
            if not isinstance(served["threshold"], dict):
                row["point"]["mix_split"] = mix_split(cal_oof, t_y, p_unseen, y_un, t_point)
            oof_cov = float((cal_oof.max(1) >= t_point).mean())
            t_q = float(np.quantile(p_train.max(1), 1 - oof_cov))
            row["quantile"] = dict(zip(("precision", "coverage"), scored(p_unseen, y_un, t_q)))
            row["ensemble"] = dict(zip(("precision", "coverage"), scored(p_ens, y_un, t_point)))
        except Exception as e:  # noqa: BLE001 - an unreachable target is a result here
            row["point"] = {"error": str(e)[:120]}
        row["bound"] = served_bound(chosen, final, oof, t_y, fold_of, n_classes, target, p_unseen, y_un)
        # the same bound at 97.5% confidence: room for the unseen rows' own sampling noise
        row["bound_975"] = served_bound(chosen, final, oof, t_y, fold_of, n_classes, target, p_unseen, y_un,
                                        delta=0.025)
        if t_groups is not None:  # grouped rules; `prediction` is what k-fold serves with --group-column
            for name, delta, rule in GROUPED:
                if grouped is None or name in grouped:
                    row[name] = served_bound(chosen, final, oof, t_y, fold_of, n_classes, target, p_unseen, y_un,
                                             t_groups, delta, rule(len(un) / len(tr)))
            t_g = row["group_bound"].get("threshold") if "group_bound" in row else None
            if isinstance(t_g, float):  # a pooled page bound: how much of its transfer gap is the class mix
                row["group_bound"]["mix_split"] = mix_split(cal_oof, t_y, p_unseen, y_un, t_g)
            for name, delta, split in PER_CLASS:
                if grouped is None or name in grouped:
                    row[name] = per_class_bound(final, oof, t_y, t_groups, target, p_unseen, y_un, delta, split)
        t_g, _ = grid_bound_threshold(cal_oof.max(1), cal_oof.argmax(1) == t_y, target, DELTA)
        row["grid"] = dict(zip(("precision", "coverage"), scored(p_unseen, y_un, t_g)))
        t_s, _ = bound_threshold(p_held.max(1), p_held.argmax(1) == t_y[held_rows], target, DELTA)
        row["share"] = dict(zip(("precision", "coverage"), scored(p_share_unseen, y_un, t_s)))
        out["targets"][str(target)] = row
    return out


def summarize(runs: list[dict]) -> dict:
    out = {}
    for target in TARGETS:
        key = str(target)
        for cand in ("point", "bound", "bound_975", *(g[0] for g in GROUPED + PER_CLASS), "grid", "quantile", "share", "ensemble"):
            if cand not in runs[0]["targets"][key]:
                continue
            got = [r["targets"][key].get(cand, {}) for r in runs]
            prec = [g.get("precision") for g in got]
            cov = [g.get("coverage", 0.0) for g in got]
            held = [p is not None and p >= target - 0.01 for p in prec]
            valid = [p for p in prec if p is not None]
            out[f"{key}/{cand}"] = {
                "held_share": float(np.mean(held)),
                "held_of_stated": f"{sum(held)} of {len(valid)}",
                "precision_median": float(np.median(valid)) if valid else None,
                "precision_min": float(np.min(valid)) if valid else None,
                "coverage_median": float(np.median(cov)), "coverage_min": float(np.min(cov)),
            }
    for k in ("oof_mean_top", "final_unseen_mean_top"):
        out[f"sharpness/{k}"] = float(np.median([r["sharpness"][k] for r in runs]))
    for k in ("oof", "final_unseen", "share_unseen", "ensemble_unseen"):
        out[f"accuracy/{k}"] = float(np.median([r["accuracy"][k] for r in runs]))
    for k in ("uncalibrated", "calibrated", "nested"):
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
    p.add_argument("--grouped", nargs="*", choices=[g[0] for g in GROUPED + PER_CLASS], help="grouped data: only these rules "
                   "(the page bootstraps cost most of a resplit's time)")
    a = p.parse_args(argv)
    result = {"delta": DELTA, "share": SHARE, "data": {}}
    for name in a.data:
        texts, y, groups, labels = DATASETS[name](a.cap)
        t0, runs = time.time(), []
        for seed in range(a.first_seed, a.first_seed + a.resplits):  # written after each resplit: a slow machine still leaves what it did
            cache = Path(a.scores) / f"{name}-{a.cap}-{a.folds}-{seed}.npz" if a.scores else None
            runs.append(one_resplit(texts, y, groups, len(labels), a.folds, seed, cache, a.grouped))
            result["data"][name] = {"rows": len(y), "classes": len(labels), "seconds": round(time.time() - t0, 1),
                                    "summary": summarize(runs), "resplits": runs}
            h.write_record(a.output, result)
        s = result["data"][name]["summary"]
        print(f"\n{name}: {len(y)} rows, {len(labels)} classes; accuracy oof {s['accuracy/oof']:.3f}, final on unseen "
              f"{s['accuracy/final_unseen']:.3f}; mean top score oof {s['sharpness/oof_mean_top']:.3f}, final on unseen "
              f"{s['sharpness/final_unseen_mean_top']:.3f}; ECE unseen {s['ece/calibrated']:.4f} (nested {s['ece/nested']:.4f})")
        for k, v in s.items():
            if "/" in k and k.split("/")[0] in map(str, TARGETS):
                pm = "n/a" if v["precision_median"] is None else f"{v['precision_median']:.3f} (min {v['precision_min']:.3f})"
                point = s.get(f"{k.split('/')[0]}/point", {}).get("coverage_median")
                print(f"  {k:<16} held {v['held_share']:.1f}  precision {pm}  coverage {v['coverage_median']:.3f} "
                      f"({h.ratio(v['coverage_median'], point, 2)}x the point threshold's)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
