"""Drift of what the served model sees and says, and live precision from the audit (app/monitoring/monitor.py,
app/labeling/audit.py): a simulated shift raises an alert, steady traffic raises none, an oracle-labeled audit gives a
live precision whose interval holds the true one, windows survive a restart, and the API shows it all."""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from starlette.testclient import TestClient

from app.config import Config, parse_args
from app.label_kinds import SINGLE
from app.labeling.audit import AuditQueue, live_precision, start_session, wilson
from app.labeling.sessions import SessionStore
from app.monitoring.monitor import Monitor
from serving.engine import Prediction
from textdata.drift import REFERENCE_FILE, build_reference

LABELS = ["dream", "error", "memo"]
MIX = [0.5, 0.3, 0.2]


Pred = Prediction  # the engine's answer type: the monitor matches answers by type (issue 41)


@dataclass
class FakeClf:
    folder: Path
    labels: list
    max_length: int = 32
    space: object = SINGLE  # single-label, as the engine's clf.space


@dataclass
class FakeServed:
    clf: FakeClf
    version: str


def traffic(rng, n, mix=MIX):
    """Answers drawn like the reference: labels by `mix`, confidences spread over 0.4-1, texts of 5-60 chars."""
    labels = rng.choice(len(LABELS), size=n, p=mix)
    conf = rng.uniform(0.4, 1.0, size=n)
    lengths = rng.integers(5, 60, size=n)
    preds = [Pred(LABELS[k], float(c), {}) for k, c in zip(labels, conf)]
    texts = [f"t{rng.integers(1 << 40)}".ljust(int(m), "x") for m in lengths]
    return preds, texts, [[1] * 10 for _ in texts]


@pytest.fixture
def reference_folder(tmp_path):
    rng = np.random.default_rng(0)
    preds, texts, _ = traffic(rng, 4000)
    probs = np.zeros((len(preds), 3))
    for i, p in enumerate(preds):  # the top score where the label is; the rest spread below it
        k = LABELS.index(p.label)
        probs[i] = (1 - p.score) / 2
        probs[i, k] = p.score
    folder = tmp_path / "v1"
    folder.mkdir()
    (folder / REFERENCE_FILE).write_text(json.dumps(build_reference(probs, texts, LABELS)))
    return folder


def feed(monitor, engine, rng, n, mix=MIX, chunk=50):
    for _ in range(0, n, chunk):
        monitor.observe(engine, *traffic(rng, chunk, mix), 32)
    monitor.flush()


def test_a_shift_to_one_class_alerts_within_1000_answers_and_steady_traffic_never(reference_folder, tmp_path,
                                                                                   caplog):
    engine = FakeServed(FakeClf(reference_folder, LABELS), "v1")
    rng = np.random.default_rng(1)
    monitor = Monitor(tmp_path / "mon", size=1000)
    with caplog.at_level(logging.WARNING, logger="app"):
        feed(monitor, engine, rng, 5000)  # 5,000 answers of the reference mix
        steady = monitor.snapshot()["versions"]["v1"]
        assert steady["alerts"] == [] and "drift alert" not in caplog.text
        assert max(h["class_mix"] for h in steady["history"]) < 0.1  # checked every 100 answers, never near
        feed(monitor, engine, rng, 1000, mix=[0, 1, 0])  # then only "error"
    shifted = monitor.snapshot()["versions"]["v1"]
    assert "class_mix" in shifted["alerts"] and shifted["levels"]["class_mix"] == "alert"
    first = next(i for i, h in enumerate(shifted["history"]) if h["class_mix"] >= 0.25)
    assert len(shifted["history"]) - first <= 10  # within the last 1,000 answers (a check every 100)
    assert "drift alert: class_mix" in caplog.text and caplog.text.count("drift alert: class_mix") == 1
    monitor.close()


def test_windows_are_per_version_and_survive_a_restart(reference_folder, tmp_path):
    rng = np.random.default_rng(2)
    v1 = FakeServed(FakeClf(reference_folder, LABELS), "v1")
    v2 = FakeServed(FakeClf(tmp_path / "no-ref", LABELS), "v2")
    monitor = Monitor(tmp_path / "mon", size=300)
    feed(monitor, v1, rng, 400)
    feed(monitor, v2, rng, 100)
    before = monitor.snapshot()["versions"]
    monitor.close()
    assert before["v1"]["n"] == 300 and before["v1"]["total"] == 400 and before["v2"]["n"] == 100
    assert before["v2"]["drift"] is None and "no reference" in before["v2"]["reference_note"]
    again = Monitor(tmp_path / "mon", size=300)
    feed(monitor=again, engine=v1, rng=rng, n=50)
    after = again.snapshot()["versions"]["v1"]
    assert after["total"] == 450 and after["n"] == 300 and after["history"][:3] == before["v1"]["history"][:3]
    again.close()


def test_a_reference_from_another_model_or_broken_is_named_and_serving_goes_on(reference_folder, tmp_path):
    other = FakeServed(FakeClf(reference_folder, ["a", "b"]), "v3")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / REFERENCE_FILE).write_text("{not json")
    monitor = Monitor(None)
    feed(monitor, other, np.random.default_rng(3), 50)
    monitor.observe(FakeServed(FakeClf(broken, LABELS), "v4"), *traffic(np.random.default_rng(4), 5), 32)
    monitor.flush()
    versions = monitor.snapshot()["versions"]
    assert "another model" in versions["v3"]["reference_note"] and versions["v3"]["drift"] is None
    assert "unreadable" in versions["v4"]["reference_note"] and versions["v4"]["n"] == 5


def test_a_full_pending_queue_drops_counts_without_blocking(tmp_path):
    monitor = Monitor(None, max_pending=1)
    engine = FakeServed(FakeClf(tmp_path, LABELS), "v1")
    with monitor.lock:  # the binning thread is stuck: the request path must still return at once
        for _ in range(20):
            monitor.observe(engine, *traffic(np.random.default_rng(5), 3), 32)
    monitor.flush()
    assert monitor.dropped > 0


def test_live_precision_from_an_oracle_labeled_audit_holds_the_true_precision(tmp_path):
    rng = np.random.default_rng(6)
    queue = AuditQueue(tmp_path / "mon", rate=0.05, seed=7)
    truth, answers, texts = {}, [], []
    for i in range(4000):  # the model is right 80% of the time on this traffic
        true = LABELS[rng.integers(3)]
        said = true if rng.random() < 0.8 else LABELS[(LABELS.index(true) + 1) % 3]
        text = f"served text {i}"
        truth[text] = true
        texts.append(text)
        answers.append([said])
    right = np.mean([a[0] == truth[t] for t, a in zip(texts, answers)])
    queue.offer("v1", texts, answers)
    queue.offer("v1", texts[:100], answers[:100])  # texts seen again are not sampled twice
    assert 120 < len(queue) < 290 and len({i["text"] for i in queue.items.values()}) == len(queue)
    store = SessionStore(tmp_path / "label")
    session = start_session(store, queue, LABELS, n=1000)
    assert session.meta["blind"] and session.meta["order"] == "file order" and len(queue) == 0
    for row, text in enumerate(session.texts):  # the oracle labels every audited text
        session.decide(row, truth[text])
    live = live_precision(tmp_path / "label")["v1"]
    lo, hi = live["interval"]
    assert live["audited"] == len(session.texts) and lo <= right <= hi and hi - lo < 0.15
    assert set(live["per_class"]) == set(LABELS)


def test_audit_queue_is_bounded_drops_the_oldest_and_survives_a_restart(tmp_path):
    queue = AuditQueue(tmp_path, rate=1.0, max_items=10)
    queue.offer("v1", [f"t{i}" for i in range(25)], [["memo"]] * 25)
    assert [i["text"] for i in queue.items.values()] == [f"t{i}" for i in range(15, 25)]
    queue.save()
    again = AuditQueue(tmp_path, rate=1.0, max_items=10)
    assert len(again) == 10 and again.offer("v1", ["t3", "new"], [["memo"]] * 2) == 1  # t3 was sampled before
    assert wilson(0, 0) == (0.0, 1.0) and 0 < wilson(1, 1)[0] < 1 == wilson(1, 1)[1]


@pytest.mark.parametrize("argv, message", [
    (["--audit-rate", "1.5"], "--audit-rate must be a share in [0, 1]"),
    (["--audit-rate", "-0.1"], "--audit-rate must be a share in [0, 1]"),
    (["--monitor-window", "0"], "--monitor-window must be at least 1"),
])
def test_bad_monitor_flags_are_one_line_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["--model", "m", *argv])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_api_reports_drift_metrics_and_audit_on_the_real_engine(spread_model_dir, tmp_path):
    from app.server import create_app
    from serving.engine import Classifier

    folder = tmp_path / "model"
    shutil.copytree(spread_model_dir, folder)
    clf = Classifier.load(folder)
    texts = ["꿈에서 봤다 오늘", "에러 발생했다 회의", "메모 약속 내일", "dream diary", "error memo", "좋은 날씨 일기"]
    (folder / REFERENCE_FILE).write_text(json.dumps(build_reference(clf.predict_proba(texts), texts, clf.labels)))
    clf = Classifier.load(folder)
    cfg = Config(model="m", ui=False, data_dir=tmp_path / "data", audit_rate=1.0)
    with TestClient(create_app(cfg, clf), base_url="http://127.0.0.1") as c:
        assert c.post("/v1/classify", json={"texts": texts}).status_code == 200
        assert c.post("/v1/classify", json={"texts": ["ok", "  "]}).status_code == 422  # an empty text, counted
        c.app.state.server.monitor.flush()
        report = c.get("/v1/monitor").json()
        (version,) = report["versions"]
        v = report["versions"][version]
        assert v["n"] == len(texts) and v["empty_rejected"] == 1 and v["drift"]["class_mix"] < 0.1
        assert report["audit"]["queued"] == len(texts)
        metrics = c.get("/metrics").text
        assert f'app_drift{{kind="class_mix",version="{version}"}}' in metrics
        assert "app_audit_queue_texts 6.0" in metrics
    assert (tmp_path / "data" / "monitor" / "state.json").is_file()  # saved at shutdown
    with TestClient(create_app(Config(model="m", ui=False, monitor=False), clf), base_url="http://127.0.0.1") as c:
        assert c.get("/v1/monitor").status_code == 404


def test_monitor_tab_summary_and_figure_show_the_window_against_the_reference(reference_folder, tmp_path):
    from app.ui.monitor import figure, summary

    monitor = Monitor(None, size=500)
    feed(monitor, FakeServed(FakeClf(reference_folder, LABELS), "v1"), np.random.default_rng(8), 600, mix=[0, 0, 1])
    report = monitor.report()
    text = summary(report, "v1")
    assert "ALERT</b> · the mix of labels the model answers" in text and "500 answers in the window" in text
    assert "answered nothing" in summary(report, "v9")
    fig = figure(report["versions"]["v1"])
    bars = fig.axes[0].patches
    assert len(bars) == 2 * len(LABELS) and bars[2].get_height() == pytest.approx(1.0)  # now: all "memo"
    assert len(fig.axes[2].lines) >= 3  # PSI of the three statistics over time


def test_alerts_agree_with_the_levels_and_a_restart_shows_the_kept_window(reference_folder, tmp_path):
    """Issue 45: levels read "alert" while alerts was [] (alerts moved only every check_every answers), and
    /v1/monitor showed no version after a restart until the first request."""
    rng = np.random.default_rng(3)
    engine = FakeServed(FakeClf(reference_folder, LABELS), "v1")
    monitor = Monitor(tmp_path / "mon", size=300, check_every=10_000)  # no check runs: only the levels move
    feed(monitor, engine, rng, 300, mix=[0.05, 0.05, 0.9])
    v = monitor.snapshot()["versions"]["v1"]
    assert v["levels"]["class_mix"] == "alert" and "class_mix" in v["alerts"]
    assert sorted(v["alerts"]) == sorted(k for k, lv in v["levels"].items() if lv == "alert")
    monitor.close()
    restarted = Monitor(tmp_path / "mon", size=300)
    assert restarted.snapshot()["versions"] == {}
    restarted.attach(engine)  # what create_app does with the served version
    assert restarted.snapshot()["versions"]["v1"]["n"] == 300
    restarted.close()


def _monitor_tab(monitor, served):
    """The Monitor tab's functions on `monitor`, serving `served` (a FakeServed)."""
    import gradio as gr

    from app.ui.monitor import monitor_tab

    state = type("State", (), {"monitor": monitor, "served": served, "fallback": None})()
    with gr.Blocks() as demo:
        monitor_tab(Config(), state, SessionStore(Path(monitor.folder or ".") / "label"))
    return {f.fn.__name__: f.fn for f in demo.fns.values()}


def test_a_switch_then_a_restart_keeps_the_previous_version_s_figures(reference_folder, tmp_path):
    """Issue 45: after a switch the previous version's figures vanished from the Monitor tab; after a restart
    /v1/monitor listed only the version served, and the earlier one came back without its reference."""
    rng = np.random.default_rng(5)
    v1 = FakeServed(FakeClf(reference_folder, LABELS), "v1")
    v2 = FakeServed(FakeClf(tmp_path / "no-ref", LABELS), "v2")
    monitor = Monitor(tmp_path / "mon", size=300, check_every=100)
    feed(monitor, v1, rng, 300, mix=[0.05, 0.05, 0.9])
    feed(monitor, v2, rng, 100)  # the switch: v2 serves now
    refresh = _monitor_tab(monitor, v2)["refresh"]
    text, fig, pick = refresh(None)
    assert text.startswith("Version **v2**") and pick["value"] == "v2"
    assert [v for _, v in pick["choices"]] == ["v2", "v1"] and pick["choices"][0][0] == "v2 (serving)"
    text, fig, pick = refresh("v1")  # the previous version, chosen in the picker
    assert text.startswith("Version **v1**: 300 answers") and "ALERT" in text and fig is not None
    monitor.close()

    restarted = Monitor(tmp_path / "mon", size=300)
    restarted.attach(v2)  # what create_app does with the served version
    earlier = restarted.snapshot()["versions"]["v1"]
    assert earlier["n"] == 300 and earlier["levels"]["class_mix"] == "alert" and len(earlier["history"]) == 3
    text, fig, pick = _monitor_tab(restarted, v2)["refresh"]("v1")
    assert "ALERT" in text and fig is not None and len(fig.axes[2].lines) >= 3
    feed(restarted, v1, rng, 50)  # v1 serves again: its reference is read from its folder
    assert restarted.snapshot()["versions"]["v1"]["total"] == 350
    restarted.close()
    state = json.loads((tmp_path / "mon" / "state.json").read_text())
    state["versions"]["v1"]["labels"] = "not a list"  # a hand-edited file: that window is not shown, the rest is
    (tmp_path / "mon" / "state.json").write_text(json.dumps(state))
    again = Monitor(tmp_path / "mon", size=300)
    again.attach(v2)
    assert list(again.snapshot()["versions"]) == ["v2"]
    again.close()


def test_the_monitor_counts_the_uis_answers_as_the_apis(spread_model_dir, tmp_path):
    """Classify and Batch in the UI feed the monitor's window and app_not_confident_total as the JSON API does:
    the window's count is API + Classify + Batch answers (issue 59, D5: the UI's answers were never counted)."""
    from gradio.utils import get_upload_folder

    from app.server import create_app
    from serving.engine import Classifier

    clf = Classifier.load(spread_model_dir)
    # every answer "not sure" (a threshold nothing clears), so the counter moves with each of them
    clf.calibration.flags = lambda probs, away: (np.zeros(len(probs), bool), [None] * len(probs))
    clf.calibration.confident = lambda probs: np.zeros(len(probs), bool)
    cfg = Config(model="m", data_dir=tmp_path / "data")
    upload = Path(get_upload_folder()) / f"monitor-test-{tmp_path.name}" / "batch.csv"
    upload.parent.mkdir(parents=True, exist_ok=True)
    upload.write_text("text\n" + "".join(f"메모 {i} 약속\n" for i in range(7)) + ",\n", encoding="utf-8")
    with TestClient(create_app(cfg, clf), base_url="http://127.0.0.1") as c:
        blocks = next(r.app for r in c.app.routes if getattr(r, "path", None) == "/ui").get_blocks()
        fn = {getattr(f.fn, "__name__", ""): f.fn for f in blocks.fns.values()}
        assert c.post("/v1/classify", json={"texts": ["에러 발생했다", "좋은 날씨"]}).status_code == 200
        c.portal.call(fn["classify"], "꿈에서 봤다 오늘")
        scored = fn["score_file"](str(upload), "text")  # 7 texts and an empty row (not an answer)
        assert "Scored **7** of 8 rows" in scored[1], scored[1]
        c.app.state.server.monitor.flush()
        (v,) = c.get("/v1/monitor").json()["versions"].values()
        assert v["n"] == 2 + 1 + 7
        assert "app_not_confident_total 10.0" in c.get("/metrics").text


def test_no_alert_before_the_window_has_the_answers_it_needs(reference_folder, tmp_path, caplog):
    """3 answers of one class read PSI 4.7 to 17: three red ALERTs telling a team to audit and retrain, while the
    class-mix estimate waited for 50 answers and the drift chart for 100 (issue 59, D6). Under 100 answers every
    level is "too few" and nothing alerts or logs; the same shift at 100 answers alerts."""
    from app.monitoring.monitor import DRIFT_MIN_ANSWERS
    from app.ui.monitor import summary

    caplog.set_level(logging.WARNING, logger="app")
    engine = FakeServed(FakeClf(reference_folder, LABELS), "v1")
    monitor = Monitor(None, size=1000, check_every=1)  # a check at every answer: the log would say an alert
    feed(monitor, engine, np.random.default_rng(6), DRIFT_MIN_ANSWERS - 1, mix=[0.0, 0.0, 1.0], chunk=DRIFT_MIN_ANSWERS - 1)
    report = monitor.report()
    v = report["versions"]["v1"]
    assert v["drift"]["class_mix"] >= 0.25 and set(v["levels"].values()) == {"too few"} and v["alerts"] == []
    assert "drift alert" not in caplog.text and "ALERT" not in summary(report, "v1")
    assert f"under {DRIFT_MIN_ANSWERS} answers" in summary(report, "v1")
    feed(monitor, engine, np.random.default_rng(7), 1, mix=[0.0, 0.0, 1.0], chunk=1)
    v = monitor.report()["versions"]["v1"]
    assert v["levels"]["class_mix"] == "alert" and "class_mix" in v["alerts"] and "drift alert: class_mix" in caplog.text
    monitor.close()
