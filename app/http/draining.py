"""The uvicorn server `python -m app` runs: SIGTERM/SIGINT drain it (app/__main__.py)."""

from __future__ import annotations

import asyncio
import logging
import signal

import uvicorn

from app.http.api import ServerState

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
