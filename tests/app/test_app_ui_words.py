"""What the UI says, checked without a browser (issue 45): the Train tab's versions table and job line, the
Classify answer when the model is not sure, the Batch summary and preview, the Label tab's key hints, the
Monitor's words, and a person's mistake logged as one line instead of a traceback."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import gradio as gr
import numpy as np
import pandas as pd
import pytest

from serving.engine import Prediction


def test_versions_table_shows_what_is_served_and_a_decision_in_words():
    from app.ui.train import VERSION_COLUMNS, VERSION_WIDTHS, versions_frame

    class Registry:
        def listing(self):
            return [{"version": "v2", "active": True, "source": "trained", "rows": 52, "cv_macro_f1": 0.0286,
                     "cv_served_macro_f1": 0.5286, "cv_served": "blend", "created": 0,
                     "last_decision": {"why": "not compared: all 52 evaluation texts were trained on"}},
                    {"version": "v1", "active": False, "source": "imported", "cv_macro_f1": 0.41, "created": 0}]

    df = versions_frame(Registry())
    assert len(VERSION_WIDTHS) == len(VERSION_COLUMNS)
    assert df.loc[0, "cv macro-F1 (served)"] == "0.5286 (blend)"  # not the encoder alone's 0.0286
    assert df.loc[1, "cv macro-F1 (served)"] == "0.4100 (encoder)"  # made before the served score was kept
    assert df.loc[0, "decision"].startswith("not compared")
    from app.versions.models import version_row  # the CLI's listing says the same

    assert "cv macro-F1 0.5286 (blend)" in version_row(Registry().listing()[0])


@pytest.mark.parametrize(("blend", "served"), [({"kept": True, "macro_f1_mean": 0.52861}, (0.5286, "blend")),
                                               ({"kept": False, "macro_f1_mean": 0.6}, (0.0286, "encoder")),
                                               (None, (0.0286, "encoder"))])
def test_a_retrain_records_the_served_cv_score(blend, served):
    from app.versions.train_child import served_cv

    got = served_cv({"macro_f1_mean": 0.0286, "blend": blend})
    assert (got["cv_served_macro_f1"], got["cv_served"]) == served


def test_the_not_compared_decision_says_why_and_what_to_do(tmp_path):
    from app.config import Config
    from app.versions.jobs import Jobs
    from app.versions.registry import Registry

    jobs = Jobs(Config(data_dir=tmp_path), Registry(tmp_path / "models"), None)
    basis = {"rows": 0, "slice_rows": 52, "left_out": {"v1": 52}}
    d = asyncio.run(jobs._decide("v2", {"eval": {}, "compared_on": basis}, "v1"))
    assert d["promoted"] is False
    assert d["why"].startswith("not compared: all 52 evaluation texts were trained on")
    assert "promote it by hand (Train tab: Promote / activate)" in d["why"]


def test_a_cancelled_job_reads_once_with_an_empty_bar_and_conflicts_are_listed():
    from app.ui.train import progress_html

    shown = progress_html({"id": "j1", "status": "cancelled", "error": "cancelled",
                           "progress": {"percent": 20}, "data": {}})
    assert 'value="0"' in shown and shown.count("cancelled") == 2  # the data attribute and the word, once
    conflicts = [{"text": f"text {i}", "kept": "b", "labels": [{"label": "a"}, {"label": "b"}]} for i in range(8)]
    shown = progress_html({"id": "j2", "status": "succeeded", "progress": {}, "data": {},
                           "conflicts": conflicts, "n_conflicts": 65})
    assert "/v1/jobs" not in shown and "“text 0”: a, b → kept <b>b</b>" in shown
    assert "and 60 more" in shown and "text 5" not in shown


def test_the_train_progress_says_where_its_rows_came_from_and_no_zero_corrections():
    """Issue 59 (minor): the progress repeated "0 label corrections … went in" at every poll and never said how
    many rows came from the team's datasets."""
    from app.ui.train import progress_html

    job = {"id": "j1", "status": "running", "progress": {"percent": 10},
           "data": {"store_labels": 40, "session_decisions": 0, "base_rows": 300, "corrections": 0, "review_kept": 0}}
    shown = progress_html(job)
    assert "read: 40 final labels from team datasets, 300 --train-data rows" in shown
    assert "corrections" not in shown and "Label-tab" not in shown
    job["data"].update(store_labels=0, session_decisions=7, corrections=3, review_kept=1)
    shown = progress_html(job)
    assert "read: 7 Label-tab decisions, 300 --train-data rows, 3 label corrections from Review suspects went in " \
        "(1 labels kept)" in shown and "team datasets" not in shown


def test_the_train_eta_counts_down_between_the_childs_writes():
    """Issue 59 (minor): the ETA froze for 24 s: the child writes progress on training steps only."""
    from app.ui.train import eta_words, progress_html

    p = {"eta_s": 120.0, "updated": 1000.0}
    assert eta_words(p, 1000.0) == "ETA 120 s"
    assert eta_words(p, 1008.0) == "ETA 112 s"  # moves with the clock, not only with the child's writes
    assert eta_words(p, 1024.0) == "ETA 96 s (last progress 24 s ago)"
    assert eta_words(p, 1500.0).startswith("ETA 0 s (last progress 500 s ago)")
    job = {"id": "j1", "status": "running", "progress": {"percent": 50, "eta_s": 30.0, "updated": 0.0}}
    assert "last progress" in progress_html(job)  # a snapshot from long ago says so


def test_an_empty_number_box_says_its_default():
    from app.ui.train import TAB_PARAMS, number_placeholders

    class Jobs:
        def settings(self, given):
            return {"folds": 5, "epochs": 3}

    class Broken:
        def settings(self, given):
            raise OSError("unreadable")

    names = [p.name for p in TAB_PARAMS]
    assert dict(zip(names, number_placeholders(Jobs()))) == {"folds": "empty: 5", "epochs": "empty: 3"}
    assert set(number_placeholders(Broken())) == {"empty: k-fold's default"}


def _clf(threshold=0.52, target=0.8):
    cal = SimpleNamespace(thresholds=np.array([threshold, 0.6]), applied=True, spec={"target_precision": target})
    return SimpleNamespace(labels=["dream", "error"], calibration=cal)


def test_classify_says_not_sure_with_the_threshold_it_missed():
    from app.ui.classify import answer_markdown

    unsure = answer_markdown(_clf(), Prediction("dream", 0.29, {"dream": 0.29, "error": 0.71}, confident=False), "v3")
    assert unsure.startswith("### ⚠ Not sure")
    assert "**dream** · 29.0% < 52% needed for 80% precision · model v3" in unsure
    sure = answer_markdown(_clf(), Prediction("error", 0.9, {"dream": 0.1, "error": 0.9}), "v3", " · cut")
    assert "Not sure" not in sure and sure.endswith("model v3 · cut")


def test_the_header_names_the_version_and_the_banner_the_useless_model():
    from app.ui.classify import header, health_banner

    served = SimpleNamespace(version="v4", clf=SimpleNamespace(labels=["a", "b"], learned=None))
    state = SimpleNamespace(served=served)
    assert header(state).startswith("## Text classifier · model v4\nLabels: a, b") and health_banner(state) == ""
    served.clf.learned = "the model adds nothing; answers are the TF-IDF baseline's"
    assert "the model adds nothing" in health_banner(state) and "Train tab" in health_banner(state)
    # issue 59, D8: "(macro-F1 0.0337)" beside a served blend at 0.3951 read as the answers' score
    from textdata.learned import message

    served.clf.learned = message({"adds_nothing": True, "at_chance": True, "macro_f1": 0.0337,
                                  "chance_macro_f1_p95": 0.05}, blended=True)
    said = health_banner(state)
    assert "the fine-tuned model alone: macro-F1 0.0337" in said
    # one line on screen (issue 59, D4): the sentence as the summary, its figures and the next step under it
    summary, details = said.split("</summary>")
    assert "the model adds nothing" in summary and "0.0337" not in summary and "Next step" in details
    assert "fine-tuned model's own score; what the answers served now score (the blend" in said
    served.clf.learned = message({"at_chance": True, "macro_f1": 0.0337, "chance_macro_f1_p95": 0.05}, blended=False)
    assert "blend" not in health_banner(state)  # served alone: the figure is the answers' own


def test_batch_summary_counts_scored_unscored_and_not_sure_rows():
    from app.label_kinds import SINGLE, kind_of
    from app.ui.batch import preview, summary

    scored = pd.DataFrame({"text": ["x" * 300, "b", "", "d", "e", "f", "g", "h"],
                           "pred_label": ["a", "a", None, None, None, "b", "b", "a"],
                           "pred_score": [0.123456789, 0.9, np.nan, np.nan, np.nan, 0.4, 0.8, 0.7],
                           "confident": pd.array([True, True, pd.NA, pd.NA, pd.NA, False, True, True], dtype="boolean")})
    said = summary(scored, kind_of(SINGLE), 1, 5000)
    assert said.startswith("Scored **5** of 8 rows: a 3, b 2")
    assert "**3** not scored" in said and "**1** not sure" in said and "1 row with a text cut to 5,000" in said
    one = summary(scored.iloc[[1]], kind_of(SINGLE), 0, 5000)
    assert one == "Scored **1** of 1 row: a 1"
    shown = preview(scored)
    assert list(shown.columns[:3]) == ["pred_label", "pred_score", "confident"]  # before the long text
    assert len(shown.loc[0, "text"]) == 80 and shown.loc[0, "text"].endswith("…")
    assert shown.loc[0, "pred_score"] == 0.123 and len(scored.loc[0, "text"]) == 300  # the CSV keeps it whole


class _Session:
    def __init__(self, **meta):
        from app.label_kinds import space_from

        self.meta, self.space = meta, space_from(meta)  # a session carries its label space


def test_key_hints_follow_the_kind_of_session(monkeypatch):
    from app.ui import label_view as ui_label_view

    monkeypatch.setattr(ui_label_view, "given_label", lambda s, r: "a" if s.meta.get("kind") == "review" else None)
    keys = ui_label_view.keys_help
    assert "**Enter** accept the suggestion" in keys(_Session(), 0) and "**K**" not in keys(_Session(), 0)
    audit = keys(_Session(blind=True), 0)
    assert "Enter" not in audit and "**1–9** choose the label you read" in audit
    review = keys(_Session(kind="review"), 0)
    assert "**K** keep the given label" in review and "**Enter** take the suggestion" in review
    multi = keys(_Session(kind="review", label_sep="|"), 0)
    assert "tick or untick" in multi and "**T** take the suggestion" in multi


def test_a_review_session_names_its_order_by_quality():
    from app.ui.label_view import _order_update

    session = _Session(kind="review")
    session.order = "least confident first"
    choices = {v: k for k, v in _order_update(session)["choices"]}
    assert choices["least confident first"] == "lowest quality first (likely wrong)"
    plain = _Session()
    plain.order = "file order"
    assert ("least confident first", "least confident first") in _order_update(plain)["choices"]


def test_monitor_levels_in_colour_with_a_next_step():
    from app.ui.monitor import summary

    report = {"window": {"size": 1000}, "audit": {"rate": 0.05, "queued": 3}, "versions": {"v1": {
        "n": 400, "total": 900, "drift": {"class_mix": 0.31, "confidence": 0.12, "length": 0.01},
        "levels": {"class_mix": "alert", "confidence": "watch", "length": "ok"},
        "overlong_share": 0.0, "not_sure_share": 0.2, "empty_rejected": 0}}}
    said = summary(report, "v1")
    assert '<b style="color:#cf222e">ALERT</b> · the mix of labels the model answers has moved far' in said
    assert "start an audit session" in said and '<b style="color:#b35900">WATCH</b>' in said
    assert '<b style="color:#1a7f37">OK</b> · how long the texts are is as in the reference' in said  # a sentence
    assert "| statistic |" not in said


def test_a_person_s_mistake_is_one_log_line_not_a_traceback(caplog):
    from app.ui.page import _quiet_user_errors

    def start(file, column):
        raise gr.Error("Upload a file first.")

    async def classify(text):
        raise gr.Error("Type or paste a text first.")

    def broken():
        raise KeyError("a defect")

    with caplog.at_level(logging.INFO, logger="app"):
        with pytest.raises(gr.Error) as e:
            _quiet_user_errors(start)(None, "text")
        assert e.value.print_exception is False
        with pytest.raises(gr.Error) as e:
            asyncio.run(_quiet_user_errors(classify)(""))
        assert e.value.print_exception is False
    said = [r for r in caplog.records if getattr(r, "fields", {}).get("event") == "ui_refused"]
    assert [r.fields["action"] for r in said] == ["start", "classify"] and not any(r.exc_info for r in said)
    with pytest.raises(KeyError):  # a defect keeps its traceback
        _quiet_user_errors(broken)()


def test_a_train_box_reads_empty_as_the_default_and_words_a_typo():
    from app.ui.train import box_value
    from app.versions.train_params import BY_NAME
    from textdata.errors import DataError

    folds, lr = BY_NAME["folds"], BY_NAME["lr"]
    assert box_value(folds, "") is None and box_value(folds, None) is None and box_value(folds, " 3 ") == 3
    assert box_value(folds, "2.5") == 2.5  # check_params then says folds must be an integer
    assert box_value(lr, "1e-4") == 1e-4
    with pytest.raises(DataError, match="'five' is not a number; leave the box empty for the default"):
        box_value(folds, "five")


def test_top_k_scores_hold_every_answered_label():
    """Issue 45: with top_k, a multi-label answer's `labels` could name a label missing from its `scores`."""
    from app.http.api import _shape
    from serving.multilabel import MultiLabelPrediction

    scores = {"a": 0.9, "b": 0.8, "c": 0.55, "d": 0.1}
    pred = MultiLabelPrediction(["a", "c"], scores, "a", 0.9, scores, None, True)  # c: over its low threshold
    shaped = _shape(pred, 2)
    assert list(shaped["scores"]) == ["a", "b", "c"] and set(shaped["labels"]) <= set(shaped["scores"])
    assert _shape(pred, None)["scores"] == scores and "model_version" not in shaped


def test_a_not_sure_answer_can_be_sent_to_the_review_queue(tmp_path):
    """Issue 45: the Classify tab had no way to send a "not sure" text to the review queue."""
    from app.config import Config
    from app.labeling.review_queue import ReviewQueue
    from app.ui.classify import classify_tab

    answer = Prediction("dream", 0.29, {"dream": 0.29, "error": 0.71}, confident=False)

    class Batcher:
        async def submit(self, seqs, lengths, served):
            return [answer]

    clf = _clf()
    clf.normalizer, clf.encode = (lambda t: t), (lambda texts: [[1, 2, 3] for _ in texts])
    state = SimpleNamespace(served=SimpleNamespace(clf=clf, version="v2"), batcher=Batcher(), draining=False,
                            review=ReviewQueue(tmp_path / "review", 10))
    with gr.Blocks() as demo:
        classify_tab(Config(), state)
    fns = {f.fn.__name__: f.fn for f in demo.fns.values()}
    probs, said, button, last = asyncio.run(fns["classify"]("꿈에서 봤다 " * 1000))
    assert button["visible"] is True and last[0] == ("꿈에서 봤다 " * 1000).strip()[:5000]
    assert "Not sure" in said and "only the first 5,000 of its" in said and probs["value"] == answer.probabilities
    assert probs["show_heading"] is False  # no large "dream" over the bars beside a small "not sure"
    assert fns["send"](last)["value"].startswith("✓ Sent") and len(state.review) == 1
    assert fns["send"](last)["value"] == "✓ Already in the review queue" and len(state.review) == 1
    state.review = None  # no --review-queue: no button
    assert asyncio.run(fns["classify"]("꿈"))[2]["visible"] == "hidden"
    answer = Prediction("error", 0.9, {"dream": 0.1, "error": 0.9})  # a sure answer keeps its heading
    assert asyncio.run(fns["classify"]("꿈"))[0]["show_heading"] is True


def test_accept_is_plain_under_the_threshold_and_an_audit_hides_the_probabilities(tmp_path):
    """Issue 45: Accept was the big orange button on a 20% guess; an audit showed an empty probabilities box."""
    from app.labeling.sessions import SessionStore
    from app.ui.label_view import _render_label

    store = SessionStore(tmp_path / "label")
    labels = ["dream", "error"]
    preds = [Prediction("dream", 0.2, {"dream": 0.2, "error": 0.8}, confident=False),
             Prediction("error", 0.9, {"dream": 0.1, "error": 0.9})]
    session = store.create("f.csv", ["a", "b"], preds, labels, unsure_rows=[0])
    shown = _render_label(store, labels, session)
    assert shown[1] == 0 and shown[6]["variant"] == "secondary" and "(not sure)" in shown[6]["value"]
    assert "not sure" in shown[3] and shown[4]["visible"] is True
    session.decide(0, "dream")
    shown = _render_label(store, labels, session)
    assert shown[1] == 1 and shown[6]["variant"] == "primary" and shown[6]["value"].startswith("✓ Accept: error")
    audit = store.create_blind("audit", ["c"], labels)
    shown = _render_label(store, labels, audit)
    assert shown[4]["visible"] == "hidden" and shown[6]["visible"] == "hidden"
    assert "choose the label you read" in shown[-1] and "Enter" not in shown[-1]


def test_the_drift_chart_has_a_clock_axis_and_says_when_it_has_no_point():
    """Issue 45: the time axis read "seconds since the first check"; with no check it would read 1970."""
    from app.ui.monitor import figure

    base = {"class_mix": {"a": 3, "b": 1}, "confidence_counts": [0] * 9 + [4], "reference": None}
    empty = figure({**base, "history": []})
    assert "no drift check yet" in empty.axes[2].texts[0].get_text() and not empty.axes[2].lines
    checked = figure({**base, "history": [{"t": 1_764_000_000 + 60 * i, "n": 100, "class_mix": 0.01 * i,
                                           "confidence": 0.02, "length": 0.03} for i in range(3)]})
    ax = checked.axes[2]
    assert ax.get_xlabel() == "time of the check (server clock)" and len(ax.lines) == 5
    assert type(ax.xaxis.get_major_formatter()).__name__ == "ConciseDateFormatter"


def test_two_sessions_of_one_file_read_apart_in_the_menu(tmp_path):
    """Issue 45: re-uploading a file listed two identical "Earlier sessions" with no progress."""
    from app.labeling.sessions import SessionStore
    from app.ui.label_view import _sessions_update

    store = SessionStore(tmp_path / "label")
    preds = [Prediction("dream", 0.6, {"dream": 0.6, "error": 0.4})] * 2
    first = store.create("notes.csv", ["a", "b"], preds, ["dream", "error"])
    store.create("notes.csv", ["a", "b"], preds, ["dream", "error"])
    first.decide(0, "error")
    names = {sid: name for name, sid in _sessions_update(store, first.id)["choices"]}
    assert names[first.id].startswith("notes.csv · 1/2 labeled · ") and len(set(names.values())) == 2


def test_classify_states_the_promise_and_says_out_of_domain():
    """The stated confidence (issue 42) under every answer where k-fold stated one; an off-topic text says why
    it is not sure instead of a threshold its score may well clear."""
    from app.ui.classify import answer_markdown

    clf = _clf()
    clf.calibration.spec["statement"] = ("precision >= 0.80 with 90% confidence on texts like the training rows, at "
                                         "an estimated coverage of 0.78")
    sure = answer_markdown(clf, Prediction("error", 0.9, {"dream": 0.1, "error": 0.9}), "v3")
    assert sure.endswith("*Confident answers: precision ≥ 0.80 with 90% confidence on texts like the training rows, "
                         "at an estimated coverage of 0.78.*")
    away = answer_markdown(clf, Prediction("error", 0.95, {"dream": 0.05, "error": 0.95}, confident=False,
                                           reason="out of domain"), "v3")
    assert away.startswith("### ⚠ Not sure\nThis text is unlike the texts the model was trained on (out of domain)")
    assert "needed" not in away and "**error** · 95.0% · model v3" in away
    clf.calibration.applied = False  # scores served uncalibrated: no promise
    assert "Confident answers" not in answer_markdown(clf, Prediction("error", 0.9, {"error": 0.9}), "v3")


def test_each_page_load_shows_the_banner_of_the_version_serving_then(engine, tmp_path):
    """Issue 45: "the model adds nothing" was only in the log and /v1/model; the banner over the tabs says it,
    read at each page load, so a switch to a model that learned something clears it without a restart."""
    from app.config import Config
    from app.http.api import ServerState
    from app.ui.page import build_ui
    from app.versions.swap import ServedVersion

    state = ServerState()
    state.served = ServedVersion(engine, "v1", "m", {})
    demo = build_ui(Config(model="m", data_dir=tmp_path), state)
    # read at page load and by the heading's timer (a promotion made elsewhere shows without a reload)
    readers = [f for f in demo.fns.values() if [o.elem_id for o in f.outputs] == ["page-header", "health-banner"]]
    assert len(readers) >= 2
    load = readers[0]
    head, banner = load.fn()
    assert head.startswith("## Text classifier · model v1") and banner == ""
    engine.learned, before = "the model adds nothing; answers are the TF-IDF baseline's", engine.learned
    try:
        head, banner = load.fn()
        assert "<summary>⚠ <b>the model adds nothing; answers are the TF-IDF baseline's.</b>" in banner
    finally:
        engine.learned = before


def test_train_while_a_job_runs_names_the_cancel_button_not_an_api_path():
    """Issue 45: the Train tab said "cancel it (DELETE /v1/jobs/<id>)" beside a Cancel button."""
    from app.config import Config
    from app.ui.train import train_tab
    from app.versions.jobs import JobConflict

    class Registry:
        def names(self):
            return ["v1"]

        def listing(self):
            return []

    class Jobs:
        registry, switcher = Registry(), None

        def settings(self, given):
            return {"folds": 5, "epochs": 3}

        async def start(self, given):
            raise JobConflict("job j1 is running: one training job at a time; wait for it or cancel it "
                              "(DELETE /v1/jobs/j1)")

        def running(self):
            return {"id": "j1"}

        def list(self):
            return []

    with gr.Blocks() as demo:
        train_tab(Config(), SimpleNamespace(), Jobs())
    (start,) = [f.fn for f in demo.fns.values() if f.fn.__name__ == "start"]
    said = asyncio.run(start("", ""))[0]
    assert said == "⚠ Job j1 is running: one training job at a time. Wait for it, or press Cancel job."


def test_the_train_tab_timer_leaves_the_version_menu_alone_while_its_names_stand():
    """Issue 45: the Train tab's 1 s timer sent the version menu's choices (and a value) every second, redrawing
    it under a person picking a version to promote; it now sends them when they change, and on the tab's
    opening."""
    from app.config import Config
    from app.ui.train import train_tab

    names = ["v1", "v2"]

    class Registry:
        def names(self):
            return list(names)

        def listing(self):
            return []

    class Jobs:
        registry, switcher = Registry(), None

        def settings(self, given):
            return {}

        def list(self):
            return []

    with gr.Blocks() as demo:
        train_tab(Config(), SimpleNamespace(), Jobs())
    fns = {f.fn.__name__: f for f in demo.fns.values()}
    timer, opening = fns["tick"].fn, fns["opened"].fn
    assert any(t[1] == "tick" for t in fns["tick"].targets) and any(t[1] == "select" for t in fns["opened"].targets)
    *_, menu, sent = timer(None)
    assert menu == {"__type__": "update", "choices": ["v2", "v1"]} and "value" not in menu  # the pick stays
    assert timer(sent)[2] == gr.skip() and timer(sent)[3] == sent  # nothing changed: the menu is left alone
    assert opening()[2]["choices"] == ["v2", "v1"]  # the tab's opening sends them whatever was sent before
    names.append("v3")
    assert timer(sent)[2]["choices"] == ["v3", "v2", "v1"]
