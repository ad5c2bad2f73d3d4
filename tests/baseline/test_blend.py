"""The baseline and blend math that k-fold fits and serving applies (baseline/blend.py)."""

import numpy as np
import pytest

from baseline.blend import (
    BASELINE_DIR,
    BaselineError,
    Blend,
    baseline_proba,
    fit_baseline,
    fit_blend,
    load_baseline,
    nested_blend,
    save_baseline,
)


def _two_models(n=600, k=4, seed=0):
    """A flat but informative 'fine-tuned model' (top probability ~0.3) and a sharp, noisier baseline that errs
    on other rows: the situation the blend is for."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    signal = np.eye(k)[y]
    logits_m = 0.4 * (2.0 * signal + rng.normal(0, 1.0, (n, k)))
    logits_b = 4.0 * (1.5 * signal + rng.normal(0, 1.0, (n, k)))
    soft = lambda z: np.exp(z - z.max(1, keepdims=True)) / np.exp(z - z.max(1, keepdims=True)).sum(1, keepdims=True)
    return soft(logits_m), soft(logits_b), y


def _nll(p, y):
    return -np.mean(np.log(np.clip(p[np.arange(len(y)), y], 1e-12, 1)))


def test_fit_blend_finds_the_log_loss_optimum_and_beats_both_models():
    pm, pb, y = _two_models()
    blend = fit_blend(pm, pb, y)
    best = _nll(blend(pm, pb), y)
    grid = [_nll(Blend(a, b)(pm, pb), y) for a in np.linspace(0, 6, 31) for b in np.linspace(0, 1.5, 31)]
    assert best <= min(grid) + 1e-6
    assert blend.model_weight > 1 and 0 < blend.baseline_weight < 1  # the flat model is scaled up, the sharp one down
    acc = lambda p: float((p.argmax(1) == y).mean())
    assert acc(blend(pm, pb)) > max(acc(pm), acc(pb))
    np.testing.assert_allclose(blend(pm, pb).sum(1), 1.0)


def test_nested_blend_never_fits_a_fold_on_its_own_rows():
    pm, pb, y = _two_models()
    fold_of = np.arange(len(y)) % 3
    blended, params = nested_blend(pm, pb, y, fold_of)
    for k in range(3):
        rest = fold_of != k
        assert params[k] == fit_blend(pm[rest], pb[rest], y[rest])
        np.testing.assert_allclose(blended[fold_of == k], params[k](pm[fold_of == k], pb[fold_of == k]))
    # Scrambling fold 0's labels changes the other folds' parameters, never fold 0's own.
    y2 = y.copy()
    y2[fold_of == 0] = (y2[fold_of == 0] + 1) % 4
    _, params2 = nested_blend(pm, pb, y2, fold_of)
    assert params2[0] == params[0] and params2[1] != params[1]


def test_saved_baseline_is_rebuilt_without_pickle_and_predicts_the_same(tmp_path, toy_rows):
    df = toy_rows(n_per_class=10)
    labels = sorted(df["label"].unique())
    y = df["label"].map(labels.index).to_numpy()
    model = fit_baseline(df["text"].tolist(), y, seed=3)
    texts = df["text"].tolist()[:15] + ["꿈 꿈 일정", "", "처음 보는 글자들 xyz"]
    save_baseline(model, tmp_path, len(labels), Blend(2.5, 0.5), {"nested_macro_f1_mean": 0.9})
    files = sorted(p.name for p in (tmp_path / BASELINE_DIR).iterdir())
    assert files == ["blend.json", "tfidf.json", "weights.safetensors"]
    for p in (tmp_path / BASELINE_DIR).iterdir():  # the slim image serves as another user than the one who trained
        assert p.stat().st_mode & 0o044 == 0o044, p.name
    loaded, n_classes, blend, meta = load_baseline(tmp_path)
    assert n_classes == 3 and blend == Blend(2.5, 0.5) and meta["nested_macro_f1_mean"] == 0.9
    np.testing.assert_allclose(baseline_proba(loaded, texts, 3), baseline_proba(model, texts, 3), rtol=0, atol=1e-12)


def test_a_broken_saved_baseline_is_one_clear_error(tmp_path, toy_rows):
    df = toy_rows(n_per_class=5)
    save_baseline(fit_baseline(df["text"].tolist(), df["label"].factorize()[0], 0), tmp_path, 3, Blend(1, 1), {})
    (tmp_path / BASELINE_DIR / "weights.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(ValueError, match="unreadable baseline"):
        load_baseline(tmp_path)


@pytest.mark.parametrize("texts,y,match", [
    (["a b", "b c", "c d"], [1, 1, 1], "only one class"),
    (["", "", "", ""], [0, 1, 0, 1], "empty vocabulary"),
])
def test_a_baseline_that_cannot_be_fitted_raises_baseline_error(texts, y, match):
    with pytest.raises(BaselineError, match=match):
        fit_baseline(texts, np.array(y), 0)


def test_classes_unseen_in_training_get_zero_probability():
    model = fit_baseline(["꿈 꿈", "꿈 봤다", "오류 에러", "에러 발생"], np.array([0, 0, 2, 2]), 0)
    proba = baseline_proba(model, ["꿈"], 3)
    assert proba.shape == (1, 3) and proba[0, 1] == 0 and proba.sum() == pytest.approx(1)
