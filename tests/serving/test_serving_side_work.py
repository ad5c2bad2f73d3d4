"""Where the blend's baseline and the off-topic detector run (serving/side_work.py): beside the model's pass or
inline after it, as the engine measured; the answers are the same bit for bit either way."""

import shutil

import numpy as np
import pytest
from test_serving_ood import OFF_TOPIC, ood_folder  # noqa: F401 - the fixture, shared

from serving import side_work
from serving.engine import Classifier


@pytest.fixture(scope="module")
def side_folder(ood_folder, tmp_path_factory, toy_rows):  # noqa: F811
    """test_serving_ood.py's model with its off-topic detector, and a blend fitted on the same rows, as --final
    writes both."""
    from baseline.blend import Blend, fit_baseline, save_baseline

    folder = tmp_path_factory.mktemp("side") / "model"
    shutil.copytree(ood_folder[0], folder)
    rows = toy_rows(n_per_class=30, seed=1)
    labels = sorted(set(rows["label"]))
    save_baseline(fit_baseline(rows["text"].tolist(), rows["label"].map(labels.index).to_numpy(), 0), folder,
                  len(labels), Blend(1.3, 0.7), {})
    return folder, ood_folder[1] + OFF_TOPIC


def _answers(preds):
    return [(p.label, p.score, p.probabilities, p.confident, p.reason) for p in preds]


def test_beside_and_inline_answer_the_same_bit_for_bit(side_folder, monkeypatch):
    folder, texts = side_folder
    clf = Classifier.load(folder, provider="torch")
    assert clf.blend is not None and clf.calibration.ood is not None
    clf.call_overhead_tokens = 4.0  # a fixed plan: the two modes must see the same passes
    submitted = []
    submit = side_work.POOL.submit
    monkeypatch.setattr(side_work.POOL, "submit", lambda fn, *a: submitted.append(fn) or submit(fn, *a))
    got = {}
    for rows in (1, side_work.NEVER):
        clf.side_rows = rows
        got[rows] = (clf.predict(texts), clf.predict(texts[:1]), clf.predict_encoded(clf.encode(texts)),
                     clf.predict_encoded(clf.encode(texts[-1:])), clf.predict_proba(texts))
        if rows == 1:  # beside: every call handed its side work to the pool (one shared read: blend and detector)
            assert len(submitted) == 5
    assert len(submitted) == 5  # inline: nothing more went to the pool
    beside, inline = got[1], got[side_work.NEVER]
    for a, b in zip(beside[:4], inline[:4]):
        assert _answers(a) == _answers(b)
    assert beside[4].dtype == inline[4].dtype and np.array_equal(beside[4], inline[4])
    assert [p.reason for p in inline[0][-2:]] == ["out of domain"] * 2  # the detector ran inline too
    plain = Classifier.load(folder, provider="torch", blend=False).predict_proba(texts)
    assert not np.allclose(plain, inline[4])  # the blend took part inline


def test_side_rows_measured_once_and_only_where_there_is_side_work(side_folder, trained_classifier_dir,
                                                                    monkeypatch):
    folder, _ = side_folder
    calls = []
    real = side_work.measure_side_rows
    monkeypatch.setattr(side_work, "measure_side_rows", lambda run, **kw: calls.append(1) or real(run, repeats=2))
    clf = Classifier.load(folder, provider="torch")
    first = clf.side_rows
    assert first in (*side_work.SIZES, side_work.NEVER) and clf.side_rows == first and len(calls) == 1
    assert Classifier.load(trained_classifier_dir, provider="torch").side_rows == side_work.NEVER
    assert len(calls) == 1  # nothing beside the pass: nothing measured
    monkeypatch.setattr(side_work, "FIXED", side_work.NEVER)
    assert clf.side_rows == side_work.NEVER  # a benchmark's fixed choice wins


def test_measurement_picks_the_first_size_where_beside_is_faster():
    import time

    def run(cost):
        return lambda n, beside: time.sleep(cost(n, beside))

    assert side_work.measure_side_rows(run(lambda n, b: 0.002 if b == (n < 4) else 0.0), repeats=3) == 4
    assert side_work.measure_side_rows(run(lambda n, b: 0.002 if b else 0.0), repeats=3) == side_work.NEVER
    assert side_work.measure_side_rows(run(lambda n, b: 0.0 if b else 0.002), repeats=3) == 1


def test_inline_runs_its_call_once_when_asked():
    calls = []
    later = side_work.INLINE.submit(lambda x: calls.append(x) or x * 2, 21)
    assert calls == []  # nothing yet: it runs after the pass, when the answer needs it
    assert later.result() == 42 and later.result() == 42 and calls == [21]
