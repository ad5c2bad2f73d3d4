"""Agreement figures against references on random rating matrices with missing answers: Krippendorff's alpha
against the coincidence-matrix definition, Fleiss' kappa against a per-item computation and Fleiss' (1971)
published example, Cohen's kappa against its definition."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from labelstore.agreement import agreement, alpha_nominal, cohen, fleiss_kappa


def alpha_reference(matrix: np.ndarray) -> float:
    """Krippendorff (2011), nominal: the coincidence matrix over pairable units, 1 - D_o / D_e."""
    cats = sorted({v for v in matrix.ravel() if not np.isnan(v)})
    idx = {c: i for i, c in enumerate(cats)}
    o = np.zeros((len(cats), len(cats)))
    for unit in matrix.T:
        values = [v for v in unit if not np.isnan(v)]
        m = len(values)
        if m < 2:
            continue
        for i, j in itertools.permutations(range(m), 2):
            o[idx[values[i]], idx[values[j]]] += 1 / (m - 1)
    n_c = o.sum(1)
    n = n_c.sum()
    d_o = (o.sum() - np.trace(o)) / n
    d_e = (n_c.sum() ** 2 - (n_c ** 2).sum()) / (n * (n - 1))
    return 1 - d_o / d_e


def fleiss_reference(counts: np.ndarray) -> float:
    n_items, n = len(counts), counts[0].sum()
    p_bar = sum(sum(c * (c - 1) for c in row) / (n * (n - 1)) for row in counts) / n_items
    p_e = sum((counts[:, j].sum() / (n_items * n)) ** 2 for j in range(counts.shape[1]))
    return (p_bar - p_e) / (1 - p_e)


def random_ratings(rng, raters=5, items=40, cats=3, missing=0.3) -> np.ndarray:
    m = rng.integers(0, cats, size=(raters, items)).astype(float)
    m[rng.random(m.shape) < missing] = np.nan
    return m


@pytest.mark.parametrize("seed", range(5))
def test_alpha_equals_the_coincidence_matrix_definition(seed):
    m = random_ratings(np.random.default_rng(seed))
    assert alpha_nominal(m) == pytest.approx(alpha_reference(m), abs=1e-9)


def test_fleiss_kappa_equals_the_published_example_and_a_per_item_computation():
    # Fleiss (1971) as reproduced on Wikipedia: 10 items, 14 raters, 5 categories, kappa 0.210
    table = np.array([[0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
                      [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7]])
    assert fleiss_kappa(table) == pytest.approx(0.20993, abs=5e-5)
    rng = np.random.default_rng(1)
    for _ in range(5):
        counts = rng.multinomial(4, [0.5, 0.3, 0.2], size=30)
        assert fleiss_kappa(counts) == pytest.approx(fleiss_reference(counts), abs=1e-9)
    assert fleiss_kappa(np.array([[3, 0], [3, 0]])) is None  # one category only: undefined, not 0 or NaN


def test_cohen_kappa_equals_its_definition():
    rng = np.random.default_rng(2)
    a, b = list(rng.integers(0, 3, 50)), list(rng.integers(0, 3, 50))
    po = np.mean(np.array(a) == np.array(b))
    pe = sum(np.mean(np.array(a) == c) * np.mean(np.array(b) == c) for c in range(3))
    assert cohen(a, b) == pytest.approx((po - pe) / (1 - pe), abs=1e-9)
    assert cohen(["x", "x"], ["x", "x"]) is None


@pytest.mark.parametrize("seed", range(5))
def test_cohen_kappa_equals_scikit_learns(seed):
    """The numpy lines (the slim image has no scikit-learn) against the reference implementation."""
    from sklearn.metrics import cohen_kappa_score

    rng = np.random.default_rng(seed)
    names = np.array(["neg", "neu", "pos", "n/a"])
    n = int(rng.integers(10, 60))
    a, b = list(names[rng.integers(0, 3, n)]), list(names[rng.integers(1, 4, n)])  # categories one rater never uses
    assert cohen(a, b) == pytest.approx(cohen_kappa_score(a, b), abs=1e-9)
    same = list(names[rng.integers(0, 2, n)])
    assert cohen(same, same) == pytest.approx(cohen_kappa_score(same, same), abs=1e-9)


def rows_of(matrix: np.ndarray, labels: list[str]) -> list[dict]:
    return [{"record_id": int(j), "annotator": f"r{i}", "value": labels[int(v)]}
            for i, j in zip(*np.nonzero(~np.isnan(matrix))) for v in [matrix[i, j]]]


@pytest.mark.parametrize("seed", range(3))
def test_dataset_agreement_from_answer_rows(seed):
    rng = np.random.default_rng(seed)
    labels = ["neg", "neu", "pos"]
    m = random_ratings(rng, raters=4, items=30)
    m[:3, :10] = rng.integers(0, 3, size=(3, 10))  # ten items with three answers...
    m[3, :10] = np.nan  # ...exactly: Fleiss' kappa is over them
    got = agreement(rows_of(m, labels), labels, False, 3)
    assert got["krippendorff_alpha"] == pytest.approx(alpha_reference(m), abs=1e-9)
    full = m[:, np.sum(~np.isnan(m), axis=0) == 3]
    counts = np.stack([np.sum(full == c, axis=0) for c in range(3)], axis=1)
    assert got["fleiss_kappa"] == pytest.approx(fleiss_reference(counts), abs=1e-9)
    pos = np.where(np.isnan(m), np.nan, (m == 2).astype(float))
    assert got["per_label"]["pos"]["krippendorff_alpha"] == pytest.approx(alpha_reference(pos), abs=1e-9)
    pair = next(p for p in got["pairwise_cohen_kappa"] if (p["a"], p["b"]) == ("r0", "r1"))
    both = ~np.isnan(m[0]) & ~np.isnan(m[1])
    assert pair["n"] == both.sum()
    assert pair["cohen_kappa"] == pytest.approx(cohen(list(m[0, both]), list(m[1, both])), abs=1e-9)
    assert got["n_records"] == int(np.sum(np.sum(~np.isnan(m), axis=0) >= 2))
    assert got["per_annotator"]["r0"]["answers"] == int(np.sum(~np.isnan(m[0])))


def test_multi_label_agreement_is_per_label_and_their_mean():
    rng = np.random.default_rng(5)
    labels = ["x", "y"]
    rows = []
    for rid in range(20):
        for who in ("a", "b", "c"):
            rows.append({"record_id": rid, "annotator": who,
                         "value": sorted(lab for lab in labels if rng.random() < 0.5)})
    got = agreement(rows, labels, True, 3)
    per = []
    for lab in labels:
        m = np.array([[float(lab in r["value"]) for r in rows if r["annotator"] == w] for w in ("a", "b", "c")])
        per.append(alpha_reference(m))
        assert got["per_label"][lab]["krippendorff_alpha"] == pytest.approx(per[-1], abs=1e-9)
    assert got["krippendorff_alpha"] == pytest.approx(np.mean(per), abs=1e-9)
