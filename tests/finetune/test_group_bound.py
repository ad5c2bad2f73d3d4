"""The served threshold's bound over unseen groups (finetune/group_bound.py through coverage.bound_threshold and
served_threshold): texts of one group right or wrong together widen the bound, independent groups leave it as
it was, and over unseen groups the grouped bound holds at its stated rate where the row-level one does not."""

import numpy as np

from finetune.calibration import calibrate
from finetune.coverage import bound_threshold, served_threshold
from finetune.group_bound import (
    DESIGN,
    SERVED,
    PageBootstrap,
    PredictionBound,
    bootstrap_lower,
    bootstrap_prediction_lower,
    correctness_icc,
    size_weighted_mean,
)


def pages(n_pages, size, rng, spread, base=1.0):
    """Scores uniform; a row is right with probability sigmoid(base + 3 * score + its page's offset)."""
    conf = rng.random(n_pages * size)
    g = np.repeat(np.arange(n_pages), size)
    off = rng.normal(0, spread, n_pages)[g] if spread else 0.0
    return conf, rng.random(len(conf)) < 1 / (1 + np.exp(-(base + 3 * conf + off))), g


def test_icc_of_correctness_and_the_size_weighted_mean():
    rng = np.random.default_rng(0)
    g = np.repeat(np.arange(50), 10)
    assert correctness_icc(np.repeat(rng.random(50) < 0.5, 10), g) > 0.95  # a page all right or all wrong
    assert correctness_icc(rng.random(500) < 0.5, g) < 0.05  # independent rows
    assert correctness_icc(np.ones(10, bool), np.arange(10)) == 0.0  # one row a group: not estimable
    # rows a, a, b, a: sum(m^2) / n after 1..4 rows = 1, 2, 5/3, 10/4
    np.testing.assert_allclose(size_weighted_mean(np.arange(4), np.array(["a", "a", "b", "a"]), np.array([1, 2, 3, 4])),
                               [1, 2, 5 / 3, 10 / 4])


def test_correlated_groups_widen_the_bound_and_independent_ones_do_not():
    rng = np.random.default_rng(1)
    conf = np.sort(rng.random(600))[::-1]
    g = np.repeat(np.arange(60), 10)  # pages of 10 rows, neighbours in score
    page_right = rng.random(60) < 0.93
    ok = np.repeat(page_right, 10)  # a page is right or wrong as a whole
    t_row, _ = bound_threshold(conf, ok, 0.85, 0.1)
    t_grp, info = bound_threshold(conf, ok, 0.85, 0.1, g)
    assert t_row is not None and info["icc"] > 0.9
    assert t_grp is None or t_grp > t_row  # fewer rows answered, or none: ~60 effective rows, not 600
    if t_grp is not None:
        assert info["design_effect"] > 5
    shuffled = rng.permutation(g)  # the same labels, groups that say nothing about correctness
    ok_ind = rng.random(600) < 0.93
    t_a, _ = bound_threshold(conf, ok_ind, 0.8, 0.1)
    t_b, info_b = bound_threshold(conf, ok_ind, 0.8, 0.1, shuffled)
    assert t_a is not None and t_b is not None and info_b["icc"] < 0.05 and abs(t_a - t_b) <= 0.02


def test_over_unseen_groups_the_grouped_bound_holds_where_the_row_level_one_does_not():
    rng = np.random.default_rng(2)
    big_conf, big_ok, _ = pages(40000, 1, rng, 2.5)  # fresh pages: the precision above t a new page sees

    def truth(t):
        return big_ok[big_conf >= t].mean()

    fails = {"row": 0, "group": 0, "bootstrap": 0}
    draws = 120
    for _ in range(draws):
        conf, ok, g = pages(30, 24, rng, 2.5)
        for key, groups, rule in (("row", None, DESIGN), ("group", g, DESIGN), ("bootstrap", g, PageBootstrap())):
            t, _ = bound_threshold(conf, ok, 0.85, 0.1, groups, rule=rule)
            fails[key] += t is not None and truth(t) < 0.85
    assert fails["group"] / draws <= 0.10 < fails["row"] / draws, fails  # stated: 90% confidence
    assert fails["bootstrap"] / draws <= 0.10, fails  # the page bootstrap too (9 of 120 here)


def test_page_bootstrap_widens_where_pages_are_right_or_wrong_together():
    rng = np.random.default_rng(5)
    g = np.repeat(np.arange(40), 10)
    together = np.repeat(rng.random(40) < 0.85, 10)  # a page all right or all wrong
    answered = np.array([100, 200, 400])
    tied = bootstrap_lower(together, g, answered, 0.05)
    loose = bootstrap_lower(together, rng.permutation(g), answered, 0.05)  # the same rows, groups saying nothing
    precision = np.cumsum(together)[answered - 1] / answered
    assert (tied < loose - 0.05).all() and (loose < precision).all(), (tied, loose, precision)
    np.testing.assert_array_equal(tied, bootstrap_lower(together, g, answered, 0.05))  # seeded: the same bound
    conf = np.linspace(1, 0, 400)
    t_row, _ = bound_threshold(conf, together, 0.75, 0.1)
    t_boot, info = bound_threshold(conf, together, 0.75, 0.1, g, rule=PageBootstrap())
    assert info["rule"] == "bootstrap" and t_row is not None and (t_boot is None or t_boot > t_row)


def test_on_one_finite_batch_of_unseen_pages_the_prediction_bound_holds_where_confidence_bounds_do_not():
    """The statement is about one batch (a quarter as many pages here), not the mean over unseen pages: the
    batch's own noise makes the confidence bounds miss more often than they state; the prediction bound not."""
    rng = np.random.default_rng(8)
    rules = {"design": DESIGN, "bootstrap": PageBootstrap(), "prediction": PredictionBound(0.25, bootstrap=True)}
    fails, stated, draws = dict.fromkeys(rules, 0), dict.fromkeys(rules, 0), 80
    for _ in range(draws):
        conf, ok, g = pages(40, 10, rng, 2.0)
        batch_conf, batch_ok, _ = pages(10, 10, rng, 2.0)
        for key, rule in rules.items():
            t, info = bound_threshold(conf, ok, 0.8, 0.1, g, rule=rule)
            sure = batch_conf >= t if t is not None else np.zeros(0, bool)
            stated[key] += bool(sure.any())
            fails[key] += bool(sure.any()) and batch_ok[sure].mean() < 0.8
    assert info["rule"] == "prediction-bootstrap (batch 0.25x)"
    assert fails["prediction"] / draws <= 0.10 < fails["bootstrap"] / draws, (fails, stated)  # 2 vs 17 of 80
    assert fails["prediction"] < fails["design"] and stated["prediction"] >= draws / 3, (fails, stated)


def test_prediction_bounds_are_below_the_confidence_bounds_and_shrink_with_the_batch():
    rng = np.random.default_rng(6)
    conf, ok, g = pages(60, 8, rng, 1.5)
    order = np.argsort(-conf, kind="stable")
    answered = np.array([120, 240, 480])
    confidence = bootstrap_lower(ok[order], g[order], answered, 0.05)
    small, large = (bootstrap_prediction_lower(ok[order], g[order], answered, 0.05, b) for b in (0.25, 4.0))
    assert (small < large).all() and (large < confidence + 0.01).all(), (small, large, confidence)
    eff = np.array([40.0, 80.0, 160.0])
    design = DESIGN.lower(ok[order], g[order], answered, eff, 0.05)
    as_large = PredictionBound().lower(ok[order], g[order], answered, eff, 0.05)
    np.testing.assert_allclose(as_large, DESIGN.lower(ok[order], g[order], answered, eff / 2, 0.05))  # half the rows
    assert (as_large < design).all() and (PredictionBound().starts(eff) == eff / 2).all()


def test_served_threshold_records_the_grouped_rule_and_says_what_it_is_about():
    rng = np.random.default_rng(4)
    n, c = 900, 3
    y = rng.integers(0, c, n)
    right = rng.random(n) < 0.9
    top = np.where(right, y, (y + 1) % c)
    probs = np.full((n, c), 0.2)
    probs[np.arange(n), top] = 0.5 + 0.5 * rng.random(n)
    probs /= probs.sum(1, keepdims=True)
    groups = np.array([f"p{i // 9}" for i in range(n)])
    fold_of = np.array([int(p[1:]) % 3 for p in groups])
    _, chosen, final = calibrate(probs, y, fold_of, "model")
    plain = served_threshold(chosen, final, probs, y, fold_of, ["a", "b", "c"], 0.8)
    got = served_threshold(chosen, final, probs, y, fold_of, ["a", "b", "c"], 0.8, groups=groups, group_column="page")
    assert "grouped" not in plain and got["grouped"]["column"] == "page" and got["grouped"]["groups"] == 100
    assert "icc" in got["grouped"] and "design effect" in got["rule"]
    # served: the prediction bound for one unseen batch, said as such; the design bound (served before) is about
    # the mean over unseen groups and, narrower, answers at a threshold no higher and (nested) more rows
    assert SERVED == PredictionBound() and got["grouped"]["bound"] == "prediction (batch 1x)"
    assert "with 90% confidence on one batch of unseen 'page' groups as large as the training rows" in got["statement"]
    design = served_threshold(chosen, final, probs, y, fold_of, ["a", "b", "c"], 0.8, groups=groups,
                              group_column="page", group_rule=DESIGN)
    assert "with 90% confidence over unseen 'page' groups like the training ones" in design["statement"]
    assert design["grouped"]["bound"] == "design" and got["threshold"] >= design["threshold"]
    assert got["estimated_coverage"] < design["estimated_coverage"]


def test_rows_needed_are_counted_as_the_served_rule_counts_them():
    """A grouped target the rows reach but cannot state: the one line's "about N rows are needed" is what the
    served prediction bound needs, twice the design bound's (a batch as large as the rows adds its own variance)."""
    import re

    from finetune.coverage import unreachable

    rng = np.random.default_rng(0)
    conf, correct, groups = np.sort(rng.random(120))[::-1], rng.random(120) < 0.93, np.repeat(np.arange(24), 5)
    need = {r.name: int(re.search(r"about (\d+) rows are needed", unreachable(0.85, 0.1, conf, correct, groups, r))[1])
            for r in (DESIGN, SERVED)}
    assert 1.9 <= need[SERVED.name] / need["design"] <= 2.1, need
