"""The review queue and the audit sample in the label store (app/labeling/kept_store.py), on SQLite and PostgreSQL:
the files of an older version imported once with every text counted, then rows that outlive a restart and a
second process, within the queues' bounds."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from app.labeling.audit import AuditQueue
from app.labeling.kept_store import attach_audit, attach_review
from app.labeling.review_queue import ReviewQueue
from labelstore import open_store


def unsure(label="a"):
    return SimpleNamespace(confident=False, label=label, score=0.4, probabilities={"a": 0.4, "b": 0.6})


def test_the_review_queue_file_is_imported_once_then_the_store_holds_the_queue(store_url, tmp_path, caplog):
    old = ReviewQueue(tmp_path / "review", 3)  # an older version's file: 3 added, 1 taken
    old.add(["first", "second", "third"], [unsure(), unsure(), unsure("b")], "v1")
    old.discard(["first"])
    engine = open_store(store_url)
    queue = ReviewQueue(tmp_path / "review", 3)
    with caplog.at_level(logging.INFO, logger="app"):
        attach_review(queue, engine)
    assert "imported 2 waiting texts" in caplog.text
    assert not (tmp_path / "review" / "queue.jsonl").exists() and (tmp_path / "review" / "queue.jsonl.imported").exists()
    queue.add(["fourth", "fifth"], [unsure(), unsure()], "v2")  # full at 3: "second" goes
    queue.discard(["third"])
    queue.kept.flush()
    again = ReviewQueue(tmp_path / "elsewhere", 3)  # a restart, or another process on the same database
    attach_review(again, engine)
    assert [w.text for w in again.peek()] == ["fourth", "fifth"]
    assert again.peek()[0].version == "v2" and again.peek()[0].probabilities == {"a": 0.4, "b": 0.6}
    assert again.add(["fourth"], [unsure()], "v2") == 0  # still deduplicated
    engine.dispose()


def test_the_audit_file_is_imported_once_then_the_store_holds_the_sample(store_url, tmp_path, caplog):
    old = AuditQueue(tmp_path / "monitor", 1.0, max_items=3, seed=0)
    old.offer("v1", ["t1", "t2", "t3"], [["a"], ["b"], ["a"]])
    old.save()
    engine = open_store(store_url)
    audit = AuditQueue(tmp_path / "monitor", 1.0, max_items=3, seed=0)
    with caplog.at_level(logging.INFO, logger="app"):
        attach_audit(audit, engine)
    assert "imported 3 waiting texts and 3 sampled hashes" in caplog.text
    assert (tmp_path / "monitor" / "audit.json.imported").exists() and not (tmp_path / "monitor" / "audit.json").exists()
    assert [i["text"] for i in audit.take(1)] == ["t1"]
    assert audit.offer("v2", ["t4", "t5"], [["b"], [], ]) == 2  # full at 3: "t2" goes
    for table in audit.kept:
        table.flush()
    again = AuditQueue(tmp_path / "elsewhere", 1.0, max_items=3, seed=0)
    attach_audit(again, engine)
    assert [i["text"] for i in again.items.values()] == ["t3", "t4", "t5"] and len(again.seen) == 5
    assert again.offer("v2", ["t1"], [["a"]]) == 0  # sampled lately: not again
    engine.dispose()


def test_a_server_keeps_its_review_queue_and_audit_sample_in_the_store(tmp_path):
    """create_app puts both queues on the store it opens: texts the API was not sure of, and the audit's
    sample, are rows of app.db, read back by the next server on the same data folder."""
    from fastapi.testclient import TestClient

    from app.config import Config
    from app.server import create_app
    from serving.engine import Prediction

    class Unsure:
        batch_tokens, call_overhead_tokens, labels = 512, 12.0, ("a", "b")

        def info(self):
            return {"name": "fake", "labels": self.labels, "provider": "cpu"}

        def encode(self, texts):
            return [[0] * (len(t.split()) + 2) for t in texts]

        def predict_encoded(self, seqs, top_k=None):
            return [Prediction("a", 0.5, {"a": 0.5, "b": 0.5}, confident=False) for _ in seqs]

    cfg = Config(model="m", ui=False, data_dir=tmp_path, review_queue=True, audit_rate=1.0)
    with TestClient(create_app(cfg, Unsure()), base_url="http://127.0.0.1") as c:
        assert c.post("/v1/classify", json={"texts": ["kept one", "kept two"]}).status_code == 200
        state = c.app.state.server
        state.monitor.flush()  # the monitor's thread offers the texts to the audit
        state.review.kept.flush()
        for table in state.monitor.audit.kept:
            table.flush()
    with TestClient(create_app(cfg, Unsure()), base_url="http://127.0.0.1") as c:
        state = c.app.state.server
        assert [w.text for w in state.review.peek()] == ["kept one", "kept two"]
        assert [i["text"] for i in state.monitor.audit.items.values()] == ["kept one", "kept two"]
    assert not (tmp_path / "review" / "queue.jsonl").exists() and not (tmp_path / "monitor" / "audit.json").exists()
