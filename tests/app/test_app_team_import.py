"""The Label tab's sessions become datasets on the first start with a label store: every row and decision
counted, undone decisions left out, and never imported twice."""

from __future__ import annotations

import sqlalchemy as sa

from app.labeling.sessions import LabelSession
from app.team.sessions_import import import_sessions
from labelstore import open_store, queue, review
from serving.engine import Prediction


def test_sessions_are_imported_once_with_every_row_counted(tmp_path):
    root = tmp_path / "label"
    root.mkdir()
    texts = ["alpha", "beta", "gamma", "beta", "delta"]  # "beta" twice: one record
    preds = [Prediction("a", 0.6 + i / 100, {"a": 0.6 + i / 100, "b": 0.4 - i / 100}) for i in range(len(texts))]
    session = LabelSession.create(root, "upload.csv", texts, preds, ["a", "b"])
    for label in ("b", "a", "b"):
        session.decide(session.current(), label)
    session.undo()  # the third decision is taken back
    engine = open_store(f"sqlite:///{tmp_path / 'app.db'}")
    counts = import_sessions(engine, root)
    assert counts == {"sessions": 1, "rows": 5, "records": 4, "decisions": 2, "answers": 2, "replaced": 0}
    [made] = queue.list_datasets(engine)
    ds = queue.get_dataset(engine, made["id"])
    assert made["name"] == f"session {session.id}" and made["records"] == 4 and ds.overlap == 1
    final = review.final_labels(engine, ds)
    with engine.connect() as conn:
        texts_of = dict(conn.execute(sa.text("SELECT id, text FROM records")).all())
    assert sorted((texts_of[r], v) for r, v in final.items()) == [("alpha", "b"), ("beta", "a")]
    assert import_sessions(engine, root)["sessions"] == 0  # a store with datasets: never again
    assert len(queue.list_datasets(engine)) == 1
    engine.dispose()
