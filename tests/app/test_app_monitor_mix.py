"""The Monitor's estimated class mix (app/monitoring/monitor.py, textdata/prior_shift.py): from the served probabilities of
the answers in the window, it finds a moved mix that the answered-label mix misreads, says "consistent" for steady
traffic, survives a restart, and shows in the Monitor tab and /v1/monitor."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_app_monitor import FakeClf, FakeServed  # tests/app is on the path, as app_testkit is

from app.monitoring.monitor import Monitor
from serving.engine import Prediction
from textdata.drift import REFERENCE_FILE, build_reference

LABELS = ["dream", "error", "memo"]
TRAINED = np.array([0.5, 0.3, 0.2])
MEANS = np.array([[0.0, 0.0], [1.5, 0.0], [0.0, 1.5]])


def labeled(rng, mix, n):
    """(calibrated probabilities: exact posteriors under the training mix, true labels) of n texts drawn at `mix`."""
    y = rng.choice(3, size=n, p=mix)
    x = MEANS[y] + rng.normal(size=(n, 2))
    log_like = -0.5 * ((x[:, None, :] - MEANS[None]) ** 2).sum(-1)
    p = np.exp(log_like - log_like.max(1, keepdims=True)) * TRAINED
    return p / p.sum(1, keepdims=True), y


def posteriors(rng, mix, n):
    return labeled(rng, mix, n)[0]


def answers(p, top_k=None):
    out = []
    for row in p:
        keep = np.argsort(-row)[: top_k or len(row)]
        out.append(Prediction(LABELS[int(row.argmax())], float(row.max()), {LABELS[j]: float(row[j]) for j in keep}))
    return out


@pytest.fixture
def folder(tmp_path):
    p = posteriors(np.random.default_rng(0), TRAINED, 4000)
    (tmp_path / REFERENCE_FILE).write_text(json.dumps(build_reference(p, ["x"] * len(p), LABELS)))
    return tmp_path


def feed(monitor, engine, p, top_k=None):
    for i in range(0, len(p), 100):
        monitor.observe(engine, answers(p[i:i + 100], top_k), ["text"] * len(p[i:i + 100]), [[1]] * 100, 32)
    monitor.flush()


def test_the_window_estimates_a_moved_mix_the_answered_labels_misread(folder, tmp_path):
    engine = FakeServed(FakeClf(folder, LABELS), "v1")
    monitor = Monitor(tmp_path / "mon", size=1000)
    rng = np.random.default_rng(1)
    feed(monitor, engine, posteriors(rng, TRAINED, 1000))
    steady = monitor.snapshot()["versions"]["v1"]["estimated_mix"]
    assert not steady["moved"] and steady["rows"] == 1000
    assert max(abs(steady["mix"][k] - t) for k, t in zip(LABELS, TRAINED)) < 0.05
    moved = np.array([0.1, 0.2, 0.7])
    feed(monitor, engine, posteriors(rng, moved, 1000), top_k=2)  # a top_k answer: the left-out label shares the rest
    v = monitor.snapshot()["versions"]["v1"]
    est = v["estimated_mix"]
    assert est["moved"] and est["p_value"] < 1e-6
    answered = np.array([v["class_mix"][k] for k in LABELS]) / v["n"]
    assert max(abs(est["mix"][k] - m) for k, m in zip(LABELS, moved)) < 0.05 < np.abs(answered - moved).max()
    monitor.close()
    again = Monitor(tmp_path / "mon", size=1000)
    again.attach(engine)
    assert again.snapshot()["versions"]["v1"]["estimated_mix"]["mix"] == est["mix"]  # kept in state.json
    again.close()


def test_few_answers_or_no_reference_show_no_estimate_and_the_tab_says_so(folder, tmp_path):
    from app.ui.monitor import figure, summary

    monitor = Monitor(None, size=500)
    feed(monitor, FakeServed(FakeClf(tmp_path / "none", LABELS), "v0"), posteriors(np.random.default_rng(2), TRAINED, 300))
    engine = FakeServed(FakeClf(folder, LABELS), "v1")
    feed(monitor, engine, posteriors(np.random.default_rng(3), TRAINED, 40)[:40])
    report = monitor.report()
    assert report["versions"]["v0"]["estimated_mix"] is None and report["versions"]["v1"]["estimated_mix"] is None
    assert "Estimated class mix: not shown" in summary(report, "v1")
    feed(monitor, engine, posteriors(np.random.default_rng(4), np.array([0.05, 0.05, 0.9]), 500))
    report = monitor.report()
    text = summary(report, "v1")
    assert "has **moved** from the training mix" in text and "memo" in text.split("training mix")[1]
    assert ("Read it with care" in text) == (report["versions"]["v1"]["levels"]["confidence"] == "alert")
    alerted = {**report["versions"]["v1"], "levels": {**report["versions"]["v1"]["levels"], "confidence": "alert"}}
    assert "Read it with care" in summary({**report, "versions": {"v1": alerted}}, "v1")
    steady = {**alerted, "levels": {**alerted["levels"], "confidence": "ok"}}
    assert "Read it with care" not in summary({**report, "versions": {"v1": steady}}, "v1")
    fig = figure(report["versions"]["v1"])
    (marks,) = fig.axes[0].collections  # the estimated mix, one marker a label
    assert marks.get_offsets()[:, 1][2] == pytest.approx(report["versions"]["v1"]["estimated_mix"]["mix"]["memo"])


def test_prior_correction_is_served_while_the_mix_moved_and_taken_away_after(folder, tmp_path):
    """--prior-correction (serving/prior.py): off while the mix is the training one; on once the window's test
    says it moved, with the estimated mix, lowering the log-loss of what is served; the window keeps counting the
    calibrated scores (the estimate does not run away on its own output); off again when the mix comes back."""
    from serving.calibration import ServedCalibration

    clf = FakeClf(folder, LABELS)
    clf.calibration = ServedCalibration()
    engine = FakeServed(clf, "v1")
    monitor = Monitor(None, size=1000)
    monitor.correct_priors = True
    rng = np.random.default_rng(5)

    def serve(mix, n):
        for _ in range(n // 100):
            p, _ = labeled(rng, mix, 100)
            monitor.observe(engine, answers(clf.calibration(p)), ["text"] * 100, [[1]] * 100, 32)
            monitor.flush()

    serve(TRAINED, 1000)
    assert clf.calibration.prior is None and clf.calibration.info()["prior_correction"] == {"applied": False}
    moved = np.array([0.1, 0.2, 0.7])
    serve(moved, 2000)
    prior = clf.calibration.prior
    assert prior is not None and np.abs(prior.prior - moved).max() < 0.05
    est = monitor.snapshot()["versions"]["v1"]["estimated_mix"]
    assert max(abs(est["mix"][k] - m) for k, m in zip(LABELS, moved)) < 0.05  # counted undone
    info = clf.calibration.info()["prior_correction"]
    assert info["applied"] and "moved from the training mix" in info["why"]
    p, y = labeled(rng, moved, 2000)
    loss = lambda q: -np.log(q[np.arange(len(y)), y]).mean()
    assert loss(clf.calibration(p)) < loss(p) - 0.05
    serve(TRAINED, 1500)
    assert clf.calibration.prior is None


def test_prior_correction_stays_off_where_kfold_measured_that_it_loses(folder):
    """calibration.json's "prior_correction" (finetune/prior_check.py): a model whose k-fold check found the
    correction losing is never corrected, however far the mix moves; /v1/model says why."""
    from serving.calibration import ServedCalibration

    clf = FakeClf(folder, LABELS)
    check = {"wins": False, "why": "corrected log-loss lower in 20% -> not served with --prior-correction"}
    clf.calibration = ServedCalibration(spec={"prior_correction": check})
    engine = FakeServed(clf, "v1")
    monitor = Monitor(None, size=1000)
    monitor.correct_priors = True
    rng = np.random.default_rng(6)
    for _ in range(20):
        p, _ = labeled(rng, np.array([0.1, 0.2, 0.7]), 100)
        monitor.observe(engine, answers(clf.calibration(p)), ["text"] * 100, [[1]] * 100, 32)
        monitor.flush()
    assert monitor.snapshot()["versions"]["v1"]["estimated_mix"]["moved"]
    assert clf.calibration.prior is None
    assert clf.calibration.info()["prior_correction"] == {"applied": False, "kfold_check": check}
