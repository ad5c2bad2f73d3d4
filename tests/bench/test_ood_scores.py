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
