"""Reading a dataset's answers (export, agreement, the Team tab) and a reviewer's adjudications."""

from __future__ import annotations

import time

import sqlalchemy as sa

from labelstore import tx
from labelstore.queue import Dataset, NotFound
from labelstore.schema import adjudications, answers, label_events, records, slots, users


def answer_rows(engine, ds: Dataset) -> list[dict]:
    """One row per current answer: record_id, text, annotator, value, created_at (seconds), in record order."""
    def q(conn):
        return conn.execute(
            sa.select(answers.c.record_id, records.c.text, users.c.name.label("annotator"), answers.c.value,
                      answers.c.updated_at.label("created_at"))
            .join(records, records.c.id == answers.c.record_id).join(users, users.c.id == answers.c.annotator_id)
            .where(records.c.dataset_id == ds.id).order_by(answers.c.record_id, users.c.name)).all()
    return [dict(r._mapping) for r in tx.read(engine, q)]


def adjudicated(engine, ds: Dataset) -> dict[int, object]:
    rows = tx.read(engine, lambda conn: conn.execute(
        sa.select(adjudications.c.record_id, adjudications.c.value)
        .join(records, records.c.id == adjudications.c.record_id).where(records.c.dataset_id == ds.id)).all())
    return {r.record_id: r.value for r in rows}


def adjudicate(engine, ds: Dataset, reviewer_id: int, record_id: int, value, first: bool = False) -> dict:
    """The reviewer's final label for a text; training takes it over the annotators' majority. `first`: only if
    the text has none yet, else nothing is written and the answer holds `settled`, the label it has (a second
    key pressed before the next text was drawn, in the same transaction: one replica's or another's)."""
    def save(conn):
        rec = conn.execute(sa.select(records.c.id).where(records.c.id == record_id, records.c.dataset_id == ds.id)
                           .with_for_update()).first()
        if rec is None:
            raise NotFound(f"no record {record_id} in dataset {ds.id}")
        if first:
            had = conn.execute(sa.select(adjudications.c.value).where(adjudications.c.record_id == record_id)).first()
            if had is not None:
                return {"record_id": record_id, "settled": had.value}
        now = time.time()
        ev = conn.execute(label_events.insert().values(record_id=record_id, annotator_id=reviewer_id,
                                                       status="adjudicated", value=value, created_at=now)
                          .returning(label_events.c.id)).scalar_one()
        fields = {"value": value, "reviewer_id": reviewer_id, "event_id": ev, "created_at": now}
        done = conn.execute(adjudications.update().where(adjudications.c.record_id == record_id).values(**fields))
        if not done.rowcount:
            conn.execute(adjudications.insert().values(record_id=record_id, **fields))
        return {"record_id": record_id, "event_id": ev, "label": value}

    return tx.run(engine, save)


def final_label(values: list, labels: list, multi_label: bool, adjudicated=None):
    """The label a text trains on: the adjudicated one, else the majority of its answers; a tie without
    adjudication gives None (for a label set, each label by its own majority: never None)."""
    if adjudicated is not None:
        return adjudicated
    if not values:
        return None
    if multi_label:
        return sorted(lab for lab in labels if 2 * sum(lab in v for v in values) > len(values))
    counts = sorted(((values.count(v), v) for v in set(values)), reverse=True)
    return counts[0][1] if len(counts) == 1 or counts[0][0] > counts[1][0] else None


def final_labels(engine, ds: Dataset) -> dict[int, object]:
    """final_label per record of the dataset, as the store holds it now (records without one left out)."""
    by_record: dict[int, list] = {}
    for row in answer_rows(engine, ds):
        by_record.setdefault(row["record_id"], []).append(row["value"])
    judged = adjudicated(engine, ds)
    final = {rid: final_label(by_record.get(rid, []), ds.labels, ds.multi_label, judged.get(rid))
             for rid in set(by_record) | set(judged)}
    return {rid: value for rid, value in final.items() if value is not None}


def progress(engine, ds: Dataset) -> dict:
    """Records complete (k answers), and each annotator's count of answers."""
    def q(conn):
        total = conn.execute(sa.select(sa.func.count()).where(records.c.dataset_id == ds.id)).scalar_one()
        complete = conn.execute(sa.select(sa.func.count()).where(
            records.c.dataset_id == ds.id, records.c.n_answers >= ds.overlap)).scalar_one()
        per = conn.execute(sa.select(users.c.name, sa.func.count()).join(answers, answers.c.annotator_id == users.c.id)
                           .join(records, records.c.id == answers.c.record_id)
                           .where(records.c.dataset_id == ds.id).group_by(users.c.name)).all()
        return {"records": total, "complete": complete, "answers": {name: n for name, n in per}}
    return tx.read(engine, q)


def my_progress(engine, ds: Dataset, uid: int) -> dict:
    """One annotator's place in a dataset (the Label tab's bar): texts in it, answered by them, and still to
    go for them (open, not answered by them; the text they hold included) apart from the ones they skipped
    (`skipped`: those come back to them last). Blind: no one else's answers."""
    def q(conn):
        total = conn.execute(sa.select(sa.func.count()).where(records.c.dataset_id == ds.id)).scalar_one()
        mine = conn.execute(sa.select(sa.func.count()).select_from(answers).join(
            records, records.c.id == answers.c.record_id).where(records.c.dataset_id == ds.id,
                                                                answers.c.annotator_id == uid)).scalar_one()
        held = sa.exists().where(slots.c.record_id == records.c.id, slots.c.annotator_id == uid)
        leased = sa.exists().where(slots.c.record_id == records.c.id, slots.c.annotator_id == uid,
                                   slots.c.state == "leased")
        todo = conn.execute(sa.select(sa.func.count()).where(
            records.c.dataset_id == ds.id, sa.or_(sa.and_(records.c.is_open == sa.true(), ~held), leased))).scalar_one()
        skips = sa.exists().where(label_events.c.record_id == records.c.id, label_events.c.annotator_id == uid,
                                  label_events.c.status == "skipped")
        skipped = conn.execute(sa.select(sa.func.count()).where(
            records.c.dataset_id == ds.id, records.c.is_open == sa.true(), ~held, skips)).scalar_one()
        return {"records": total, "mine": mine, "todo": todo - skipped, "skipped": skipped}
    return tx.read(engine, q)


def disagreements(engine, ds: Dataset, limit: int = 200) -> list[dict]:
    """Texts whose answers differ and that no reviewer has settled yet, most answers first."""
    by_record: dict[int, dict] = {}
    for row in answer_rows(engine, ds):
        r = by_record.setdefault(row["record_id"], {"record_id": row["record_id"], "text": row["text"], "answers": {}})
        r["answers"][row["annotator"]] = row["value"]
    judged = adjudicated(engine, ds)
    split = [r for rid, r in by_record.items() if rid not in judged
             and len({str(v) for v in r["answers"].values()}) > 1]
    return sorted(split, key=lambda r: (-len(r["answers"]), r["record_id"]))[:limit]
