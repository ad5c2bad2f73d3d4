"""Labels as of event N: what a retrain reads, rebuilt from the append-only event log alone.

The answers and adjudications tables hold the state now; replaying the log up to event N gives the state
then, so a version whose lineage names N can be retrained on exactly the labels it had, whatever was
answered, changed or undone since.
"""

from __future__ import annotations

import sqlalchemy as sa

from labelstore import tx
from labelstore.review import final_label
from labelstore.schema import datasets, label_events, records


def latest_event(engine) -> int:
    """The newest event's id (0 for an empty log): the snapshot a retrain started now takes."""
    return tx.read(engine, lambda conn: conn.execute(sa.select(sa.func.max(label_events.c.id))).scalar()) or 0


def labels_as_of(engine, event_id: int, dataset_id: int | None = None) -> list[dict]:
    """Per record with a final label as of `event_id` (of one dataset where given): text, label (a string, or a
    sorted list for a multi-label dataset), dataset_id, record_id, multi_label, ts (its last event's time), and
    how it was decided (the final-labels export, app/team/final_export.py): `decided` ("adjudicated",
    "unanimous" or "majority"), `answers` (how many) and `agreeing` (how many of them are the final label)."""
    def q(conn):
        one = [records.c.dataset_id == dataset_id] if dataset_id is not None else []
        return conn.execute(
            sa.select(label_events.c.record_id, label_events.c.annotator_id, label_events.c.status,
                      label_events.c.value, label_events.c.created_at, records.c.text, records.c.dataset_id,
                      datasets.c.labels, datasets.c.multi_label)
            .join(records, records.c.id == label_events.c.record_id)
            .join(datasets, datasets.c.id == records.c.dataset_id)
            # a skip changes no answer (labelstore/queue.py skip)
            .where(label_events.c.id <= event_id, label_events.c.status != "skipped", *one)
            .order_by(label_events.c.id)).all()

    answers: dict[int, dict[int, object]] = {}
    judged, info = {}, {}
    for ev in tx.read(engine, q):
        info[ev.record_id] = ev
        if ev.status == "adjudicated":
            judged[ev.record_id] = ev.value
        elif ev.status == "undone":
            answers.get(ev.record_id, {}).pop(ev.annotator_id, None)
        else:  # answered, changed
            answers.setdefault(ev.record_id, {})[ev.annotator_id] = ev.value
    out = []
    for rid, ev in info.items():
        given = list(answers.get(rid, {}).values())
        label = final_label(given, ev.labels, ev.multi_label, judged.get(rid))
        if label is not None:
            agreeing = sum(_same(v, label, ev.multi_label) for v in given)
            decided = "adjudicated" if rid in judged else "unanimous" if agreeing == len(given) else "majority"
            out.append({"text": ev.text, "label": label, "dataset_id": ev.dataset_id, "record_id": rid,
                        "multi_label": ev.multi_label, "ts": ev.created_at, "decided": decided,
                        "answers": len(given), "agreeing": agreeing})
    return out


def _same(answer, final, multi_label: bool) -> bool:
    """An answer is the final label (a label set: the same names, whatever their order)."""
    return sorted(answer or []) == sorted(final) if multi_label else answer == final
