"""The cascade (app/llm/fallback.py): 'not sure' answers go to an LLM (a local OpenAI-compatible server), with the
model's answer kept when the LLM is slow, failing or unreachable."""

from __future__ import annotations

import csv
import json
import logging
import math

import pytest
from fake_llm import PROMPT
from starlette.testclient import TestClient
from test_app_calibration import TEXTS, calibrated  # noqa: F401 - the fixture, shared

from app.config import parse_args
from app.server import create_app
from serving.engine import Classifier


def cascade(folder, tmp_path, url, *flags):
    (tmp_path / "prompt.txt").write_text(PROMPT)
    cfg = parse_args(["--model", str(folder), "--no-ui", "--data-dir", str(tmp_path / "data"), "--fallback-url", url,
                      "--fallback-model", "m", "--fallback-prompt", str(tmp_path / "prompt.txt"),
                      "--fallback-price-per-1k-input", "1", *flags])
    return TestClient(create_app(cfg, Classifier.load(folder, provider="torch")), base_url="http://127.0.0.1")


def test_not_sure_answers_come_from_the_llm_once_and_are_kept_as_teacher_labels(calibrated, tmp_path, fake):  # noqa: F811
    folder, threshold, scaled = calibrated
    unsure = [t for t, s in zip(TEXTS, scaled.max(1)) if s < threshold]
    with cascade(folder, tmp_path, fake.url) as c:
        preds = c.post("/v1/classify", json={"texts": TEXTS}).json()["predictions"]
        again = c.post("/v1/classify", json={"texts": TEXTS}).json()["predictions"]
        metrics = c.get("/metrics").text
        monitor = c.get("/v1/monitor").json()["cascade"]
    for text, p, s in zip(TEXTS, preds, scaled.max(1)):
        if s < threshold:  # the fake LLM answers the first label where the text names none
            assert p["source"] == "llm" and p["label"] == "dream" and p["confident"] is True
        else:
            assert p["source"] == "model" and p["confident"] is True
    assert again == preds and fake.calls == len(unsure)  # the second time from the stored answers
    assert f"app_llm_deferred_total {2 * len(unsure)}.0" in metrics
    assert f'app_answers_total{{source="llm"}} {2 * len(unsure)}.0' in metrics
    assert "app_llm_latency_seconds_count" in metrics
    with open(tmp_path / "data" / "teacher" / "llm_labels.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["text"] for r in rows) == sorted(unsure) and {r["teacher"] for r in rows} == {"dream"}
    # clients' texts: the owner's only (issue 63 L3: it was 0644)
    assert (tmp_path / "data" / "teacher" / "llm_labels.csv").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "data" / "teacher").stat().st_mode & 0o777 == 0o700
    assert monitor["share_deferred"] == pytest.approx(len(unsure) / len(TEXTS))
    assert monitor["llm_calls"] == len(unsure) and monitor["from_stored_answers"] == len(unsure)
    assert monitor["cost_per_llm_call"] > 0
    assert monitor["estimated_cost_saved"] == pytest.approx(
        (2 * len(TEXTS) - len(unsure)) * monitor["cost_per_llm_call"], rel=1e-3)


@pytest.mark.parametrize("trouble", ["timeout", "error"])
def test_a_slow_or_failing_llm_leaves_the_models_answer_not_sure(calibrated, tmp_path, fake, trouble):  # noqa: F811
    folder, threshold, scaled = calibrated
    n_unsure = int((scaled.max(1) < threshold).sum())
    if trouble == "timeout":
        fake.delay = 3.0
    else:
        fake.fail_first(100, 500)
    with cascade(folder, tmp_path, fake.url, "--fallback-timeout", "0.5") as c:
        preds = c.post("/v1/classify", json={"texts": TEXTS}).json()["predictions"]
        metrics = c.get("/metrics").text
    assert all(p["source"] == "model" for p in preds)
    assert [p["confident"] for p in preds] == (scaled.max(1) >= threshold).tolist()
    assert f'app_llm_errors_total{{kind="{trouble}"}} {n_unsure}.0' in metrics


def test_an_unreachable_llm_is_one_warning_and_the_model_answers_alone(calibrated, tmp_path, caplog):  # noqa: F811
    folder, threshold, scaled = calibrated
    from fake_llm import free_port

    with caplog.at_level(logging.WARNING, logger="app"), \
            cascade(folder, tmp_path, f"http://127.0.0.1:{free_port()}/v1") as c:
        preds = c.post("/v1/classify", json={"texts": TEXTS}).json()["predictions"]
        monitor = c.get("/v1/monitor").json()["cascade"]
    assert len([r for r in caplog.records if "cannot be reached" in r.getMessage()]) == 1
    assert [p["confident"] for p in preds] == (scaled.max(1) >= threshold).tolist()
    assert all(p["source"] == "model" for p in preds) and monitor["reachable"] is False


def test_a_fallback_prompt_without_placeholders_is_refused_at_start(tmp_path, capsys):
    (tmp_path / "p.txt").write_text("Classify: {text}")
    with pytest.raises(SystemExit) as e:
        parse_args(["--fallback-url", "http://x/v1", "--fallback-model", "m", "--fallback-prompt",
                    str(tmp_path / "p.txt")])
    assert e.value.code == 2 and "{labels}" in capsys.readouterr().err


def _completion(content, usage=None) -> str:
    return json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": content}}],
                       **({"usage": usage} if usage is not None else {})})


MALFORMED = {"not json": "{not json", "a list": "[]", "null": "null", "choices a string": '{"choices":"x"}',
             "message null": '{"choices":[{"message":null}]}', "content a number": _completion(12345),
             "content a list": _completion(["dream"])}


@pytest.mark.parametrize("body", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_llm_answer_is_that_calls_error_and_the_models_answer_stands(calibrated, tmp_path, fake, body):  # noqa: F811
    folder, threshold, scaled = calibrated
    n_unsure = int((scaled.max(1) < threshold).sum())
    fake.body = body
    with cascade(folder, tmp_path, fake.url) as c:
        r = c.post("/v1/classify", json={"texts": TEXTS})
        metrics = c.get("/metrics").text
    assert r.status_code == 200
    preds = r.json()["predictions"]
    assert all(p["source"] == "model" for p in preds)
    assert [p["confident"] for p in preds] == (scaled.max(1) >= threshold).tolist()  # confident texts answered too
    assert f'app_llm_errors_total{{kind="error"}} {n_unsure}.0' in metrics
    assert not (tmp_path / "data" / "teacher" / "llm_labels.csv").read_text().count("\n") > 1  # nothing kept


@pytest.mark.parametrize("usage", [{"prompt_tokens": "10", "completion_tokens": "1"},
                                   {"prompt_tokens": 1e308, "completion_tokens": 1e308},
                                   {"prompt_tokens": -5, "completion_tokens": True}], ids=["strings", "1e308", "odd"])
def test_odd_token_counts_are_ignored_and_the_monitor_stays_finite(calibrated, tmp_path, fake, usage):  # noqa: F811
    folder, _threshold, _scaled = calibrated
    fake.body = _completion("dream", usage)
    with cascade(folder, tmp_path, fake.url) as c:
        preds = c.post("/v1/classify", json={"texts": TEXTS}).json()["predictions"]
        fake.body = None  # the LLM behaves again: the monitor must still answer
        c.post("/v1/classify", json={"texts": ["another text the model is unsure of"]})
        monitor = c.get("/v1/monitor")
    assert any(p["source"] == "llm" for p in preds)  # the answer itself was fine
    assert monitor.status_code == 200
    cascade_report = monitor.json()["cascade"]
    assert cascade_report["tokens_paid"]["completion"] <= 2 * len(TEXTS)
    assert math.isfinite(cascade_report["cost_paid"])


@pytest.fixture
def json_logs():
    """The server's log setup (app/http/logs.py, as `python -m app` runs it), undone after the test."""
    from app.http import logs

    root, saved = logging.getLogger(), {n: logging.getLogger(n).level for n in ("httpx", "httpx2")}
    handlers, level = root.handlers[:], root.level
    logs.setup("info")
    yield
    root.handlers[:], root.level = handlers, level
    for name, lvl in saved.items():
        logging.getLogger(name).setLevel(lvl)


def test_credentials_in_the_fallback_url_never_reach_the_log(calibrated, tmp_path, fake, json_logs, capsys):  # noqa: F811
    """Issue 63 L2: with user:pass@ in --fallback-url, the HTTP client logged every LLM call's URL (at info,
    logger httpx2) and the start warning printed it too."""
    from fake_llm import free_port

    folder, _, _ = calibrated
    with_creds = fake.url.replace("http://", "http://llmuser:llmpass@")
    with cascade(folder, tmp_path, with_creds) as c:
        preds = c.post("/v1/classify", json={"texts": TEXTS}).json()["predictions"]
        logging.getLogger("httpx2").warning("HTTP Request: POST %s/chat/completions", with_creds)  # at any level
    assert any(p["source"] == "llm" for p in preds)  # the credentials still reach the endpoint
    with cascade(folder, tmp_path, f"http://llmuser:llmpass@127.0.0.1:{free_port()}/v1?api-key=k3y"):
        pass
    err = capsys.readouterr().err
    assert "cannot be reached" in err and "http://***@127.0.0.1" in err and "api-key=***" in err
    assert "llmpass" not in err and "k3y" not in err
