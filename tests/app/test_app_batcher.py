"""MicroBatcher with a fake engine: coalescing, budgets, the bounded queue, cancellation, failures."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from app.http.batcher import Closed, MicroBatcher, QueueFull


class FakeEngine:
    """Echoes each text with its batch number, and records batch sizes and the thread it ran on."""

    def __init__(self, delay: float = 0.0, fail_on: str | None = None):
        self.batches: list[list[str]] = []
        self.threads: set[str] = set()
        self.delay = delay
        self.fail_on = fail_on

    def __call__(self, texts, lengths):
        assert len(lengths) == len(texts)
        self.threads.add(threading.current_thread().name)
        if self.fail_on in texts:
            raise RuntimeError("engine failed")
        time.sleep(self.delay)
        self.batches.append(list(texts))
        return [f"{t}@{len(self.batches)}" for t in texts]


def run(coro):
    return asyncio.run(coro)


def test_concurrent_requests_share_a_batch_and_get_their_own_answers():
    engine = FakeEngine()

    async def main():
        b = MicroBatcher(engine, max_wait_ms=50, max_batch_tokens=10_000)
        b.start()
        results = await asyncio.gather(*(b.submit([f"r{i}a", f"r{i}b"], [2, 2]) for i in range(10)))
        await b.close()
        return results

    results = run(main())
    assert [r[0].split("@")[0] for r in results] == [f"r{i}a" for i in range(10)]
    assert [r[1].split("@")[0] for r in results] == [f"r{i}b" for i in range(10)]
    assert len(engine.batches) == 1 and len(engine.batches[0]) == 20
    assert all(name.startswith("engine") for name in engine.threads)  # never on the event loop's thread


def test_token_budget_closes_a_batch():
    engine = FakeEngine()

    async def main():
        b = MicroBatcher(engine, max_wait_ms=200, max_batch_tokens=10)
        b.start()
        await asyncio.gather(*(b.submit([f"t{i}"], [4]) for i in range(5)))
        await b.close()

    run(main())
    # 4 + 4 fits in 10, a third would not: batches of 2, 2, 1.
    assert [len(x) for x in engine.batches] == [2, 2, 1]


def test_batching_off_runs_one_request_per_forward():
    engine = FakeEngine()

    async def main():
        b = MicroBatcher(engine, max_wait_ms=50, batching=False)
        b.start()
        await asyncio.gather(*(b.submit([f"t{i}", "x"], [1, 1]) for i in range(4)))
        await b.close()

    run(main())
    assert [len(x) for x in engine.batches] == [2, 2, 2, 2]


def test_batches_grow_while_the_engine_is_busy():
    engine = FakeEngine(delay=0.1)

    async def main():
        b = MicroBatcher(engine, max_wait_ms=0)
        b.start()
        first = asyncio.create_task(b.submit(["first"], [1]))
        await asyncio.sleep(0.02)  # the engine is now busy with "first"
        rest = [asyncio.create_task(b.submit([f"t{i}"], [1])) for i in range(6)]
        await asyncio.gather(first, *rest)
        await b.close()

    run(main())
    assert [len(x) for x in engine.batches] == [1, 6]


def test_full_queue_refuses_instead_of_waiting():
    engine = FakeEngine()

    async def main():
        b = MicroBatcher(engine, max_wait_ms=300, max_queue=4)
        b.start()
        waiting = asyncio.create_task(b.submit(["a", "b", "c"], [1, 1, 1]))
        await asyncio.sleep(0.05)
        assert b.queued_texts == 3  # a forming batch still counts as waiting
        with pytest.raises(QueueFull):
            await b.submit(["d", "e"], [1, 1])
        assert await b.submit(["d"], [1]) == ["d@1"]  # exactly fills the queue: accepted, same batch
        assert await waiting == ["a@1", "b@1", "c@1"]
        assert b.queued_texts == 0
        await b.close()

    run(main())


def test_cancelled_request_is_dropped_before_the_engine():
    engine = FakeEngine(delay=0.1)

    async def main():
        b = MicroBatcher(engine, max_wait_ms=0)
        b.start()
        busy = asyncio.create_task(b.submit(["busy"], [1]))
        await asyncio.sleep(0.02)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(b.submit(["late"], [1]), 0.01)
        kept = await b.submit(["kept"], [1])
        await busy
        await b.close()
        return kept

    assert run(main()) == ["kept@2"]
    assert engine.batches == [["busy"], ["kept"]]


def test_engine_failure_fails_only_its_batch():
    engine = FakeEngine(fail_on="boom")

    async def main():
        b = MicroBatcher(engine, max_wait_ms=0)
        b.start()
        with pytest.raises(RuntimeError, match="engine failed"):
            await b.submit(["boom"], [1])
        ok = await b.submit(["fine"], [1])
        await b.close()
        return ok

    assert run(main()) == ["fine@1"]


def test_close_finishes_queued_work_and_refuses_new():
    engine = FakeEngine(delay=0.05)

    async def main():
        b = MicroBatcher(engine, max_wait_ms=100)
        b.start()
        pending = asyncio.create_task(b.submit(["queued"], [1]))
        await asyncio.sleep(0.01)
        await b.close()
        with pytest.raises(Closed):
            await b.submit(["new"], [1])
        return await pending

    assert run(main()) == ["queued@1"]


def test_a_batch_never_mixes_engines_and_each_request_runs_on_its_own():
    """What a model switch relies on: requests queued for the old engine run on it, the new ones on the new."""
    calls = []

    def predict(texts, lengths, engine):
        calls.append((engine, list(texts)))
        return [f"{t}@{engine}" for t in texts]

    async def main():
        b = MicroBatcher(predict, max_wait_ms=50, max_batch_tokens=10_000)
        b.start()
        pending = [b.submit([f"t{i}"], [1], "old" if i < 4 or i == 6 else "new") for i in range(8)]
        results = await asyncio.gather(*pending)
        await b.close()
        return results

    results = run(main())
    assert [r[0] for r in results] == [f"t{i}@{'old' if i < 4 or i == 6 else 'new'}" for i in range(8)]
    assert [texts for _, texts in calls] == [["t0", "t1", "t2", "t3"], ["t4", "t5"], ["t6"], ["t7"]]
    assert [engine for engine, _ in calls] == ["old", "new", "old", "new"]  # cut at each change, in queue order


class GatedEngine:
    """Holds each batch until the test releases it, so what arrives during a running batch is known exactly."""

    def __init__(self):
        self.batches: list[list[str]] = []
        self.started = threading.Semaphore(0)  # one release per batch entering the engine
        self.go = threading.Event()

    def __call__(self, texts, lengths):
        self.batches.append(list(texts))
        self.started.release()
        assert self.go.wait(10), "the test never released the engine"
        return [f"{t}@{len(self.batches)}" for t in texts]


async def _ticks(n: int) -> None:
    """n turns of the event loop: what a batcher does "at once" is done within a few, whatever the clock."""
    for _ in range(n):
        await asyncio.sleep(0)


def test_a_request_on_an_idle_engine_runs_without_waiting_for_company():
    """Issue 44: 5 ms of waiting was 6.5 of the 11 ms one text took through the API. By default an idle engine
    takes a request at once: a second one sent a few loop turns later (far under any window) is not in its batch."""
    engine = GatedEngine()

    async def main():
        b = MicroBatcher(engine)  # the defaults, as the server's Config has them
        b.start()
        first = asyncio.create_task(b.submit(["first"], [1]))
        await _ticks(20)
        second = asyncio.create_task(b.submit(["second"], [1]))
        await asyncio.to_thread(engine.started.acquire)  # "first" is in the engine
        engine.go.set()
        results = await asyncio.gather(first, second)
        await b.close()
        return results

    assert run(main()) == [["first@1"], ["second@2"]]
    assert engine.batches == [["first"], ["second"]]


def test_requests_arriving_while_a_batch_runs_form_the_next_batch_together():
    engine = GatedEngine()

    async def main():
        b = MicroBatcher(engine)
        b.start()
        first = asyncio.create_task(b.submit(["first"], [1]))
        await asyncio.to_thread(engine.started.acquire)  # the engine is busy with "first" until released
        rest = [asyncio.create_task(b.submit([f"t{i}"], [1])) for i in range(6)]
        await _ticks(20)
        assert b.queued_texts == 6  # all waiting: none started alone while the engine was busy
        engine.go.set()
        await asyncio.gather(first, *rest)
        await b.close()

    run(main())
    assert engine.batches == [["first"], [f"t{i}" for i in range(6)]]


def test_a_wait_window_still_collects_an_idle_burst():
    """--max-wait-ms > 0 keeps the old window for those who want it: a request a few loop turns after the first
    joins its batch (closed here by the token budget, so no clock decides)."""
    engine = FakeEngine()

    async def main():
        b = MicroBatcher(engine, max_wait_ms=60_000, max_batch_tokens=2)
        b.start()
        first = asyncio.create_task(b.submit(["first"], [1]))
        await _ticks(20)
        second = asyncio.create_task(b.submit(["second"], [1]))
        await asyncio.gather(first, second)
        await b.close()

    run(main())
    assert engine.batches == [["first", "second"]]


@pytest.mark.parametrize("value", ["-1", "30001", "nan"])
def test_max_wait_outside_zero_to_the_request_timeout_is_refused_in_one_line(value, capsys):
    from app.config import Config, parse_args

    assert Config().max_wait_ms == 0  # the default runs an idle request at once
    assert parse_args(["--max-wait-ms", "30000"]).max_wait_ms == 30000  # the request timeout itself: allowed
    with pytest.raises(SystemExit):
        parse_args(["--max-wait-ms", value])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--max-wait-ms" in err and "--request-timeout" in err and "30000 ms" in err
    with pytest.raises(SystemExit):
        parse_args(["--max-wait-ms", "500", "--request-timeout", "0.2"])
    with pytest.raises(ValueError, match="max_wait_ms"):
        MicroBatcher(FakeEngine(), max_wait_ms=-1)
