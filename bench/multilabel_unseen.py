"""Multi-label: does each label's served threshold keep its precision on texts the model never saw? The per-label
Learn-then-Test thresholds (finetune/calibration_multilabel.py, as --target-precision serves them) chosen on k-fold
out-of-fold rows, scored on unseen rows by the final model (fitted on every train row, calibrated as served).

    python bench/multilabel_unseen.py --train-rows 3000 --unseen 4000 --folds 3 \\
        --output bench/results/multilabel-unseen-debtags.json

The model is the one-vs-rest TF-IDF + logistic-regression baseline on debtags (40 labels; 2 shared cores). Per
target and label with a threshold under 1: the rows whose calibrated probability of the label is at or above its
threshold, and how often the label is true on them (its precision, the statement "each label's precision >= P
with 90% confidence" is about), on the out-of-fold rows and on the unseen rows. Reported: the share of those labels
whose unseen precision is >= target - 0.01 (all of them, and those answering >= 20 unseen rows, where a precision
is an estimate), the labels never confident, the point estimate's share beside it, and the unseen mean binary ECE.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.resplits import started, write_result

TARGETS = (0.8, 0.9)
MIN_ROWS = 20


def debtags():
    import pandas as pd

    df = pd.read_csv("/work/shared/data/debtags/train.csv", dtype=str, keep_default_na=False)
    sets = df["labels"].map(lambda s: [t for t in s.split(";") if t])
    labels = sorted({t for s in sets for t in s})
    Y = np.zeros((len(df), len(labels)), np.int8)
    for i, s in enumerate(sets):
        Y[i, [labels.index(t) for t in s]] = 1
    return df["text"].tolist(), Y, labels


def per_label(P, Y, th) -> list[dict]:
    out = []
    for j, t in enumerate(th):
        rows = P[:, j] >= t
        out.append({"answered": int(rows.sum()), "precision": float(Y[rows, j].mean()) if rows.any() else None})
    return out


def one(texts, Y, labels, a, seed) -> dict:
    from sklearn.model_selection import KFold

    from baseline.label_blend import fit_ovr_baseline, ovr_proba
    from finetune.calibration_multilabel import calibrate_labels, scores
    from finetune.coverage import pick_threshold
    from textdata.errors import DataError

    rng = np.random.default_rng(seed)
    order = rng.permutation(len(texts))
    tr, un = order[: a.train_rows], order[a.train_rows: a.train_rows + a.unseen]
    keep = Y[tr].sum(0) >= 2 * a.folds  # labels a fold model can learn
    Yt, Yu = Y[tr][:, keep], Y[un][:, keep]
    t_texts = [texts[i] for i in tr]
    oof, fold_of = np.zeros(Yt.shape), np.zeros(len(tr), int)
    for k, (fit_rows, held) in enumerate(KFold(a.folds, shuffle=True, random_state=seed).split(tr)):
        model = fit_ovr_baseline([t_texts[i] for i in fit_rows], Yt[fit_rows], seed)
        oof[held], fold_of[held] = ovr_proba(model, [t_texts[i] for i in held]), k
    final_model = fit_ovr_baseline(t_texts, Yt, seed)
    p_un = ovr_proba(final_model, [texts[i] for i in un])
    names = [n for n, k in zip(labels, keep) if k]
    out = {"seed": seed, "train": len(tr), "unseen": len(un), "labels": len(names), "targets": {}}
    for target in TARGETS:
        try:
            section, final, _ = calibrate_labels(oof, Yt, fold_of, names, "model", target)
        except DataError as e:  # no label reaches the target: nothing is confident
            out["targets"][str(target)] = {"error": str(e)[:200]}
            continue
        cal_un, cal_oof = final(p_un), final(oof)
        th = np.array([section["served"]["threshold"][n] for n in names])
        point = np.array([pick_threshold(cal_oof[:, j], Yt[:, j] == 1, target)[0] or 1.0 for j in range(len(names))])
        out["ece_unseen"] = {"uncalibrated": scores(p_un, Yu)["ece"], "calibrated": scores(cal_un, Yu)["ece"],
                             "method": section["method"]}
        out["targets"][str(target)] = {"threshold": th.tolist(), "never_confident": section["served"]["never_confident"],
                                       "bound": per_label(cal_un, Yu, th), "point": per_label(cal_un, Yu, point),
                                       "point_threshold": point.tolist()}
    return out


def summarize(runs) -> dict:
    out = {}
    for target in TARGETS:
        for rule in ("bound", "point"):
            done = [run["targets"][str(target)] for run in runs if "error" not in run["targets"][str(target)]]
            key = "point_threshold" if rule == "point" else "threshold"
            got = [(r, t) for d in done for r, t in zip(d[rule], d[key]) if t < 1.0]
            answered = [r for r, _ in got if r["precision"] is not None]
            enough = [r for r in answered if r["answered"] >= MIN_ROWS]
            out[f"{target}/{rule}"] = {
                "labels_with_threshold": len(got) / len(runs),
                "held_share": float(np.mean([r["precision"] >= target - 0.01 for r in answered])) if answered else None,
                "held_share_20_rows": float(np.mean([r["precision"] >= target - 0.01 for r in enough])) if enough else None,
                "labels_20_rows": len(enough) / len(runs),
                "precision_median": float(np.median([r["precision"] for r in answered])) if answered else None}
    out["ece/uncalibrated"] = float(np.median([r["ece_unseen"]["uncalibrated"] for r in runs]))
    out["ece/calibrated"] = float(np.median([r["ece_unseen"]["calibrated"] for r in runs]))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--resplits", type=int, default=1)
    p.add_argument("--folds", type=int, default=3)
    p.add_argument("--train-rows", type=int, default=3000)
    p.add_argument("--unseen", type=int, default=4000)
    p.add_argument("--output", type=Path, default=ROOT / "bench/results/multilabel-unseen-debtags.json")
    a = p.parse_args(argv)
    texts, Y, labels = debtags()
    result, runs = started(sys.argv), []
    for seed in range(a.resplits):
        runs.append(one(texts, Y, labels, a, seed))
        result.update(summary=summarize(runs), resplits=runs)
        write_result(result, a.output)
    for k, v in result["summary"].items():
        print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
