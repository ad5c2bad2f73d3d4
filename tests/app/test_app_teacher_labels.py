"""The cascade's LLM answers as teacher labels for the next retrain (app/llm/teacher_labels.py): gold rows stay gold, texts
with only the LLM's answer become teacher rows, the evaluation slice stays gold only, and the retrain runs k-fold
with --teacher-column and records what it read in the version's lineage."""

from __future__ import annotations

import asyncio
import csv
import json
import shutil
from types import SimpleNamespace

import httpx
import pandas as pd
from app_testkit import training_server
from fake_llm import PROMPT
from test_app_calibration import TEXTS, calibrated  # noqa: F401 - the fixture, shared
from test_app_train import wait_job

from app.llm.fallback import STORE_COLUMNS
from app.llm.teacher_labels import TEACHER_FILE, attach, described
from app.versions.lineage import text_hash
from app.versions.trainset import in_eval_slice
from textdata.labels import LabelSpace


def write_answers(data_dir, rows):
    path = data_dir / TEACHER_FILE
    path.parent.mkdir(parents=True)
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(STORE_COLUMNS)
        for i, (text, answer) in enumerate(rows):  # two clients: the lineage counts the answers of each
            w.writerow([text, answer, "m", "v1", "x", "0.4", "2026-11-26T00:00:00Z", "api-key" if i else "user:ann"])
    return path


def test_gold_stays_gold_and_llm_only_texts_become_teacher_rows(tmp_path):
    train = pd.DataFrame({"text": ["a gold  text", "another gold"], "label": ["x", "y"]})
    held = [t for t in (f"slice text {i}" for i in range(200)) if in_eval_slice(t, 0.2)][:1]
    write_answers(tmp_path, [("a gold text", "y"), ("only the llm", "x"), ("only the llm", "y"), (held[0], "x"),
                             ("", "x")])
    out, record = attach(train, 0.2, tmp_path, LabelSpace())
    assert out.to_dict("records") == [
        {"text": "a gold  text", "label": "x", "teacher": "y"},  # whitespace collapsed: the same text
        {"text": "another gold", "label": "y", "teacher": ""},
        {"text": "only the llm", "label": "", "teacher": "y"},  # the latest answer wins
    ]
    assert record["used"] and record["teacher_rows"] == 1 and record["gold_rows_with_answer"] == 1
    assert record["in_eval_slice"] == 1 and record["answers"] == 5 and record["llm"] == ["m"]
    assert record["by_client"] == {"api-key": 4, "user:ann": 1}
    assert len(record["sha256"]) == 64


def test_the_train_tab_says_what_was_read_from_the_llm():
    assert described({}) == "" and "not read: a multi-label" in described({"used": False, "why": "a multi-label x"})
    said = described({"used": True, "teacher_rows": 7, "gold_rows_with_answer": 3})
    assert "7 texts answered only by the LLM" in said and "3 gold rows" in said


def test_no_answers_leave_the_table_as_it_was(tmp_path):
    train = pd.DataFrame({"text": ["t"], "label": ["x"]})
    assert attach(train, 0.2, tmp_path, LabelSpace()) == (train, {})
    write_answers(tmp_path, [("u", "x")])  # single-label answers: a multi-label retrain reads the label sets' file
    sets = LabelSpace.of(multi_label=True, sep=";")
    assert attach(train, 0.2, tmp_path, sets) == (train, {})


def test_a_multi_label_retrain_learns_from_the_cascades_label_sets(tmp_path, fake):
    """The multi-label twin of test_a_retrain_learns_from_the_cascades_answers, without the server and the training:
    the cascade defers 'not sure' label sets to the local LLM and keeps them; the retrain's table (`attach`, as
    app/versions/jobs.py calls it) is what k-fold --multi-label --teacher-column reads: gold sets stay gold (a
    "none of these" too), LLM-only texts become teacher rows (the LLM's "none" an answer of no label), the slice
    stays gold only."""
    from test_app_cascade_rows import fallback, ml

    from finetune.teacher_data import load
    from textdata.normalize import Normalizer

    sets = LabelSpace.of(["bug", "docs", "ui"], multi_label=True, sep=";")
    share = 0.2
    slice_text = next(t for t in (f"a ui text {i}" for i in range(200)) if in_eval_slice(t, share))
    asked = ["a bug in the docs page", "SAY:none", "SAY:docs;ui", "gold bug text 2", slice_text]
    assert not any(in_eval_slice(t, share) for t in asked[:4])
    fb = fallback(tmp_path, fake.url)
    answers = asyncio.run(fb.resolve(asked, [ml(["ui"], False)] * len(asked), "v1", sets.labels, space=sets))
    assert [a.labels for a in answers] == [["bug"], [], ["docs", "ui"], ["bug"], ["ui"]]
    gold = pd.DataFrame({"text": ["gold bug text 2", "bug one", "bug two docs", "docs three", "ui four", "ui five",
                                  "nothing six", "nothing seven"],
                         "label": ["bug;ui", "bug", "bug;docs", "docs", "ui", "ui", "", ""]})
    out, record = attach(gold, share, tmp_path / "data", sets)
    assert record["used"] and record["teacher_rows"] == 3 and record["gold_rows_with_answer"] == 1
    assert record["in_eval_slice"] == 1 and record["file"].endswith("llm_label_sets.csv")
    got = dict(zip(out["text"], zip(out["label"], out["teacher"])))
    assert got == {"gold bug text 2": ("bug;ui", "bug"), "bug one": ("bug", ""), "bug two docs": ("bug;docs", ""),
                   "docs three": ("docs", ""), "ui four": ("ui", ""), "ui five": ("ui", ""),
                   "nothing six": ("[]", ""), "nothing seven": ("[]", ""),  # gold "none of these": still gold
                   "a bug in the docs page": ("", "bug"), "SAY:none": ("", "[]"), "SAY:docs;ui": ("", "docs;ui")}
    path = tmp_path / "train.csv"
    out.to_csv(path, index=False)
    cfg = SimpleNamespace(text_column="text", label_column="label", teacher_column="teacher", encoding="utf-8",
                          group_column=None, seed=0, multi_label=True, label_sep=";")
    data = load(path, cfg, Normalizer("none"))
    assert data.labels == ["bug", "docs", "ui"] and data.gold.sum() == 8 and (~data.gold).sum() == 3
    said = dict(zip(data.texts, data.answered.tolist()))
    assert said["SAY:none"] == [0, 0, 0] and said["SAY:docs;ui"] == [0, 1, 1] and said["gold bug text 2"] == [1, 0, 0]
    assert data.Y[data.texts.index("nothing six")].tolist() == [0, 0, 0] and not data.outside


def test_a_retrain_learns_from_the_cascades_answers(calibrated, spread_model_dir, tiny_electra_dir,  # noqa: F811
                                                    tmp_path_factory, toy_rows, llm):
    """End to end: the cascade defers 'not sure' answers to the local LLM, which are kept; the retrain reads them
    as teacher labels (k-fold --teacher-column), scores on gold rows only, and the version says what it read."""
    folder, _, _ = calibrated
    root = tmp_path_factory.mktemp("teacher-retrain")
    v1 = root / "v1-model"
    shutil.copytree(folder, v1)
    (root / "prompt.txt").write_text(PROMPT)
    rows = toy_rows(n_per_class=12, seed=3)
    new = toy_rows(n_per_class=10, seed=99)["text"].drop_duplicates()
    new = [t for t in new if t not in set(rows["text"])]
    with training_server(v1, tiny_electra_dir, rows, root, "--no-ui", "--fallback-url", llm.url, "--fallback-model",
                         "m", "--fallback-prompt", str(root / "prompt.txt")) as server:
        url = server.url
        preds = httpx.post(url + "/v1/classify", json={"texts": new + TEXTS}, timeout=60).json()["predictions"]
        deferred = [t for t, p in zip(new + TEXTS, preds) if p["source"] == "llm"]
        store = pd.read_csv(server.cwd / "app-data" / TEACHER_FILE, keep_default_na=False)
        assert sorted(store["text"]) == sorted(deferred) and len(deferred) > 0
        r = httpx.post(url + "/v1/train", json={"folds": 2, "epochs": 1, "lr": 0.001})
        assert r.status_code == 202, r.text
        job = wait_job(url, r.json()["id"], lambda j: j["status"] != "running" and (j.get("decision")
                                                                                   or j["status"] == "failed"))
        assert job["status"] == "succeeded", job.get("error")
        models = server.cwd / "app-data" / "models"
        table = pd.read_csv(models / ".jobs" / job["id"] / "train.csv", keep_default_na=False)
        spec = json.loads((models / ".jobs" / job["id"] / "spec.json").read_text())
        meta = json.loads((models / job["version"] / "version.json").read_text())
    share = json.loads((models / "eval_slice.json").read_text())["share"]
    expected = sorted(t for t in deferred if not in_eval_slice(t, share) and t not in set(rows["text"]))
    assert expected, "no deferred text outside the slice: the test would prove nothing"
    assert spec["kfold"]["teacher_column"] == "teacher"
    assert sorted(table.loc[table["label"] == "", "text"]) == expected  # teacher rows: the LLM's answer only
    assert (table.loc[table["label"] == "", "teacher"] != "").all()
    lineage = meta["data"]["teacher"]
    assert lineage["used"] and lineage["teacher_rows"] == len(expected) and lineage["llm"] == ["m"]
    assert lineage["sha256"] and lineage["texts"] == len(deferred)
    # every score on gold rows: the version's teacher summary counts the kinds of rows it trained on
    assert meta["teacher"]["rows"]["teacher_only"] == len(expected)
    assert meta["teacher"]["rows"]["gold"] == job["data"]["train_rows"]
    trained = set((models / job["version"] / "training" / "texts.sha256").read_text().split())
    assert {text_hash(t) for t in expected} <= trained  # lineage: the teacher rows were trained on

