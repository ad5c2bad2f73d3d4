"""The engine applies a folder's out-of-domain detector (ood/, baseline/ood.py): texts unlike the training rows
come back not confident with the reason "out of domain", the rest as before; /v1/model's info says so; the
API keeps such an answer not confident at any min_confidence; export carries ood/."""

import shutil

import numpy as np
import pytest

from app.http.api import _shape
from baseline.ood import OOD_DIR, fit_typicality, save_ood
from serving.engine import Classifier, Prediction

OFF_TOPIC = ["Shares in the bank fell sharply after the chancellor announced new taxes on profits",
             "library for parsing XML documents in Perl (development files)"]


@pytest.fixture(scope="module")
def ood_folder(trained_classifier_dir, tmp_path_factory, toy_rows):
    folder = tmp_path_factory.mktemp("ood") / "model"
    shutil.copytree(trained_classifier_dir, folder)
    rows = toy_rows(n_per_class=30, seed=1)  # the rows the fixture model was trained on
    labels = sorted(set(rows["label"]))
    typ, _ = fit_typicality(rows["text"].tolist(), rows["label"].map(labels.index).to_numpy(),
                            np.arange(len(rows)) % 3, len(labels))
    save_ood(folder, typ)
    return folder, toy_rows(n_per_class=4, seed=7)["text"].tolist()


def test_off_topic_not_confident_with_a_reason(ood_folder, trained_classifier_dir):
    folder, fresh = ood_folder
    clf = Classifier.load(folder, provider="torch")
    plain = Classifier.load(trained_classifier_dir, provider="torch")
    preds = clf.predict(fresh + OFF_TOPIC)
    assert [p.reason for p in preds[-2:]] == ["out of domain"] * 2 and not any(p.confident for p in preds[-2:])
    inside = preds[: len(fresh)]
    assert sum(p.reason is None for p in inside) >= len(fresh) - 1
    assert all(p.confident for p in inside if p.reason is None)  # no calibration.json: the rest are confident
    before = plain.predict(fresh + OFF_TOPIC)  # the scores and labels themselves do not move
    assert [p.label for p in preds] == [p.label for p in before]
    np.testing.assert_allclose([p.score for p in preds], [p.score for p in before], atol=1e-6)
    # the server's path: ids from encode() carry their text through the batcher
    again = clf.predict_encoded(clf.encode(OFF_TOPIC))
    assert [p.reason for p in again] == ["out of domain"] * 2
    info = clf.info()["calibration"]["out_of_domain"]
    assert info["cut"] >= 0 and "TF-IDF" in info["method"]
    assert plain.info()["calibration"]["out_of_domain"] is None


def test_api_shape_keeps_the_reason_at_any_min_confidence():
    away = Prediction(label="a", score=0.99, probabilities={"a": 0.99}, confident=False, reason="out of domain")
    fine = Prediction(label="a", score=0.99, probabilities={"a": 0.99})
    assert _shape(away, None, 0.0) == {"label": "a", "score": 0.99, "probabilities": {"a": 0.99},
                                     "confident": False, "reason": "out of domain"}
    assert _shape(fine, None, 0.0)["confident"] and "reason" not in _shape(fine, None)


def test_export_carries_the_detector(ood_folder, tmp_path):
    from baseline.ood import carry_ood

    folder, _ = ood_folder
    (tmp_path / OOD_DIR).mkdir()  # a stale one from an earlier export goes
    (tmp_path / OOD_DIR / "stale").write_text("x")
    carry_ood(folder, tmp_path)
    assert sorted(p.name for p in (tmp_path / OOD_DIR).iterdir()) == ["index.safetensors", "ood.json"]


def test_blend_and_detector_share_one_read(ood_folder, tmp_path, toy_rows, monkeypatch):
    """With a blend fitted on the detector's rows (as --final fits both), one TF-IDF read of each text serves
    the baseline and the detector: the answers are those of two separate reads."""
    from baseline.blend import Blend, fit_baseline, save_baseline
    from baseline.tfidf import CharTfidf

    folder, fresh = ood_folder
    shared = tmp_path / "model"
    shutil.copytree(folder, shared)
    rows = toy_rows(n_per_class=30, seed=1)
    labels = sorted(set(rows["label"]))
    save_baseline(fit_baseline(rows["text"].tolist(), rows["label"].map(labels.index).to_numpy(), 0), shared,
                  len(labels), Blend(1.0, 1.0), {})
    reads = []
    real = CharTfidf.read
    monkeypatch.setattr(CharTfidf, "read", lambda self, texts, fast=None: reads.append(len(texts)) or real(self, texts, fast))
    clf = Classifier.load(shared, provider="torch")
    assert clf.blend is not None
    clf.call_overhead_tokens, clf.side_rows  # noqa: B018 -- measured as a server does before ready
    reads.clear()  # loading and those measurements warm the engine up
    texts = fresh + OFF_TOPIC
    got = clf.predict_encoded(clf.encode(texts))
    assert reads == [len(texts)]  # one read for both
    assert [p.reason for p in got[-2:]] == ["out of domain"] * 2
    monkeypatch.setattr(type(clf.calibration), "_reads_like", lambda self, blend: False)
    reads.clear()
    apart = clf.predict_encoded(clf.encode(texts))
    assert reads == [len(texts)] * 2  # the baseline's and the detector's own
    assert [(p.label, p.confident, p.reason) for p in got] == [(p.label, p.confident, p.reason) for p in apart]
    np.testing.assert_allclose([p.score for p in got], [p.score for p in apart], atol=1e-6)
