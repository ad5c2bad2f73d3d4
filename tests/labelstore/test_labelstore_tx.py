"""The store thread's transactions (labelstore/tx.py run_hot, on the connection that thread keeps): a lost
race is retried from the start, a failure leaves nothing behind, a commit is there for every other reader;
and the queue runs through them as through `run`."""

from __future__ import annotations

import asyncio

import sqlalchemy as sa

from labelstore import fast, open_store, queue, tx, users
from labelstore.schema import users as users_table

_ADD = fast.Statement(users_table.insert())


def names(engine) -> list[str]:
    with engine.connect() as conn:
        return sorted(conn.execute(sa.select(users_table.c.name)).scalars())


def add(name: str, fail=None, calls=None):
    def fn(conn):
        calls is not None and calls.append(name)
        _ADD.execute(conn, {"name": name, "role": "annotator", "token_hash": None, "created_at": 0.0,
                            "revoked_at": None})
        if fail is not None and (calls is None or len(calls) == 1):
            raise fail
    return fn


def test_store_thread_transactions_retry_roll_back_and_commit(tmp_path):
    engine = open_store(f"sqlite:///{tmp_path / 'app.db'}")
    in_store = lambda fn: asyncio.run(tx.call(engine, tx.run_hot, engine, fn))
    calls = []
    in_store(add("raced", sa.exc.IntegrityError("INSERT", (), Exception("lost a race")), calls))
    assert calls == ["raced", "raced"] and names(engine) == ["raced"]  # the first run rolled back whole
    try:
        in_store(add("broken", ValueError("no")))
    except ValueError:
        pass
    assert names(engine) == ["raced"]
    in_store(add("kept"))
    assert names(engine) == ["kept", "raced"]
    engine.dispose()


def test_the_queue_through_the_store_thread(tmp_path):
    engine = open_store(f"sqlite:///{tmp_path / 'app.db'}")
    uid = users.by_token(engine, users.add_user(engine, "ann", "annotator"))[0]
    rows = [{"text": f"t{i}", "priority": i, "suggestion": {"label": "a"}} for i in range(3)]
    ds = queue.get_dataset(engine, queue.create_dataset(engine, "d", ["a", "b"], False, 1, rows, None)[0])

    async def label_all():
        seen = []
        while (rec := await tx.call(engine, queue.next_record, engine, ds, uid)) is not None:
            seen.append(rec["text"])
            body, replayed = await tx.call(engine, queue.submit, engine, ds, uid, rec["record_id"], "b", rec["text"])
            again = await tx.call(engine, queue.submit, engine, ds, uid, rec["record_id"], "b", rec["text"])
            assert not replayed and again == (body, True)  # the same client event id: the first answer
        return seen

    assert asyncio.run(label_all()) == ["t0", "t1", "t2"]
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM answers WHERE value = '\"b\"'")).scalar_one() == 3
    engine.dispose()
