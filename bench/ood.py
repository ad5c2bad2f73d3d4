"""Off-topic texts must not be answered "confident": the out-of-domain detector (baseline/ood.py) measured on
texts of other data sets, with the in-domain coverage it costs and its serving cost, over random resplits.

    python bench/ood.py --resplits 3 --output bench/results/ood.json

The model is the TF-IDF + logistic-regression baseline (2 shared cores; the detector reads only the texts, so
the same detector serves an encoder). Per resplit: 60% of the rows train (k-fold out-of-fold scores, nested
calibration, the served threshold at --target as finetune/coverage.py chooses it, the detector fitted on the
out-of-fold rows as finetune/confidence.py does), 40% are unseen. Reported: the share of off-topic rows
answered confident without and with the detector, the in-domain unseen coverage without and with it, and the
detector's microseconds a row beside the baseline's own (the blend's cost, measured in the same run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.threshold_transfer import DATASETS, fit_proba, folds_of, resplit

OFF_TOPIC = {"bbc-first-sentences": ("ko-help-grouped", "debtags-implemented-in"),
             "debtags-implemented-in": ("bbc-first-sentences", "ko-help-grouped"),
             "ko-help-grouped": ("bbc-first-sentences", "debtags-implemented-in")}


def one(name, texts, y, groups, n_classes, others, target, seed, folds) -> dict:
    import tempfile

    from baseline.blend import Blend, fit_baseline, load_baseline, save_baseline
    from baseline.ood import fit_typicality
    from finetune.calibration import calibrate
    from finetune.coverage import served_threshold
    from textdata.calibration import confident, threshold_vector

    tr, un = resplit(y, groups, seed)
    t_texts, t_y = [texts[i] for i in tr], y[tr]
    oof, fold_of = np.zeros((len(tr), n_classes)), np.zeros(len(tr), int)
    for k, (a, b) in enumerate(folds_of(t_y, None if groups is None else groups[tr], folds, seed)):
        oof[b], fold_of[b] = fit_proba(t_texts, t_y, a, b, n_classes, seed), k
    _, chosen, final = calibrate(oof, t_y, fold_of, "model")
    served = served_threshold(chosen, final, oof, t_y, fold_of, list(range(n_classes)), target)
    th = threshold_vector(served["threshold"] if not isinstance(served["threshold"], dict)
                          else {int(k): v for k, v in served["threshold"].items()}, list(range(n_classes)))
    typ, meta = fit_typicality(t_texts, t_y, fold_of, n_classes, confident(final(oof), th))
    model = fit_baseline(t_texts, t_y, seed)
    un_texts = [texts[i] for i in un]
    row = {"seed": seed, "cut": typ.cut, "fit": meta}

    def probs(batch):
        p = np.zeros((len(batch), n_classes))
        p[:, model.classes_] = model.predict_proba(batch)
        return final(p)

    def answered(batch):
        sure = confident(probs(batch), th)
        return sure, sure & typ.in_domain(batch)

    sure, kept = answered(un_texts)
    right = probs(un_texts).argmax(1) == y[un]
    row["in_domain"] = {"coverage_without": float(sure.mean()), "coverage_with": float(kept.mean()),
                        "precision_without": float(right[sure].mean()) if sure.any() else None,
                        "precision_with": float(right[kept].mean()) if kept.any() else None}
    for other, other_texts in others.items():
        s, k = answered(other_texts)
        row[f"off_topic/{other}"] = {"confident_without": float(s.mean()), "confident_with": float(k.mean())}
    # serving cost: the detector a row beside the served baseline's (numpy, as the engine runs both)
    with tempfile.TemporaryDirectory() as tmp:
        save_baseline(model, tmp, n_classes, Blend(1.0, 1.0), {})
        served_baseline = load_baseline(tmp)[0]
    batch = un_texts[:256]
    t0 = time.perf_counter()
    for _ in range(3):
        served_baseline.predict_proba(batch)
    t1 = time.perf_counter()
    for _ in range(3):
        typ.in_domain(batch)
    t2 = time.perf_counter()
    row["us_per_row"] = {"baseline": 1e6 * (t1 - t0) / (3 * len(batch)), "detector": 1e6 * (t2 - t1) / (3 * len(batch))}
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--resplits", type=int, default=3)
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--cap", type=int, default=1200)
    p.add_argument("--off-topic-rows", type=int, default=300)
    p.add_argument("--target", type=float, default=0.9)
    p.add_argument("--data", nargs="*", default=list(OFF_TOPIC))
    p.add_argument("--output", type=Path, default=ROOT / "bench/results/ood.json")
    a = p.parse_args(argv)
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "command": " ".join(sys.argv),
              "loadavg_before": os.getloadavg(), "target": a.target, "data": {}}
    loaded = {n: DATASETS[n](a.cap) for n in {*a.data, *[o for d in a.data for o in OFF_TOPIC[d]]}}
    for name in a.data:
        texts, y, groups, labels = loaded[name]
        rng = np.random.default_rng(0)
        others = {o: [loaded[o][0][i] for i in rng.permutation(len(loaded[o][0]))[: a.off_topic_rows]]
                  for o in OFF_TOPIC[name]}
        runs = [one(name, texts, y, groups, len(labels), others, a.target, s, a.folds) for s in range(a.resplits)]
        med = lambda key, sub, runs=runs: float(np.median([r[key][sub] for r in runs]))
        summary = {"in_domain_coverage_without": med("in_domain", "coverage_without"),
                   "in_domain_coverage_with": med("in_domain", "coverage_with"),
                   "us_per_row_baseline": med("us_per_row", "baseline"),
                   "us_per_row_detector": med("us_per_row", "detector"),
                   **{f"off_topic/{o}/{k}": med(f"off_topic/{o}", k) for o in others
                      for k in ("confident_without", "confident_with")},
                   "off_topic_confident_with_max": max(r[f"off_topic/{o}"]["confident_with"] for r in runs for o in others)}
        result["data"][name] = {"rows": len(y), "summary": summary, "resplits": runs}
        print(f"\n{name} (target {a.target}): in-domain coverage {summary['in_domain_coverage_without']:.3f} -> "
              f"{summary['in_domain_coverage_with']:.3f}; detector {summary['us_per_row_detector']:.0f} us/row "
              f"(baseline {summary['us_per_row_baseline']:.0f})")
        for o in others:
            print(f"  off-topic {o}: confident {summary[f'off_topic/{o}/confident_without']:.3f} -> "
                  f"{summary[f'off_topic/{o}/confident_with']:.3f}")
    result["loadavg_after"] = os.getloadavg()
    a.output.parent.mkdir(parents=True, exist_ok=True)
    a.output.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
