"""What a server open to anyone (app/config.py `open_to_anyone`) keeps from its visitors: the labeling
sessions that hold texts other clients sent.

--audit-rate and --review-queue are refused on such a server at start (`kept_texts_refusal`), so it keeps
no new ones; sessions made while it ran with a key (a blind audit session, a review-queue session) stay in
DATA_DIR/label. The Label tab's store is wrapped here so a visitor neither sees them under "Earlier
sessions" nor opens, labels or downloads them by id.
"""

from __future__ import annotations

from .audit import AUDIT_SOURCE
from .review_queue import SOURCE as REVIEW_SOURCE


def holds_kept_texts(meta: dict) -> bool:
    """A session of texts the API kept (the audit's are blind; the review queue's carry its source name)."""
    return bool(meta.get("blind")) or meta.get("source") in (AUDIT_SOURCE, REVIEW_SOURCE)


class VisitorStore:
    """A SessionStore (app/labeling.py) without the sessions that hold kept texts."""

    def __init__(self, store):
        self._store = store

    def __getattr__(self, name):
        return getattr(self._store, name)

    def get(self, sid):
        session = self._store.get(sid)
        return None if session is not None and holds_kept_texts(session.meta) else session

    def list(self) -> list[dict]:
        return [m for m in self._store.list() if not holds_kept_texts(m)]
