"""A multi-label model in the app (issue 32), over HTTP against a real `python -m app`: /v1/classify's label sets,
the Hugging Face and TEI shapes, the Label tab's checkbox events (journal, undo, labeled.csv with the separator),
the Batch tab's columns; the label-set journal and the retraining table without a server."""

from __future__ import annotations

import json
import re

import httpx
import numpy as np
import pandas as pd
import pytest
from app_testkit import session_outputs as _call
from app_testkit import start_server
from huggingface_hub import InferenceClient
from test_app_ui_http import all_functions, gradio_call

from app.label_kinds import folder_space
from app.labeling.sessions import SessionError, SessionStore, decisions
from app.versions.swap import check_engine
from app.versions.train_child import multi_label_scores
from app.versions.trainset import build, check
from serving.engine import Classifier
from textdata.labels import LabelSpace

LABELS = ["dream", "error", "memo"]
THRESHOLDS = [0.45, 0.5, 0.6]
SETS = LabelSpace.of(LABELS, multi_label=True, sep=";")
TEXTS = ["꿈에서 봤다 메모 기록", "에러 발생했다 오늘", "오늘 회의 시간", "memo 약속 error 오류"]


def finetune_half():
    """The per-label blend of issue 32's finetune half (k-fold --multi-label)."""
    from baseline import label_blend

    return label_blend


@pytest.fixture(scope="module")
def ml_server(multilabel_classifier_dir, tmp_path_factory):
    server = start_server(multilabel_classifier_dir, tmp_path_factory.mktemp("ml-server"))
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def ml_engine(multilabel_classifier_dir):
    return Classifier.load(multilabel_classifier_dir)


def test_classify_answers_label_sets_scores_and_version(ml_server, ml_engine):
    r = httpx.post(ml_server.url + "/v1/classify", json={"texts": TEXTS}, timeout=30)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model_version"] == "v1" and r.headers["X-Model-Version"] == "v1"
    want = ml_engine.predict(TEXTS)
    for got, p in zip(body["predictions"], want):
        assert set(got) == {"labels", "scores", "confident"}  # the version once, in the response (issue 45)
        assert got["confident"] is True  # no calibration.json: every answer is confident
        assert got["labels"] == p.labels
        assert got["scores"] == pytest.approx(p.scores, abs=1e-5)
        assert got["labels"] == [lab for lab, t in zip(LABELS, THRESHOLDS) if got["scores"][lab] > t]
    assert [] in [g["labels"] for g in body["predictions"]]  # "none of these" is an answer
    top = httpx.post(ml_server.url + "/v1/classify", json={"text": TEXTS[0], "top_k": 1}).json()["predictions"][0]
    # top_k keeps the k most likely and every answered label: `labels` never names one missing from `scores`
    kept = {max(want[0].scores, key=want[0].scores.get), *want[0].labels}
    assert list(top["scores"]) == sorted(kept, key=lambda k: -want[0].scores[k]) and top["labels"] == want[0].labels
    model = httpx.get(ml_server.url + "/v1/model").json()
    assert model["multi_label"] is True and model["thresholds"] == dict(zip(LABELS, THRESHOLDS))


def test_hf_inference_client_and_tei_shapes(ml_server, ml_engine):
    p = ml_engine.predict([TEXTS[0]])[0]
    ranked = sorted(p.scores.items(), key=lambda kv: -kv[1])
    out = InferenceClient(model=ml_server.url, timeout=30).text_classification(TEXTS[0], top_k=None)
    assert [o.label for o in out] == [lab for lab, _ in ranked]
    assert [o.score for o in out] == pytest.approx([s for _, s in ranked], abs=1e-5)
    assert sum(o.score for o in out) != pytest.approx(1.0, abs=1e-3)  # independent sigmoids, not a softmax
    logits = dict(zip(LABELS, ml_engine.predict_logits([TEXTS[0]])[0].tolist()))
    r = httpx.post(ml_server.url + "/", json={"inputs": TEXTS[0], "parameters": {"function_to_apply": "none"}})
    assert {d["label"]: d["score"] for d in r.json()[0]} == pytest.approx(logits, abs=1e-4)
    r = httpx.post(ml_server.url + "/", json={"inputs": "x", "parameters": {"function_to_apply": "softmax"}})
    assert r.status_code == 422 and "multi-label" in r.json()["message"]
    # TEI: raw_scores true answers logits, which a TEI client passes through a sigmoid itself
    r = httpx.post(ml_server.url + "/predict", json={"inputs": TEXTS[:2], "raw_scores": True}, timeout=30)
    assert r.status_code == 200, r.text
    first = r.json()[0]
    assert [d["label"] for d in first] == sorted(logits, key=lambda k: -logits[k])
    assert {d["label"]: 1 / (1 + np.exp(-d["score"])) for d in first} == pytest.approx(p.scores, abs=1e-4)
    single = httpx.post(ml_server.url + "/predict", json={"inputs": TEXTS[0]}).json()
    assert {d["label"]: d["score"] for d in single} == pytest.approx(p.scores, abs=1e-5)


def _dependency(url: str, elem_id: str) -> tuple[int, list]:
    """(fn_index, inputs) of the event a component with this elem_id triggers."""
    config = httpx.get(url + "/ui/config").json()
    by_id = {c["id"]: c.get("props", {}).get("elem_id") for c in config["components"]}
    for i, dep in enumerate(config["dependencies"]):
        if any(by_id.get(t[0]) == elem_id for t in dep["targets"]):
            return i, dep["inputs"]
    raise AssertionError(f"no event on #{elem_id}")


def _upload(url: str, name: str, data: bytes) -> dict:
    path = httpx.post(url + "/ui/gradio_api/upload", files={"files": (name, data, "text/csv")}).json()[0]
    return {"path": path, "orig_name": name, "meta": {"_type": "gradio.FileData"}}


def test_label_tab_checkboxes_journal_undo_and_labeled_csv(ml_server, ml_engine):
    url, session = ml_server.url, "mltest000001"
    csv = "text\n" + "".join(f"{t}\n" for t in TEXTS)
    start = next(f for f in all_functions(url) if f[1] == "start")
    out = _call(url, session, start[0], [_upload(url, "notes.csv", csv.encode()), "text"])
    sid, row = out[0], TEXTS.index(out[2]["value"])
    checks = out[31]  # the checkbox group (the panel follows the sessions menu)
    assert checks["visible"] is True and [c[1] for c in checks["choices"]] == LABELS
    assert checks["value"] == ml_engine.predict([TEXTS[row]])[0].labels  # suggestions pre-ticked
    assert all(b.get("visible") == "hidden" for b in out[7:27])  # no one-click label buttons
    folder = ml_server.cwd / "app-data" / "label" / sid
    save, _ = _dependency(url, "save-btn")
    out = _call(url, session, save, [sid, out[1], ["memo", "dream"]])  # out[1]: the record the page shows
    event = [json.loads(x) for x in (folder / "journal.jsonl").read_text().splitlines()][-1]
    assert event["labels"] == ["dream", "memo"] and event["label"] == "dream;memo" and event["row"] == row
    second = TEXTS.index(out[2]["value"])
    assert out[31]["value"] == ml_engine.predict([TEXTS[second]])[0].labels
    none, _ = _dependency(url, "none-btn")
    _call(url, session, none, [sid, out[1]])
    labeled = pd.read_csv(folder / "labeled.csv", dtype=str, keep_default_na=False)
    assert labeled["label"].tolist() == ["dream;memo", ""]
    undo, _ = _dependency(url, "undo-btn")
    out = _call(url, session, undo, [sid, None])
    assert out[2]["value"] == TEXTS[second]  # the undone row is shown again
    labeled = pd.read_csv(folder / "labeled.csv", dtype=str, keep_default_na=False)
    assert labeled.to_dict("records") == [{"text": TEXTS[row], "label": "dream;memo"}]
    assert [d["label"] for d in decisions(folder)] == ["dream;memo"]


def test_batch_tab_writes_pred_labels_and_probabilities(ml_server, ml_engine):
    url = ml_server.url
    fn = next(f for f in all_functions(url) if f[1] == "score_file")
    csv = "text\n" + "".join(f"{t}\n" for t in TEXTS)
    done = gradio_call(url, fn[0], [_upload(url, "batch.csv", csv.encode()), "text"])
    assert done["success"], done
    preview = done["output"]["data"][2]
    # the answer first, then the (cut) text: a long text must not push the answer off the screen (issue 45)
    assert preview["headers"][:7] == ["pred_labels", "confident", "error", "text", "prob_dream", "prob_error",
                                      "prob_memo"]
    got = [r[0] for r in preview["data"]]
    assert got == [";".join(p.labels) for p in ml_engine.predict(TEXTS)]
    assert "(none)" in done["output"]["data"][1]


def test_session_label_sets_without_a_server(tmp_path, ml_engine):
    store = SessionStore(tmp_path / "label")
    preds = ml_engine.predict(TEXTS)
    s = store.create("x.csv", TEXTS, preds, LABELS, ml_engine.thresholds, SETS)
    assert s.multi_label and [s.suggested_set(i) for i in range(len(TEXTS))] == [p.labels for p in preds]
    first = s.current()
    assert s.confidence[first] == min(s.confidence)  # least certain label nearest its threshold first
    with pytest.raises(SessionError, match="unknown label 'weather'"):
        s.decide(first, ["dream", "weather"])
    with pytest.raises(SessionError, match="contains the separator ';'"):
        s.add_label("a;b")
    # issue 40 M5: names that would not read back as one label of a set ('[x]' as a JSON list, '[1]' as 1,
    # 'a,b' as a file mixing separators) and the empty set's name are refused when added, not in the child
    for bad in ("[x]", "[1]", "a,b", "(none)"):
        with pytest.raises(SessionError, match=re.escape(f"label {bad!r}")):
            s.add_label(bad)
    assert s.decide(first, "memo")  # one name: that label alone
    assert decisions(s.folder)[-1]["label"] == "memo"


def test_training_table_and_retrain_flags_for_a_multi_label_model(tmp_path, multilabel_classifier_dir,
                                                                  tiny_classifier_dir, ml_engine):
    assert folder_space(multilabel_classifier_dir).sep == ";" and not folder_space(tiny_classifier_dir).multi_label
    base = tmp_path / "base.csv"
    pd.DataFrame({"text": ["a b", "c d", "e f", "g h"], "label": ["memo;dream", "", "dream", "memo"]}).to_csv(base,
                                                                                                            index=False)
    store = SessionStore(tmp_path / "label")
    s = store.create("x.csv", ["a b", "new text"], ml_engine.predict(["a b", "new text"]), LABELS,
                     ml_engine.thresholds, SETS)
    for _ in range(2):
        s.decide(s.current(), ["error"] if s.texts[s.current()] == "a b" else ["dream", "memo"])
    ts = build(tmp_path / "label", base, share=0.0, space=SETS)
    table = dict(zip(ts.train["text"], ts.train["label"]))
    assert table == {"a b": "error", "c d": "", "e f": "dream", "g h": "memo", "new text": "dream;memo"}
    assert ts.n_conflicts == 1 and ts.conflicts[0]["kept"] == "error"  # the session's later decision wins
    with pytest.raises(ValueError, match="'error' has 1 row"):
        check(ts, 2, SETS)
    check(ts, 1, SETS)
    ev = pd.DataFrame({"text": TEXTS, "label": [";".join(p.labels) for p in ml_engine.predict(TEXTS)]})
    scores = multi_label_scores(ml_engine, ev, SETS)
    assert scores["macro_f1"] == 1.0 and scores["subset_accuracy"] == 1.0
    check_engine(ml_engine)  # per-label probabilities pass the activation check


def test_retraining_a_multi_label_model_makes_a_multi_label_version(multilabel_classifier_dir, tiny_electra_dir,
                                                                   multilabel_rows, tmp_path_factory):
    """The learning loop end to end on a multi-label active model: label sets in the table, k-fold with
    --multi-label, a gated export, the slice scored as sets, v2 promoted and answering label sets."""
    finetune_half()  # k-fold --multi-label: the finetune half of issue 32
    import time

    from app_testkit import training_server

    rows = multilabel_rows(90, seed=11)
    with training_server(multilabel_classifier_dir, tiny_electra_dir, rows, tmp_path_factory.mktemp("ml-train"),
                         "--no-ui") as server:
        r = httpx.post(server.url + "/v1/train", json={"folds": 2, "epochs": 1})
        assert r.status_code == 202, r.text
        job_id, deadline = r.json()["id"], time.monotonic() + 900
        while time.monotonic() < deadline:
            job = httpx.get(f"{server.url}/v1/jobs/{job_id}").json()
            if job["status"] == "failed" or (job["status"] != "running" and job.get("decision")):
                break
            time.sleep(1)
        assert job["status"] == "succeeded", job.get("error")
        models = server.cwd / "app-data" / "models"
        spec = json.loads((models / ".jobs" / job_id / "spec.json").read_text())
        assert spec["label_sep"] == ";" and spec["kfold"]["multi_label"] is True and spec["kfold"]["label_sep"] == ";"
        assert json.loads((models / "v2" / "config.json").read_text())["problem_type"] == "multi_label_classification"
        assert json.loads((models / "v2" / "thresholds.json").read_text())["labels"] == LABELS
        table = pd.read_csv(models / "v2" / "training" / "train.csv", dtype=str, keep_default_na=False)
        assert "" in set(table["label"]) and any(";" in c for c in table["label"])  # sets and "none of these"
        meta = json.loads((models / "v2" / "version.json").read_text())
        assert {"macro_f1", "micro_f1", "subset_accuracy"} <= set(meta["eval"]) and job["decision"]["promoted"]
        body = httpx.post(server.url + "/v1/classify", json={"texts": TEXTS}).json()
        assert body["model_version"] == "v2" and all(set(p) == {"labels", "scores", "confident"}
                                                     for p in body["predictions"])
