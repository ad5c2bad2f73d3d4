"""A server open to anyone (no --api-key, a non-loopback --host, no --allow-admin) shows no texts other clients
sent (issue 40, H2): --audit-rate and --review-queue are refused at start, and sessions of kept texts made
while it ran with a key are neither listed nor opened in the Label tab, and nor is any session a visitor did not
start in their own page (no "Earlier sessions" list). What it shows is said in the log."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from app.config import Config, parse_args
from app.http.api import ServerState
from app.labeling.sessions import SessionStore
from app.server import create_app
from app.versions.swap import ServedVersion

OPEN = ["--model", "m", "--host", "0.0.0.0"]


@pytest.mark.parametrize("flags", [["--review-queue"], ["--audit-rate", "0.05"], ["--audit-rate", "1", "--review-queue"]])
def test_keeping_texts_on_an_open_server_is_refused_at_start(flags, monkeypatch, capsys):
    """Before: any visitor opened "Review 'not sure' answers" or an audit session and read every kept text."""
    monkeypatch.delenv("ELECTRA_API_KEY", raising=False)
    with pytest.raises(SystemExit):
        parse_args(OPEN + flags)
    err = capsys.readouterr().err
    assert "anyone who can reach it could read them" in err and "--api-key" in err and "--allow-admin" in err
    for allowed in (["--api-key", "k"], ["--allow-admin"]):  # a key, or the operator's word that anyone may
        assert parse_args(OPEN + flags + allowed).host == "0.0.0.0"
    assert parse_args(["--model", "m", *flags]).host == "127.0.0.1"  # loopback only: the machine's own users
    monkeypatch.setenv("ELECTRA_API_KEY", "from-env")
    assert parse_args(OPEN + flags).api_key == "from-env"


def test_a_server_built_in_code_is_held_to_the_same_rule(engine, tmp_path):
    with pytest.raises(ValueError, match="--review-queue"):
        create_app(Config(model="m", host="0.0.0.0", ui=False, review_queue=True, data_dir=tmp_path), engine)


def test_the_start_log_says_what_a_visitor_may_see(engine, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="app"):
        create_app(Config(model="m", host="0.0.0.0", ui=False, data_dir=tmp_path), engine)
    said = caplog.text
    assert "anyone who can reach it may classify" in said and "kept texts are refused" in said
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="app"):
        create_app(Config(model="m", host="0.0.0.0", ui=False, data_dir=tmp_path, allow_admin=True,
                          review_queue=True), engine)
    assert "may read the texts --audit-rate / --review-queue keep" in caplog.text


def _sessions(root, engine):
    """A normal session, a blind audit session and a review-queue session, as a keyed run leaves them."""
    from app.labeling.audit import AuditQueue, start_session
    from app.labeling.review_queue import ReviewQueue
    from app.labeling.review_queue import start_session as review_session

    store = SessionStore(root / "label")
    mine = store.create("mine.csv", ["오늘 회의"], engine.predict(["오늘 회의"]), list(engine.labels))
    queue = AuditQueue(None, 1.0, seed=0)
    queue.offer("v1", ["PRIVATE: patient 7 has HIV"], [[engine.labels[0]]])
    audit = start_session(store, queue, list(engine.labels))
    unsure = ReviewQueue(root / "review", 10)
    pred = engine.predict(["PRIVATE: account 1234"])[0]
    unsure.add(["PRIVATE: account 1234"], [type("P", (), {"confident": False, "label": pred.label, "score": pred.score,
                                                          "probabilities": pred.probabilities})()], "v1")
    review = review_session(unsure, store, list(engine.labels))
    return mine.id, audit.id, review.id


def _label_tab(cfg, engine):
    from app.ui.page import build_ui

    state = ServerState()
    state.served = ServedVersion(engine, "v1", "m", {})
    demo = build_ui(cfg, state)
    return {f.name: f.fn for f in demo.fns.values()}


def test_an_open_server_neither_lists_nor_opens_sessions_of_kept_texts(engine, tmp_path):
    mine, audit, review = _sessions(tmp_path, engine)
    fns = _label_tab(Config(model="m", host="0.0.0.0", data_dir=tmp_path), engine)
    for sid in (audit, review, mine):  # `mine`: texts another visitor uploaded (issue 40: it opened for anyone)
        out = fns["resume"](sid)
        assert out[0] == "" and "PRIVATE" not in repr(out) and "오늘 회의" not in repr(out)  # as if no such session
    from gradio.utils import get_upload_folder

    upload = Path(get_upload_folder()) / f"open-server-{os.getpid()}" / "upload.csv"  # as Gradio stores an upload
    upload.parent.mkdir(parents=True, exist_ok=True)
    upload.write_text("text\n내일 약속 기록\n", encoding="utf-8")
    out = fns["start"](str(upload), "text")  # a visitor's own upload opens, and nothing else is listed
    sid = out[0]
    assert sid and sid not in (mine, audit, review) and "내일 약속 기록" in repr(fns["resume"](sid))
    listed = repr(out)
    assert "mine.csv" not in listed and "live audit" not in listed and "review queue" not in listed
    # With a key the same sessions open and are listed (the people the operator gave it to label them).
    fns = _label_tab(Config(model="m", host="0.0.0.0", data_dir=tmp_path, api_key="k"), engine)
    assert "PRIVATE: patient 7" in repr(fns["resume"](audit))
    assert "PRIVATE: account 1234" in repr(fns["resume"](review))
    assert "mine.csv" in repr(fns["resume"](mine)) and "upload.csv" in repr(fns["resume"](mine))


def test_an_open_server_does_not_show_the_active_versions_suspects(engine, tmp_path):
    """They are rows of the training table, which /v1/models and /v1/jobs already refuse there."""
    import asyncio

    fns = _label_tab(Config(model="m", host="0.0.0.0", data_dir=tmp_path), engine)
    out = asyncio.run(fns["from_active"](""))
    assert "not shown" in repr(out) and "--api-key" in repr(out)
