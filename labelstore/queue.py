"""Datasets and their shared queue: k answers per text from k different people, never more, under races.

A record has `overlap` slots (labelstore/schema.py): `next` leases one to the caller, an answer turns it
into an answered slot. The slots' primary key (record, slot number < k) and unique (record, annotator) are
what hold the limits; the code only picks which slot to try. On SQLite every write is serialized (BEGIN
IMMEDIATE); on PostgreSQL `next` skips rows another transaction holds and an answer locks its record.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from dataclasses import dataclass

import sqlalchemy as sa

from labelstore import fast, tx
from labelstore.schema import adjudications, answers, datasets, label_events, records, slots

LEASE_S = 600.0  # a text given to someone and not answered goes back to the queue after this
CANDIDATES = 16


class NotFound(LookupError):
    pass


class Full(RuntimeError):
    """The text already has its k answers (the caller's lease expired and someone else took the slot)."""


class BadLabel(ValueError):
    pass


class Reused(ValueError):
    """A client_event_id the caller sent before with another answer (another record, or another label): a
    replay would drop this answer unsaved, so it is refused and nothing changes."""


@dataclass(frozen=True)
class Dataset:
    id: int
    name: str
    labels: list
    multi_label: bool
    overlap: int


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def create_dataset(engine, name: str, labels: list[str], multi_label: bool, overlap: int, rows: list[dict],
                   created_by: int | None) -> tuple[int, int, int]:
    """rows: {"text", "suggestion", "priority", "model_version", "meta"}; returns (id, records, duplicates
    dropped). A text given twice is one record: its answers are asked for once."""
    def insert(conn):
        ds = conn.execute(datasets.insert().values(name=name, labels=list(labels), multi_label=multi_label,
                                                   overlap=overlap, created_by=created_by, created_at=time.time())
                          .returning(datasets.c.id)).scalar_one()
        seen, batch = set(), []
        for row in rows:
            h = text_hash(row["text"])
            if h not in seen:
                seen.add(h)
                batch.append({"dataset_id": ds, "text": row["text"], "text_hash": h, "meta": row.get("meta"),
                              "suggestion": row.get("suggestion"), "model_version": row.get("model_version"),
                              "priority": row.get("priority", 0.0), "n_answers": 0})
        if batch:
            conn.execute(records.insert(), batch)
        return ds, len(batch), len(rows) - len(batch)

    return tx.run(engine, insert)


def get_dataset(engine, dataset_id: int) -> Dataset:
    row = tx.read(engine, lambda conn: conn.execute(
        sa.select(datasets.c.id, datasets.c.name, datasets.c.labels, datasets.c.multi_label, datasets.c.overlap)
        .where(datasets.c.id == dataset_id)).first())
    if row is None:
        raise NotFound(f"no dataset {dataset_id}")
    return Dataset(*row)


def list_datasets(engine) -> list[dict]:
    def q(conn):
        n = sa.select(sa.func.count()).where(records.c.dataset_id == datasets.c.id).scalar_subquery()
        done = (sa.select(sa.func.count()).where(records.c.dataset_id == datasets.c.id,
                                                 records.c.n_answers >= datasets.c.overlap).scalar_subquery())
        return conn.execute(sa.select(datasets.c.id, datasets.c.name, datasets.c.overlap, datasets.c.multi_label,
                                      datasets.c.labels, n.label("records"), done.label("complete"))
                            .order_by(datasets.c.id)).all()
    return [dict(r._mapping) for r in tx.read(engine, q)]


def delete_dataset(engine, dataset_id: int) -> int:
    """The dataset and everything of it (records, answers, events, slots, adjudications: ON DELETE CASCADE, and
    deleted here too where a database was made without foreign keys on); its number of records, or NotFound."""
    def delete(conn):
        ids = sa.select(records.c.id).where(records.c.dataset_id == dataset_id).scalar_subquery()
        n = conn.execute(sa.select(sa.func.count()).where(records.c.dataset_id == dataset_id)).scalar_one()
        for table in (adjudications, answers, slots, label_events):
            conn.execute(table.delete().where(table.c.record_id.in_(ids)))
        conn.execute(records.delete().where(records.c.dataset_id == dataset_id))
        if conn.execute(datasets.delete().where(datasets.c.id == dataset_id)).rowcount == 0:
            raise NotFound(f"no dataset {dataset_id}")
        return n

    return tx.run(engine, delete)


def check_value(ds: Dataset, label=None, labels=None):
    """The answer as stored: a label of the set, or a sorted list of them for a multi-label dataset."""
    if ds.multi_label:
        if labels is None:
            raise BadLabel("this dataset is multi-label: send 'labels': [...] (possibly empty)")
        unknown = [x for x in labels if x not in ds.labels]
        if unknown:
            raise BadLabel(f"label {unknown[0]!r} is not in this dataset's labels {ds.labels}")
        return sorted(set(labels))
    if label is None:
        raise BadLabel("send 'label': one of " + ", ".join(map(str, ds.labels)))
    if label not in ds.labels:
        raise BadLabel(f"label {label!r} is not in this dataset's labels {ds.labels}")
    return label


def _record_out(row) -> dict:
    return {"record_id": row.id, "text": row.text, "suggestion": row.suggestion}


B, S = sa.bindparam, fast.Statement
# The hot path's statements, built once, run through labelstore/fast.py (on SQLite, the driver's cursor:
# SQLAlchemy's execute cost more Python than SQLite spends running them). Values come as bound parameters;
# those named new_* set columns of the same name.
_COLS = (records.c.id, records.c.text, records.c.suggestion)
_HELD = S(sa.select(*_COLS).join(slots, slots.c.record_id == records.c.id)
          .where(records.c.dataset_id == B("ds"), slots.c.annotator_id == B("uid"), slots.c.state == "leased")
          .order_by(records.c.priority, records.c.id).limit(1))
_RENEW = S(slots.update().where(slots.c.record_id == B("rid"), slots.c.annotator_id == B("uid"))
           .values(expires_at=B("new_expires")))
_FREE = (records.c.dataset_id == B("ds"), records.c.is_open == sa.true(),
         ~sa.exists().where(slots.c.record_id == records.c.id, slots.c.annotator_id == B("uid")),
         sa.or_(sa.select(sa.func.count()).where(slots.c.record_id == records.c.id).scalar_subquery() < B("k"),
                sa.exists().where(slots.c.record_id == records.c.id, slots.c.state == "leased",
                                  slots.c.expires_at < B("now"))))
# the caller's skips (label_events status "skipped"): such a text comes back to them only once nothing else is
_MY_SKIPS = sa.select(label_events.c.id).where(label_events.c.record_id == records.c.id,
                                              label_events.c.annotator_id == B("uid"),
                                              label_events.c.status == "skipped")
_OPEN_SELECT = (sa.select(*_COLS).where(*_FREE, ~_MY_SKIPS.exists())
                .order_by(records.c.priority, records.c.id).limit(CANDIDATES))
_OPEN = S(_OPEN_SELECT)
# ... and then the one skipped longest ago first, so skipping again moves on to the next skipped text
_SKIPPED = S(sa.select(*_COLS).where(*_FREE, _MY_SKIPS.exists())
             .order_by(_MY_SKIPS.with_only_columns(sa.func.max(label_events.c.id)).scalar_subquery(), records.c.id)
             .limit(CANDIDATES))
# PostgreSQL: texts another transaction is claiming are skipped first; when all are, wait for them (in queue
# order, so two waiting callers cannot deadlock), in rounds (a text that filled up meanwhile drops out of
# the next round's read), before saying nothing is left. SQLite runs one writer at a time: one read is exact.
_OPEN_PG = ([S(_OPEN_SELECT.with_for_update(of=records, skip_locked=True))]
            + [S(_OPEN_SELECT.with_for_update(of=records))] * 4)
_SLOTS_OF = S(sa.select(slots.c.slot, slots.c.state, slots.c.expires_at, slots.c.annotator_id)
              .where(slots.c.record_id == B("rid")))
_TAKE_OVER = S(slots.update().where(slots.c.record_id == B("rid"), slots.c.slot == B("s"), slots.c.state == "leased",
                                    slots.c.expires_at < B("now"))
               .values(annotator_id=B("new_uid"), state=B("new_state"), expires_at=B("new_expires")))
_PRIOR = S(sa.select(label_events).where(label_events.c.annotator_id == B("uid"),
                                         label_events.c.client_event_id == B("cid")))
_RECORD = S(sa.select(records.c.id, records.c.suggestion, records.c.model_version)
            .where(records.c.id == B("rid"), records.c.dataset_id == B("ds")).with_for_update())
# read once the record is locked (a statement of its own: on PostgreSQL it sees what the lock waited for)
_CURRENT = S(sa.select(answers.c.event_id).where(answers.c.record_id == B("rid"), answers.c.annotator_id == B("uid")))
_ANSWERED = S(slots.update().where(slots.c.record_id == B("rid"), slots.c.annotator_id == B("uid"),
                                   slots.c.state == "leased").values(state="answered"))
_COUNT_UP = S(records.update().where(records.c.id == B("rid"))
              .values(n_answers=records.c.n_answers + 1, is_open=records.c.n_answers + 1 < B("k")))
_EVENT = S(label_events.insert().returning(*label_events.c))
_CHANGE = S(answers.update().where(answers.c.record_id == B("rid"), answers.c.annotator_id == B("uid"))
            .values(value=B("new_value", type_=sa.JSON), event_id=B("new_event"), updated_at=B("new_at")))
_NEW_SLOT, _NEW_ANSWER = S(slots.insert()), S(answers.insert())


def _nested(conn):
    """A savepoint on PostgreSQL, where a failed statement aborts the whole transaction. SQLite undoes only
    the failed statement (and runs one writer at a time): the two statements a savepoint costs are saved."""
    return conn.begin_nested() if conn.dialect.name != "sqlite" else contextlib.nullcontext()


def _claim(conn, record_id: int, uid: int, k: int, now: float, expires: float, state: str) -> bool:
    """Take a free slot of the record, or one whose lease ran out; False when all k are held."""
    used = _SLOTS_OF.execute(conn, {"rid": record_id}).all()
    if any(u.annotator_id == uid for u in used):  # this person holds the text already
        return False
    taken = {u.slot for u in used}
    for s in (s for s in range(k) if s not in taken):
        try:
            with _nested(conn):
                _NEW_SLOT.execute(conn, {"record_id": record_id, "slot": s, "annotator_id": uid, "state": state,
                                              "expires_at": expires})
            return True
        except sa.exc.IntegrityError:  # another transaction took it, or this person holds the text already
            return False
    for u in used:
        if u.state == "leased" and u.expires_at < now:
            try:
                with _nested(conn):
                    done = _TAKE_OVER.execute(conn, {"rid": record_id, "s": u.slot, "now": now, "new_uid": uid,
                                                     "new_state": state, "new_expires": expires})
                if done.rowcount:
                    return True
            except sa.exc.IntegrityError:
                return False
    return False


def next_record(engine, ds: Dataset, uid: int, lease_s: float = LEASE_S) -> dict | None:
    """The caller's next text: the one they hold (resume, from any browser), else the least sure text that
    still has a free slot and that they have not answered nor skipped, else one they skipped (the oldest skip
    first). None when nothing is left for them."""
    def pick(conn):
        now = time.time()
        held = _HELD.execute(conn, {"ds": ds.id, "uid": uid}).first()
        if held is not None:
            _RENEW.execute(conn, {"rid": held.id, "uid": uid, "new_expires": now + lease_s})
            return _record_out(held)
        params = {"ds": ds.id, "k": ds.overlap, "uid": uid, "now": now}
        for query in [*(_OPEN_PG if conn.dialect.name == "postgresql" else [_OPEN]), _SKIPPED]:
            for row in query.execute(conn, params).all():
                if _claim(conn, row.id, uid, ds.overlap, now, now + lease_s, "leased"):
                    return _record_out(row)
        return None

    return tx.run_hot(engine, pick)


def _event_body(ev, multi_label: bool) -> dict:
    body = {"event_id": ev.id, "record_id": ev.record_id, "status": ev.status, "created_at": ev.created_at}
    body["labels" if multi_label else "label"] = ev.value
    return body


def submit(engine, ds: Dataset, uid: int, record_id: int, value, client_event_id: str | None):
    """Save the caller's answer; (body, replayed). A client_event_id seen before with the same record and value
    returns the first answer's body and changes nothing; with another record or value it raises Reused (the
    id is the caller's, across datasets: a per-session counter reused would otherwise drop answers unsaved).
    Answering a text again changes the caller's answer (status "changed")."""
    def save(conn):
        if client_event_id is not None:
            prior = _PRIOR.execute(conn, {"uid": uid, "cid": client_event_id}).first()
            if prior is not None:
                if (prior.record_id, prior.value) != (record_id, value):
                    raise Reused(f"client_event_id {client_event_id!r} was sent before with another answer (record "
                                 f"{prior.record_id}); send a new id per answer")
                return _event_body(prior, ds.multi_label), True
        # one answer at a time per text (FOR UPDATE on PostgreSQL; SQLite has one writer anyway)
        rec = _RECORD.execute(conn, {"rid": record_id, "ds": ds.id}).first()
        if rec is None:
            raise NotFound(f"no record {record_id} in dataset {ds.id}")
        now = time.time()
        current = _CURRENT.execute(conn, {"rid": record_id, "uid": uid}).first()
        if current is None:
            mine = _ANSWERED.execute(conn, {"rid": record_id, "uid": uid})
            if not mine.rowcount and not _claim(conn, record_id, uid, ds.overlap, now, now, "answered"):
                raise Full(f"record {record_id} already has its {ds.overlap} answer(s)")
            _COUNT_UP.execute(conn, {"rid": record_id, "k": ds.overlap})
        ev = _EVENT.execute(conn, {"record_id": record_id, "annotator_id": uid, "value": value,
                                   "status": "changed" if current else "answered", "suggestion": rec.suggestion,
                                   "model_version": rec.model_version, "created_at": now,
                                   "client_event_id": client_event_id}).first()
        if current is None:
            _NEW_ANSWER.execute(conn, {"record_id": record_id, "annotator_id": uid, "value": value,
                                            "event_id": ev.id, "updated_at": now})
        else:
            _CHANGE.execute(conn, {"rid": record_id, "uid": uid, "new_value": value, "new_event": ev.id,
                                   "new_at": now})
        return _event_body(ev, ds.multi_label), False

    return tx.run_hot(engine, save)


def undo_last(engine, ds: Dataset, uid: int, lease_s: float = LEASE_S) -> dict | None:
    """Take back the caller's latest action in the dataset, an answer or a skip: the text is theirs again
    (leased), first in their `next`. {"record_id", "text", "action": "answer" or "skip", "undone": the answer
    taken back (None for a skip), "back": False for a skipped text that got its k answers from others since
    (the skip is taken back all the same, so the next undo reaches the action before it)}. None when they have
    nothing left to undo."""
    def undo(conn):
        last = conn.execute(sa.select(answers.c.record_id, answers.c.value, answers.c.event_id, records.c.text,
                                      records.c.suggestion, records.c.model_version)
                            .join(records, records.c.id == answers.c.record_id)
                            .where(records.c.dataset_id == ds.id, answers.c.annotator_id == uid)
                            .order_by(answers.c.event_id.desc()).limit(1)).first()
        skipped = conn.execute(_LAST_SKIP, {"ds": ds.id, "uid": uid}).first()
        if skipped is not None and (last is None or skipped.id > last.event_id):
            return _undo_skip(conn, ds, uid, skipped, lease_s)
        if last is None:
            return None
        now = time.time()
        conn.execute(answers.delete().where(answers.c.record_id == last.record_id, answers.c.annotator_id == uid))
        conn.execute(slots.update().where(slots.c.record_id == last.record_id, slots.c.annotator_id == uid)
                     .values(state="leased", expires_at=now + lease_s))
        conn.execute(records.update().where(records.c.id == last.record_id)
                     .values(n_answers=records.c.n_answers - 1, is_open=True))
        _hold_only(conn, ds, uid, last.record_id)
        _log_undone(conn, uid, last, now)
        return {"record_id": last.record_id, "text": last.text, "action": "answer", "undone": last.value,
                "back": True}

    return tx.run(engine, undo)


# The caller's latest skip still in force: no later event of theirs on that text (an answer once it came back,
# a skip again, or the "undone" that took this skip back).
_later = label_events.alias("later")
_LAST_SKIP = (sa.select(label_events.c.id, label_events.c.record_id, records.c.text, records.c.suggestion,
                        records.c.model_version)
              .join(records, records.c.id == label_events.c.record_id)
              .where(records.c.dataset_id == B("ds"), label_events.c.annotator_id == B("uid"),
                     label_events.c.status == "skipped",
                     ~sa.exists().where(_later.c.record_id == label_events.c.record_id,
                                        _later.c.annotator_id == label_events.c.annotator_id,
                                        _later.c.id > label_events.c.id))
              .order_by(label_events.c.id.desc()).limit(1))


def _hold_only(conn, ds: Dataset, uid: int, record_id: int) -> None:
    """The text an undo gave back is the one the caller holds: the one `next` had leased them since goes back
    to the queue (unanswered, no event), so the undone text is the one shown, whatever their priorities."""
    mine = sa.select(records.c.id).where(records.c.dataset_id == ds.id)
    conn.execute(slots.delete().where(slots.c.annotator_id == uid, slots.c.state == "leased",
                                      slots.c.record_id != record_id, slots.c.record_id.in_(mine)))


def _log_undone(conn, uid: int, rec, now: float) -> None:
    conn.execute(label_events.insert().values(record_id=rec.record_id, annotator_id=uid, status="undone", value=None,
                                              suggestion=rec.suggestion, model_version=rec.model_version,
                                              created_at=now))


def _undo_skip(conn, ds: Dataset, uid: int, skipped, lease_s: float) -> dict:
    """The skipped text leased to the caller again when a slot is free (it went to the others at once), and an
    "undone" event: the skip no longer counts as their last action (snapshots read it as no answer)."""
    now = time.time()
    back = _claim(conn, skipped.record_id, uid, ds.overlap, now, now + lease_s, "leased")
    if back:
        _hold_only(conn, ds, uid, skipped.record_id)
    _log_undone(conn, uid, skipped, now)
    return {"record_id": skipped.record_id, "text": skipped.text, "action": "skip", "undone": None, "back": back}


def skip(engine, ds: Dataset, uid: int, record_id: int) -> bool:
    """Give back the text the caller holds, unanswered: its slot is free for the others at once, and the caller
    is given it again only once nothing else is left for them (a "skipped" event: the log keeps it, no answer
    changes). False when they do not hold that text (answered, or never given to them)."""
    def give_back(conn):
        rec = conn.execute(sa.select(records.c.suggestion, records.c.model_version)
                           .where(records.c.id == record_id, records.c.dataset_id == ds.id)).first()
        if rec is None:
            raise NotFound(f"no record {record_id} in dataset {ds.id}")
        held = conn.execute(slots.delete().where(slots.c.record_id == record_id, slots.c.annotator_id == uid,
                                                 slots.c.state == "leased"))
        if not held.rowcount:
            return False
        conn.execute(label_events.insert().values(record_id=record_id, annotator_id=uid, status="skipped", value=None,
                                                  suggestion=rec.suggestion, model_version=rec.model_version,
                                                  created_at=time.time()))
        return True

    return tx.run(engine, give_back)


def import_answered(engine, name: str, labels: list, multi_label: bool, rows: list[dict], uid: int,
                    decided: list[tuple[str, object, float]]) -> tuple[int, int, int]:
    """A dataset with overlap 1 whose answers already exist (an older labeling session), in one transaction:
    rows as for create_dataset; decided: (text, value, time), a later one for the same text replacing the
    earlier. Returns (dataset id, records, answers written)."""
    def insert(conn):
        ds = conn.execute(datasets.insert().values(name=name, labels=list(labels), multi_label=multi_label,
                                                   overlap=1, created_by=uid, created_at=time.time())
                          .returning(datasets.c.id)).scalar_one()
        by_hash = {}
        for row in rows + [{"text": t} for t, _, _ in decided]:  # an answered text missing from the rows too
            h = text_hash(row["text"])
            if h not in by_hash:
                by_hash[h] = conn.execute(records.insert().values(
                    dataset_id=ds, text=row["text"], text_hash=h, meta=row.get("meta"),
                    suggestion=row.get("suggestion"), model_version=row.get("model_version"),
                    priority=row.get("priority", 0.0), n_answers=0).returning(records.c.id)).scalar_one()
        latest = {text_hash(t): (v, ts) for t, v, ts in sorted(decided, key=lambda a: a[2])}
        for h, (value, ts) in latest.items():
            rid = by_hash[h]
            ev = _EVENT.execute(conn, {"record_id": rid, "annotator_id": uid, "value": value, "status": "answered",
                                       "suggestion": None, "model_version": None, "created_at": ts,
                                       "client_event_id": None}).first()
            conn.execute(slots.insert(), {"record_id": rid, "slot": 0, "annotator_id": uid, "state": "answered",
                                          "expires_at": ts})
            conn.execute(answers.insert(), {"record_id": rid, "annotator_id": uid, "value": value,
                                            "event_id": ev.id, "updated_at": ts})
            _COUNT_UP.execute(conn, {"rid": rid, "k": 1})
        return ds, len(by_hash), len(latest)

    return tx.run(engine, insert)
