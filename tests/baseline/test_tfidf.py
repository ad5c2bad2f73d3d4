"""The served numpy baseline (baseline/tfidf.py) against the fitted scikit-learn pipeline it replaces at serve time."""

import json

import numpy as np
import pytest

from baseline.blend import BASELINE_DIR, Blend, fit_baseline, load_baseline, save_baseline

# What serving meets: Korean, mixed case, whitespace runs of every kind, empty and blank texts, one-character
# words (shorter than the 4-gram: sklearn counts them once), long text, characters never seen in training.
TEXTS = [
    "", " ", " \t\n ", "꿈", "꿈에서 봤다", "오류  발생했다\t\t에러", "메모\n\n기록\r\n약속", "ERROR Error error",
    "Dream 꿈 DREAM", "a b c d 꿈 x", "  회의   시간  ", "漢字 é ü ñ 😀 ∑", "일기" * 3000 + " memo " * 500,
    "꿈\u00a0\u00a0봤다", "x", "메모기록약속오류에러꿈",
]


def _train(toy_rows, y_of):
    df = toy_rows(n_per_class=12, seed=1)
    texts = [t.upper() if i % 3 == 0 else t for i, t in enumerate(df["text"])]  # mixed case in the vocabulary
    return texts, np.array([y_of(label) for label in df["label"]])


@pytest.mark.parametrize("kind", ["multiclass", "binary"])
def test_numpy_baseline_equals_the_sklearn_pipeline(tmp_path, toy_rows, kind):
    labels = ["dream", "error", "memo"]
    texts, y = _train(toy_rows, labels.index if kind == "multiclass" else (lambda label: int(label == "error")))
    sk = fit_baseline(texts, y, seed=0)
    assert sk.steps[-1][1].coef_.shape[0] == (3 if kind == "multiclass" else 1)  # sklearn's binary LR: one row
    save_baseline(sk, tmp_path, len(np.unique(y)), Blend(1, 1), {})
    served, *_ = load_baseline(tmp_path)
    assert not hasattr(served, "steps")  # not a scikit-learn pipeline
    want, got = sk.predict_proba(TEXTS), served.predict_proba(TEXTS)
    assert got.shape == want.shape == (len(TEXTS), len(np.unique(y)))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
    assert np.ptp(want[:, 0]) > 0.1  # the texts do move the probabilities: the parity is not of constants
    # the analyzer, n-gram for n-gram, and the TF-IDF rows themselves
    vec = sk.steps[0][1]
    analyze = vec.build_analyzer()
    for t in TEXTS:
        assert served.ngrams(t) == analyze(t)
    assert served._fast  # the batched integer-key path; the per-n-gram path (wide alphabets) must agree too
    for fast in (True, False):
        row, col, val = served.features(TEXTS, fast=fast)
        dense = np.zeros((len(TEXTS), len(vec.vocabulary_)))
        dense[row, col] = val
        np.testing.assert_allclose(dense, vec.transform(TEXTS).toarray(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("setting,value", [("norm", "l1"), ("analyzer", "char"), ("strip_accents", "unicode"),
                                           ("use_idf", False), ("binary", True), ("ngram_range", [0, 2])])
def test_settings_the_numpy_baseline_does_not_implement_refuse_to_load(tmp_path, toy_rows, setting, value):
    texts, y = _train(toy_rows, ["dream", "error", "memo"].index)
    save_baseline(fit_baseline(texts, y, 0), tmp_path, 3, Blend(1, 1), {})
    path = tmp_path / BASELINE_DIR / "tfidf.json"
    spec = json.loads(path.read_text(encoding="utf-8"))
    spec["vectorizer"][setting] = value
    path.write_text(json.dumps(spec), encoding="utf-8")
    with pytest.raises(ValueError, match=rf"does not implement: {setting}=") as err:
        load_baseline(tmp_path)
    assert "\n" not in str(err.value)
