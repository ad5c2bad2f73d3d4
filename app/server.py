"""Assemble the server: API routes, the gate (auth, limits, logs), CORS when asked, and the Gradio UI."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from pathlib import Path

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from app.config import Config, kept_texts_refusal, loopback_only, open_to_anyone, pass_size, quantized
from app.http.api import ServerState, build_api, public
from app.http.batcher import MicroBatcher
from app.http.gate import FIELD_VALUES, Gate
from app.http.metrics import Metrics
from app.http.origin import SiteRule
from app.http.server_timing import timed
from app.http.upload_guard import FRAMING_BYTES, UploadGuard
from app.versions.admin import add_admin_routes
from app.versions.registry import Registry
from app.versions.swap import ServedVersion, Switcher
from textdata.run_folder import model_version

log = logging.getLogger("app")
MB = 1 << 20


def load_classifier(cfg: Config, folder):
    """A model folder as this server serves it (its engine flags), for the first version and every switch."""
    from serving.engine import Classifier

    return Classifier.load(folder, provider=cfg.provider, max_length=cfg.max_length, batch_tokens=pass_size(cfg),
                           threads=cfg.threads, quantized=quantized(cfg), blend=cfg.blend)


def describe(clf) -> dict:
    info = clf.info()
    if info.get("export_report") is not None:
        info = {**info, "export_report": public(info["export_report"])}
    return info


def create_app(cfg: Config, clf, state: ServerState | None = None, registry: Registry | None = None,
               version: str | None = None) -> FastAPI:
    """The server on `clf`, served as `version` (default: the folder's name). With a `registry`, versions can
    be listed, trained and switched to (app/versions/admin.py)."""
    # The pass size the engine settled at load (app.config.pass_size): the batcher uses it, /v1/model reports it.
    cfg = dataclasses.replace(cfg, engine_batch_tokens=clf.batch_tokens)
    refused = kept_texts_refusal(cfg)
    if refused:  # parse_args says it first; a server built in code is held to the same rule
        raise ValueError(refused)
    say_who_sees_what(cfg)
    state = state or ServerState()
    metrics = Metrics()
    if cfg.monitor and state.monitor is None:
        state.monitor = open_monitor(cfg)
    folder = getattr(clf, "folder", None)
    version = version or (model_version(folder) if folder is not None else clf.info()["name"])
    name = registry.display_name(version) if registry is not None else clf.info()["name"]
    state.served = ServedVersion(clf, version, name, describe(clf))
    if state.monitor is not None:  # its saved window shows in /v1/monitor from the start
        state.monitor.attach(state.served)
    metrics.set_model(version)
    switcher = make_switcher(cfg, registry, state, metrics) if registry is not None else None
    if cfg.review_queue:
        from app.labeling.review_queue import ReviewQueue

        state.review = ReviewQueue(Path(cfg.data_dir) / "review", cfg.review_queue_size)
        metrics.review_queue.set_function(lambda: len(state.review))
    if cfg.fallback_url and state.fallback is None:
        from app.llm.fallback import open_fallback

        state.fallback = open_fallback(cfg, metrics)
    app = build_api(cfg, state, metrics)
    app.state.server = state
    app.state.metrics = metrics  # the UI counts its answers there too (app/ui/classify.py observed)
    identities = _add_team(app, cfg, state)
    jobs = add_admin_routes(app, cfg, state, registry, switcher) if registry is not None else None
    if cfg.in_fleet and switcher is not None:
        from app.fleet.gate import attach

        attach(app, state, metrics, switcher)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        def predict(seqs, lengths, served: ServedVersion):
            return served.clf.predict_encoded(seqs)  # the engine plans the passes (serving/passes.py)

        if cfg.server_timing:
            predict = timed(predict)

        batcher = MicroBatcher(predict,
                               max_batch_tokens=cfg.max_batch_tokens, max_wait_ms=cfg.max_wait_ms,
                               max_queue=cfg.max_queue, workers=cfg.workers, batching=cfg.batching,
                               on_batch=metrics.observe_batch)
        batcher.start()
        state.batcher = batcher
        metrics.queue_depth.set_function(lambda: batcher.queued_texts)
        warm = asyncio.create_task(_warm_up(batcher, state))
        follow = asyncio.create_task(switcher.follow_pointer()) if switcher is not None else None
        if state.fallback is not None:
            await state.fallback.check()
        yield
        warm.cancel()
        if follow is not None:
            follow.cancel()
        state.draining = True
        if jobs is not None:
            await jobs.shutdown()
        await batcher.close()
        if state.fallback is not None:
            await state.fallback.close()
        if state.monitor is not None:
            await asyncio.to_thread(state.monitor.close)
        state.store.dispose()
        log.info("stopped", extra={"fields": {"event": "shutdown"}})

    app.router.lifespan_context = lifespan
    if cfg.ui:
        from app.ui.page import mount_ui

        mount_ui(app, cfg, state, jobs)
    sites = SiteRule(cfg.host, cfg.allowed_hosts, cfg.cors_origins)
    if sites.any_host:
        log.warning("listening on %s without --allowed-host: requests are answered under any Host name (DNS "
                    "rebinding is not refused); give the names clients use with --allowed-host", cfg.host)
    uploads = UploadGuard(int(cfg.max_upload_mb * MB) + FRAMING_BYTES, int(cfg.upload_mb_per_minute * MB))
    from app.team.roles import Authorizer, check_routes
    from app.team.routes import open_refusal
    from app.versions.admin import admin_refusal

    check_routes(app)  # a route that names no role refuses to start
    authorizer = Authorizer(identities, open_server=open_to_anyone(cfg),
                            refusals={"admin": admin_refusal(cfg), "team": open_refusal(cfg)})
    if cfg.lean_classify:  # inside the gate, as app/team/hot.py's routes
        from app.http.lean import LeanClassify

        app.add_middleware(LeanClassify, classify_texts=app.state.classify_texts)
    app.add_middleware(Gate, authorizer=authorizer, state=state, metrics=metrics, api_key=cfg.api_key,
                       max_body_bytes=cfg.max_body_bytes, server_timing=cfg.server_timing,
                       sites=sites, uploads=uploads if cfg.ui else None, max_texts=cfg.max_texts,
                       identities=identities, bulk_values={"/v1/datasets": cfg.max_upload_rows + FIELD_VALUES})
    if cfg.cors_origins:
        # Outside the gate: preflight requests carry no Authorization header.
        app.add_middleware(CORSMiddleware, allow_origins=sorted(sites.cors), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    return app


def make_switcher(cfg: Config, registry: Registry, state: ServerState, metrics: Metrics) -> Switcher:
    """One process's switcher, or in a fleet the two-phase promotion across every replica (app/fleet/replica.py)."""
    if cfg.in_fleet:
        from app.fleet.replica import FleetSwitcher

        return FleetSwitcher(registry, state, metrics, lambda f: load_classifier(cfg, f), describe, cfg)
    return Switcher(registry, state, metrics, lambda f: load_classifier(cfg, f), describe)


def say_who_sees_what(cfg: Config) -> None:
    """At start, what a visitor without a key may see on a server others can reach (docs/app.md, Security)."""
    if open_to_anyone(cfg):
        log.warning("listening on %s without --api-key: anyone who can reach it may classify and use the UI's "
                    "Classify, Label and Batch tabs; the registry, jobs, training, team datasets (until a user is added: "
                    "`python -m app users add`) and kept texts are refused "
                    "(--audit-rate and --review-queue need --api-key here), and a visitor opens only the Label "
                    "sessions started in their own page (no 'Earlier sessions' list)", cfg.host)
    elif not (cfg.api_key or loopback_only(cfg.host)) and (cfg.audit_rate > 0 or cfg.review_queue):
        log.warning("--allow-admin without --api-key on %s: anyone who can reach it may read the texts "
                    "--audit-rate / --review-queue keep, and train, activate and delete versions", cfg.host)


def _add_team(app: FastAPI, cfg: Config, state: ServerState):
    """Team labeling (app/team/routes.py) on the label store, opened here unless `python -m app` opened it first."""
    from app.team.auth import Identities
    from app.team.routes import add_team_routes
    from labelstore import open_store
    from labelstore.engine import SERVER_BUSY_TIMEOUT_MS

    if state.store is None:
        state.store = open_store(cfg.store_url, busy_ms=SERVER_BUSY_TIMEOUT_MS)
    if (Path(cfg.data_dir) / "label").is_dir():  # the Label tab's sessions, once: a store with datasets skips it
        from app.team.sessions_import import (
            import_sessions,  # (app/labeling/sessions.py's imports: only where there are sessions)
        )

        import_sessions(state.store, Path(cfg.data_dir) / "label")
    identities = state.identities = Identities(state.store)
    _keep_texts_in_store(state)
    add_team_routes(app, cfg, state, state.store, identities)
    return identities


def _keep_texts_in_store(state: ServerState) -> None:
    """The review queue and the audit sample live in the label store (app/labeling/kept_store.py)."""
    from app.labeling.kept_store import attach_audit, attach_review

    if state.review is not None:
        attach_review(state.review, state.store)
    if state.monitor is not None and getattr(state.monitor, "audit", None) is not None:
        attach_audit(state.monitor.audit, state.store)


def open_monitor(cfg: Config):
    """Drift windows kept in DATA_DIR/monitor; with --audit-rate, the audit sample beside them."""
    from pathlib import Path

    from app.labeling.audit import AuditQueue
    from app.monitoring.monitor import Monitor

    folder = Path(cfg.data_dir) / "monitor"
    monitor = Monitor(folder, size=cfg.monitor_window, span_s=cfg.monitor_span_s)
    monitor.label_root = Path(cfg.data_dir) / "label"
    monitor.correct_priors = cfg.prior_correction
    if cfg.audit_rate:
        monitor.audit = AuditQueue(folder, cfg.audit_rate)
    return monitor


async def _warm_up(batcher: MicroBatcher, state: ServerState) -> None:
    """Ready means the engine's per-pass cost is measured and a request has gone through the whole path
    (queue, worker thread, engine)."""
    served = state.served
    overhead = await asyncio.to_thread(lambda: served.clf.call_overhead_tokens)
    log.info("engine pass overhead: %.0f tokens' worth", overhead,
             extra={"fields": {"event": "calibrated", "call_overhead_tokens": round(overhead)}})
    seqs = served.clf.encode(["warm up"])
    await batcher.submit(seqs, [len(seqs[0])], served)
    state.ready = True
    log.info("ready", extra={"fields": {"event": "ready"}})
