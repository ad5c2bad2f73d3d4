"""What a server open to anyone (app/config.py `open_to_anyone`) keeps from its visitors: the labeling
sessions that hold texts other clients sent.

--audit-rate and --review-queue are refused on such a server at start (`kept_texts_refusal`), so it keeps
no new ones; sessions made while it ran with a key (a blind audit session, a review-queue session) stay in
DATA_DIR/label. And the texts a visitor uploads to the Label tab are theirs: any visitor could open a session
another one uploaded from "Earlier sessions" (issue 40). So the Label tab's store is wrapped here: on such a
server "Earlier sessions" lists nothing, and a session opens only where it was started in this server's life
(its id is 12 random hex digits, shown to no one else); a session of kept texts never opens.
"""

from __future__ import annotations

from app.labeling.audit import AUDIT_SOURCE
from app.labeling.review_queue import SOURCE as REVIEW_SOURCE


def holds_kept_texts(meta: dict) -> bool:
    """A session of texts the API kept (the audit's are blind; the review queue's carry its source name)."""
    return bool(meta.get("blind")) or meta.get("source") in (AUDIT_SOURCE, REVIEW_SOURCE)


class VisitorStore:
    """A SessionStore (app/labeling/sessions.py) for visitors: no listing, and only the sessions made through it open."""

    def __init__(self, store):
        self._store = store
        self._made: set[str] = set()

    def __getattr__(self, name):
        return getattr(self._store, name)

    def create(self, *args, **kwargs):
        session = self._store.create(*args, **kwargs)
        self._made.add(session.id)
        return session

    def create_blind(self, *args, **kwargs):
        session = self._store.create_blind(*args, **kwargs)
        self._made.add(session.id)
        return session

    def get(self, sid):
        if sid not in self._made:
            return None
        session = self._store.get(sid)
        return None if session is not None and holds_kept_texts(session.meta) else session

    def list(self) -> list[dict]:
        return []


class AdminsKept:
    """A SessionStore whose sessions of kept texts (audit, review queue) list and open for admins only (issue 63,
    H1: an annotator opened an audit session and read what other API clients sent). `is_admin()`: the person
    whose UI event runs now."""

    def __init__(self, store, is_admin):
        self._store, self._is_admin = store, is_admin

    def __getattr__(self, name):
        return getattr(self._store, name)

    def get(self, sid):
        session = self._store.get(sid)
        if session is not None and holds_kept_texts(session.meta) and not self._is_admin():
            return None
        return session

    def list(self) -> list[dict]:
        found = self._store.list()
        return found if self._is_admin() else [m for m in found if not holds_kept_texts(m)]
