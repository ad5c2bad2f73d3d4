"""The out-of-domain detector's cut rule over random resplits: how many unseen in-domain confident answers it
costs and how many off-topic texts it lets through as confident, for the rule before issue 42's resplits ("the
smaller of the two percentiles", cut on a 0.005 grid), the centroid typicality with the cut up to 0.5
(`uncapped`, trust51's) and at most MAX_CUT (`centroid`, served until the length score) and the one fitted now
(`now`: baseline/ood.py COMBINE, fit_levels and choose_cut; "centroid*length" also reads the texts' n-gram
counts, recounted from the texts where a saved resplit lacks them), all on the same similarities (only the cut and the combination differ, so one run compares them).

    python bench/ood_cuts.py --data bbc-first-sentences --resplits 5 --output bench/results/ood-cuts-bbc.json

Per resplit, as bench/ood.py: 60% of the rows train (k-fold out-of-fold scores and similarities, the served
threshold at --target, the point estimate where the bound is not reachable), 40% are unseen; --off-topic-rows
of each other data set. The goals (issue 42): off-topic rows answered confident <= 5% while the in-domain
coverage drops by <= 2 points. `--saved DIR` keeps each resplit's similarities (npz) and reuses them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.ood import OFF_TOPIC, served_fit
from bench.resplits import DATASETS, started, write_result

RULES = ("before", "uncapped", "centroid", "now")


def similarities(name, loaded, seed, folds, off_rows, target) -> dict:
    """One resplit's out-of-fold, unseen and off-topic similarities and confident masks."""
    from baseline.blend import fit_baseline
    from baseline.ood import build_index
    from textdata.calibration import confident
    from textdata.nested import nested

    texts, y, groups, labels = loaded[name]
    n_classes = len(labels)
    rng = np.random.default_rng(0)
    others = {o: [loaded[o][0][i] for i in rng.permutation(len(loaded[o][0]))[:off_rows]] for o in OFF_TOPIC[name]}
    t_texts, t_y, un, oof, fold_of, final, th, rule = served_fit(texts, y, groups, n_classes, target, seed, folds)
    rows = lambda mask: [t_texts[i] for i in np.flatnonzero(mask)]
    both, _ = nested(fold_of, lambda rest: build_index(rows(rest), t_y[rest], n_classes),
                     lambda ix, held: np.stack(ix.similarities(rows(held)), 1), np.zeros((len(t_texts), 2)))
    ix, model = build_index(t_texts, t_y, n_classes), fit_baseline(t_texts, t_y, seed)

    def probs(batch):
        p = np.zeros((len(batch), n_classes))
        p[:, model.classes_] = model.predict_proba(batch)
        return final(p)

    un_texts = [texts[i] for i in un]
    out = {"oof_sims": both, "sure_oof": confident(final(oof), th), "un_sims": np.stack(ix.similarities(un_texts), 1),
           "sure_un": confident(probs(un_texts), th), "rule": rule}
    for o, other in others.items():
        out[f"off_{o}_sims"], out[f"off_{o}_sure"] = np.stack(ix.similarities(other), 1), confident(probs(other), th)
    return out


def before_cut(level, sure, max_drop):
    """The rule before: the highest of 0, 0.005 ... 0.5 whose out-of-fold cost stays within max_drop."""
    from baseline.ood import LEVELS

    cuts = LEVELS[:101]
    cost = np.array([(sure & (level < c)).mean() for c in cuts])
    return float(cuts[np.flatnonzero(cost <= max_drop)[-1]])


def rates(d: dict, combine: str, cut_rule) -> dict:
    """The rule's cut on the out-of-fold rows and what it costs the unseen and off-topic ones, the typicality as
    baseline/ood.py serves `combine` (fit_levels; "centroid*length" reads the `*_totals` and `fold_of` that
    `add_totals` put in `d`)."""
    from baseline.ood import MAX_DROP, fit_levels, percentile

    length = combine == "centroid*length"
    nq, cq, rank, oof = fit_levels(d["oof_sims"][:, 0], d["oof_sims"][:, 1], d.get("oof_totals"), d.get("fold_of"),
                                   combine)
    level = lambda p: percentile(d[f"{p}_sims"][:, 0], d[f"{p}_sims"][:, 1], nq, cq, combine,
                                 rank.score(d[f"{p}_totals"]) if length else None, rank)
    cut = cut_rule(oof, d["sure_oof"], MAX_DROP)
    sure_un = d["sure_un"]
    out = {"cut": cut, "coverage_without": float(sure_un.mean()),
           "coverage_drop": float((sure_un & (level("un") < cut)).mean())}
    for k in [k for k in d if k.startswith("off_") and k.endswith("_sims")]:
        sure = d[k.replace("_sims", "_sure")]
        out[k[4:-5]] = {"confident_without": float(sure.mean()), "confident_with": float((sure & (level(k[:-5]) >= cut)).mean())}
    out["off_topic_confident_max"] = max(v["confident_with"] for v in out.values() if isinstance(v, dict))
    out["both_goals"] = out["coverage_drop"] <= 0.02 and out["off_topic_confident_max"] <= 0.05
    return out


def add_totals(d: dict, name: str, seed: int, loaded: dict) -> None:
    """The texts' n-gram counts (what the served read's `totals` holds) and the training rows' folds, for a
    resplit saved before the length score: the texts rebuilt as bench/ood_scores.py's `material` does."""
    from baseline.ood import vectorizer_settings
    from baseline.tfidf import CharTfidf
    from bench.ood_scores import material

    t_texts, _, fold_of, parts = material(name, seed, loaded)
    if len(t_texts) != len(d["oof_sims"]):
        raise SystemExit(f"resplit {seed}: {len(t_texts)} training rows here, {len(d['oof_sims'])} saved; --cap?")
    count = CharTfidf(vectorizer_settings(), [], np.zeros(0)).ngram_counts
    d.update({"oof_totals": count(t_texts), "fold_of": fold_of, **{f"{p}_totals": count(v) for p, v in parts.items()}})


def main(argv=None) -> int:
    from baseline.ood import COMBINE, choose_cut
    from textdata.errors import DataError

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, choices=list(OFF_TOPIC))
    p.add_argument("--resplits", type=int, default=5)
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--cap", type=int, default=1200)
    p.add_argument("--off-topic-rows", type=int, default=300)
    p.add_argument("--target", type=float, default=0.9)
    p.add_argument("--saved", type=Path, default=None, help="folder of per-resplit similarities (npz), reused")
    p.add_argument("--output", type=Path, default=ROOT / "bench/results/ood-cuts.json")
    a = p.parse_args(argv)
    result, runs, done = started(sys.argv, target=a.target, data=a.data), [], []
    loaded = None
    for seed in range(a.resplits):
        path = None if a.saved is None else a.saved / f"ood-{a.data}-{seed}.npz"
        if path is not None and path.exists():
            d = dict(np.load(path, allow_pickle=True))
        else:
            loaded = loaded or {n: DATASETS[n](a.cap) for n in {a.data, *OFF_TOPIC[a.data]}}
            try:
                d = similarities(a.data, loaded, seed, a.folds, a.off_topic_rows, a.target)
            except DataError as e:  # not even the point estimate reaches --target: nothing is confident
                runs.append({"seed": seed, "skipped": str(e)})
                continue
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                np.savez(path, **d)
        if COMBINE == "centroid*length" and "oof_totals" not in d:
            loaded = loaded or {n: DATASETS[n](a.cap) for n in {a.data, *OFF_TOPIC[a.data]}}
            add_totals(d, a.data, seed, loaded)
        runs.append({"seed": seed, "threshold_rule": str(d["rule"]), "before": rates(d, "min", before_cut),
                     "uncapped": rates(d, "centroid", lambda lv, sure, m: choose_cut(lv, sure, m, 0.5)),
                     "centroid": rates(d, "centroid", choose_cut), "now": rates(d, COMBINE, choose_cut)})
        done = [r for r in runs if "skipped" not in r]
        result["resplits"] = runs
        result["summary"] = {k: {"both_goals": sum(r[k]["both_goals"] for r in done), "of": len(done),
                                 "coverage_drop_max": max(r[k]["coverage_drop"] for r in done),
                                 "off_topic_confident_max": max(r[k]["off_topic_confident_max"] for r in done)}
                             for k in RULES}
        write_result(result, a.output)
    for r in done:
        print(r["seed"], r["threshold_rule"], *(f"{k}: drop {r[k]['coverage_drop']:.3f} off-topic max "
                                                f"{r[k]['off_topic_confident_max']:.3f}" for k in RULES))
    print(result["summary"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
