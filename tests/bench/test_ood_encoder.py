"""bench/ood_encoder.py's embedding-space candidates on synthetic embeddings (no model loaded): what each score
reads, and that scored out of fold they separate off-topic rows the TF-IDF-like score cannot."""

from __future__ import annotations

import numpy as np

from baseline.ood import NEIGHBOURS
from bench.ood_encoder import embedded
from bench.ood_scores import fit_scores, outcome


def space(vectors: dict):
    unit = {t: np.asarray(v, float) / np.linalg.norm(v) for t, v in vectors.items()}
    return lambda texts: np.stack([unit[t] for t in texts])


def test_knn_is_the_mean_over_the_nearest_rows_not_the_nearest():
    e1, e2 = np.eye(3)[0], np.eye(3)[1]
    rows = {f"r{i}": e2 for i in range(NEIGHBOURS - 1)}
    embed = space({"one": e1, **rows, "q": e1, "far": np.eye(3)[2]})
    knn = embedded(embed, "knn")(["one", *rows], np.zeros(NEIGHBOURS, int), 1)
    assert np.allclose(knn(["q", "far"]), [1 / NEIGHBOURS, 0.0])


def test_centroid_is_the_nearest_class_mean_and_maha_falls_with_distance():
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 40)
    X = np.eye(8)[y] * 3 + rng.normal(0, 0.3, (80, 8))
    vec = {f"r{i}": X[i] for i in range(80)}
    vec.update(a=np.eye(8)[0], b=np.eye(8)[1], off=np.eye(8)[5], mid=np.eye(8)[0] + np.eye(8)[5])
    embed, rows = space(vec), [f"r{i}" for i in range(80)]
    cen = embedded(embed, "centroid")(rows, y, 2)(["a", "b", "off"])
    assert cen[0] > 0.95 and cen[1] > 0.95 and cen[2] < 0.2  # either class's mean counts; the other direction not
    maha = embedded(embed, "maha")(rows, y, 2)(["a", "mid", "off"])
    assert maha[0] > maha[1] > maha[2]


def test_embedding_score_separates_what_the_tfidf_like_score_cannot():
    """The TF-IDF similarities of off-topic rows drawn from the in-domain rows' own distribution (the served
    cut sits in the tail: most of them pass), while in the embedding they lie in another direction: scored out
    of fold and cut by the served rule, the embedding score keeps them out at a small in-domain cost."""
    rng = np.random.default_rng(1)
    n, dim = 1000, 16
    y = rng.integers(0, 3, n + n // 2)
    inside = np.eye(dim)[y] + rng.normal(0, 0.15, (len(y), dim))
    off = np.eye(dim)[7] + 0.3 * np.eye(dim)[y[:300]] + rng.normal(0, 0.15, (300, dim))
    names = [f"t{i}" for i in range(len(y))] + [f"o{i}" for i in range(300)]
    embed = space(dict(zip(names, np.r_[inside, off])))
    sims = lambda m: np.c_[rng.uniform(0.2, 0.6, m), rng.uniform(0.3, 0.9, m)]
    d = {"oof_sims": sims(n), "un_sims": sims(n // 2), "off_x_sims": sims(300), "sure_oof": np.ones(n, bool),
         "sure_un": np.ones(n // 2, bool), "off_x_sure": np.ones(300, bool)}
    parts = {"un": names[n:n + n // 2], "off_x": names[-300:]}
    for how in ("centroid", "knn"):
        d.update(fit_scores(embedded(embed, how), how, names[:n], y[:n], np.arange(n) % 5, parts))
        served, alone, joined = (outcome(d, c, 0.015, 0.05) for c in ("served", how, f"{how}*"))
        assert served["off_topic_confident_max"] > 0.8 and not served["both_goals"]
        assert alone["both_goals"] and alone["off_topic_confident_max"] < 0.05
        assert joined["off_topic_confident_max"] < 0.05 and joined["coverage_drop"] <= 0.02


def test_fine_tuned_scores_share_one_model_per_training_set(monkeypatch):
    """k-fold's six trainings a resplit are the cost: the centroid, kNN and Mahalanobis scores of one training set
    must reuse its model, and a new training set must get its own."""
    import bench.ood_encoder as oe

    trained = []
    vec = {f"r{i}": np.eye(4)[i % 2] + 0.1 * np.eye(4)[2 + i % 2] for i in range(12)}
    vec.update(q=np.eye(4)[0])

    def tune(texts, y, nc, *rest):
        trained.append(tuple(texts))
        return space(vec)
    monkeypatch.setattr(oe, "_fine_tune", tune)
    monkeypatch.setattr(oe, "_TUNED", {})
    rows, y = [f"r{i}" for i in range(12)], np.arange(12) % 2
    for how in ("centroid", "knn", "maha"):
        assert oe.finetuned(how)(rows, y, 2)(["q"]).shape == (1,)
    oe.finetuned("knn")(rows[:10], y[:10], 2)
    assert trained == [tuple(rows), tuple(rows[:10])]
