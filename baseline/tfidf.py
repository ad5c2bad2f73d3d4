"""The saved TF-IDF + logistic-regression baseline applied with numpy alone (serving's side of baseline/blend.py).

Our own rather than scikit-learn objects rebuilt at load, for two measured reasons:
- speed: on 2,000 ko-help rows in batches of 64 (load average ~3.5), sklearn's transform + predict_proba
  took 84-89 µs a row (its char_wb analyzer and vocabulary counting in Python per n-gram, then a scipy
  CSR matrix), this 28-33 µs: the analyzer and the lookup run batched in numpy on integer n-gram keys;
- size: the slim serving image then needs neither scikit-learn nor scipy (docker/deps.py TRAIN_ONLY).

It copies scikit-learn 1.x's semantics exactly for the settings `tfidf_logreg` uses: TfidfVectorizer
(`_preprocess`, `_white_spaces`, `_char_wb_ngrams`, `_count_vocab` with a fixed vocabulary,
TfidfTransformer.transform) and LogisticRegression.predict_proba. tests/baseline/test_tfidf.py holds it to
the fitted sklearn pipeline at 1e-9. Settings it does not implement are refused at load (`check_settings`),
never served approximately.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import NamedTuple

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


def grams(vocabulary: dict[str, int]) -> list[str]:
    """A vocabulary ({n-gram: column}, sklearn's `vocabulary_` or `CharTfidf.vocabulary`) as its n-grams in column
    order: what tfidf.json and ood.json store and `CharTfidf` takes."""
    out = [""] * len(vocabulary)
    for gram, i in vocabulary.items():
        out[i] = gram
    return out


class CharTfidf:
    """A fitted char_wb TfidfVectorizer: `features(texts)` as sklearn's transform computes them."""

    def __init__(self, settings: dict, vocabulary: list[str], idf: np.ndarray):
        check_settings(settings)
        self.settings = dict(settings)
        self.lowercase, self.sublinear_tf = bool(settings["lowercase"]), bool(settings["sublinear_tf"])
        self.ngram_range = (int(settings["ngram_range"][0]), int(settings["ngram_range"][1]))
        self.vocabulary = {g: i for i, g in enumerate(vocabulary)}
        if len(self.vocabulary) != len(vocabulary):
            raise ValueError("the vocabulary repeats an n-gram")
        self.idf = np.asarray(idf, np.float64)
        if self.idf.shape != (len(vocabulary),):
            raise ValueError("idf does not match the vocabulary")
        self._index_vocabulary(vocabulary)

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

    def _index_vocabulary(self, vocabulary: list[str]) -> None:
        """Each character of the vocabulary gets a digit 1..B-1, each n-gram the integer of its digits in base B:
        exact (no hashing), and a gram with a character the vocabulary lacks has a 0 digit and matches nothing.
        Where B**max_n overflows 64 bits, the per-n-gram Python path serves instead (`_counts_python`)."""
        alphabet = sorted({c for gram in vocabulary for c in gram})
        self._base = len(alphabet) + 1
        self._fast = self._base ** self.ngram_range[1] < 2 ** 64 and all(len(g) <= self.ngram_range[1] for g in vocabulary)
        if not self._fast:
            return
        self._digit = np.zeros(0x110000, np.uint64)  # code point -> digit (0: not in the vocabulary)
        self._digit[[ord(c) for c in alphabet]] = np.arange(1, self._base, dtype=np.uint64)
        keys = np.array([self._key_of(g) for g in vocabulary], np.uint64)
        order = np.argsort(keys, kind="stable")
        self._keys, self._cols = keys[order], order

    def _key_of(self, gram: str) -> int:
        key = 0
        for c in gram:
            key = key * self._base + int(self._digit[ord(c)])
        return key

    def _counts_fast(self, texts: list[str]) -> tuple[np.ndarray, ...]:
        """(row, column, count) of the known n-grams, the n-grams enumerated as `ngrams` does, batched in numpy,
        and each text's n-gram total (known or not, as `ngram_counts`), from the same words."""
        lo, hi = self.ngram_range
        words: list[str] = []
        word_row: list[int] = []
        for r, doc in enumerate(texts):
            if self.lowercase:
                doc = doc.lower()
            split = _WHITE_SPACES.sub(" ", doc).split()
            words.extend(split)
            word_row.extend([r] * len(split))
        padded = "".join(" " + w + " " for w in words)
        codes = np.frombuffer(padded.encode("utf-32-le", "surrogatepass"), "<u4")
        digits = np.concatenate([self._digit[codes], np.zeros(hi, np.uint64)])
        size = np.fromiter((len(w) + 2 for w in words), np.int64, len(words))
        start = np.cumsum(size) - size
        rows_of = np.asarray(word_row, np.int64)
        base = np.uint64(self._base)
        keys, rows = [], []
        # every window of n < len(word) characters, for each n
        for n in range(lo, hi + 1):
            m = size > n
            count = size[m] - n + 1
            first = np.repeat(start[m] - (np.cumsum(count) - count), count) + np.arange(count.sum())
            key, ok = np.zeros(len(first), np.uint64), np.ones(len(first), bool)
            for k in range(n):
                d = digits[first + k]
                key, ok = key * base + d, ok & (d > 0)
            keys.append(key[ok])
            rows.append(np.repeat(rows_of[m], count)[ok])
        # and a word no longer than max_n once, whole (sklearn's early break)
        m = size <= hi
        first, length = start[m], size[m]
        key, ok = np.zeros(len(first), np.uint64), np.ones(len(first), bool)
        for k in range(hi):
            inside = k < length
            d = digits[first + k]
            key = np.where(inside, key * base + d, key)
            ok &= ~inside | (d > 0)
        keys.append(key[ok])
        rows.append(rows_of[m][ok])
        key, row = np.concatenate(keys), np.concatenate(rows)
        # searchsorted on distinct, sorted keys: 3-4x faster than on the raw ones (fewer, and cache-friendly)
        distinct, inverse = np.unique(key, return_inverse=True)
        at = np.minimum(np.searchsorted(self._keys, distinct), len(self._keys) - 1)
        hit = (self._keys[at] == distinct)[inverse]
        n_cols = len(self._keys)
        cell, count = np.unique(row[hit] * n_cols + self._cols[at][inverse[hit]], return_counts=True)
        top = np.minimum(size - 1, hi)  # per word, as ngram_counts counts them
        k = np.maximum(0, top - lo + 1)
        totals = np.bincount(rows_of, k * (size + 1) - (lo + top) * k // 2 + (size <= hi), minlength=len(texts))
        return cell // n_cols, cell % n_cols, count, totals.astype(np.int64)

    def _counts_python(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
        return np.asarray(rows, np.intp), np.asarray(cols, np.intp), np.asarray(counts)

    def weights(self, texts: list[str], fast: bool | None = None) -> tuple[np.ndarray, ...]:
        """(row, column, count, tf-idf weight before the l2 norm) of the known n-grams' non-zeros."""
        return self.read(texts, fast).weights

    def read(self, texts: list[str], fast: bool | None = None) -> Read:
        """`weights` with every text's n-gram total (`ngram_counts`): one pass over the texts that the baseline
        and the out-of-domain detector (baseline/ood.py) share where their vocabularies are the same."""
        fast = self._fast if fast is None else fast
        if fast:
            row, col, count, totals = self._counts_fast(texts)
        else:
            (row, col, count), totals = self._counts_python(texts), self.ngram_counts(texts)
        val = np.asarray(count, np.float64)
        if self.sublinear_tf:
            val = np.log(val) + 1.0
        return Read((row, col, count, val * self.idf[col]), totals)

    def features(self, texts: list[str], fast: bool | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The l2-normalised TF-IDF matrix as (row, column, value) of its non-zeros."""
        return normalised(self.weights(texts, fast), len(texts))

    def ngram_counts(self, texts: list[str]) -> np.ndarray:
        """Every text's number of n-grams, known or not (len(ngrams(text))), from its words' lengths: a padded
        word of size s gives s - n + 1 windows for each n < s in the range, and itself once where s <= max n."""
        lo, hi = self.ngram_range
        out = np.zeros(len(texts), np.int64)
        for r, doc in enumerate(texts):
            doc = doc.lower() if self.lowercase else doc
            s = np.fromiter((len(w) + 2 for w in doc.split()), np.int64)
            top = np.minimum(s - 1, hi)  # the largest n cut into windows
            k = np.maximum(0, top - lo + 1)  # how many n's
            out[r] = int((k * (s + 1) - (lo + top) * k // 2).sum() + (s <= hi).sum())
        return out


class Read(NamedTuple):
    """What `CharTfidf.read` got from a batch of texts."""

    weights: tuple  # (row, column, count, weight before the l2 norm) of the known n-grams
    totals: np.ndarray  # each text's n-grams, known or not


def normalised(weights: tuple, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, column, value) of `weights` l2-normalised per row, as TfidfTransformer does."""
    row, col, _, val = weights
    norm = np.sqrt(np.bincount(row, val * val, minlength=n))
    return row, col, val / norm[row]  # rows without a known n-gram have no entries: they stay zero


class TfidfLogreg(CharTfidf):
    """`predict_proba(texts)` and `classes_` of a fitted TfidfVectorizer + LogisticRegression pipeline
    (single-label: a softmax over the classes; `OvrTfidfLogreg` is the multi-label one)."""

    min_classes = 2

    def __init__(self, settings: dict, vocabulary: list[str], idf: np.ndarray, coef: np.ndarray,
                 intercept: np.ndarray, classes: list[int]):
        super().__init__(settings, vocabulary, idf)
        coef = np.asarray(coef, np.float64)
        self.classes_ = np.asarray(classes)
        want_rows = self.coef_rows(len(self.classes_))
        if len(self.classes_) < self.min_classes or coef.shape != (want_rows, len(vocabulary)) \
                or np.shape(intercept) != (want_rows,):
            raise ValueError("weights do not match the vocabulary and classes")
        self.coef_t = np.ascontiguousarray(coef.T)  # (vocabulary, rows): a gather per n-gram, not per class
        self.intercept = np.asarray(intercept, np.float64)

    def decision_function(self, texts: list[str], weights: tuple | None = None) -> np.ndarray:
        """`weights`: this vocabulary's `weights(texts)` where a caller already has them (serving's detector)."""
        row, col, val = self.features(texts) if weights is None else normalised(weights, len(texts))
        z = np.zeros((len(texts), self.coef_t.shape[1]))
        if len(row):  # rows come sorted: one segment sum per row that has entries
            present, first = np.unique(row, return_index=True)
            z[present] = np.add.reduceat(val[:, None] * self.coef_t[col], first)
        return z + self.intercept

    @staticmethod
    def coef_rows(n_classes: int) -> int:
        """sklearn's binary LR keeps one row of coefficients and answers [1 - sigmoid, sigmoid]."""
        return 1 if n_classes <= 2 else n_classes

    def predict_proba(self, texts: list[str], weights: tuple | None = None) -> np.ndarray:
        z = self.decision_function(texts, weights)
        if z.shape[1] == 1:  # binary: sklearn's expit, written so that large |z| neither overflows nor warns
            p = np.exp(-np.logaddexp(0.0, -z[:, 0]))
            return np.stack([1.0 - p, p], axis=1)
        z = np.exp(z - z.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)


class OvrTfidfLogreg(TfidfLogreg):
    """The multi-label baseline (one-vs-rest, baseline/label_blend.py): a row of coefficients per label, a
    sigmoid per label."""

    min_classes = 1

    @staticmethod
    def coef_rows(n_classes: int) -> int:
        return n_classes

    def predict_proba(self, texts: list[str], weights: tuple | None = None) -> np.ndarray:
        return np.exp(-np.logaddexp(0.0, -self.decision_function(texts, weights)))
