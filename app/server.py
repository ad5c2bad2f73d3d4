"""Assemble the server: API routes, the gate (auth, limits, logs), CORS when asked, and the Gradio UI."""

from __future__ import annotations

import asyncio
import contextlib
import logging

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
        batcher = MicroBatcher(clf.predict, max_batch_tokens=cfg.max_batch_tokens, max_wait_ms=cfg.max_wait_ms,
                               max_queue=cfg.max_queue, workers=cfg.workers, batching=cfg.batching,
                               on_batch=metrics.observe_batch)
        batcher.start()
        state.batcher = batcher
        metrics.queue_depth.set_function(lambda: batcher.queued_texts)
        warm = asyncio.create_task(_warm_up(batcher, state))
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


async def _warm_up(batcher: MicroBatcher, state: ServerState) -> None:
    """Ready means a request has gone through the whole path (queue, worker thread, engine)."""
    await batcher.submit(["warm up"], 4)
    state.ready = True
    log.info("ready", extra={"fields": {"event": "ready"}})
