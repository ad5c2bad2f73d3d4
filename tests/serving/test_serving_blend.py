"""The served blend (baseline/blend.py through serving.engine, serving.export and serving.score)."""

import numpy as np
import pytest

from baseline.blend import BASELINE_DIR, Blend, baseline_proba, fit_baseline, save_baseline


# ----------------------------------------------------------------------------------------- served
@pytest.fixture(scope="module")
def blended_dir(trained_classifier_dir, tmp_path_factory, toy_rows):
    import shutil

    folder = tmp_path_factory.mktemp("blended")
    for p in trained_classifier_dir.iterdir():
        shutil.copy2(p, folder / p.name)
    (folder / "normalization.json").write_text('{"kind": "kc", "max_repeats": 2}')
    rows = toy_rows(n_per_class=12, seed=5)
    labels = ["dream", "error", "memo"]  # the fixture's id2label order
    baseline = fit_baseline(rows["text"].tolist(), rows["label"].map(labels.index).to_numpy(), 0)
    save_baseline(baseline, folder, 3, Blend(1.7, 0.6), {"method": "test", "nested_macro_f1_mean": 0.8})
    return folder, baseline


TEXTS = ["꿈에서 봤다", "오류 발생했다!!!!! 😀", "메모 기록 약속", "", "  회의   시간  ", "x" * 9000 + " 꿈"]


def _expected(clf, baseline, texts):
    from textdata.normalize import Normalizer

    kc = Normalizer("kc")
    logits = clf.predict_logits(texts)
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    return Blend(1.7, 0.6)(p, baseline_proba(baseline, [kc(t) for t in texts], 3))


def test_classifier_serves_the_blend_by_default_and_a_flag_turns_it_off(blended_dir):
    from serving.engine import Classifier

    folder, baseline = blended_dir
    clf = Classifier.load(folder, provider="torch")
    want = _expected(clf, baseline, TEXTS)
    np.testing.assert_allclose(clf.predict_proba(TEXTS), want, atol=1e-5)
    # the API's path: ids from encode() through predict_encoded (and the batcher's regrouping)
    seqs = clf.encode(TEXTS)
    preds = clf.predict_encoded([seqs[i] for i in (2, 0, 1, 5, 4, 3)])
    np.testing.assert_allclose([list(p.probabilities.values()) for p in preds], want[[2, 0, 1, 5, 4, 3]], atol=1e-5)
    info = clf.info()
    assert info["blend"]["model_weight"] == 1.7 and info["blend"]["nested_macro_f1_mean"] == 0.8
    plain = Classifier.load(folder, provider="torch", blend=False)
    assert plain.info()["blend"] is None and plain.info()["blend_available"]
    model_only = plain.predict_proba(TEXTS)
    # the blend does change the numbers (in log space: a sharp model's probabilities sit near 0 and 1)
    assert np.abs(np.log(model_only) - np.log(want)).max() > 1e-2
    np.testing.assert_allclose(clf.predict_logits(TEXTS), plain.predict_logits(TEXTS), atol=1e-6)


def test_export_carries_the_blend_and_onnx_serves_it(blended_dir, tmp_path):
    from serving import export
    from serving.engine import Classifier

    folder, baseline = blended_dir
    out = tmp_path / "onnx"
    export.run(export.ExportConfig(model=folder, output=out))
    assert sorted(p.name for p in (out / BASELINE_DIR).iterdir()) == ["blend.json", "tfidf.json", "weights.safetensors"]
    clf = Classifier.load(out, provider="cpu")
    assert clf.info()["blend"] is not None and clf.info()["backend"] == "onnx"
    np.testing.assert_allclose(clf.predict_proba(TEXTS), _expected(clf, baseline, TEXTS), atol=1e-5)


def test_a_broken_blend_refuses_to_load_with_a_clear_error(blended_dir, tmp_path):
    import shutil

    from serving.engine import Classifier, ModelError

    folder = tmp_path / "m"
    shutil.copytree(blended_dir[0], folder)
    (folder / BASELINE_DIR / "tfidf.json").write_text("{")
    with pytest.raises(ModelError, match="unreadable baseline"):
        Classifier.load(folder, provider="torch")
    assert Classifier.load(folder, provider="torch", blend=False).info()["blend"] is None


def test_score_writes_blended_probabilities_and_no_blend_the_model_s(blended_dir, tmp_path):
    import pandas as pd

    from serving import score
    from serving.engine import Classifier

    folder, _ = blended_dir
    src = tmp_path / "in.csv"
    pd.DataFrame({"text": TEXTS[:3] + TEXTS[4:]}).to_csv(src, index=False)
    texts = pd.read_csv(src, keep_default_na=False)["text"].tolist()
    cols = ["prob_dream", "prob_error", "prob_memo"]
    for flags, blend in (([], True), (["--no-blend"], False)):
        out = tmp_path / f"out-{blend}.csv"
        cfg = score.parse_args(["--model", str(folder), "--input", str(src), "--output", str(out), "--no-progress",
                                *flags])
        assert cfg.blend is blend
        score.run(cfg)
        want = Classifier.load(folder, provider="torch", blend=blend).predict_proba(texts)
        np.testing.assert_allclose(pd.read_csv(out)[cols].to_numpy(), want, atol=1e-4)


def test_baseline_beside_the_model_gives_the_sequential_numbers(blended_dir, monkeypatch):
    """The engine runs the baseline in a side thread during the model's pass; the numbers equal the path that runs
    it after the model, exactly, for whole batches and for the API's mixed ids."""
    from serving import side_work
    from serving.engine import Classifier

    folder, _ = blended_dir
    clf = Classifier.load(folder, provider="torch")
    clf.side_rows = 2  # beside from 2 rows: fixed, not this machine's measurement
    submitted = []
    submit = side_work.POOL.submit
    monkeypatch.setattr(side_work.POOL, "submit", lambda fn, *a: submitted.append(len(a[0])) or submit(fn, *a))
    texts = TEXTS * 7
    seqs = clf.encode(texts)
    mixed = seqs[:10] + [list(s) for s in seqs[10:15]] + seqs[15:]  # plain ids: no text, the model's own numbers
    overlapped = clf.predict_proba(texts), clf._proba(mixed), clf.predict_proba(TEXTS[:1])
    assert submitted == [len(texts), len(texts) - 5]  # one text: no hand-off
    clf.side_rows = side_work.NEVER
    sequential = clf.predict_proba(texts), clf._proba(mixed), clf.predict_proba(TEXTS[:1])
    assert len(submitted) == 2
    for a, b in zip(overlapped, sequential):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert not np.array_equal(sequential[1][10:15], sequential[0][10:15])  # the plain-id rows were not blended
