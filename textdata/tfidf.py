"""The saved TF-IDF + logistic-regression baseline applied with numpy alone (serving's side of textdata/blend.py).

Our own rather than scikit-learn objects rebuilt at load, for two measured reasons:
- speed: sklearn's transform spends ~80 µs a row on per-call overhead (input validation, a scipy CSR
  matrix, estimator checks), which made serving with the blend 0.62-0.65x the rows/s without it on the
  tiny encoder (bench/results/serving-tiny-blend.json); this does one batched pass per call instead;
- size: the slim serving image then needs neither scikit-learn nor scipy (docker/deps.py TRAIN_ONLY).

It copies scikit-learn 1.x's semantics exactly for the settings `tfidf_logreg` uses: TfidfVectorizer
(`_preprocess`, `_white_spaces`, `_char_wb_ngrams`, `_count_vocab` with a fixed vocabulary,
TfidfTransformer.transform) and LogisticRegression.predict_proba. tests/textdata/test_tfidf.py holds it to
the fitted sklearn pipeline at 1e-9. Settings it does not implement are refused at load (`check_settings`),
never served approximately.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

_WHITE_SPACES = re.compile(r"\s\s+")  # sklearn's _VectorizerMixin._white_spaces
# What this module implements; anything else in a saved tfidf.json is refused. smooth_idf only matters
# when fitting (idf_ is saved), so either value is served the same.
SUPPORTED = {"analyzer": ("char_wb",), "strip_accents": (None,), "norm": ("l2",), "use_idf": (True,),
             "binary": (False,), "lowercase": (True, False), "sublinear_tf": (True, False),
             "smooth_idf": (True, False)}


def check_settings(settings: dict) -> None:
    """ValueError (one line naming every setting) unless this module computes what sklearn would."""
    bad = [f"{k}={settings.get(k)!r}" for k, allowed in SUPPORTED.items()
           if k in settings and settings[k] not in allowed]
    missing = sorted(set(SUPPORTED) - set(settings) - {"smooth_idf"})
    ngram = settings.get("ngram_range")
    if not (isinstance(ngram, (list, tuple)) and len(ngram) == 2 and all(isinstance(n, int) for n in ngram)
            and 1 <= ngram[0] <= ngram[1]):
        bad.append(f"ngram_range={ngram!r}")
    if bad or missing:
        raise ValueError("baseline settings the served TF-IDF does not implement: "
                         + ", ".join(bad + [f"{k} missing" for k in missing]))


class TfidfLogreg:
    """`predict_proba(texts)` and `classes_` of a fitted TfidfVectorizer + LogisticRegression pipeline."""

    def __init__(self, settings: dict, vocabulary: list[str], idf: np.ndarray, coef: np.ndarray,
                 intercept: np.ndarray, classes: list[int]):
        check_settings(settings)
        self.lowercase, self.sublinear_tf = bool(settings["lowercase"]), bool(settings["sublinear_tf"])
        self.ngram_range = (int(settings["ngram_range"][0]), int(settings["ngram_range"][1]))
        self.vocabulary = {g: i for i, g in enumerate(vocabulary)}
        if len(self.vocabulary) != len(vocabulary):
            raise ValueError("the vocabulary repeats an n-gram")
        self.idf = np.asarray(idf, np.float64)
        coef = np.asarray(coef, np.float64)
        self.classes_ = np.asarray(classes)
        # sklearn's binary LR keeps one row of coefficients and answers [1 - sigmoid, sigmoid]
        want_rows = 1 if len(self.classes_) <= 2 else len(self.classes_)
        if len(self.classes_) < 2 or coef.shape != (want_rows, len(vocabulary)) or np.shape(intercept) != (want_rows,) \
                or self.idf.shape != (len(vocabulary),):
            raise ValueError("weights do not match the vocabulary and classes")
        self.coef_t = np.ascontiguousarray(coef.T)  # (vocabulary, rows): a gather per n-gram, not per class
        self.intercept = np.asarray(intercept, np.float64)

    def ngrams(self, doc: str) -> list[str]:
        """sklearn's analyzer for char_wb: lowercase, then whitespace runs to one space, then per word padded
        with spaces every n-gram, except that a word no longer than n counts once and ends the n loop."""
        if self.lowercase:
            doc = doc.lower()
        doc = _WHITE_SPACES.sub(" ", doc)
        lo, hi = self.ngram_range
        out: list[str] = []
        for w in doc.split():
            w = " " + w + " "
            size = len(w)
            for n in range(lo, hi + 1):
                if size <= n:
                    out.append(w)
                    break
                out.extend([w[i:i + n] for i in range(size - n + 1)])
        return out

    def features(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The l2-normalised TF-IDF matrix as (row, column, value) of its non-zeros."""
        rows: list[int] = []
        cols: list[int] = []
        counts: list[int] = []
        get = self.vocabulary.get
        for r, doc in enumerate(texts):
            for gram, n in Counter(self.ngrams(doc)).items():
                j = get(gram)
                if j is not None:
                    rows.append(r)
                    cols.append(j)
                    counts.append(n)
        row, col = np.asarray(rows, np.intp), np.asarray(cols, np.intp)
        val = np.asarray(counts, np.float64)
        if self.sublinear_tf:
            val = np.log(val) + 1.0
        val *= self.idf[col]
        norm = np.sqrt(np.bincount(row, val * val, minlength=len(texts)))
        return row, col, val / norm[row]  # rows without a known n-gram have no entries: they stay zero

    def decision_function(self, texts: list[str]) -> np.ndarray:
        row, col, val = self.features(texts)
        z = np.zeros((len(texts), self.coef_t.shape[1]))
        np.add.at(z, row, val[:, None] * self.coef_t[col])
        return z + self.intercept

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        z = self.decision_function(texts)
        if z.shape[1] == 1:  # binary: sklearn's expit, written so that large |z| neither overflows nor warns
            p = np.exp(-np.logaddexp(0.0, -z[:, 0]))
            return np.stack([1.0 - p, p], axis=1)
        z = np.exp(z - z.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)
