"""The live audit of a multi-label model (app/labeling/audit.py): the served answer is a label SET, maybe empty, so the
blind session is a multi-label one (the person ticks every label that applies, none allowed, with the answer
hidden) and `live_precision` scores sets: micro precision of the asserted labels, micro recall of the ticked
ones, the exact-set rate and per-label precision and recall. A queue holding both kinds (a swap from a
single-label version to a multi-label one) scores each text by its own version's kind; older queue items without
a kind keep the single-label rule. The expected figures are counted here from the decisions themselves."""

from __future__ import annotations

import json
from dataclasses import dataclass

import httpx
import pytest
from app_testkit import session_outputs, start_server
from multilabel_fixture import ML_LABELS
from test_app_monitor import FakeClf, FakeServed, Pred

from app.labeling.audit import AuditQueue, live_precision, start_session, wilson
from app.labeling.sessions import SessionStore
from app.monitoring.monitor import Monitor
from app.ui.label_view import _render_label
from app.versions.trainset import build
from serving.multilabel import MultiLabelPrediction
from textdata.labels import LabelSpace

SEP = ";"
SETS = LabelSpace.of(ML_LABELS, multi_label=True, sep=SEP)  # the served multi-label model's label space
# (served text, the set the model answered, the set the person ticks)
CASES = [
    ("꿈에서 메모 봤다", {"dream", "memo"}, {"dream"}),
    ("에러 발생했다 메모", {"error"}, {"error", "memo"}),
    ("오늘 좋은 날씨", set(), set()),
    ("메모 기록 꿈", {"memo"}, {"dream", "memo"}),
    ("dream error 오류", {"dream", "error"}, {"dream", "error"}),
    ("약속 내일", set(), {"memo"}),
    ("error memo 회의", {"error", "memo"}, {"dream"}),
]


@dataclass
class MLClf(FakeClf):
    space: LabelSpace = SETS


def ml_pred(labels: set[str]) -> MultiLabelPrediction:
    scores = {lab: (0.9 if lab in labels else 0.1) for lab in ML_LABELS}
    top = max(scores, key=scores.get)
    return MultiLabelPrediction([lab for lab in ML_LABELS if lab in labels], scores, top, scores[top], scores)


def serve(monitor: Monitor, engine, texts: list[str], preds: list) -> None:
    monitor.observe(engine, preds, texts, [[1] * 5 for _ in texts], 32)
    monitor.flush()


def expected(cases) -> dict:
    """Micro precision and recall, exact match and per-label counts, counted from (answer, ticked) pairs."""
    both = sum(len(a & t) for _, a, t in cases)
    asserted = sum(len(a) for _, a, _ in cases)
    ticked = sum(len(t) for _, _, t in cases)
    exact = sum(a == t for _, a, t in cases)
    per = {lab: {"asserted": sum(lab in a for _, a, _ in cases), "ticked": sum(lab in t for _, _, t in cases),
                 "both": sum(lab in a and lab in t for _, a, t in cases)} for lab in ML_LABELS}
    return {"both": both, "asserted": asserted, "ticked": ticked, "exact": exact, "per": per}


@pytest.fixture
def ml_monitor(tmp_path):
    monitor = Monitor(None)
    monitor.audit = AuditQueue(tmp_path / "mon", rate=1.0)
    yield monitor
    monitor.close()


def test_a_multi_label_audit_session_is_multi_label_and_blind(ml_monitor, tmp_path):
    engine = FakeServed(MLClf(tmp_path, ML_LABELS), "v2")
    serve(ml_monitor, engine, [c[0] for c in CASES], [ml_pred(c[1]) for c in CASES])
    queued = list(ml_monitor.audit.items.values())
    assert [set(i["answer"]) for i in queued] == [c[1] for c in CASES]  # an empty set stays empty
    assert all(i["multi_label"] for i in queued)
    store = SessionStore(tmp_path / "label")
    session = start_session(store, ml_monitor.audit, ML_LABELS, space=SETS)
    assert session.multi_label and session.meta["blind"] and session.meta["label_sep"] == SEP
    assert session.meta["order"] == "file order" and session.texts == [c[0] for c in CASES]
    assert all(session.suggested_set(r) == [] and session.probs[r] == {} for r in range(len(CASES)))
    out = _render_label(store, ML_LABELS, session)
    checks, hint = out[31], out[3]
    assert checks["visible"] is True and checks["value"] == [] and [c[1] for c in checks["choices"]] == ML_LABELS
    assert out[4]["visible"] == "hidden" and out[6]["visible"] == "hidden" and "hidden" in hint
    assert "suggests" not in hint and all(b.get("visible") == "hidden" for b in out[7:27])  # no one-label buttons
    assert all(out[i]["visible"] is True for i in (32, 33))  # save the ticked set, or none of these


def test_multi_label_live_precision_recall_and_exact_match_from_the_decisions(ml_monitor, tmp_path):
    engine = FakeServed(MLClf(tmp_path, ML_LABELS), "v2")
    serve(ml_monitor, engine, [c[0] for c in CASES], [ml_pred(c[1]) for c in CASES])
    store = SessionStore(tmp_path / "label")
    session = start_session(store, ml_monitor.audit, ML_LABELS, space=SETS)
    person = {text: ticked for text, _, ticked in CASES}
    for _ in CASES:
        row = session.current()
        assert session.decide(row, sorted(person[session.texts[row]], reverse=True))
    want = expected(CASES)
    assert want["asserted"] != want["ticked"]  # so precision and recall swapped would show
    live = live_precision(tmp_path / "label")["v2"]
    assert live["multi_label"] is True and live["audited"] == len(CASES)
    assert live["asserted"] == want["asserted"] and live["ticked"] == want["ticked"] and live["both"] == want["both"]
    assert live["precision"] == pytest.approx(want["both"] / want["asserted"])
    assert live["recall"] == pytest.approx(want["both"] / want["ticked"])
    assert live["exact_match"] == pytest.approx(want["exact"] / len(CASES))
    assert tuple(live["interval"]) == wilson(want["both"], want["asserted"])
    assert tuple(live["recall_interval"]) == wilson(want["both"], want["ticked"])
    assert tuple(live["exact_interval"]) == wilson(want["exact"], len(CASES))
    for lab, c in want["per"].items():
        got = live["per_label"][lab]
        assert (got["asserted"], got["ticked"], got["both"]) == (c["asserted"], c["ticked"], c["both"])
        assert got["precision"] == pytest.approx(c["both"] / c["asserted"])
        assert got["recall"] == pytest.approx(c["both"] / c["ticked"])
        assert tuple(got["interval"]) == wilson(c["both"], c["asserted"])
        assert tuple(got["recall_interval"]) == wilson(c["both"], c["ticked"])
    # the decisions are label sets for retraining like any multi-label session's, "none of these" included
    table = dict(zip(*build(tmp_path / "label", None, 0.0, SETS).train[["text", "label"]].T.values))
    assert table == {text: SEP.join(sorted(ticked)) for text, _, ticked in CASES}


def test_a_queue_of_both_kinds_scores_each_text_by_its_versions_kind(tmp_path):
    queue = AuditQueue(tmp_path / "mon", rate=1.0)
    single = [("s1 text", "dream", "dream"), ("s2 text", "error", "memo"), ("s3 text", "memo", "memo")]
    queue.offer("v1", [t for t, _, _ in single], [[a] for _, a, _ in single])  # before the swap
    queue.offer("v2", [c[0] for c in CASES], [sorted(c[1]) for c in CASES], multi_label=True)  # after it
    queue.save()
    queue = AuditQueue(tmp_path / "mon", rate=1.0)  # a restart keeps each item's kind
    store = SessionStore(tmp_path / "label")
    first = start_session(store, queue, ML_LABELS, space=SETS)  # the served version's kind first
    second = start_session(store, queue, ML_LABELS, space=SETS)  # then what is left, in its own kind
    assert first.multi_label and len(first.texts) == len(CASES)
    assert not second.multi_label and second.texts == [t for t, _, _ in single] and len(queue) == 0
    person = {text: ticked for text, _, ticked in CASES}
    for row, text in enumerate(first.texts):
        first.decide(row, sorted(person[text]))
    for row, (_, _, truth) in enumerate(single):
        second.decide(row, truth)
    live = live_precision(tmp_path / "label")
    assert set(live["v1"]) == {"audited", "precision", "interval", "per_class"}  # single-label: as it always was
    right = sum(a == t for _, a, t in single)
    assert live["v1"]["audited"] == 3 and live["v1"]["precision"] == pytest.approx(right / 3)
    assert live["v2"]["multi_label"] and live["v2"]["precision"] == pytest.approx(
        expected(CASES)["both"] / expected(CASES)["asserted"])


def test_older_items_without_a_kind_keep_the_single_label_rule(tmp_path):
    """Queue items and audit sessions saved before items carried their kind are scored as they were."""
    (tmp_path / "mon").mkdir()
    old = [{"hash": f"h{i}", "text": f"old {i}", "version": "v1", "answer": ["dream", "memo"], "ts": 0.0}
           for i in range(2)]
    (tmp_path / "mon" / "audit.json").write_text(json.dumps({"items": old, "seen": ["h0", "h1"]}))
    queue = AuditQueue(tmp_path / "mon", rate=1.0)
    store = SessionStore(tmp_path / "label")
    session = start_session(store, queue, ML_LABELS, space=SETS)
    assert not session.multi_label
    session.decide(0, "memo")  # among the answered set: right under the single-label rule
    session.decide(1, "error")
    live = live_precision(tmp_path / "label")["v1"]
    assert set(live) == {"audited", "precision", "interval", "per_class"} and live["precision"] == 0.5


def test_monitor_tab_and_api_show_the_multi_label_audit(multilabel_classifier_dir, tmp_path):
    """Through a real server: served label sets are sampled, the Monitor tab's button makes a blind multi-label
    session, the Label tab shows it with nothing ticked, and /v1/monitor and the tab report the set figures."""
    from app.ui.monitor import summary

    server = start_server(multilabel_classifier_dir, tmp_path, "--audit-rate", "1")
    try:
        server.wait_ready()
        url, tab = server.url, "mlaudit00001"
        texts = [c[0] for c in CASES]
        answers = [p["labels"] for p in httpx.post(url + "/v1/classify", json={"texts": texts}).json()["predictions"]]
        config = httpx.get(url + "/ui/config").json()
        by_id = {c["id"]: c.get("props", {}).get("elem_id") for c in config["components"]}
        fn = {(by_id.get(t), e): i for i, d in enumerate(config["dependencies"]) for t, e in d["targets"]}
        message = session_outputs(url, tab, fn[("monitor-audit", "click")], [50])[0]
        assert f"{len(texts)} texts" in message and "Tick every label" in message
        (made,) = SessionStore(tmp_path / "app-data" / "label").list()
        sid = made["id"]
        session_outputs(url, tab, fn[("tab-label", "select")], [None, None])  # opening the tab lists the sessions
        out = session_outputs(url, tab, fn[("label-sessions", "input")], [sid])
        assert out[31]["visible"] is True and out[31]["value"] == [] and "answer is hidden" in json.dumps(out[3])
        person = {text: ticked for text, _, ticked in CASES}
        for _ in texts:
            ticked = sorted(person[out[2]["value"]])  # none: its own key (Save with nothing ticked saves nothing)
            button = ("save-btn", "click") if ticked else ("none-btn", "click")
            out = session_outputs(url, tab, fn[button], [sid, out[1], ticked] if ticked else [sid, out[1]])
        report = httpx.get(url + "/v1/monitor").json()
        (version,) = report["versions"]
        live = report["versions"][version]["live_precision"]
        served = [(t, set(a), person[t]) for t, a in zip(texts, answers)]
        assert live["multi_label"] and live["audited"] == len(texts)
        assert live["exact_match"] == pytest.approx(expected(served)["exact"] / len(texts))
        shown = summary(report, version)
        assert "recall" in shown and "exact" in shown and "| dream |" in shown
    finally:
        server.stop()


def test_single_label_answers_still_queue_one_label(tmp_path):
    monitor = Monitor(None)
    monitor.audit = AuditQueue(None, rate=1.0)
    serve(monitor, FakeServed(FakeClf(tmp_path, ML_LABELS), "v1"), ["a", "b"], [Pred("memo", 0.9, {}),
                                                                             Pred("dream", 0.6, {})])
    assert [(i["answer"], i["multi_label"]) for i in monitor.audit.items.values()] == [(["memo"], False),
                                                                                       (["dream"], False)]
    monitor.close()
