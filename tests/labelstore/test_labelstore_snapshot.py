"""Labels as of event N, rebuilt from the event log: the same as the store's state at N, whatever came later."""

from __future__ import annotations

import pytest

from labelstore import open_store, queue, review, users
from labelstore.snapshot import labels_as_of, latest_event


@pytest.fixture
def engine(store_url):
    engine = open_store(store_url)
    yield engine
    engine.dispose()


def test_a_snapshot_keeps_its_labels_after_changes_undos_and_adjudication(engine):
    ids = [users.by_token(engine, users.add_user(engine, f"p{i}", "annotator"))[0] for i in range(3)]
    rows = [{"text": f"t{i}", "priority": i} for i in range(3)]
    ds = queue.get_dataset(engine, queue.create_dataset(engine, "d", ["a", "b"], False, 3, rows, None)[0])
    for uid, votes in zip(ids, (["a", "a", "a"], ["a", "b", "b"], ["b", "b", "b"])):
        for vote in votes:
            rec = queue.next_record(engine, ds, uid)
            queue.submit(engine, ds, uid, rec["record_id"], vote, None)
    n = latest_event(engine)
    then = {r["text"]: r["label"] for r in labels_as_of(engine, n)}
    now = review.final_labels(engine, ds)
    assert then == {f"t{rid - min(now)}": label for rid, label in now.items()} == {"t0": "a", "t1": "b", "t2": "b"}
    queue.undo_last(engine, ds, ids[2])  # t2: a, b left: a tie, no label
    review.adjudicate(engine, ds, ids[0], min(now), "b")
    assert {r["text"]: r["label"] for r in labels_as_of(engine, latest_event(engine))} == {"t0": "b", "t1": "b"}
    assert {r["text"]: r["label"] for r in labels_as_of(engine, n)} == then  # the snapshot did not move
