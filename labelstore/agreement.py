"""Agreement between annotators: Krippendorff's alpha, Fleiss' kappa, pairwise Cohen's kappa.

Alpha comes from the `krippendorff` package (nominal; it takes missing answers as they are). Fleiss' and
Cohen's kappa are the few lines below: statsmodels has Fleiss', scikit-learn Cohen's, but the slim serving
image has neither (scikit-learn brings scipy, about 200 MB: docker/deps.py), and the agreement route must
answer there too; tests check these lines to 1e-9 against scikit-learn's cohen_kappa_score, an independent
per-item computation and Fleiss' published example. Fleiss' kappa assumes the same number
of raters per item, so it is computed over the texts with exactly k answers (the finished ones).

For a multi-label dataset each label is a yes/no question: per label alpha and kappa on that, and the
dataset's figures are their mean. An undefined figure (one value only, fewer than two raters) is None.
"""

from __future__ import annotations

import itertools
import math

import krippendorff
import numpy as np


def fleiss_kappa(counts: np.ndarray) -> float | None:
    """counts[i, j]: raters who put item i in category j; every row sums to the same n >= 2."""
    counts = np.asarray(counts, dtype=float)
    if counts.ndim != 2 or len(counts) == 0:
        return None
    n = counts.sum(1)
    if n[0] < 2 or not np.all(n == n[0]):
        return None
    n = n[0]
    p_j = counts.sum(0) / counts.sum()
    p_i = (np.square(counts).sum(1) - n) / (n * (n - 1))
    p_e = float(np.square(p_j).sum())
    return None if math.isclose(p_e, 1.0) else float((p_i.mean() - p_e) / (1 - p_e))


def alpha_nominal(matrix: np.ndarray) -> float | None:
    """matrix[rater, item]: a category index, NaN where the rater did not answer."""
    pairable = np.sum(~np.isnan(matrix), axis=0) >= 2
    values = matrix[:, pairable]
    if values.size == 0 or len(np.unique(values[~np.isnan(values)])) < 2:
        return None
    return float(krippendorff.alpha(reliability_data=values, level_of_measurement="nominal"))


def cohen(a: list, b: list) -> float | None:
    """Cohen's kappa of two raters' answers to the same items (scikit-learn's cohen_kappa_score, unweighted):
    observed agreement against the agreement their own label frequencies give by chance."""
    if len(a) < 2:
        return None
    _, codes = np.unique(np.array([str(x) for x in list(a) + list(b)]), return_inverse=True)
    x, y = codes[:len(a)], codes[len(a):]
    n_cat = int(codes.max()) + 1
    p_o = float(np.mean(x == y))
    p_e = float(np.dot(np.bincount(x, minlength=n_cat), np.bincount(y, minlength=n_cat))) / len(a) ** 2
    return None if math.isclose(p_e, 1.0) else (p_o - p_e) / (1 - p_e)


def _figures(matrix: np.ndarray, n_categories: int, k: int) -> tuple[float | None, float | None]:
    answered = np.sum(~np.isnan(matrix), axis=0)
    full = matrix[:, answered == k] if k >= 2 else matrix[:, :0]
    counts = np.stack([np.sum(full == c, axis=0) for c in range(n_categories)], axis=1) if full.size else full.T
    return alpha_nominal(matrix), fleiss_kappa(counts) if full.size else None


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def agreement(rows: list[dict], labels: list[str], multi_label: bool, k: int) -> dict:
    """rows: {"record_id", "annotator", "value"}. The /v1/datasets/{id}/agreement answer."""
    recs = sorted({r["record_id"] for r in rows})
    names = sorted({r["annotator"] for r in rows})
    col = {rid: i for i, rid in enumerate(recs)}
    row_of = {n: i for i, n in enumerate(names)}

    def matrix(code) -> np.ndarray:
        m = np.full((len(names), len(recs)), np.nan)
        for r in rows:
            m[row_of[r["annotator"]], col[r["record_id"]]] = code(r["value"])
        return m

    per_label = {}
    for lab in labels:  # one-vs-rest: how reliably each label is told apart
        m = matrix(lambda v, lab=lab: float(lab in v) if multi_label else float(v == lab))
        a, f = _figures(m, 2, k)
        per_label[lab] = {"krippendorff_alpha": a, "fleiss_kappa": f}
    if multi_label:
        alpha = _mean(v["krippendorff_alpha"] for v in per_label.values())
        fleiss = _mean(v["fleiss_kappa"] for v in per_label.values())
        key = "|".join  # a label set is compared whole for Cohen's kappa
    else:
        index = {lab: i for i, lab in enumerate(labels)}
        alpha, fleiss = _figures(matrix(lambda v: index[v]), len(labels), k)
        key = str
    answers = {n: {} for n in names}
    for r in rows:
        answers[r["annotator"]][r["record_id"]] = key(r["value"])
    pairs = []
    for a, b in itertools.combinations(names, 2):
        shared = sorted(set(answers[a]) & set(answers[b]))
        pairs.append({"a": a, "b": b, "n": len(shared),
                      "cohen_kappa": cohen([answers[a][i] for i in shared], [answers[b][i] for i in shared])})
    per_annotator = {}
    for n in names:
        mine = [p["cohen_kappa"] for p in pairs if n in (p["a"], p["b"])]
        per_annotator[n] = {"answers": len(answers[n]), "mean_cohen_kappa": _mean(mine)}
    n_records = int(np.sum(np.sum(~np.isnan(matrix(lambda v: 0.0)), axis=0) >= 2)) if rows else 0
    return {"krippendorff_alpha": alpha, "fleiss_kappa": fleiss, "per_label": per_label,
            "per_annotator": per_annotator, "pairwise_cohen_kappa": pairs, "n_records": n_records}
