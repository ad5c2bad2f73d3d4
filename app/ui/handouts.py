"""What the UI hands out and how its long jobs run: copies of files for the browser in a private temp folder,
and scoring in chunks that stop when nobody waits (the Label tab's upload and the Batch tab share them)."""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
import weakref
from pathlib import Path

import gradio as gr
from gradio.context import LocalContext

log = logging.getLogger("app")
SCORE_CHUNK = 256  # rows per engine call in scoring jobs: the progress bar moves at this step


class Exports:
    """Copies of files handed to the browser, in a private temp folder; old ones are removed."""

    def __init__(self, max_age_s: float = 3600):
        self.root = Path(tempfile.mkdtemp(prefix="electra-app-"))
        self.max_age_s = max_age_s
        # Removed when the server exits (SIGTERM included): otherwise every start leaves a folder behind.
        self.close = weakref.finalize(self, shutil.rmtree, self.root, ignore_errors=True)

    def path(self, name: str) -> Path:
        now = time.time()
        for old in self.root.glob("*/*"):
            if now - old.stat().st_mtime > self.max_age_s:
                shutil.rmtree(old.parent, ignore_errors=True)
        folder = Path(tempfile.mkdtemp(dir=self.root))  # a folder per export keeps the nice file name
        return folder / name


UNREAD_GONE = 25  # messages waiting unread on an event's stream (about one per chunk): nobody is listening


def client_gone() -> bool:
    """True once nobody waits for the running event: Gradio marked it dead (its tab closed or its stream
    dropped), or its messages pile up unread (a client that queued work and never opened the stream)."""
    blocks, event_id = LocalContext.blocks.get(None), LocalContext.event_id.get(None)
    queue = getattr(blocks, "_queue", None)
    for job in getattr(queue, "active_jobs", None) or ():
        for event in job or ():
            if event._id == event_id:
                unread = queue.pending_messages_per_session.get(event.session_hash)
                return not event.alive or (unread is not None and unread.qsize() > UNREAD_GONE)
    return False


def stop_reason(state) -> str | None:
    """Why a UI job reading a file should stop now, or None (the shared reader asks every few hundred rows)."""
    if state.draining:
        return "the server is shutting down"
    return "the page was closed" if client_gone() else None


def score_chunks(n: int, score, progress, desc: str, unit: str, engine_turn: threading.Lock, state=None) -> list:
    """`score(start, stop)` over SCORE_CHUNK-row chunks, stopping when the client is gone (or the server
    drains). One UI chunk computes at a time (`engine_turn`), so API batches interleave with UI jobs."""
    parts = []
    for i in range(0, n, SCORE_CHUNK):
        why = stop_reason(state) if state is not None else ("the page was closed" if client_gone() else None)
        if why:
            log.info("UI job cancelled: %s", why, extra={"fields": {"event": "ui_cancelled", "done": i}})
            raise gr.Error(f"Cancelled: {why}.")
        progress((i, n), desc=desc, unit=unit)
        with engine_turn:
            parts.append(score(i, min(n, i + SCORE_CHUNK)))
    return parts
