"""The API on a calibrated model: `confident` per prediction, a request's own min_confidence, the calibration
in /v1/model, and the review queue of "not sure" answers (app/labeling/review_queue.py) into a labeling session and a
retrain's table."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from starlette.testclient import TestClient

from app.config import parse_args
from app.labeling.kept_store import attach_review
from app.labeling.review_queue import ReviewQueue, start_session
from app.labeling.sessions import SessionStore
from app.server import create_app
from app.versions.trainset import build
from labelstore import open_store
from serving.engine import Classifier, Prediction

TEXTS = [
    "꿈에서 봤다",
    "오류 발생했다",
    "메모 기록",
    "회의 시간 약속",
    "좋은 날씨 일기",
    "내일 오늘 약속 메모",
]


@pytest.fixture(scope="module")
def calibrated(spread_model_dir, tmp_path_factory):
    """The spread tiny model with a temperature and a threshold in the middle of its scores on TEXTS."""
    folder = tmp_path_factory.mktemp("app-calibrated") / "model"
    shutil.copytree(spread_model_dir, folder)
    clf = Classifier.load(folder, provider="torch")
    labels = list(clf.labels)
    raw = clf.predict_proba(TEXTS)
    scaled = raw ** (1 / 0.7)
    scaled /= scaled.sum(1, keepdims=True)
    threshold = float(np.median(scaled.max(1)))
    (folder / "calibration.json").write_text(
        json.dumps(
            {
                "method": "temperature",
                "temperature": 0.7,
                "labels": labels,
                "fitted_on": "model",
                "threshold": threshold,
                "threshold_scope": "global",
                "target_precision": 0.9,
                "estimated_coverage": 0.42,
            }
        )
    )
    return folder, threshold, scaled


def client(folder, tmp_path, *flags):
    cfg = parse_args(["--model", str(folder), "--no-ui", "--data-dir", str(tmp_path / "data"), *flags])
    # issue 29: in-process clients name 127.0.0.1 (a Host the server answers to)
    return TestClient(create_app(cfg, Classifier.load(folder, provider="torch")), base_url="http://127.0.0.1")


def test_confident_and_calibrated_scores(calibrated, tmp_path):
    folder, threshold, scaled = calibrated
    with client(folder, tmp_path) as c:
        preds = c.post("/v1/classify", json={"texts": TEXTS}).json()["predictions"]
        model = c.get("/v1/model").json()
        hf = c.post("/", json={"inputs": TEXTS[0]}).json()
        tei = c.post("/predict", json={"inputs": TEXTS[0]}).json()
        own = c.post("/v1/classify", json={"texts": TEXTS, "min_confidence": 0.0}).json()["predictions"]
        strict = c.post("/v1/classify", json={"texts": TEXTS, "min_confidence": 1}).json()["predictions"]
    np.testing.assert_allclose([p["score"] for p in preds], scaled.max(1), atol=1e-5)
    assert [p["confident"] for p in preds] == (scaled.max(1) >= threshold).tolist()
    assert 0 < sum(p["confident"] for p in preds) < len(TEXTS)
    # calibrated on every route (one text alone: padding moves the last digits)
    assert hf[0][0]["score"] == pytest.approx(preds[0]["score"], abs=1e-4) == tei[0]["score"]
    assert all(p["confident"] for p in own) and not any(p["confident"] for p in strict)
    cal = model["calibration"]
    assert cal["calibrated"] and cal["threshold"] == threshold and cal["target_precision"] == 0.9
    assert cal["estimated_coverage"] == 0.42


@pytest.mark.parametrize("value", [1.5, -0.1, "0.5", True])
def test_min_confidence_outside_0_1_is_a_422_naming_it(calibrated, tmp_path, value):
    folder, _, _ = calibrated
    with client(folder, tmp_path) as c:
        r = c.post("/v1/classify", json={"text": TEXTS[0], "min_confidence": value})
    assert r.status_code == 422 and r.json()["message"].startswith("min_confidence:"), r.text


def test_not_sure_answers_queue_metrics_and_session(calibrated, tmp_path):
    folder, threshold, scaled = calibrated
    unsure = [t for t, s in zip(TEXTS, scaled.max(1)) if s < threshold]
    with client(folder, tmp_path, "--review-queue") as c:
        c.post("/v1/classify", json={"texts": TEXTS})
        c.post("/v1/classify", json={"texts": TEXTS})  # the same texts again: queued once
        c.post(
            "/v1/classify", json={"texts": TEXTS, "min_confidence": 0.0}
        )  # the client's view; still queued once
        metrics = c.get("/metrics").text
        c.app.state.server.review.kept.flush()  # the store's thread writes after the request
    assert f"app_not_confident_total {3 * len(unsure)}.0" in metrics
    assert f"app_review_queue_texts {len(unsure)}.0" in metrics
    queue = ReviewQueue(tmp_path / "data" / "review", 1000)  # read back from the label store, as after a restart
    attach_review(queue, open_store(f"sqlite:///{tmp_path / 'data' / 'app.db'}"))
    assert [w.text for w in queue.peek()] == unsure
    assert all(w.score < threshold for w in queue.peek())
    store = SessionStore(tmp_path / "data" / "label")
    labels = ["dream", "error", "memo"]
    waiting = queue.peek()
    session = start_session(queue, store, labels)
    assert (
        session.texts == unsure and len(queue) == 0 and len(ReviewQueue(tmp_path / "data" / "review", 9)) == 0
    )
    assert session.suggestion == [w.label for w in waiting]  # the model's suggestion travels with each text
    np.testing.assert_allclose(session.confidence, [w.score for w in waiting])
    row = session.current()
    session.decide(row, "memo")
    train = build(tmp_path / "data" / "label", None, 0.0).train  # a retrain's table holds the decision
    assert (train["text"] == session.texts[row]).any() and set(train["label"]) == {"memo"}
    assert start_session(queue, store, labels) is None


def test_no_queue_by_default(calibrated, tmp_path):
    folder, _, _ = calibrated
    with client(folder, tmp_path) as c:
        c.post("/v1/classify", json={"texts": TEXTS})
        metrics = c.get("/metrics").text
    assert "app_not_confident_total" in metrics and "app_review_queue_texts 0.0" in metrics
    assert not (tmp_path / "data" / "review").exists()


def test_full_queue_drops_the_oldest_and_dedups(tmp_path):
    q = ReviewQueue(tmp_path, size=3)

    def pred(score, confident=False):
        return Prediction("memo", score, {"memo": score, "dream": 1 - score}, confident=confident)

    texts = [f"text {i}" for i in range(5)]
    assert q.add(texts, [pred(0.4)] * 5, "v1") == 5
    assert [w.text for w in q.peek()] == texts[2:] and q.dropped == 2
    assert q.add(["text  4", "text 5", "sure one"], [pred(0.4), pred(0.3), pred(0.9, True)], "v1") == 1
    assert [w.text for w in q.peek()] == ["text 3", "text 4", "text 5"]
    for i in range(20):  # the first one pushes "text 3" out; the journal is compacted on the way
        q.add([f"x{i}"], [pred(0.2)], "v2")
        q.discard([f"x{i}"])
    again = ReviewQueue(tmp_path, size=3)
    assert [w.text for w in again.peek()] == [w.text for w in q.peek()] == ["text 4", "text 5"]
    assert len((tmp_path / "queue.jsonl").read_text().splitlines()) <= 2 * 3 + 16 + 1


def test_a_retrain_inherits_the_target_precision():
    from app.versions.jobs import Jobs
    from app.versions.train_params import kfold_config, request_model

    jobs = Jobs.__new__(Jobs)  # settings() reads only the active version's training_config.json
    jobs._active_training_config = lambda: {"config": {"folds": 3, "target_precision": 0.9, "train": {"epochs": 2}}}
    assert jobs.settings({})["target_precision"] == 0.9
    assert jobs.settings({"target_precision": 0.95})["target_precision"] == 0.95
    assert kfold_config({"target_precision": 0.9}, model="m")["target_precision"] == 0.9  # k-fold's Config field
    assert "target_precision" in request_model().model_fields  # POST /v1/train takes it
