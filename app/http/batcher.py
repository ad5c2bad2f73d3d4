"""Micro-batching: concurrent requests share one forward pass.

Requests wait in a bounded queue. When an engine slot is free the next batch takes everything waiting (up to
`max_batch_tokens`) and runs at once: a request that finds the engine idle runs alone without waiting, and
the requests that arrive while a batch runs form the next one, so batches grow with load instead of
requests queuing single forwards (text-embeddings-inference's dynamic batching). `max_wait_ms` > 0 brings
back a collection window: a batch whose oldest request has waited less than that keeps collecting; under
load the oldest has already waited through the running batch, so the window only delays requests that
arrive at an idle engine. The engine runs in its own thread pool: the event loop keeps answering health
checks and new requests while a batch computes.

A request may name the served version it must run on (`submit(..., version)`, an app/versions/swap.py
`ServedVersion`): a batch never mixes versions, and the batch holds its version until it is done, so a
model swap never moves a queued request.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field


class QueueFull(Exception):
    """More texts are waiting than the queue allows; the caller should retry later (429)."""


class Closed(Exception):
    """The batcher is shutting down and takes no new work (503)."""


@dataclass
class _Item:
    texts: Sequence[str]
    lengths: Sequence[int]  # tokens per text
    future: asyncio.Future
    version: object = None  # passed to predict as its third argument when given
    enqueued: float = field(default_factory=time.monotonic)
    timing: dict | None = None  # --server-timing: the batch's stages, filled in seconds when it ran

    @property
    def tokens(self) -> int:
        return max(1, sum(self.lengths))


class MicroBatcher:
    def __init__(
        self,
        predict: Callable[[list[str], list[int]], list],
        *,
        max_batch_tokens: int = 8192,
        max_wait_ms: float = 0.0,
        max_queue: int = 512,
        workers: int = 1,
        batching: bool = True,
        on_batch: Callable[[int, int, float], None] | None = None,
    ):
        if not 0 <= max_wait_ms < float("inf"):
            raise ValueError(f"max_wait_ms {max_wait_ms}: use milliseconds >= 0 (0: an idle engine runs a request at once)")
        self.predict = predict
        self.max_batch_tokens = max_batch_tokens
        self.max_wait = max_wait_ms / 1000
        self.max_queue = max_queue
        self.workers = workers
        self.batching = batching
        self.on_batch = on_batch
        self.queued_texts = 0
        self._pending: deque[_Item] = deque()
        self._wakeup = asyncio.Event()
        self._slots = asyncio.Semaphore(workers)
        self._running: set[asyncio.Task] = set()
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="engine")
        self._closing = False
        self._loop_task: asyncio.Task | None = None

    def start(self) -> None:
        self._loop_task = asyncio.get_running_loop().create_task(self._run(), name="micro-batcher")

    async def submit(self, texts: Sequence[str], lengths: Sequence[int], version=None, timing: dict | None = None) -> list:
        """Predictions for `texts` (`lengths`: tokens per text), in order, computed by `version` when given
        (`predict(texts, lengths, version)`). Cancelling the caller drops the texts if they have not started.
        `timing`: filled with the seconds this request waited (`queue`), its batch took (`batch`: the engine thread
        and the hop to it) and the stages `predict` names on its answer (`stages`, a dict)."""
        if self._closing:
            raise Closed("shutting down")
        if self.queued_texts + len(texts) > self.max_queue:
            raise QueueFull(f"{self.queued_texts} texts are waiting; the queue holds {self.max_queue}")
        item = _Item(texts, lengths, asyncio.get_running_loop().create_future(), version, timing=timing)
        self._pending.append(item)
        self.queued_texts += len(texts)
        self._wakeup.set()
        return await item.future

    async def close(self) -> None:
        """Refuse new work, finish what is queued and running, then stop the engine threads."""
        self._closing = True
        self._wakeup.set()
        if self._loop_task is not None:
            await self._loop_task
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
        self._executor.shutdown(wait=True)

    def _pop(self) -> _Item | None:
        """The next request still waiting for an answer (timed-out callers have cancelled theirs)."""
        while self._pending:
            item = self._pending.popleft()
            if not item.future.done():
                return item
            self.queued_texts -= len(item.texts)
        return None

    async def _wait(self, timeout: float | None) -> bool:
        self._wakeup.clear()
        try:
            await asyncio.wait_for(self._wakeup.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def _collect(self) -> list[_Item] | None:
        first = self._pop()
        while first is None:
            if self._closing:
                return None
            await self._wait(None)
            first = self._pop()
        batch, tokens = [first], first.tokens
        if not self.batching:
            return batch
        deadline = first.enqueued + self.max_wait
        while tokens < self.max_batch_tokens:
            if self._pending:
                nxt = self._pending[0]
                if not nxt.future.done() and (tokens + nxt.tokens > self.max_batch_tokens
                                              or nxt.version is not first.version):
                    break  # it opens the next batch
                item = self._pop()
                if item is not None:
                    batch.append(item)
                    tokens += item.tokens
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closing or not await self._wait(remaining):
                break
        return batch

    async def _run(self) -> None:
        while True:
            await self._slots.acquire()
            batch = await self._collect()
            if batch is None:
                self._slots.release()
                return
            # Texts in a forming batch still count as queued: they wait just the same.
            self.queued_texts -= sum(len(item.texts) for item in batch)
            task = asyncio.get_running_loop().create_task(self._execute(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _execute(self, batch: list[_Item]) -> None:
        texts = [t for item in batch for t in item.texts]
        lengths = [n for item in batch for n in item.lengths]
        started = time.monotonic()
        start = time.perf_counter()
        try:
            preds = await self._predict(texts, lengths, batch[0].version)
        except Exception as e:  # noqa: BLE001 - one bad request must not fail the others in its batch
            await self._one_by_one(batch, e)
            return
        finally:
            self._slots.release()
        took = time.perf_counter() - start
        if self.on_batch is not None:
            self.on_batch(len(texts), sum(item.tokens for item in batch), took)
        i = 0
        for item in batch:
            if item.timing is not None:
                item.timing.update(getattr(preds, "stages", {}), queue=started - item.enqueued, batch=took)
            if not item.future.done():
                item.future.set_result(preds[i : i + len(item.texts)])
            i += len(item.texts)

    async def _predict(self, texts, lengths, version=None) -> list:
        args = (texts, lengths) if version is None else (texts, lengths, version)
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.predict, *args)

    async def _one_by_one(self, batch: list[_Item], error: Exception) -> None:
        """A failed batch again, request by request: only the request(s) that cause the failure fail."""
        for item in batch:
            if item.future.done():
                continue
            if len(batch) == 1:
                item.future.set_exception(error)
                return
            try:
                result = await self._predict(list(item.texts), list(item.lengths), item.version)
            except Exception as e:  # noqa: BLE001
                if not item.future.done():
                    item.future.set_exception(e)
                continue
            if not item.future.done():
                item.future.set_result(result)
