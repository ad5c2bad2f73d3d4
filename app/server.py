"""Assemble the server: API routes, the gate (auth, limits, logs), CORS when asked, and the Gradio UI."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from functools import partial

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from .api import ServerState, build_api
from .batcher import MicroBatcher
from .config import Config
from .gate import Gate
from .metrics import Metrics

log = logging.getLogger("app")


def create_app(cfg: Config, clf, state: ServerState | None = None) -> FastAPI:
    state = state or ServerState()
    metrics = Metrics()
    app = build_api(cfg, clf, state, metrics)
    app.state.server = state

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        batcher = MicroBatcher(partial(predict_by_length, clf, max_tokens=cfg.engine_batch_tokens),
                               max_batch_tokens=cfg.max_batch_tokens, max_wait_ms=cfg.max_wait_ms,
                               max_queue=cfg.max_queue, workers=cfg.workers, batching=cfg.batching,
                               on_batch=metrics.observe_batch)
        batcher.start()
        state.batcher = batcher
        metrics.queue_depth.set_function(lambda: batcher.queued_texts)
        warm = asyncio.create_task(_warm_up(batcher, state, clf))
        yield
        warm.cancel()
        state.draining = True
        await batcher.close()
        log.info("stopped", extra={"fields": {"event": "shutdown"}})

    app.router.lifespan_context = lifespan
    if cfg.ui:
        from .ui import mount_ui

        mount_ui(app, cfg, clf, state)
    app.add_middleware(Gate, state=state, metrics=metrics, api_key=cfg.api_key, max_body_bytes=cfg.max_body_bytes)
    if cfg.cors_origins:
        # Outside the gate: preflight requests carry no Authorization header.
        app.add_middleware(CORSMiddleware, allow_origins=list(cfg.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    return app


def predict_by_length(clf, seqs: list[list[int]], lengths: list[int], max_tokens: int = 512,
                      spread: float = 1.3) -> list:
    """`clf.predict_encoded` on groups of similar length, answers in input order.

    A forward pass is padded to its longest text and on CPU every padded token costs as much as a real
    one: 16 mixed-length requests in one pass cost more than 16 single passes. Sorted and cut where a
    text is `spread` times longer than its group's shortest (or the group would pass `max_tokens`
    padded tokens), a batch keeps the shared-pass gain without the padding.
    """
    order = sorted(range(len(seqs)), key=lengths.__getitem__)
    out: list = [None] * len(seqs)
    group: list[int] = []

    def flush():
        for i, pred in zip(group, clf.predict_encoded([seqs[j] for j in group])):
            out[i] = pred

    for i in order:
        n = lengths[i]
        if group and (n > spread * lengths[group[0]] + 2 or (len(group) + 1) * n > max_tokens):
            flush()
            group = []
        group.append(i)
    if group:
        flush()
    return out


async def _warm_up(batcher: MicroBatcher, state: ServerState, clf) -> None:
    """Ready means a request has gone through the whole path (queue, worker thread, engine)."""
    seqs = clf.encode(["warm up"])
    await batcher.submit(seqs, [len(seqs[0])])
    state.ready = True
    log.info("ready", extra={"fields": {"event": "ready"}})
