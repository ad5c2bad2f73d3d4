"""Serve a classifier: JSON API at /v1, labeling UI at /ui, one process.

    python -m app --model OUT [--host 127.0.0.1] [--port 8000] [--api-key KEY]
                  [--max-batch-tokens 8192] [--max-wait-ms 5] [--max-queue 512] [--no-ui]
                  [--models-dir DATA_DIR/models] [--train-data base.csv] [--promote auto|manual]

OUT is a `serving.export` folder (ONNX) or a transformers folder with a trained classification head; it is
copied into the model registry (--models-dir) as a version (or found there, by content) and activated: the
folder given is what serves, unless a version the app retrained from it was promoted since (a restarted
container keeps its learning loop). Without --model the registry's active version serves.
Retraining from the labels runs in a child process (app/versions/train_child.py). `python -m app --help` lists every
limit. SIGTERM drains: in-flight requests finish, new ones get 503, then the process exits 0.
"""

from __future__ import annotations

import signal
import sys


def _stop_before_serving(signum, frame) -> None:
    raise SystemExit(0)  # nothing is in flight yet, so nothing to drain


# First, before the slow imports and the model load: as a container's PID 1 the process ignores a SIGTERM it
# has no handler for, so `docker stop` during start-up would wait out its grace period and kill (exit 137).
# uvicorn installs its draining handlers once it serves. Only when run, not when imported (tests import main).
if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _stop_before_serving)
    from textdata.inputs import hint_on_missing_module

    sys.excepthook = hint_on_missing_module  # outside the project's venv: one line, not a traceback

import logging
from pathlib import Path

from app.config import parse_args
from app.http import logs

log = logging.getLogger("app")


def retrained_from(registry, version: str | None, ancestor: str) -> bool:
    """`version` was trained by the app, directly or through other retrains, from `ancestor`."""
    seen = set()
    while version and version not in seen:
        seen.add(version)
        try:
            meta = registry.meta(version)
        except ValueError:  # deleted along the way
            return False
        if meta.get("source") != "trained":
            return False
        version = meta.get("parent")
        if version == ancestor:
            return True
    return False


def model_to_serve(cfg, registry):
    """(version, its loaded Classifier). With --model, FOLDER's version (registered now, or found registered by
    content) is activated once it has loaded, whatever was active, with one exception: a version the app
    retrained from it and promoted stays (a container restarts with the same --model; the learning loop must
    not be undone). Said in one line. Without --model, the active version. A folder that cannot serve (no
    trained head, fails to load) raises, leaving the registry as it was."""
    from app.versions.registry import RegistryError

    new = False
    if cfg.model:  # what the command line names is what serves
        version, new = registry.register_folder(cfg.model)
        given = version
        if retrained_from(registry, registry.active(), version):
            version = registry.active()
    else:
        version = given = registry.active()
    if version is None:
        raise RegistryError(f"no --model given and no active version in {registry.root}: "
                            "start with --model FOLDER (a serving.export or transformers folder)")
    from app.server import load_classifier  # the UI's imports (seconds): after the folder was checked
    from app.versions.version_check import load_or_fall_back

    if hasattr(registry, "verify"):  # a fleet's content-addressed folder: its files must still match its name
        registry.verify(version)
    try:
        if version == given and cfg.model:  # the folder given serves itself or not at all
            clf = load_classifier(cfg, registry.path(version))
        else:  # the registry's active version, or the last one that serves (app/versions/version_check.py)
            version, clf = load_or_fall_back(registry, version, lambda folder: load_classifier(cfg, folder))
    except ValueError:
        if new:  # it never served: it does not stay as a version
            registry.delete(version)
        raise
    was = registry.active()
    if version != was:  # switched only once it has loaded
        # the folder name only: /v1/models and the UI show this, and server paths stay private (issue 24)
        registry.set_active(version, why=f"python -m app --model .../{Path(cfg.model or '').name}")
    if cfg.model and version != given:
        log.info("serving %s: retrained from %s (%s) and promoted; `python -m app models activate %s` serves %s "
                 "itself", version, cfg.model, given, given, given)
    elif cfg.model:
        now = "active already" if version == was else (f"activated instead of {was}" if was else "activated")
        log.info("serving %s as %s (%s; %s)", cfg.model, version, "registered now" if new else "registered before", now)
    return version, clf


# The shell's tools, one command each, beside the server: each module's own parser answers --help.
SUBCOMMANDS = {"users": "app.team.users_cli",  # the people who label, review and administer
               "db": "app.fleet.db_cli",  # the label store's schema: a fleet's replicas never migrate
               "models": "app.versions.models"}  # list, activate, delete versions in the registry


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] and argv[0] in SUBCOMMANDS:  # python -m app users add NAME --role ROLE, … (SUBCOMMANDS)
        import importlib

        return importlib.import_module(SUBCOMMANDS[argv[0]]).main(argv[1:])
    cfg = parse_args(argv)
    logs.setup(cfg.log_level)
    from app.versions.registry import Registry
    from labelstore import open_store
    from labelstore.engine import SERVER_BUSY_TIMEOUT_MS
    from textdata.inputs import check_table

    registry = Registry(cfg.registry_dir)
    try:
        if not cfg.in_fleet:  # on a shared model store another process's job may be building one
            registry.clean_staging()
        if cfg.train_data is not None:  # before the model loads: a typo answers at once, not at the first retrain
            check_table(cfg.train_data, {"text": "--train-data (column text)", "label": "--train-data (column label)"},
                        flag="--train-data")
        # before the model loads: a database that cannot be used answers at once. A fleet's replica never
        # migrates (app/fleet/db_cli.py): an older schema is refused in one line naming `python -m app db upgrade`
        store = open_store(cfg.store_url, upgrade=not cfg.in_fleet, busy_ms=SERVER_BUSY_TIMEOUT_MS)
        if cfg.in_fleet:
            from app.fleet.registry import fleet_start

            registry, cfg = fleet_start(cfg, store)
        version, clf = model_to_serve(cfg, registry)
    except ValueError as e:  # ModelError, RegistryError, DataError, StoreError: what the user gave cannot serve
        print(f"error: {e}", file=sys.stderr)
        return 2
    # the server's own imports (uvicorn, FastAPI) after the checks: a usage error answers without them
    import uvicorn

    from app.http.api import ServerState
    from app.http.draining import DrainingServer
    from app.http.gate import proxy_settings
    from app.http.protocol import bounded_protocol
    from app.server import create_app

    state = ServerState(store=store)
    app = create_app(cfg, clf, state, registry, version)
    http = bounded_protocol(cfg.max_header_bytes, cfg.header_timeout_s, cfg.body_timeout_s)
    server = DrainingServer(uvicorn.Config(app, host=cfg.host, port=cfg.port, log_config=None, access_log=False,
                                           timeout_graceful_shutdown=cfg.shutdown_timeout_s, http=http,
                                           timeout_keep_alive=cfg.keep_alive_s, **proxy_settings(cfg)), state)
    log.info("serving", extra={"fields": {"event": "start", "url": f"http://{cfg.host}:{cfg.port}",
                                          "model": cfg.model, "version": version, "auth": bool(cfg.api_key), "ui": cfg.ui}})
    # What start-up made (torch, transformers, Gradio, the model: millions of objects) lives as long as the
    # process: out of the collector's sight, so that a full collection while serving does not walk it all
    # again (each one stalled every request for ~0.4 s: the k=1 p99 of bench/team_labels.py, docs/notes/log.md, "Team labeling")
    import gc

    gc.freeze()
    server.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
