"""The TF-IDF baseline and its blend with the fine-tuned model: one definition that k-fold fits and serving applies.

The blend is a log-linear pool of the two models' probabilities,

    p_blend ∝ exp(a · log p_model + b · log p_baseline),   a, b >= 0,

with (a, b) fitted by log-loss on out-of-fold rows. Two free scales rather than one weight because the two
models are calibrated differently: one epoch of fine-tuning leaves the model's probabilities flat (top
~0.13 of 10 classes), so a plain average of probabilities lets the sharper model win every disagreement.
The pool is multinomial logistic regression on two features without intercept: convex, two parameters,
so it cannot overfit a few hundred rows. Measured against a weighted average of probabilities and a
logistic-regression stacker on the log-probabilities (2K features, K classes) (docs/notes/log.md, "Blend methods"): see
docs/finetune.md, "Blend with the baseline".

The baseline is saved without pickle: vocabulary and settings as JSON, idf and coefficients as
safetensors. Serving applies it with numpy alone (baseline/tfidf.py: faster per row than rebuilding the
scikit-learn objects, and the slim image carries no scikit-learn or scipy); only fitting uses scikit-learn.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from baseline.tfidf import OvrTfidfLogreg, TfidfLogreg, check_settings, grams
from textdata.labels import KIND_KEY, LabelSpace
from textdata.model_files import BASELINE_DIR  # baseline/: tfidf.json, weights, blend.json
from textdata.model_files import BLEND as BLEND_FILE
from textdata.nested import nested

# Both sides cut texts here: serving must bound the baseline's work on a 50 MB cell, and k-fold must
# see the same text for the served blend to equal its own (identical for texts up to this length).
TEXT_CAP = 100_000
_FLOOR = 1e-12  # log(0) guard: the baseline's LR and a float32 softmax can both round to 0
_VECTORIZER_KEYS = ("analyzer", "ngram_range", "lowercase", "sublinear_tf", "norm", "use_idf", "smooth_idf",
                    "binary", "strip_accents")


class BaselineError(ValueError):
    """The baseline cannot be fitted on these rows (one class, or no usable characters)."""


def tfidf_logreg(seed: int):
    """Char n-grams because they need no tokenizer and work on Korean, where word TF-IDF splits on spaces
    that Korean uses inconsistently."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    return make_pipeline(
        TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 4), min_df=2, sublinear_tf=True, max_features=200_000),
        LogisticRegression(C=10.0, max_iter=2000, random_state=seed),
    )


def fit_baseline(texts: list[str], y: np.ndarray, seed: int):
    """The baseline fitted on `texts`; BaselineError (one line) where it cannot be."""
    y = np.asarray(y)
    if len(np.unique(y)) < 2:
        raise BaselineError(f"only one class ({y[0] if len(y) else 'none'}) among {len(y)} training rows")
    try:
        return tfidf_logreg(seed).fit([t[:TEXT_CAP] for t in texts], y)
    except ValueError as e:  # "empty vocabulary" (no text, or min_df=2 finds nothing), and the like
        raise BaselineError(str(e).splitlines()[0]) from None


def baseline_proba(model, texts: list[str], n_classes: int, weights: tuple | None = None) -> np.ndarray:
    """(len(texts), n_classes) probabilities; classes the baseline never saw in training get 0. `weights`: the
    served baseline's own read of these texts (TfidfLogreg.read), where the out-of-domain detector shared it."""
    proba = np.zeros((len(texts), n_classes))
    if len(texts):
        capped = [t[:TEXT_CAP] for t in texts]
        proba[:, model.classes_] = model.predict_proba(capped) if weights is None else \
            model.predict_proba(capped, weights)
    return proba


# ------------------------------------------------------------------------------------------- the blend
@dataclass(frozen=True)
class Blend:
    """The pool p_blend = squash(a · link(p_model) + b · link(p_baseline)), a, b >= 0, fitted by log-loss on
    out-of-fold rows (`fit_weights`). One pool for both kinds; the kind decides only what differs: single-label
    (this class) pools log-probabilities with one weight each and squashes by a softmax over the classes;
    multi-label (`LabelBlend`) pools logits with a weight per label and squashes by a sigmoid per label, which
    is this pool over each label's two outcomes (label, not label)."""

    model_weight: float
    baseline_weight: float

    kind_fields: ClassVar[dict] = {}  # what tfidf.json and blend.json say of the kind: nothing for single-label

    def __call__(self, p_model: np.ndarray, p_baseline: np.ndarray) -> np.ndarray:
        return self.squash(self.pooled(p_model, p_baseline))

    def pooled(self, p_model: np.ndarray, p_baseline: np.ndarray) -> np.ndarray:
        return np.tensordot(np.array([self.model_weight, self.baseline_weight]), _logs(p_model, p_baseline), axes=1)

    @staticmethod
    def squash(z: np.ndarray) -> np.ndarray:
        z = np.exp(z - z.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)

    @staticmethod
    def weight(value) -> float:
        return float(value)

    @classmethod
    def from_meta(cls, meta: dict, n_labels: int | None = None) -> Blend:
        return cls.checked(cls(cls.weight(meta["model_weight"]), cls.weight(meta["baseline_weight"])), n_labels)

    @staticmethod
    def checked(blend: Blend, n_labels: int | None) -> Blend:
        return blend

    def as_json(self) -> dict:
        return {**asdict(self), **self.kind_fields}


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, np.float64), _FLOOR, 1.0 - _FLOOR)
    return np.log(p) - np.log1p(-p)


# The multi-label pool (fitted in baseline/label_blend.py) lives beside the single-label one, so that the loader
# below reads either kind without importing the multi-label module (which imports this one).
@dataclass(frozen=True)
class LabelBlend(Blend):
    """Per-label weights of the pool, label id order."""

    model_weight: tuple
    baseline_weight: tuple

    kind_fields: ClassVar[dict] = {KIND_KEY: True}  # tfidf.json and blend.json: one-vs-rest, a weight per label

    def pooled(self, p_model: np.ndarray, p_baseline: np.ndarray) -> np.ndarray:
        return np.asarray(self.model_weight) * _logit(p_model) + np.asarray(self.baseline_weight) * _logit(p_baseline)

    @staticmethod
    def squash(z: np.ndarray) -> np.ndarray:
        return np.exp(-np.logaddexp(0.0, -z))

    @staticmethod
    def weight(value) -> tuple:
        return tuple(float(v) for v in value)

    @staticmethod
    def checked(blend: LabelBlend, n_labels: int | None) -> LabelBlend:
        a, b = blend.model_weight, blend.baseline_weight
        if len(a) != len(b) or (n_labels is not None and len(a) != n_labels):
            raise ValueError(f"blend weights for {len(a)} and {len(b)} labels")
        return blend


def _logs(p_model, p_baseline) -> np.ndarray:
    """(2, n, K) log-probabilities, float64."""
    return np.log(np.clip(np.stack([np.asarray(p_model, np.float64), np.asarray(p_baseline, np.float64)]),
                          _FLOOR, 1.0))


def fit_weights(loss, n_weights: int) -> np.ndarray:
    """The pool's weights (all >= 0) minimising `loss` (w -> (mean log-loss, gradient)), from 1 each: the
    loss is convex in them, so L-BFGS-B finds the optimum. Both kinds' fit."""
    from scipy.optimize import minimize

    return minimize(loss, np.ones(n_weights), jac=True, method="L-BFGS-B", bounds=[(0, None)] * n_weights).x


def fit_blend(p_model: np.ndarray, p_baseline: np.ndarray, y: np.ndarray) -> Blend:
    """(a, b) >= 0 minimising the mean log-loss of the pool on these rows."""
    logs = _logs(p_model, p_baseline)
    y = np.asarray(y)
    rows = np.arange(len(y))
    picked = logs[:, rows, y]  # (2, n): each model's log-probability of the true class

    def loss(w):
        q = Blend.squash(np.tensordot(w, logs, axes=1))
        nll = -np.mean(np.log(np.clip(q[rows, y], _FLOOR, 1.0)))
        grad = np.einsum("mnk,nk->m", logs, q) / len(y) - picked.mean(1)
        return nll, grad

    a, b = (float(v) for v in fit_weights(loss, 2))
    return Blend(round(a, 6), round(b, 6))


def nested_blend(p_model: np.ndarray, p_baseline: np.ndarray, y: np.ndarray, fold_of: np.ndarray,
                 fit=fit_blend) -> tuple[np.ndarray, list[Blend]]:
    """Blended out-of-fold probabilities where each fold's rows are blended with parameters fitted on the
    other folds' rows only, so its score is an honest estimate; and the per-fold parameters."""
    return nested(fold_of, lambda rest: fit(p_model[rest], p_baseline[rest], y[rest]),
                  lambda blend, held: blend(p_model[held], p_baseline[held]), np.empty(np.shape(p_model), np.float64))


# ------------------------------------------------------------------------------ saving without pickle
def save_baseline(model, folder: str | Path, n_classes: int, blend: Blend, meta: dict) -> Path:
    """Write folder/baseline/ (tfidf.json, weights.safetensors, blend.json); returns that folder."""
    lr = model.steps[-1][1]
    return write_baseline(folder, model.steps[0][1], n_classes, [int(c) for c in lr.classes_], lr.coef_,
                          lr.intercept_, blend, meta)


def write_baseline(folder: str | Path, vec, n_classes: int, classes: list[int], coef, intercept,
                   blend: Blend | LabelBlend, meta: dict) -> Path:
    """folder/baseline/ for either kind (the blend says which: `kind_fields`): tfidf.json (the vectorizer's
    settings and vocabulary), weights.safetensors (idf, a row of coefficients per class or label, intercepts),
    blend.json (the blend's weights and `meta`); returns that folder."""
    from safetensors.numpy import save_file

    from textdata.tables import atomic_path, write_json

    params = vec.get_params()
    target = Path(folder) / BASELINE_DIR
    target.mkdir(parents=True, exist_ok=True)
    write_json(target / "tfidf.json", {
        "vectorizer": {k: params[k] for k in _VECTORIZER_KEYS}, "n_classes": int(n_classes),
        "classes": classes, **blend.kind_fields, "vocabulary": grams(vec.vocabulary_)})
    with atomic_path(target / "weights.safetensors") as tmp:
        save_file({"idf": np.ascontiguousarray(vec.idf_, np.float64),
                   "coef": np.ascontiguousarray(coef, np.float64),
                   "intercept": np.ascontiguousarray(intercept, np.float64)}, str(tmp))
        tmp.chmod(0o644)  # safetensors writes a new file, 0600
    write_json(target / BLEND_FILE, {**blend.as_json(), **meta})
    return target


def _unreadable(target: Path, e: Exception) -> ValueError:
    return ValueError(f"{target}: unreadable baseline ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")


def load_baseline(folder: str | Path) -> tuple[TfidfLogreg, int, Blend | LabelBlend, dict]:
    """(the baseline as numpy, n_classes, blend, blend.json) from folder/baseline/; ValueError if broken or
    saved with settings the numpy transform does not implement (baseline/tfidf.py: serving imports no sklearn)."""
    from safetensors.numpy import load_file

    target = Path(folder) / BASELINE_DIR
    try:
        spec = json.loads((target / "tfidf.json").read_text(encoding="utf-8"))
        meta = json.loads((target / BLEND_FILE).read_text(encoding="utf-8"))
        weights = load_file(str(target / "weights.safetensors"))
        settings = spec["vectorizer"]
        unknown = set(settings) - set(_VECTORIZER_KEYS)
        if unknown:
            raise ValueError(f"unknown vectorizer settings {sorted(unknown)}")
        n_classes = int(spec["n_classes"])
        # tfidf.json's key: one-vs-rest, a weight per label (baseline/label_blend.py)
        kind = LabelSpace.recorded(spec)
        blend = kind.pick(Blend, LabelBlend).from_meta(meta, n_classes)
    except Exception as e:  # noqa: BLE001 - json and safetensors each raise their own types
        raise _unreadable(target, e) from None
    try:
        check_settings(settings)
    except ValueError as e:
        raise ValueError(f"{target}: {e}") from None
    try:
        baseline = kind.pick(TfidfLogreg, OvrTfidfLogreg)(settings, spec["vocabulary"], weights["idf"],
                                                          weights["coef"], weights["intercept"], spec["classes"])
    except Exception as e:  # noqa: BLE001 - a missing key, a wrong shape
        raise _unreadable(target, e) from None
    return baseline, n_classes, blend, meta


# ------------------------------------------------------------------------------------------- serving
class Encoded(list):
    """Token ids that remember the normalised text they came from: the API tokenizes once, hands the ids
    through its batcher, and the blend still sees the text."""

    __slots__ = ("text",)

    def __init__(self, ids, text: str):
        super().__init__(ids)
        self.text = text


class ServedBlend:
    """The saved baseline and blend of a model folder, applied to the model's probabilities."""

    def __init__(self, folder: str | Path, n_labels: int):
        self.baseline, n_classes, self.blend, self.meta = load_baseline(folder)
        if n_classes != n_labels:
            raise ValueError(f"{Path(folder) / BASELINE_DIR}: baseline has {n_classes} classes, the model {n_labels}")
        self.n_labels = n_labels

    def __call__(self, p_model: np.ndarray, texts: list[str]) -> np.ndarray:
        return self.combine(p_model, self.baseline_proba(texts))

    # The two halves of __call__, for a caller that runs the baseline beside the model (serving/engine.py).
    def baseline_proba(self, texts: list[str], weights: tuple | None = None) -> np.ndarray:
        return baseline_proba(self.baseline, texts, self.n_labels, weights)

    def combine(self, p_model: np.ndarray, p_baseline: np.ndarray) -> np.ndarray:
        return self.blend(p_model, p_baseline).astype(np.float32)

    def info(self) -> dict:
        keep = ("method", "nested_macro_f1_mean", "nested_macro_f1_std", "lift_vs_model")
        return {**asdict(self.blend), **{k: self.meta[k] for k in keep if k in self.meta}}


def carry_blend(model: Path, output: Path) -> None:
    """serving.export: the baseline and blend travel with the model; a stale one from an earlier export goes."""
    import shutil

    from textdata.plain_files import copy_plain_tree, plain_files

    shutil.rmtree(output / BASELINE_DIR, ignore_errors=True)
    if (model / BASELINE_DIR / BLEND_FILE).exists():  # plain files only: a link is refused, not followed
        copy_plain_tree(model / BASELINE_DIR, output / BASELINE_DIR, plain_files(model / BASELINE_DIR))
