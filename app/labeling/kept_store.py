"""The review queue (app/labeling/review_queue.py) and the live audit's sample (app/labeling/audit.py) kept in the label store
(table kept_texts) rather than in files under the data folder, so every server process on one database
sees one queue, and a backup of the database holds them.

Each queue keeps its texts in memory as before (a request only touches memory); its changes go to the
store in the store's thread, in order, after the request (tx.later: a failed write is logged, never raised
into a request). At start the rows are read back. On the first start with a store, the files of an older
version (review/queue.jsonl, monitor/audit.json) are imported once: every text counted, the counts logged,
the file renamed to *.imported (kept, never read again).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from pathlib import Path

import sqlalchemy as sa

from labelstore import tx
from labelstore.schema import kept_texts

log = logging.getLogger("app")


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()


class KeptTexts:
    """The rows of one kind, oldest first."""

    def __init__(self, engine: sa.Engine, kind: str):
        self.engine, self.kind = engine, kind

    def load(self) -> list[tuple[str, object]]:
        return [tuple(r) for r in tx.read(self.engine, lambda conn: conn.execute(
            sa.select(kept_texts.c.key, kept_texts.c.item).where(kept_texts.c.kind == self.kind)
            .order_by(kept_texts.c.id)).all())]

    def count(self) -> int:
        return tx.read(self.engine, lambda conn: conn.execute(
            sa.select(sa.func.count()).where(kept_texts.c.kind == self.kind)).scalar_one())

    def _put(self, rows: list[tuple[str, object]], keep: int | None) -> None:
        def write(conn):
            keys = [k for k, _ in rows]
            for start in range(0, len(keys), 500):
                conn.execute(kept_texts.delete().where(kept_texts.c.kind == self.kind,
                                                       kept_texts.c.key.in_(keys[start:start + 500])))
            if rows:
                now = time.time()
                conn.execute(kept_texts.insert(), [{"kind": self.kind, "key": k, "item": item, "created_at": now}
                                                   for k, item in rows])
            if keep is not None:  # the queue's bound: its oldest rows go, as its oldest texts did in memory
                newest = (sa.select(kept_texts.c.id).where(kept_texts.c.kind == self.kind)
                          .order_by(kept_texts.c.id.desc()).limit(keep).scalar_subquery())
                conn.execute(kept_texts.delete().where(kept_texts.c.kind == self.kind, kept_texts.c.id.not_in(newest)))

        tx.run(self.engine, write)

    def put(self, rows: list[tuple[str, object]], keep: int | None = None):
        return tx.later(self.engine, self._put, rows, keep)

    def put_now(self, rows: list[tuple[str, object]]) -> None:
        self._put(rows, None)

    def drop(self, keys: list[str]):
        def write(conn):
            conn.execute(kept_texts.delete().where(kept_texts.c.kind == self.kind, kept_texts.c.key.in_(keys)))

        return tx.later(self.engine, tx.run, self.engine, write)

    def put_texts(self, rows: list[tuple[str, object]], keep: int | None = None):
        """put, keyed by a text (its digest: a text may be longer than a key)."""
        return self.put([(digest(text), item) for text, item in rows], keep)

    def drop_texts(self, texts: list[str]):
        return self.drop([digest(t) for t in texts])

    def flush(self) -> None:
        """Wait for the writes handed over so far (tests, shutdown)."""
        tx.later(self.engine, lambda: None).result()


def _imported(path: Path) -> None:
    path.replace(path.with_name(path.name + ".imported"))


def attach_review(queue, engine: sa.Engine) -> None:
    """The review queue on the store: its file imported once (the queue replayed it at start), else the
    store's rows read back."""
    from app.labeling.review_queue import Waiting, key

    kept = KeptTexts(engine, "review")
    if kept.count() == 0 and queue.path.exists():
        items = list(queue._items.values())
        kept.put_now([(digest(key(i.text)), i.__dict__) for i in items])
        log.info("review queue: imported %d waiting texts from %s into the label store", len(items), queue.path,
                 extra={"fields": {"event": "imported", "what": "review queue", "texts": len(items)}})
        _imported(queue.path)
    else:
        queue._items = OrderedDict((key(item["text"]), Waiting(**item)) for _, item in kept.load())
    queue.kept = kept


def attach_audit(queue, engine: sa.Engine) -> None:
    """The audit sample on the store: audit.json imported once (waiting texts and the hashes sampled
    lately), else the store's rows read back."""
    items, seen = KeptTexts(engine, "audit"), KeptTexts(engine, "audit_seen")
    path = queue._path()
    if items.count() == 0 and seen.count() == 0 and path is not None and path.is_file():
        items.put_now([(h, item) for h, item in queue.items.items()])
        seen.put_now([(h, None) for h in queue.seen])
        log.info("audit: imported %d waiting texts and %d sampled hashes from %s into the label store",
                 len(queue.items), len(queue.seen), path,
                 extra={"fields": {"event": "imported", "what": "audit", "texts": len(queue.items),
                                   "seen": len(queue.seen)}})
        _imported(path)
    else:
        queue.items = OrderedDict((h, item) for h, item in items.load())
        queue.seen = OrderedDict((h, None) for h, _ in seen.load())
    queue.kept = (items, seen)
