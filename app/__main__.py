"""Serve a classifier: JSON API at /v1, labeling UI at /ui, one process.

    python -m app --model OUT [--host 127.0.0.1] [--port 8000] [--api-key KEY]
                  [--max-batch-tokens 8192] [--max-wait-ms 5] [--max-queue 512] [--no-ui]
                  [--models-dir DATA_DIR/models] [--train-data base.csv] [--promote auto|manual]

OUT is a `serving.export` folder (ONNX) or a transformers folder; it is copied into the model registry
(--models-dir) as a version, and the registry's active version is served (without --model too).
Retraining from the labels runs in a child process (app/train_child.py). `python -m app --help` lists every
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

import asyncio
import logging
from pathlib import Path

import uvicorn

from . import logs
from .api import ServerState
from .config import parse_args
from .gate import proxy_settings
from .protocol import bounded_protocol

log = logging.getLogger("app")


class DrainingServer(uvicorn.Server):
    """Marks the app as draining the moment SIGTERM/SIGINT arrives, before uvicorn closes sockets,
    so requests already on open keep-alive connections get 503 instead of starting new work."""

    def __init__(self, config: uvicorn.Config, state: ServerState):
        super().__init__(config)
        self.app_state = state

    def handle_exit(self, sig, frame) -> None:
        if not self.app_state.draining:
            log.info("draining", extra={"fields": {"event": "draining", "signal": signal.Signals(sig).name}})
        self.app_state.draining = True
        try:
            loop = asyncio.get_running_loop()  # signal handlers run on the loop's own thread
            for callback in self.app_state.on_drain:
                loop.call_soon_threadsafe(callback)
        except RuntimeError:
            pass
        super().handle_exit(sig, frame)
        # uvicorn re-raises the signal after its shutdown, so the exit status would read "killed";
        # a completed drain is a clean exit, and supervisors should see 0.
        self._captured_signals.clear()


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    logs.setup(cfg.log_level)
    from serving.engine import ModelError

    from .registry import Registry, RegistryError
    from .server import load_classifier
    from .version_check import load_or_fall_back

    registry = Registry(cfg.registry_dir)
    new = False
    try:
        registry.clean_staging()
        if cfg.model:
            version, new = registry.register_folder(cfg.model)
            if not new and registry.active() not in (None, version):
                log.info("%s is registered as %s; serving the active version %s (switch with POST "
                         "/v1/models/%s/activate)", cfg.model, version, registry.active(), version)
        if not (cfg.model and (new or registry.active() is None)):
            version = registry.active()
        if version is None:
            raise RegistryError(f"no --model given and no active version in {registry.root}: "
                                "start with --model FOLDER (a serving.export or transformers folder)")
        if new:  # a folder given now serves itself or not at all
            clf = load_classifier(cfg, registry.path(version))
        else:  # the registry's active version, or the last one that serves (app/version_check.py)
            version, clf = load_or_fall_back(registry, version, lambda folder: load_classifier(cfg, folder))
        if version != registry.active():  # a folder new to the registry serves once it has loaded
            # the folder name only: /v1/models and the UI show this, and server paths stay private (issue 24)
            registry.set_active(version, why=f"python -m app --model .../{Path(cfg.model).name}")
    except (ModelError, ValueError) as e:
        if new:  # it never served: it does not stay as a version
            registry.delete(version)
        print(f"error: {e}", file=sys.stderr)
        return 2
    from .server import create_app

    state = ServerState()
    app = create_app(cfg, clf, state, registry, version)
    http = bounded_protocol(cfg.max_header_bytes, cfg.header_timeout_s, cfg.body_timeout_s)
    server = DrainingServer(uvicorn.Config(app, host=cfg.host, port=cfg.port, log_config=None, access_log=False,
                                           timeout_graceful_shutdown=cfg.shutdown_timeout_s, http=http,
                                           timeout_keep_alive=cfg.keep_alive_s, **proxy_settings(cfg)), state)
    log.info("serving", extra={"fields": {"event": "start", "url": f"http://{cfg.host}:{cfg.port}",
                                          "model": cfg.model, "version": version, "auth": bool(cfg.api_key), "ui": cfg.ui}})
    server.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
