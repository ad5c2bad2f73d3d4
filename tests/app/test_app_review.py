"""Review suspects (app/labeling/review.py, app/ui/review.py): a label_issues.csv becomes a review session whose decisions
correct the training table (app/versions/trainset.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import httpx
import numpy as np
import pandas as pd
import pytest
from app_testkit import session_outputs, start_server

from app.labeling.review import ReviewError, given_label, open_review, plan
from app.labeling.sessions import SessionStore
from app.versions.trainset import build
from finetune import label_issues as li

LABELS = ["dream", "error", "memo"]
TEXTS = [f"{w} 메모 {i}" for i, w in enumerate(["꿈에서 봤다", "서버 오류", "회의 기록"] * 10)]


@pytest.fixture
def base(tmp_path) -> Path:
    path = tmp_path / "notes.csv"
    pd.DataFrame({"text": TEXTS, "label": [LABELS[i % 3] for i in range(len(TEXTS))]}).to_csv(path, index=False)
    return path


def issues_csv(folder: Path, base: Path, wrong=(0, 4, 8, 13)) -> pd.DataFrame:
    """A label_issues.csv written by finetune/label_issues.py itself for `base`, whose rows `wrong` the
    out-of-fold probabilities put confidently in the next class."""
    df = pd.read_csv(base)
    y = df["label"].map(LABELS.index).to_numpy()
    probs = np.full((len(y), 3), 0.05)
    probs[np.arange(len(y)), y] = 0.9
    for i, row in enumerate(wrong):
        probs[row] = 0.05
        probs[row, (y[row] + 1) % 3] = 0.9 - 0.01 * i  # the first row wrong most surely
    data = SimpleNamespace(labels=LABELS, texts=df["text"].tolist(), y=y, keep=np.arange(len(y)), groups=None)
    section = li.run("auto", folder, data, probs / probs.sum(1, keepdims=True), None, None, np.zeros(len(y), int),
                     base, [], li.SingleLabelIssues())
    assert section["n_flagged"] == len(wrong)
    return pd.read_csv(folder / li.FILE, dtype=str, keep_default_na=False)


def open_it(store, issues, base, root):
    ts = build(root, base, 0.0)
    return open_review(store, issues, "label_issues.csv", ts, root, "notes.csv", LABELS)


def test_review_session_orders_by_quality_and_its_decisions_correct_the_training_table(tmp_path, base):
    root = tmp_path / "label"
    store = SessionStore(root)
    issues = issues_csv(tmp_path, base)
    session, message = open_it(store, issues, base, root)
    assert "Review of 4 suspects" in message and session.meta["kind"] == "review"
    assert session.texts == issues.sort_values("quality")["text"].tolist()
    order = []
    while (row := session.current()) is not None:
        order.append(row)
        given = given_label(session, row)
        assert given == issues.set_index("text").loc[session.texts[row], "given_label"]
        assert session.suggestion[row] == issues.set_index("text").loc[session.texts[row], "suggested_label"]
        # keep the first, take the suggestion for two, another label for the last
        label = {0: given, 1: session.suggestion[row], 2: session.suggestion[row]}.get(len(order) - 1)
        session.decide(row, label or next(x for x in LABELS if x not in (given, session.suggestion[row])))
    assert order == list(range(4))  # least likely correct (lowest quality) first
    ts = build(root, base, 0.0)
    table = dict(zip(ts.train["text"], ts.train["label"]))
    assert len(table) == len(TEXTS)  # corrections of base rows, not new rows
    for row in range(4):
        assert table[session.texts[row]] == session.stack[row]["label"]
    assert ts.sources["corrections"] == 3 and ts.sources["review_kept"] == 1
    assert table[session.texts[0]] == given_label(session, 0)


def test_reopening_asks_nothing_already_reviewed_and_skips_gone_or_changed_texts(tmp_path, base):
    root = tmp_path / "label"
    store = SessionStore(root)
    issues = issues_csv(tmp_path, base)
    first, _ = open_it(store, issues, base, root)
    kept_row = first.current()
    first.decide(kept_row, given_label(first, kept_row))  # keep: never asked again for this text and label
    changed = first.current()
    first.decide(changed, first.suggestion[changed])  # its label changed since the run
    gone = issues["text"].iloc[-1]
    df = pd.read_csv(base)
    df[df["text"] != gone].to_csv(base, index=False)  # a text no longer in the table
    again, message = open_it(store, issues, base, root)
    assert len(again.texts) == 1 and again.texts[0] not in (first.texts[kept_row], first.texts[changed], gone)
    assert "1 skipped: their text is no longer in the training table" in message
    assert "1 skipped: their label changed since the run" in message
    assert "1 skipped: a review already confirmed that label" in message
    again.decide(0, given_label(again, 0))
    with pytest.raises(ReviewError, match="nothing left to review"):
        open_it(store, issues, base, root)


def test_a_file_from_other_data_is_refused_naming_both(tmp_path, base):
    other = tmp_path / "other.csv"
    pd.DataFrame({"text": [f"전혀 다른 글 {i}" for i in range(30)], "label": LABELS * 10}).to_csv(other, index=False)
    issues = issues_csv(tmp_path, other)
    with pytest.raises(ReviewError) as e:
        open_it(SessionStore(tmp_path / "label"), issues, base, tmp_path / "label")
    assert "'other.csv'" in str(e.value) and "notes.csv" in str(e.value) and "0 of 4" in str(e.value)
    with pytest.raises(ReviewError, match="not a label_issues.csv"):
        plan(pd.DataFrame({"text": ["a"]}), "mine.csv", {}, set(), "notes.csv")


def test_ui_opens_a_review_from_an_uploaded_file_and_keep_goes_to_the_journal(tmp_path, base, spread_model_dir):
    issues_csv(tmp_path, base)
    server = start_server(spread_model_dir, tmp_path, "--train-data", str(base))
    try:
        server.wait_ready()
        url = server.url
        config = httpx.get(url + "/ui/config").json()
        by_elem = {c.get("props", {}).get("elem_id"): c["id"] for c in config["components"]}
        fn_of = {}
        for i, d in enumerate(config["dependencies"]):
            for target, event in d["targets"]:
                fn_of.setdefault((target, event), i)

        def upload(name, body):
            ref = httpx.post(url + "/ui/gradio_api/upload", files={"files": (name, body, "text/csv")}).json()[0]
            return {"path": ref, "orig_name": name, "meta": {"_type": "gradio.FileData"}}

        session = "reviewtest01"
        start = fn_of[(by_elem["review-start"], "click")]
        refused = session_outputs(url, session, start, [upload("mine.csv", b"text\nhello\n"), ""])
        assert "not a label_issues.csv" in json.dumps(refused, ensure_ascii=False)
        out = session_outputs(url, session, start, [upload("label_issues.csv", (tmp_path / li.FILE).read_bytes()), ""])
        sid = out[0]
        text = json.dumps(out, ensure_ascii=False)
        assert "Review of 4 suspects" in text and "Given **" in text and "suggestion **" in text
        meta = json.loads((tmp_path / "app-data" / "label" / sid / "meta.json").read_text())
        assert meta["kind"] == "review"
        keep_view = fn_of[(by_elem["label-hint"], "change")]
        shown = session_outputs(url, session, keep_view, [sid, out[1]])
        assert "Keep: " in json.dumps(shown, ensure_ascii=False)
        session_outputs(url, session, fn_of[(by_elem["keep-btn"], "click")], [sid, out[1]])
        journal = [json.loads(x) for x in (tmp_path / "app-data" / "label" / sid / "journal.jsonl").read_text().splitlines()]
        first = pd.read_parquet(tmp_path / "app-data" / "label" / sid / "items.parquet").iloc[journal[0]["row"]]
        assert journal[0]["op"] == "label" and journal[0]["label"] == first["given_label"]
    finally:
        server.stop()


def test_train_tab_says_how_many_corrections_went_in():
    from app.ui.train import progress_html

    shown = progress_html({"id": "20261124-000000-abcdef", "status": "running", "progress": None,
                           "data": {"train_rows": 30, "corrections": 3, "review_kept": 1}})
    assert "3 label corrections from Review suspects went in (1 labels kept)" in shown
    assert "corrections" not in progress_html({"id": "j", "status": "running", "progress": None, "data": {}})


HOSTILE = ['=HYPERLINK("http://x","y")', "+cmd|' /C calc'!A0", "a\x00b", "a\nb", "\u202eevil", "x" * 4957, "(none)"]


@pytest.mark.parametrize("bad", HOSTILE)
def test_a_suggestion_must_be_a_known_label_or_pass_the_name_rule(tmp_path, base, bad):
    """Issue 40 M4: an uploaded label_issues.csv put any name into the training table through Review suspects,
    after which every retrain was refused. Refused when opened, naming the file, the row and the name."""
    root = tmp_path / "label"
    store = SessionStore(root)
    issues = issues_csv(tmp_path, base)
    row = int(issues["quality"].astype(float).idxmin())
    issues.loc[row, "suggested_label"] = bad
    with pytest.raises(ReviewError) as e:
        open_it(store, issues, base, root)
    assert f"label_issues.csv row {row + 2}, column 'suggested_label'" in str(e.value) and repr(bad[:60]) in str(e.value)
    assert not list(root.glob("*/meta.json"))
    issues.loc[row, "suggested_label"] = "todo"  # a new name the rule takes is still a suggestion
    assert open_it(store, issues, base, root)[0].suggestion[0] == "todo"


def test_the_training_table_refuses_a_name_the_rule_refuses_naming_file_or_session_and_row(tmp_path, base):
    from app.versions.trainset import TrainingDataError

    df = pd.read_csv(base)
    df.loc[3, "label"] = "\u202eevil"
    df.to_csv(base, index=False)
    with pytest.raises(TrainingDataError) as e:
        build(tmp_path / "label", base, 0.0)
    assert f"{base} row 5, column 'label'" in str(e.value) and "U+202E" in str(e.value)
    df.loc[3, "label"] = "memo"
    df.to_csv(base, index=False)
    store = SessionStore(tmp_path / "label")
    s = store.create_blind("notes.csv", TEXTS[:3], LABELS)
    assert s.decide(s.current(), "memo")
    journal = s.folder / "journal.jsonl"  # a journal written before the rule: a hostile name in force
    journal.write_text(journal.read_text().replace('"label": "memo"', '"label": "=cmd()"'))
    with pytest.raises(TrainingDataError, match=f"session {s.folder.name} row {s.stack[-1]['row'] + 1}: label '=cmd\\(\\)'"):
        build(tmp_path / "label", base, 0.0)
