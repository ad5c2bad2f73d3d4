"""Off-topic texts must not be answered "confident": the out-of-domain detector (baseline/ood.py) measured on
texts of other data sets, with the in-domain coverage it costs and its serving cost, over random resplits.

    python -m bench ood --resplits 3 [--cap 1200] [--off-topic-rows 300] [--data NAME ...]

The TF-IDF + LR baseline as the model (the detector reads only the texts). Per resplit 60% train (out-of-fold
scores, nested calibration, the served threshold at --target, the detector fitted as k-fold fits it), 40% unseen.
Reported: the off-topic rows answered confident without (the baseline) and with the detector, in-domain unseen
coverage without and with it, the in-domain coverage ratio. (The detector's serving cost is `python -m bench
calibration --model FOLDER --ood`; the microseconds measured here until issue 60 are in git history.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import harness as h
from bench.resplits import DATASETS, out_of_fold, resplit

OFF_TOPIC = {"bbc-first-sentences": ("ko-help-grouped", "debtags-implemented-in"),
             "debtags-implemented-in": ("bbc-first-sentences", "ko-help-grouped"),
             "ko-help-grouped": ("bbc-first-sentences", "debtags-implemented-in")}


def served_fit(texts, y, groups, n_classes, target, seed, folds):
    """One resplit's training side as k-fold builds it: out-of-fold scores, nested calibration and the served
    threshold (the point estimate where too few rows state the bound)."""
    from finetune.calibration import calibrate
    from finetune.coverage import served_threshold
    from textdata.calibration import threshold_vector
    from textdata.errors import DataError

    tr, un = resplit(y, groups, seed)
    t_texts, t_y = [texts[i] for i in tr], y[tr]
    oof, fold_of = out_of_fold(t_texts, t_y, None if groups is None else groups[tr], n_classes, folds, seed)
    _, chosen, final = calibrate(oof, t_y, fold_of, "model")
    try:
        served, rule = served_threshold(chosen, final, oof, t_y, fold_of, list(range(n_classes)), target), "bound"
    except DataError:  # too few rows to state it: the point estimate, so that the detector is still measured
        served, rule = served_threshold(chosen, final, oof, t_y, fold_of, list(range(n_classes)), target, None), "point"
    th = threshold_vector(served["threshold"] if not isinstance(served["threshold"], dict)
                          else {int(k): v for k, v in served["threshold"].items()}, list(range(n_classes)))
    return t_texts, t_y, un, oof, fold_of, final, th, rule


def one(name, texts, y, groups, n_classes, others, target, seed, folds) -> dict:
    from baseline.blend import fit_baseline
    from baseline.ood import fit_typicality
    from textdata.calibration import confident

    t_texts, t_y, un, oof, fold_of, final, th, rule = served_fit(texts, y, groups, n_classes, target, seed, folds)
    typ, meta = fit_typicality(t_texts, t_y, fold_of, n_classes, confident(final(oof), th))
    model = fit_baseline(t_texts, t_y, seed)
    un_texts = [texts[i] for i in un]
    row = {"seed": seed, "cut": typ.cut, "fit": meta, "threshold_rule": rule}

    def probs(batch):
        p = np.zeros((len(batch), n_classes))
        p[:, model.classes_] = model.predict_proba(batch)
        return final(p)

    def answered(batch):
        sure, inside = confident(probs(batch), th), typ.in_domain(batch)
        return sure, sure & inside, float((~inside).mean())

    sure, kept, flagged = answered(un_texts)
    right = probs(un_texts).argmax(1) == y[un]
    row["in_domain"] = {"coverage_without": float(sure.mean()), "coverage_with": float(kept.mean()),
                        "precision_without": float(right[sure].mean()) if sure.any() else None,
                        "precision_with": float(right[kept].mean()) if kept.any() else None, "flagged": flagged}
    for other, other_texts in others.items():
        s, k, f = answered(other_texts)
        row[f"off_topic/{other}"] = {"confident_without": float(s.mean()), "confident_with": float(k.mean()),
                                     "flagged": f}
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--resplits", type=int, default=3)
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--cap", type=int, default=1200)
    p.add_argument("--off-topic-rows", type=int, default=300)
    p.add_argument("--target", type=float, default=0.9)
    p.add_argument("--data", nargs="*", default=list(OFF_TOPIC))
    p.add_argument("--output", type=Path, default=h.RESULTS / "ood.json")
    a = p.parse_args(argv)
    result = {"target": a.target, "data": {}}
    loaded = {n: DATASETS[n](a.cap) for n in {*a.data, *[o for d in a.data for o in OFF_TOPIC[d]]}}
    for name in a.data:
        texts, y, groups, labels = loaded[name]
        rng = np.random.default_rng(0)
        others = {o: [loaded[o][0][i] for i in rng.permutation(len(loaded[o][0]))[: a.off_topic_rows]]
                  for o in OFF_TOPIC[name]}
        runs = []
        for s in range(a.resplits):  # written after each resplit: a slow machine still leaves what it did
            runs.append(one(name, texts, y, groups, len(labels), others, a.target, s, a.folds))
            h.write_record(a.output, {**result, "data": {**result["data"], name: {"rows": len(y), "resplits": runs}}},
                           quiet=True)
        med = lambda key, sub, runs=runs: float(np.median([r[key][sub] for r in runs]))
        summary = {"in_domain_coverage_without": med("in_domain", "coverage_without"),
                   "in_domain_coverage_with": med("in_domain", "coverage_with"),
                   "in_domain_flagged": med("in_domain", "flagged"),
                   "threshold_rules": [r["threshold_rule"] for r in runs],
                   **{f"off_topic/{o}/{k}": med(f"off_topic/{o}", k) for o in others
                      for k in ("confident_without", "confident_with", "flagged")},
                   "off_topic_confident_with_max": max(r[f"off_topic/{o}"]["confident_with"] for r in runs for o in others)}
        result["data"][name] = {"rows": len(y), "summary": summary, "resplits": runs}
        print(f"\n{name} (target {a.target}): in-domain coverage {summary['in_domain_coverage_without']:.3f} -> "
              f"{summary['in_domain_coverage_with']:.3f} ("
              f"{h.ratio(summary['in_domain_coverage_with'], summary['in_domain_coverage_without'])}x without the detector)")
        for o in others:
            print(f"  off-topic {o}: confident {summary[f'off_topic/{o}/confident_without']:.3f} -> "
                  f"{summary[f'off_topic/{o}/confident_with']:.3f} (flagged {summary[f'off_topic/{o}/flagged']:.3f})")
        h.write_record(a.output, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
