"""bench/ood_scores.py's pure parts: a candidate's typicality combined with the served one, and what the served
cut rule and the needed cut make of it."""

from __future__ import annotations

import numpy as np

from baseline.ood import LEVELS, percentile
from bench.ood_scores import level_of, outcome


def resplit(seed: int = 0, n: int = 1000):
    """In-domain rows and off-topic rows whose two similarities come from the same distribution (the served
    score cannot tell them apart) while a candidate ("length") puts the off-topic ones far below."""
    rng = np.random.default_rng(seed)
    sims = lambda m: np.c_[rng.uniform(0.2, 0.6, m), rng.uniform(0.3, 0.9, m)]
    d = {"oof_sims": sims(n), "un_sims": sims(n // 2), "off_x_sims": sims(300),
         "sure_oof": np.ones(n, bool), "sure_un": np.ones(n // 2, bool), "off_x_sure": np.ones(300, bool)}
    d.update({"length/oof": rng.normal(4, 0.3, n), "length/un": rng.normal(4, 0.3, n // 2),
              "length/off_x": rng.normal(1, 0.3, 300)})
    return d


def test_served_level_is_the_detectors_percentile():
    d = resplit()
    nq, cq = np.quantile(d["oof_sims"][:, 0], LEVELS), np.quantile(d["oof_sims"][:, 1], LEVELS)
    want = percentile(d["un_sims"][:, 0], d["un_sims"][:, 1], nq, cq, "centroid")
    assert np.allclose(level_of(d, "served")("un"), want)


def test_combination_is_reranked_and_keeps_texts_under_every_row():
    d = resplit()
    d["un_sims"][0] = [0.01, 0.8]  # shares no rare n-gram with any row: negative neighbours level, as served
    for combo in ("length*", "length-min", "length"):
        oof = level_of(d, combo)("oof")
        assert 0 <= oof.min() and oof.max() <= 1 and abs(np.median(oof) - 0.5) < 0.02  # a percentile again
        assert level_of(d, combo)("un")[0] < 0


def test_candidate_separates_what_the_centroid_percentile_could_not():
    d = resplit()
    served, joined = outcome(d, "served", 0.015, 0.05), outcome(d, "length*", 0.015, 0.05)
    assert served["off_topic_confident_max"] > 0.8  # the cut sits in the tail; the off-topic rows are the bulk
    assert joined["off_topic_confident_max"] < 0.05 and joined["coverage_drop"] < 0.05
    assert joined["cut_needed"] < served["cut_needed"]
    assert served["both_goals"] is False and joined["both_goals"] is True
    # no cut on the served score separates them, even one read from the unseen rows; on the joined one it does
    assert served["best_cut_off_topic_confident_max"] > 0.8 and joined["best_cut_off_topic_confident_max"] < 0.05


def test_length_both_is_two_sided():
    from bench.ood_scores import CANDIDATES

    rows = ["word " * n for n in (8, 9, 10, 10, 11, 12)]
    score = CANDIDATES["length_both"](rows, np.zeros(len(rows), int), 1)(["word " * 10, "word", "word " * 40])
    assert score[0] > score[1] and score[0] > score[2]  # too short and too long are both less typical


def test_served_length_product_is_the_measured_one():
    """baseline/ood.py's "centroid*length" typicality (what a model folder serves) equals the one measured here
    as `length_both*` on the same texts, folds and fit: level and cut."""
    from baseline.ood import build_index, choose_cut, fit_typicality
    from bench.ood_scores import CANDIDATES
    from textdata.nested import nested

    rng = np.random.default_rng(3)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    pools = [["".join(rng.choice(letters, rng.integers(3, 8))) for _ in range(30)] for _ in range(3)]
    text = lambda c, lo, hi: " ".join(rng.choice(pools[c], rng.integers(lo, hi)))
    y = rng.integers(0, 3, 150)
    texts = [text(c, 4, 15) for c in y]
    un = [text(c, 1, 30) for c in rng.integers(0, 3, 60)] + ["완전히 다른 글", "x"]
    fold_of = np.arange(len(texts)) % 5
    typ, _ = fit_typicality(texts, y, fold_of, 3)
    rows = lambda m: [texts[i] for i in np.flatnonzero(m)]
    oof, _ = nested(fold_of, lambda rest: build_index(rows(rest), y[rest], 3),
                    lambda ix, held: np.stack(ix.similarities(rows(held)), 1), np.zeros((len(texts), 2)))
    length = np.zeros(len(texts))
    for k in range(5):
        length[fold_of == k] = CANDIDATES["length_both"](rows(fold_of != k), None, 3)(rows(fold_of == k))
    d = {"oof_sims": oof, "un_sims": np.stack(typ.index.similarities(un), 1), "length_both/oof": length,
         "length_both/un": CANDIDATES["length_both"](texts, y, 3)(un)}
    level = level_of(d, "length_both*")
    np.testing.assert_allclose(typ.typicality(un), level("un"), atol=1e-12)
    assert (level("un") < 0).any() and (level("un") > 0.5).any()  # both ends covered
    assert typ.cut == choose_cut(level("oof"), np.ones(len(texts), bool))
