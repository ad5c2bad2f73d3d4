"""The multi-label TF-IDF baseline and its blend with the model, per label: fitted by k-fold, applied by serving.

The baseline is one-vs-rest: the single-label baseline's char TF-IDF (baseline/blend.py `tfidf_logreg`, same
settings) and one binary logistic regression per label on it, so each label gets its own sigmoid.

The blend is the single-label log-linear pool (baseline/blend.py) made per label: for label j,

    logit p_blend_j = a_j · logit p_model_j + b_j · logit p_baseline_j,    a_j, b_j >= 0,

which is the pool p ∝ exp(a·log p_model + b·log p_baseline) over the two outcomes (label, not label). Each
(a_j, b_j) is fitted by log-loss on out-of-fold rows: a convex two-parameter fit per label, so a label with
few rows cannot be overfitted far.

Saved like the single-label baseline (folder/baseline/: tfidf.json with `"multi_label": true`, the weights as
safetensors with one coefficient row per label, blend.json with a weight per label); `baseline.blend.ServedBlend`
reads either kind, and serving applies this one with numpy alone (baseline/tfidf.py). The pool itself
(`LabelBlend`) is defined in baseline/blend.py beside the single-label one, so that its loader needs nothing
from here: this module imports baseline/blend.py, never the reverse.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from baseline.blend import (
    TEXT_CAP,
    BaselineError,
    LabelBlend,
    _logit,
    fit_weights,
    tfidf_logreg,
    write_baseline,
)

# A label that is on every training row (or on none) has no logistic regression: its saved intercept is this
# far out, which the served sigmoid turns into 1 - 4e-18 (or 4e-18), what sklearn's constant answer rounds to.
_CONSTANT_LOGIT = 40.0


# ----------------------------------------------------------------------------------------- the baseline
def fit_ovr_baseline(texts: list[str], Y: np.ndarray, seed: int):
    """The one-vs-rest baseline fitted on `texts`; BaselineError (one line) where it cannot be."""
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.pipeline import make_pipeline


    Y = np.asarray(Y)
    if len(Y) == 0:
        raise BaselineError("no training rows")
    single = tfidf_logreg(seed)
    vectorizer, logreg = single.steps[0][1], single.steps[-1][1]
    try:
        return make_pipeline(vectorizer, OneVsRestClassifier(logreg)).fit([t[:TEXT_CAP] for t in texts], Y)
    except ValueError as e:  # "empty vocabulary" and the like
        raise BaselineError(str(e).splitlines()[0]) from None


def ovr_proba(model, texts: list[str]) -> np.ndarray:
    """(len(texts), L) per-label probabilities of a fitted one-vs-rest baseline."""

    n_labels = len(model.steps[-1][1].estimators_)
    if not texts:
        return np.zeros((0, n_labels))
    return np.asarray(model.predict_proba([t[:TEXT_CAP] for t in texts]), np.float64).reshape(len(texts), n_labels)


def ovr_weights(model) -> tuple[np.ndarray, np.ndarray]:
    """(coef (L, V), intercept (L,)) of a fitted one-vs-rest baseline, a row per label, for saving."""
    vocab_size = len(model.steps[0][1].vocabulary_)
    coef, intercept = [], []
    for est in model.steps[-1][1].estimators_:
        if hasattr(est, "coef_"):
            coef.append(np.asarray(est.coef_, np.float64).reshape(-1))
            intercept.append(float(np.ravel(est.intercept_)[0]))
        else:  # sklearn's constant predictor: the label was on every training row or on none
            coef.append(np.zeros(vocab_size))
            intercept.append(_CONSTANT_LOGIT if float(np.ravel(est.y_)[0]) > 0.5 else -_CONSTANT_LOGIT)
    return np.vstack(coef), np.asarray(intercept)


# ------------------------------------------------------------------------------------------- the blend
def fit_label_blend(p_model: np.ndarray, p_baseline: np.ndarray, Y: np.ndarray) -> LabelBlend:
    """(a_j, b_j) >= 0 per label minimising that label's mean log-loss; the labels' losses are independent,
    so one fit over their sum (baseline/blend.py `fit_weights`) finds every label's optimum."""
    Y = np.asarray(Y, np.float64)
    n, n_labels = Y.shape
    lm, lb = _logit(p_model), _logit(p_baseline)

    def loss(w):
        a, b = w[:n_labels], w[n_labels:]
        z = a * lm + b * lb
        # log-loss of sigmoid(z) against Y, written without overflow: log(1 + e^z) - y z
        nll = (np.logaddexp(0.0, z) - Y * z).sum() / n
        r = (LabelBlend.squash(z) - Y) / n  # d nll / d z
        return nll, np.concatenate([(r * lm).sum(0), (r * lb).sum(0)])

    w = np.round(fit_weights(loss, 2 * n_labels), 6)
    return LabelBlend(tuple(float(v) for v in w[:n_labels]), tuple(float(v) for v in w[n_labels:]))


# ------------------------------------------------------------------------------------------- saving
def save_ovr_baseline(model, folder: str | Path, blend: LabelBlend, meta: dict) -> Path:
    """Write folder/baseline/ for a multi-label model (tfidf.json, weights.safetensors, blend.json)."""
    coef, intercept = ovr_weights(model)
    return write_baseline(folder, model.steps[0][1], len(intercept), list(range(len(intercept))), coef, intercept,
                          blend, meta)
