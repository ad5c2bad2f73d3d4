"""What the server answers with, and switching it with no downtime.

`state.served` is the `ServedVersion`: a loaded Classifier (the engine), its version and what /v1/model shows. A
request takes the version it finds when it arrives (it is tokenized by that engine's tokenizer) and the batcher
runs it on that engine: batches never mix versions, so requests queued before a switch finish on the old one, and
the old engine is freed when its last batch is done.

Activation loads the new version off the request path (a thread), checks it (every label, finite
probabilities on a sample), measures its pass cost and sends one request through the batcher on it; only
then is the `active` pointer moved and `state.served` replaced (one assignment). A version that fails any
step is not switched to: the old one keeps serving and the error says why. The server also follows the
`active` file, so `python -m app models activate` switches a running server the same way.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from app.http.batcher import Closed, QueueFull
from app.label_kinds import kind_of
from app.versions.registry import Registry, RegistryError

log = logging.getLogger("app")
CHECK_TEXTS = ["warm up", "a check of the new version before it serves"]


@dataclass(frozen=True)
class ServedVersion:
    clf: object  # serving.engine.Classifier (or a test double with its methods): it plans its own passes
    version: str
    name: str
    info: dict = field(default_factory=dict)  # clf.info() without server paths, for /v1/model


class ActivationError(Exception):
    """The version could not be switched to; the message says why and which version keeps serving."""


class ActivationBusy(ActivationError):
    """Another activation (a fleet's promotion) is running: answered 409 at once, nothing started."""


def check_engine(clf) -> None:
    """A loaded model that answers nonsense must not serve: every text gets finite probabilities summing to 1
    over the model's own labels (for a multi-label model, each label's in [0, 1])."""
    if not list(clf.labels):
        raise ValueError("the model has no labels")
    kind = kind_of(clf.space)
    for pred in clf.predict(CHECK_TEXTS):
        problem = kind.probability_problem(pred.probabilities)
        if problem:
            raise ValueError(problem)


class Switcher:
    """Activate registry versions on a running server, one at a time."""

    def __init__(self, registry: Registry, state, metrics, load, describe):
        self.registry, self.state, self.metrics = registry, state, metrics
        self._load, self._describe = load, describe  # folder -> clf, clf -> /v1/model's info
        self._lock = asyncio.Lock()
        self.busy: str | None = None  # the version being loaded

    async def activate(self, version: str, why: str) -> ServedVersion:
        folder = self.registry.path(version)  # RegistryError for an unknown name: nothing is touched
        async with self._lock:
            old = self.state.served
            if old is not None and old.version == version:
                return old
            self.busy = version
            try:
                new = await self._prepare(version, folder, old)
                self.registry.set_active(version, why=why)
                self.state.served = new
                self.metrics.set_model(version)
            finally:
                self.busy = None
        log.info("activated %s", version, extra={"fields": {"event": "activated", "version": version,
                                                            "previous": old.version if old else None, "why": why}})
        return new

    async def follow_pointer(self, interval_s: float = 1.0) -> None:
        """Switch when the `active` file is moved from outside (`python -m app models activate`); a version
        that cannot serve is not switched to and the pointer is put back, with the reason in events.jsonl."""
        while True:
            await asyncio.sleep(interval_s)
            wanted, serving = self.registry.active(), self.state.served.version
            if wanted is None or wanted == serving or self.busy:
                continue
            try:
                await self.activate(wanted, why="the active pointer was moved (python -m app models activate)")
            except (ActivationError, RegistryError) as e:
                if self.registry.active() == wanted:
                    self.registry.set_active(self.state.served.version, why=f"put back: {e}")

    async def _prepare(self, version: str, folder, old) -> ServedVersion:
        keeps = f"; {old.version} keeps serving" if old is not None else ""
        try:
            clf = await asyncio.to_thread(self._load, folder)
            await asyncio.to_thread(check_engine, clf)
            await asyncio.to_thread(lambda: clf.call_overhead_tokens)  # its pass cost, measured before it serves
        except Exception as e:  # noqa: BLE001 - any failure to load means: do not switch, say why
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            log.warning("activation of %s failed: %s", version, msg,
                        extra={"fields": {"event": "activation_failed", "version": version}})
            self.registry.log("activation_failed", version=version, why=msg)
            raise ActivationError(f"{version} was not activated: {msg}{keeps}") from None
        new = ServedVersion(clf, version, self.registry.display_name(version), self._describe(clf))
        batcher = self.state.batcher
        if batcher is not None:  # the whole path (queue, engine thread) on the new version, before anyone waits on it
            seqs = clf.encode(CHECK_TEXTS[:1])
            try:
                await batcher.submit(seqs, [len(seqs[0])], new)
            except (QueueFull, Closed) as e:
                raise ActivationError(f"{version} was not activated: the queue could not take its warm-up request "
                                      f"({e}){keeps}; try again") from None
        return new


__all__ = ["ActivationBusy", "ActivationError", "RegistryError", "ServedVersion", "Switcher", "check_engine"]
