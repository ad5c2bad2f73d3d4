"""The cascade beyond single-label API answers (app/llm/fallback.py, app/llm/cascade_rows.py): multi-label answers the model
is not sure of, a Batch file's 'not sure' rows, and the UI's Classify, Batch and Monitor tabs through a running
server, each answer saying who gave it."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import httpx
import pandas as pd
import pytest
from app_testkit import start_server
from fake_llm import PROMPT
from prometheus_client import CollectorRegistry
from test_app_calibration import TEXTS, calibrated  # noqa: F401 - the fixture, shared
from test_app_ui_http import _call, _upload, all_functions, gradio_call

from app.llm.cascade_rows import cascade_markdown, defer_frame
from app.llm.fallback import AnsweredSet, Fallback
from serving.multilabel import MultiLabelPrediction
from textdata.labels import LabelSpace

LABELS = ["bug", "docs", "ui"]


def fallback(tmp_path, url, timeout=5.0) -> Fallback:
    (tmp_path / "prompt.txt").write_text(PROMPT)
    cfg = SimpleNamespace(fallback_url=url, fallback_model="m", fallback_prompt=tmp_path / "prompt.txt",
                          fallback_concurrency=2, fallback_timeout_s=timeout, fallback_price_per_1k_input=1.0,
                          fallback_price_per_1k_output=0.0, fallback_client_calls=0, data_dir=tmp_path / "data")
    return Fallback(cfg, CollectorRegistry())


def ml(labels, confident):
    scores = {"bug": 0.6, "docs": 0.45, "ui": 0.1}
    return MultiLabelPrediction(labels, scores, "bug", 0.6, scores, confident=confident)


def test_a_label_set_the_model_is_not_sure_of_is_the_llms(tmp_path, fake):
    fb = fallback(tmp_path, fake.url)
    texts = ["a bug and docs here", "SAY:none", "SAY:bug;nope", "sure of this one"]
    preds = [ml(["bug"], False), ml(["bug", "docs"], False), ml(["bug"], False), ml(["bug"], True)]

    async def twice():
        first = await fb.resolve(texts, preds, "v1", LABELS)
        return first, await fb.resolve(texts, preds, "v1", LABELS)

    first, again = asyncio.run(twice())
    assert isinstance(first[0], AnsweredSet)
    # the fake names the first label it finds in the text: one label; "none" is the empty set, said in words
    assert (first[0].labels, first[0].source, first[0].confident) == (["bug"], "llm", True)
    assert (first[1].labels, first[1].source) == ([], "llm")
    assert (first[2].labels, first[2].source, first[2].confident) == (["bug"], "model", False)  # "nope": outside
    assert (first[3].source, first[3].confident) == ("model", True)
    assert [p.labels for p in again] == [p.labels for p in first] and fake.calls == 4  # 3, then "nope" again
    stored = pd.read_csv(tmp_path / "data" / "teacher" / "llm_label_sets.csv", keep_default_na=False)
    assert sorted(zip(stored["text"], stored["teacher"])) == [("SAY:none", ""), ("a bug and docs here", "bug")]
    assert (tmp_path / "data" / "teacher" / "llm_labels.csv").read_text().count("\n") == 1  # a header: sets apart
    report = fb.report()
    assert report["errors_by_kind"] == {"outside_label_set": 2} and report["from_stored_answers"] == 2


@pytest.fixture
def loop_thread():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def test_a_batch_files_not_sure_rows_go_to_the_llm_and_every_row_is_kept(tmp_path, fake, loop_thread):
    fb = fallback(tmp_path, fake.url, timeout=0.5)
    fb.loop = loop_thread
    fake.delay = 0.2  # two slots, four calls: with the wait counted, the last ones would time out
    clf = SimpleNamespace(labels=LABELS, space=LabelSpace.of(LABELS))
    scored = pd.DataFrame({
        "text": ["ui is off", "docs typo", "crash", "", "ui again", "FAIL500 bug"],
        "pred_label": ["bug", "docs", "bug", None, "bug", "docs"],
        "pred_score": [0.4, 0.9, 0.5, None, 0.45, 0.4],
        "prob_bug": [0.4, 0.05, 0.5, None, 0.45, 0.3], "prob_docs": [0.3, 0.9, 0.3, None, 0.3, 0.4],
        "prob_ui": [0.3, 0.05, 0.2, None, 0.25, 0.3],
        "confident": pd.array([False, True, False, pd.NA, False, False], dtype="boolean"),
        "error": [None, None, None, "empty text", None, None]})
    out = defer_frame(fb, clf, scored, "text", "v1", "user:ann")
    assert out["text"].tolist() == scored["text"].tolist()
    assert out["pred_label"].tolist()[:3] == ["ui", "docs", "bug"] and out["pred_label"][4] == "ui"
    assert out["source"].tolist()[:3] == ["llm", "model", "llm"] and pd.isna(out["source"][3])
    assert out["pred_score"][0] == pytest.approx(0.3)  # the model's probability of the LLM's label
    # the LLM failing: the model's answer stands, still not sure
    assert (out["pred_label"][5], out["source"][5], bool(out["confident"][5])) == ("docs", "model", False)
    assert fb.report()["errors_by_kind"] == {"error": 1}


def test_the_monitor_words_say_who_answered_and_what_it_cost():
    base = {"llm": "gpt", "reachable": True, "answers": 200, "deferred": 60, "llm_answered": 40,
            "from_stored_answers": 10, "errors": 10, "errors_by_kind": {"timeout": 10},
            "llm_calls": 50, "cost_paid": 0.5, "cost_per_llm_call": 0.01,
            "estimated_cost_saved": 1.6, "teacher_labels": {"file": "t.csv", "rows": 40}}
    text = cascade_markdown(base)
    assert "gave **75.0%** itself, the LLM **25.0%**" in text and "LLM errors: 10 (timeout 10)" in text
    assert "estimated saved 1.6000" in text and "40" in text and "label sets" not in text
    with_sets = cascade_markdown({**base, "teacher_label_sets": {"file": "s.csv", "rows": 7}})
    assert "Teacher labels kept for the next retrain: 40 (`t.csv`), label sets 7 (`s.csv`)." in with_sets


def writes_to(url: str, elem_id: str) -> int:
    """The first UI event whose outputs hold the component `elem_id`."""
    config = httpx.get(url + "/ui/config").json()
    wanted = next(c["id"] for c in config["components"] if c.get("props", {}).get("elem_id") == elem_id)
    return next(i for i, d in enumerate(config["dependencies"]) if wanted in d["outputs"])


def test_the_ui_classify_batch_and_monitor_tabs_go_through_the_cascade(calibrated, tmp_path, llm):  # noqa: F811
    folder, threshold, scaled = calibrated
    (tmp_path / "prompt.txt").write_text(PROMPT)
    unsure = [t for t, s in zip(TEXTS, scaled.max(1)) if s < threshold]
    sure = [t for t, s in zip(TEXTS, scaled.max(1)) if s >= threshold]
    server = start_server(folder, tmp_path, "--fallback-url", llm.url, "--fallback-model", "m", "--fallback-prompt",
                          str(tmp_path / "prompt.txt"), "--fallback-price-per-1k-input", "1")
    try:
        server.wait_ready()
        functions = all_functions(server.url)
        classify = next(i for i, name, _ in functions if name == "classify")
        said = gradio_call(server.url, classify, [unsure[0]])
        assert said["success"], said
        assert "Answered by the LLM (m)" in said["output"]["data"][1] and "Not sure" not in said["output"]["data"][1]
        said = gradio_call(server.url, classify, [sure[0]])
        assert "Answered by the LLM" not in said["output"]["data"][1]
        body = pd.DataFrame({"text": TEXTS}).to_csv(index=False).encode()
        done = _call(server, "score_file", _upload(server, "notes.csv", body))
        assert done["success"], done
        scored = pd.read_csv(done["output"]["data"][0]["path"], keep_default_na=False)
        assert scored.loc[scored["text"].isin(unsure), "source"].eq("llm").all()
        assert scored.loc[scored["text"].isin(sure), "source"].eq("model").all()
        assert scored["confident"].astype(str).eq("True").all()
        assert f"**{len(unsure)}** answered by the LLM" in done["output"]["data"][1]
        refresh = writes_to(server.url, "monitor-summary")
        shown = gradio_call(server.url, refresh, [None])
        assert shown["success"] and "**LLM fallback** (m)" in shown["output"]["data"][0]
        monitor = httpx.get(server.url + "/v1/monitor").json()["cascade"]
        assert monitor["deferred"] == 1 + len(unsure) and monitor["llm_calls"] == len(unsure)  # the file reused one
    finally:
        server.stop()
