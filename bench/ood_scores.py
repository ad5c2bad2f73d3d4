"""Better-separating typicality scores for the out-of-domain detector (issue 42), compared with the served one on
bench/ood_cuts.py's saved resplits: each candidate is scored out of fold (an index of the other folds' rows,
as k-fold fits the detector), on the unseen rows and on the off-topic rows by a fit on every training row,
then turned into its out-of-fold percentile, alone or combined with the served typicality (the product or the
smaller of the percentiles, re-ranked on the out-of-fold rows; a text under every training row on the
neighbours percentile stays there, as served). Per candidate and cut allowance: the served cut rule's result
(both goals: in-domain drop <= 2 points, off-topic confident <= 5%) and the cut the off-topic rows needed
(the out-of-fold percentile under which 95% of a set's confident rows fall; the unseen drop there) and, for
scale, the off-topic share left by the best cut any rule could choose (read from the unseen rows themselves).

    python bench/ood_cuts.py --data bbc-first-sentences --resplits 10 --saved DIR ...   # first: the resplits
    python bench/ood_scores.py --run bbc-first-sentences:0.9:DIR --candidates length,style --output OUT.json

No off-topic row fits anything: they are only scored. Candidate scores are cached beside the resplits
(`scores-NAME-SEED.npz`), so that a new combination or allowance costs no refit.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.ood import OFF_TOPIC
from bench.resplits import DATASETS, folds_of, resplit, started, write_result


def _csr(ix, texts):
    import scipy.sparse as sp

    r, c, v = ix.vectors(texts)
    return sp.csr_matrix((v, (r, c)), shape=(len(texts), len(ix.tfidf.idf)))


def length():
    """log of the text's char_wb n-gram count (the detector's read has it: `totals`): how long it is."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    an = TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 4)).build_analyzer()
    return lambda texts, y, nc: (lambda t: np.log1p([len(an(x)) for x in t]))


def length_both():
    """`length` two-sided: minus the distance to the training rows' median (too long is as unlike them as too
    short; one-sided, a long English sentence read typical to a model of short Korean rows)."""
    one = length()

    def cand(texts, y, nc):
        f = one(texts, y, nc)
        mid = float(np.median(f(texts)))
        return lambda t: -np.abs(f(t) - mid)
    return cand


def style(share=0.05, per_class=False):
    """Cosine to the training rows' mean over the n-grams more than `share` of them hold (those the neighbour
    index leaves out: function words, endings), each row renormalised on them: how the text is written."""
    import scipy.sparse as sp

    from baseline.ood import build_index

    def cand(texts, y, nc):
        ix = build_index(texts, y, nc)
        X = _csr(ix, texts)
        keep = sp.diags((np.bincount(X.indices, minlength=X.shape[1]) >= share * len(texts)).astype(float))

        def rows(M):
            M = M @ keep
            return sp.diags(1 / np.maximum(np.sqrt(np.asarray(M.multiply(M).sum(1)).ravel()), 1e-12)) @ M

        R = rows(X)
        C = (np.stack([np.asarray(R[y == c].mean(0)).ravel() for c in range(nc)]) if per_class
             else np.asarray(R.mean(0)))
        C = C / np.maximum(np.linalg.norm(C, axis=1, keepdims=True), 1e-12)
        return lambda t: np.asarray(rows(_csr(ix, t)) @ C.T).max(1)
    return cand


def svd(k, how):
    """In a k-dimension TruncatedSVD of the detector's vectors: "maha" the smallest Mahalanobis distance to a
    class mean (tied covariance, ridge 1e-3 of its mean variance), "knn" the mean cosine to the 5 nearest rows."""
    from sklearn.decomposition import TruncatedSVD

    from baseline.ood import build_index

    def cand(texts, y, nc):
        ix = build_index(texts, y, nc)
        X = _csr(ix, texts)
        tsvd = TruncatedSVD(min(k, X.shape[1] - 1, len(texts) - 1), random_state=0).fit(X)
        Z = tsvd.transform(X)
        if how == "knn":
            Zn = Z / np.maximum(np.linalg.norm(Z, axis=1, keepdims=True), 1e-12)
            return lambda t: np.sort(tsvd.transform(_csr(ix, t)) @ Zn.T, 1)[:, -5:].mean(1)
        mu = np.stack([Z[y == c].mean(0) for c in range(nc)])
        S = np.cov((Z - mu[y]).T)
        P = np.linalg.inv(S + 1e-3 * np.eye(len(S)) * np.trace(S) / len(S))

        def f(t):
            z = tsvd.transform(_csr(ix, t))
            return -np.stack([np.einsum("ij,jk,ik->i", z - m, P, z - m) for m in mu], 1).min(1)
        return f
    return cand


def energy():
    """The baseline classifier's own logsumexp of its logits (Liu et al. 2020's energy score)."""
    from scipy.special import logsumexp

    from baseline.blend import fit_baseline

    def cand(texts, y, nc):
        model = fit_baseline(texts, y, 0)
        return lambda t: logsumexp(model.decision_function(t), 1)
    return cand


def words(known: bool):
    """Word-level: the share of a text's words the training rows hold (`known`), or the largest cosine of its
    word TF-IDF vector to a class centroid."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    def cand(texts, y, nc):
        v = TfidfVectorizer(analyzer="word", sublinear_tf=True).fit(texts)
        if known:
            an, voc = v.build_analyzer(), v.vocabulary_
            return lambda t: np.array([np.mean([w in voc for w in an(s)]) if an(s) else 0.0 for s in t])
        X = v.transform(texts)
        C = np.stack([np.asarray(X[y == c].mean(0)).ravel() for c in range(nc)])
        C /= np.maximum(np.linalg.norm(C, axis=1, keepdims=True), 1e-12)
        return lambda t: np.asarray(v.transform(t) @ C.T).max(1)
    return cand


CANDIDATES = {"length": length(), "length_both": length_both(), "style": style(), "style_class": style(per_class=True),
              "style10": style(0.10), "style20": style(0.20), "style30": style(0.30),
              "svd_maha20": svd(20, "maha"), "svd_knn100": svd(100, "knn"), "energy": energy(),
              "word_centroid": words(False), "known_words": words(True)}


def material(name, seed, loaded):
    """The resplit bench/ood_cuts.py saved: training rows, k-fold's folds, unseen and off-topic texts."""
    texts, y, groups, _ = loaded[name]
    tr, un = resplit(y, groups, seed)
    t_y, fold_of = y[tr], np.zeros(len(tr), int)
    for k, (_, b) in enumerate(folds_of(t_y, None if groups is None else groups[tr], 5, seed)):
        fold_of[b] = k
    rng = np.random.default_rng(0)
    others = {f"off_{o}": [loaded[o][0][i] for i in rng.permutation(len(loaded[o][0]))[:300]]
              for o in OFF_TOPIC[name]}
    return [texts[i] for i in tr], t_y, fold_of, {"un": [texts[i] for i in un], **others}


def scores(name, seed, saved: Path, which, loaded, fit: bool = True, rows: int | None = None) -> dict:
    """{candidate/part: score}, parts oof, un, off_NAME; cached in saved/scores-NAME-SEED.npz (`fit` False:
    only what the cache holds). `rows`: the saved resplit's training rows, which the rows read here must match."""
    path = saved / f"scores-{name}-{seed}.npz"
    have = dict(np.load(path)) if path.exists() else {}
    todo = [c for c in which if f"{c}/oof" not in have] if fit else []
    if todo:
        t_texts, t_y, fold_of, parts = material(name, seed, loaded())
        if rows is not None and len(t_texts) != rows:  # another --cap than bench/ood_cuts.py saved it with
            raise SystemExit(f"{path}: {len(t_texts)} training rows here, {rows} in the saved resplit; pass the "
                             "--cap bench/ood_cuts.py used")
        for c in todo:
            have.update(fit_scores(CANDIDATES[c], c, t_texts, t_y, fold_of, parts))
        np.savez(path, **have)
    return have


def fit_scores(cand, name: str, t_texts, t_y, fold_of, parts: dict) -> dict:
    """{name/oof: fold k's rows scored by a fit on the other folds' rows (as k-fold fits the detector),
    name/PART: each part's texts scored by a fit on every training row}."""
    nc, oof = int(t_y.max()) + 1, np.zeros(len(t_texts))
    for k in np.unique(fold_of):
        rest, held = np.flatnonzero(fold_of != k), np.flatnonzero(fold_of == k)
        oof[held] = cand([t_texts[i] for i in rest], t_y[rest], nc)([t_texts[i] for i in held])
    f = cand(t_texts, t_y, nc)
    return {f"{name}/oof": oof, **{f"{name}/{p}": f(v) for p, v in parts.items()}}


def _pct(x, ref):
    """The share of the out-of-fold rows under x (below every one: just under 0)."""
    from baseline.ood import LEVELS

    return np.interp(x, np.quantile(ref, LEVELS), LEVELS, left=-1e-3)


def level_of(d: dict, combo: str):
    """part -> typicality: "served" (baseline/ood.py as fitted now); "CAND" (several joined with "+": their
    product) instead of it; "CAND*" / "CAND-min": the product / smaller of the served percentile and each
    candidate's; each re-ranked on the out-of-fold rows; a text under every training row on the neighbours
    percentile keeps that negative level, as served."""
    from baseline.ood import LEVELS, percentile

    nq, cq = np.quantile(d["oof_sims"][:, 0], LEVELS), np.quantile(d["oof_sims"][:, 1], LEVELS)
    served = lambda p: percentile(d[f"{p}_sims"][:, 0], d[f"{p}_sims"][:, 1], nq, cq, "centroid")
    if combo == "served":
        return served
    how = "*" if combo.endswith("*") else "min" if combo.endswith("-min") else "alone"
    names = {"*": combo[:-1], "min": combo[:-4], "alone": combo}[how].split("+")
    join = np.min if how == "min" else np.prod

    def raw(p):
        lv = [] if how == "alone" else [np.clip(served(p), 1e-3, 1.0)]
        lv += [np.clip(_pct(d[f"{c}/{p}"], d[f"{c}/oof"]), 1e-3, 1.0) for c in names]
        return join(np.stack(lv), 0)

    ref = raw("oof")
    return lambda p: np.where(served(p) < 0, served(p), _pct(raw(p), ref))


def outcome(d: dict, combo: str, max_drop: float, max_cut: float) -> dict:
    """The served cut rule on this typicality, and the cut each off-topic set needed."""
    from baseline.ood import choose_cut

    level = level_of(d, combo)
    cut = choose_cut(level("oof"), d["sure_oof"], max_drop, max_cut)
    un = level("un")
    off = sorted(k[:-5] for k in d if k.startswith("off_") and k.endswith("_sims"))
    leak = max(float((d[f"{o}_sure"] & (level(o) >= cut)).mean()) for o in off)
    needed = max(float(np.quantile(level(o)[d[f"{o}_sure"]], 1 - 0.05 / d[f"{o}_sure"].mean()))
                 if d[f"{o}_sure"].mean() > 0.05 else -1.0 for o in off)
    drop = float((d["sure_un"] & (un < cut)).mean())
    # the best any rule could do: the highest cut whose unseen drop stays within 2 points (it reads the unseen rows)
    mine = np.sort(un[d["sure_un"]])
    allowed = int(np.floor(0.02 * len(un) + 1e-9))
    best = mine[allowed] if allowed < len(mine) else np.inf
    return {"cut": float(cut), "coverage_drop": drop, "off_topic_confident_max": leak,
            "both_goals": drop <= 0.02 and leak <= 0.05, "cut_needed": needed,
            "coverage_drop_at_needed": float((d["sure_un"] & (un < needed)).mean()),
            "best_cut_off_topic_confident_max": max(float((d[f"{o}_sure"] & (level(o) >= best)).mean()) for o in off)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", action="append", required=True, help="NAME:TARGET:DIR (bench/ood_cuts.py --saved DIR)")
    p.add_argument("--candidates", default="length,style")
    p.add_argument("--combos", default="served", help="comma list of level_of() combinations")
    p.add_argument("--max-drop", default="0.015")
    p.add_argument("--max-cut", type=float, default=0.05)
    p.add_argument("--cap", type=int, default=1200)
    p.add_argument("--cached-only", action="store_true",
                   help="no fit: resplits whose cache lacks a score are left out")
    p.add_argument("--output", type=Path, default=ROOT / "bench/results/ood-scores.json")
    a = p.parse_args(argv)
    result, cache = started(sys.argv, runs={}), {}
    loaded = lambda: cache.setdefault("d", {n: DATASETS[n](a.cap) for n in DATASETS})
    which = [c for c in a.candidates.split(",") if c]
    for spec in a.run:
        name, target, folder = spec.split(":", 2)
        seeds = sorted(int(f.stem.rsplit("-", 1)[1]) for f in Path(folder).glob(f"ood-{name}-*.npz"))
        per = {}
        for seed in seeds:
            d = dict(np.load(Path(folder) / f"ood-{name}-{seed}.npz", allow_pickle=True))
            d.update(scores(name, seed, Path(folder), which, loaded, not a.cached_only, len(d["oof_sims"])))
            for combo in a.combos.split(","):
                for m in a.max_drop.split(","):
                    try:
                        row = {"seed": seed, **outcome(d, combo, float(m), a.max_cut)}
                    except KeyError:  # --cached-only and this resplit's cache lacks a score
                        continue
                    per.setdefault(f"{combo} @{m}", []).append(row)
        result["runs"][f"{name} {target}"] = {k: {"both_goals": sum(r["both_goals"] for r in v), "of": len(v),
                                                  "best_cut_both_goals": sum(r["best_cut_off_topic_confident_max"]
                                                                             <= 0.05 for r in v),
                                                  "resplits": v} for k, v in per.items()}
        for k, v in per.items():
            print(f"{name} {target} {k:28s} {sum(r['both_goals'] for r in v):2d}/{len(v)} " + " ".join(
                f"{100 * r['coverage_drop']:.1f}/{100 * r['off_topic_confident_max']:.1f}" for r in v)
                + " | needed " + " ".join(f"{100 * r['cut_needed']:.2f}" if r["cut_needed"] >= 0 else "-" for r in v),
                flush=True)
        write_result(result, a.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
