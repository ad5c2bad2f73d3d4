"""Assemble the server: API routes, the gate (auth, limits, logs), CORS when asked, and the Gradio UI."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import statistics
import time

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from .api import ServerState, build_api
from .batcher import MicroBatcher
from .config import Config
from .gate import Gate
from .metrics import Metrics

log = logging.getLogger("app")


def create_app(cfg: Config, clf, state: ServerState | None = None) -> FastAPI:
    # The pass size the engine settled at load (app.config.pass_size): the batcher uses it, /v1/model reports it.
    cfg = dataclasses.replace(cfg, engine_batch_tokens=clf.batch_tokens)
    state = state or ServerState()
    metrics = Metrics()
    app = build_api(cfg, clf, state, metrics)
    app.state.server = state

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        def predict(seqs, lengths):
            return predict_by_length(clf, seqs, lengths, max_tokens=cfg.engine_batch_tokens,
                                     overhead_tokens=state.call_overhead_tokens)

        batcher = MicroBatcher(predict,
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
                      overhead_tokens: float = 12) -> list:
    """`clf.predict_encoded` on groups of similar length, answers in input order.

    A forward pass is padded to its longest text, and every padded token costs as much as a real one;
    each pass also has a fixed cost (`overhead_tokens`, in tokens' worth of compute: 10-20 for ONNX on
    CPU, ~150 for eager PyTorch, see `call_overhead_tokens`). Texts are sorted by length and a group is
    cut where the padding that the next, longer text would add to it costs more than a new pass (or the
    group would pass `max_tokens` padded tokens). One rule for both regimes: ONNX on CPU gets several
    tight groups, PyTorch gets one wide pass.
    """
    order = sorted(range(len(seqs)), key=lengths.__getitem__)
    out: list = [None] * len(seqs)
    group: list[int] = []

    def flush():
        for i, pred in zip(group, clf.predict_encoded([seqs[j] for j in group])):
            out[i] = pred

    for i in order:
        n = lengths[i]
        if group and (len(group) * (n - lengths[group[-1]]) > overhead_tokens or (len(group) + 1) * n > max_tokens):
            flush()
            group = []
        group.append(i)
    if group:
        flush()
    return out


def call_overhead_tokens(clf, repeats: int = 5) -> float:
    """The engine's fixed cost per forward pass, in tokens' worth of compute: medians of one 16-token
    text and of 8 x 64 tokens give the per-token cost, and what one pass costs beyond its tokens."""

    def median_time(seqs):
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            clf.predict_encoded(seqs)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    ids = clf.encode(["warm up " * 64])[0]  # real token ids, truncated to the model's max length
    short, wide = ids[: min(16, len(ids))], ids[:64]
    t_short, t_wide = median_time([short]), median_time([wide] * 8)
    per_token = max(t_wide - t_short, 1e-9) / (8 * len(wide) - len(short))
    return float(min(1000.0, max(0.0, t_short / per_token - len(short))))


async def _warm_up(batcher: MicroBatcher, state: ServerState, clf) -> None:
    """Ready means the engine's per-pass cost is measured and a request has gone through the whole path
    (queue, worker thread, engine)."""
    state.call_overhead_tokens = await asyncio.to_thread(call_overhead_tokens, clf)
    log.info("engine pass overhead: %.0f tokens' worth", state.call_overhead_tokens,
             extra={"fields": {"event": "calibrated", "call_overhead_tokens": round(state.call_overhead_tokens)}})
    seqs = clf.encode(["warm up"])
    await batcher.submit(seqs, [len(seqs[0])])
    state.ready = True
    log.info("ready", extra={"fields": {"event": "ready"}})
