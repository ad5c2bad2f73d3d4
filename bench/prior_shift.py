"""Does correcting the served scores to the served class mix (Saerens et al. 2002, textdata/prior_shift.py) help, and
when: unseen rows drawn at the training mix and at shifted mixes, the served (calibrated) scores with and without
the correction, and the rule that decides whether to serve it.

    python bench/prior_shift.py --data bbc-first-sentences ko-help-grouped --resplits 2 --folds 3 \\
        --output bench/results/prior-shift.json

The model is the TF-IDF + logistic-regression baseline (2 shared cores). Per resplit: `--train-rows` rows train
(k-fold out-of-fold scores, nested calibration, the final calibrator, the served threshold for --target with 90%
confidence, the point estimate where too few rows state it), the rest are the unseen pool. From it, `--draws`
samples of `--window` rows per mix: `same` (the training rows' mix), `dirichlet` (a mix drawn from Dirichlet(1)),
`one` (half the rows from one class, the rest at the training mix). The training mix the correction divides by is
the mean calibrated out-of-fold probability (what reference.json's `mean_probability` holds). Reported per mix,
without and with the correction (and with it only where the rule fires): accuracy, log-loss, top-label ECE,
precision and coverage of the confident answers, the estimated mix's distance to the true one, how often the
likelihood-ratio test fires at each level.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.calibration_unseen import parser, resplits, split
from bench.resplits import fit_proba, out_of_fold
from finetune.prior_check import mix_of, sample

LEVELS = (0.05, 0.01, 0.001)
MIXES = ("same", "dirichlet", "one")


def served(oof, y, fold_of, n, target):
    """(the final calibrator, the served thresholds, k-fold's --prior-correction check on the nested-calibrated
    out-of-fold rows: finetune/prior_check.py)."""
    from finetune.calibration import calibrate
    from finetune.coverage import served_threshold
    from finetune.prior_check import prior_check
    from textdata.calibration import threshold_vector
    from textdata.errors import DataError

    _, chosen, final = calibrate(oof, y, fold_of, "model")
    check = prior_check(chosen.calibrated, y)
    try:
        s = served_threshold(chosen, final, oof, y, fold_of, list(range(n)), target)
    except DataError:
        s = served_threshold(chosen, final, oof, y, fold_of, list(range(n)), target, None)
    t = s["threshold"]
    return final, threshold_vector({int(k): v for k, v in t.items()} if isinstance(t, dict) else t, list(range(n))), check


def judged(p, y, th) -> dict:
    from finetune.calibration import scores
    from textdata.calibration import confident

    s = scores(p, y)
    sure = confident(p, th)
    return {**{k: s[k] for k in ("accuracy", "log_loss", "ece")}, "coverage": float(sure.mean()),
            "precision": float((p[sure].argmax(1) == y[sure]).mean()) if sure.any() else None}


def one(texts, y, groups, n, a, seed) -> dict:
    from textdata.prior_shift import adjust, estimate

    rng = np.random.default_rng(seed)
    tr, un = split(y, groups, a.train_rows, 10**9, seed)
    t_texts, t_y, y_pool = [texts[i] for i in tr], y[tr], y[un]
    oof, fold_of, _ = out_of_fold(t_texts, t_y, None if groups is None else groups[tr], n, a.folds, seed)
    final, th, check = served(oof, t_y, fold_of, n, a.target)
    every = [*t_texts, *(texts[i] for i in un)]
    p_pool = final(fit_proba(every, np.r_[t_y, y_pool], np.arange(len(tr)), len(tr) + np.arange(len(un)), n, seed))
    fitted = final(oof).mean(0)
    label_mix = np.bincount(t_y, minlength=n) / len(t_y)
    present = np.bincount(y_pool, minlength=n) > 0
    out = {"seed": seed, "train": len(tr), "pool": len(un), "fitted_mix": fitted.tolist(),
           "label_mix": label_mix.tolist(), "kfold_check": check, "mixes": {}}
    for kind in MIXES:
        rows = []
        for _ in range(a.draws):
            mix = mix_of(kind, label_mix, rng) * present
            idx = sample(y_pool, mix, a.window, rng)
            p, yy = p_pool[idx], y_pool[idx]
            true = np.bincount(yy, minlength=n) / len(yy)
            est = estimate(p, fitted)
            fixed = adjust(p, fitted, est["prior"])
            rows.append({"p_value": est["p_value"], "tv_estimate": float(0.5 * np.abs(est["prior"] - true).sum()),
                         "tv_training": float(0.5 * np.abs(fitted - true).sum()),
                         "plain": judged(p, yy, th), "corrected": judged(fixed, yy, th)})
        out["mixes"][kind] = rows
    return out


def summarize(runs) -> dict:
    out = {}
    for kind in MIXES:
        rows = [r for run in runs for r in run["mixes"][kind]]
        s = {"draws": len(rows), "tv_estimate": float(np.median([r["tv_estimate"] for r in rows])),
             "tv_training": float(np.median([r["tv_training"] for r in rows]))}
        for level in LEVELS:
            s[f"fires_{level}"] = float(np.mean([r["p_value"] < level for r in rows]))
        for how in ("plain", "corrected"):
            for k in ("accuracy", "log_loss", "ece", "coverage"):
                s[f"{how}/{k}"] = float(np.median([r[how][k] for r in rows]))
            prec = [r[how]["precision"] for r in rows if r[how]["precision"] is not None]
            s[f"{how}/precision"] = float(np.median(prec)) if prec else None
        for level in LEVELS:  # the rule: corrected only where the test fires at `level`
            pick = [r["corrected"] if r["p_value"] < level else r["plain"] for r in rows]
            s[f"rule_{level}/log_loss"] = float(np.median([p["log_loss"] for p in pick]))
            s[f"rule_{level}/accuracy"] = float(np.median([p["accuracy"] for p in pick]))
            s[f"rule_{level}/log_loss_wins"] = float(np.mean([p["log_loss"] <= r["plain"]["log_loss"] + 1e-12
                                                               for p, r in zip(pick, rows)]))
        s["corrected_log_loss_wins"] = float(np.mean([r["corrected"]["log_loss"] < r["plain"]["log_loss"] for r in rows]))
        out[kind] = s
    out["kfold_check_wins"] = [bool(run["kfold_check"]["wins"]) for run in runs]
    return out


def serving_cost(n_classes: int = 5, rows: int = 32, window: int = 1000, rounds: int = 2000) -> dict:
    """µs a served row of the correction (serving/prior.py, after the calibrator), against the calibrator alone,
    and of the monitor's EM on a full window, run every 100 answers (amortized per answer), from the training mix
    (cold) and from the window's estimate 100 answers before (warm, as served); medians of 5, interleaved."""
    import time

    from serving.calibration import ServedCalibration
    from serving.prior import PriorCorrection
    from textdata.calibration import Calibrator
    from textdata.prior_shift import estimate

    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(n_classes), rows).astype(np.float32)
    cal = ServedCalibration(Calibrator("temperature", temperature=1.3))
    fitted = np.full(n_classes, 1 / n_classes)
    on = PriorCorrection(tuple(range(n_classes)), fitted, rng.dirichlet(np.ones(n_classes)), window, 1e-6)

    def per_row(prior) -> float:
        cal.prior = prior
        t = time.perf_counter()
        for _ in range(rounds):
            cal(p)
        return (time.perf_counter() - t) / rounds / rows * 1e6

    plain, corrected, em, warm, fast, fast_warm = [], [], [], [], [], []
    # the window as the monitor sees it 100 answers apart: warm-started from the last estimate (app/monitoring/mix.py)
    stream = rng.dirichlet(np.ones(n_classes), window + 100) * rng.dirichlet(np.ones(n_classes) * 5)
    stream /= stream.sum(1, keepdims=True)
    big, last = stream[100:], estimate(stream[:window], fitted)["prior"]
    last_fast = estimate(stream[:window], fitted, accelerated=True)["prior"]
    for _ in range(5):
        plain.append(per_row(None))
        corrected.append(per_row(on))
        t = time.perf_counter()
        estimate(big, fitted)
        em.append((time.perf_counter() - t) / 100 * 1e6)
        t = time.perf_counter()
        estimate(big, fitted, start=last)
        warm.append((time.perf_counter() - t) / 100 * 1e6)
        t = time.perf_counter()
        estimate(big, fitted, accelerated=True)
        fast.append((time.perf_counter() - t) / 100 * 1e6)
        t = time.perf_counter()
        estimate(big, fitted, start=last_fast, accelerated=True)
        fast_warm.append((time.perf_counter() - t) / 100 * 1e6)
    return {"classes": n_classes, "batch_rows": rows, "calibrator_us_per_row": float(np.median(plain)),
            "with_correction_us_per_row": float(np.median(corrected)),
            "correction_us_per_row": float(np.median(corrected) - np.median(plain)),
            "monitor_em_us_per_answer": float(np.median(em)), "monitor_em_warm_us_per_answer": float(np.median(warm)),
            "em_warm_over_cold": float(np.median(np.array(warm) / np.array(em))), "em_window": window,
            **accelerated(big, fitted, last, last_fast, em, warm, fast, fast_warm)}


def accelerated(big, fitted, last, last_fast, em, warm, fast, fast_warm) -> dict:
    """The accelerated EM's columns (SQUAREM, textdata/prior_shift.py, as the monitor runs it): µs per answer, ratios
    against plain EM timed in the same rounds, EM steps against plain EM's rounds (to a 1e-6 move, 200 at most, and
    to a 1e-13 move), and each estimate's distance (TV) to plain EM's fixed point."""
    from textdata.prior_shift import TOLERANCE, estimate, squarem_prior

    a = big / fitted

    def plain(start, tol, cap):
        q = np.asarray(start, np.float64).clip(min=1e-6)
        q = q / q.sum()
        for k in range(1, cap + 1):
            new = q * (a.T @ (1 / (a @ q))) / len(a)
            if np.abs(new - q).max() < tol:
                return k, new
            q = new
        return cap, q

    fixed_rounds, fixed = plain(fitted, 1e-13, 100000)
    tv = lambda q: float(0.5 * np.abs(q - fixed).sum())
    ratio = lambda x, y: float(np.median(np.array(x) / np.array(y)))
    return {"monitor_em_accelerated_us_per_answer": float(np.median(fast)),
            "monitor_em_accelerated_warm_us_per_answer": float(np.median(fast_warm)),
            "accelerated_over_cold": ratio(fast, em), "accelerated_warm_over_warm": ratio(fast_warm, warm),
            "accelerated_warm_over_cold": ratio(fast_warm, em),
            "em_rounds_cold": plain(fitted, TOLERANCE, 200)[0], "em_rounds_warm": plain(last, TOLERANCE, 200)[0],
            "em_rounds_to_1e-13": fixed_rounds,
            "accelerated_steps_cold": squarem_prior(big, fitted)[1],
            "accelerated_steps_warm": squarem_prior(big, fitted, last_fast)[1],
            "tv_to_fixed_point": {"cold": tv(estimate(big, fitted)["prior"]),
                                  "warm": tv(estimate(big, fitted, last)["prior"]),
                                  "accelerated": tv(estimate(big, fitted, accelerated=True)["prior"]),
                                  "accelerated_warm": tv(estimate(big, fitted, last_fast, accelerated=True)["prior"])}}


def main(argv=None) -> int:
    p = parser(__doc__, ["bbc-first-sentences", "ko-help-grouped"], 2, "bench/results/prior-shift.json")
    p.add_argument("--window", type=int, default=500, help="rows a served window holds")
    p.add_argument("--draws", type=int, default=30, help="samples per mix and resplit")
    p.add_argument("--target", type=float, default=0.8)
    p.add_argument("--cost-only", action="store_true", help="only the serving cost (no resplits)")
    a = p.parse_args(argv)
    if a.cost_only:
        from bench.resplits import started, write_result

        result = started(sys.argv, cost={c: serving_cost(c) for c in (5, 10, 40)})
        print(json.dumps(result["cost"], indent=1))
        write_result(result, a.output)
        return 0
    for name, runs, result in resplits(a, one, summarize):
        if len(runs) < a.resplits:
            continue
        print(f"\n{name} ({result['data'][name]['classes']} classes, medians of {a.resplits} x {a.draws} windows of "
              f"{a.window}):")
        for kind, s in result["data"][name]["summary"].items():
            if kind not in MIXES:
                continue
            print(f"  {kind:>9}: mix error {s['tv_training']:.3f} -> {s['tv_estimate']:.3f}; fires "
                  + " ".join(f"{lv}:{s[f'fires_{lv}']:.2f}" for lv in LEVELS)
                  + f"; log-loss {s['plain/log_loss']:.4f} -> {s['corrected/log_loss']:.4f} (wins "
                  f"{s['corrected_log_loss_wins']:.2f}), rule@0.01 {s['rule_0.01/log_loss']:.4f}; accuracy "
                  f"{s['plain/accuracy']:.3f} -> {s['corrected/accuracy']:.3f}; ECE {s['plain/ece']:.3f} -> "
                  f"{s['corrected/ece']:.3f}; precision {s['plain/precision']} -> {s['corrected/precision']} at "
                  f"coverage {s['plain/coverage']:.3f} -> {s['corrected/coverage']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
