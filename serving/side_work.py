"""Where the blend's TF-IDF baseline and the off-topic detector run: in a side thread during the model's pass, or
inline after it. Beside the pass they hide their cost only where a core is free: on two cores with two ONNX
intra-op threads the side thread fights the pass for a core and the GIL, and one text's baseline cost ~1.4 ms
instead of 0.37 (issue 61); on a larger batch, or a machine with cores to spare, beside wins. So the engine
measures both at first need (as it measures a pass's fixed cost, serving/passes.py) and keeps the fewest rows
from which beside was faster. Either way the numbers are the same functions of the same inputs: bit for bit.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

# Batch sizes the engine tries; from the first where beside is faster, beside (a server's batches rarely stop at 16)
SIZES = (1, 4, 16)
NEVER = sys.maxsize  # side_rows that keeps everything inline
# Beside must win by this much: where the two tie, load noise picked "beside" on a loaded 2-core machine as often
# as not, and there each call pays the hand-off to the side thread (0.4 ms of queue puts a call in a profile of one
# text there, issue 61) for no gain; inline costs at most the side work itself.
BESIDE_MARGIN = 0.95
# The pool the side work runs in beside the pass (threads start on first use); FIXED, when set, fixes side_rows for
# every engine (benchmarks: NEVER runs it after the pass).
POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="blend-baseline")
FIXED: int | None = None


class Later:
    """A future that runs its call when its result is first asked for: inline, after the pass."""

    def __init__(self, fn: Callable, args: tuple):
        self._fn, self._args, self._done, self._value = fn, args, False, None

    def result(self):
        if not self._done:
            self._value, self._done = self._fn(*self._args), True
        return self._value


class Inline:
    """The pool stand-in whose `submit` defers the call to its result: the engine hands it instead of a pool."""

    @staticmethod
    def submit(fn: Callable, *args) -> Later:
        return Later(fn, args)


INLINE = Inline()


def measure_side_rows(run: Callable[[int, bool], object], sizes: Sequence[int] = SIZES, repeats: int = 7) -> int:
    """The fewest rows from which running beside the pass is faster than inline: `run(n, beside)` predicts n rows;
    medians of `repeats`, the two modes interleaved so that a change in the machine's load hits both alike."""
    for n in sizes:
        run(n, True), run(n, False)  # warm: the pool's threads start, caches fill
        times = {True: [], False: []}
        for _ in range(repeats):
            for beside in (True, False):
                start = time.perf_counter()
                run(n, beside)
                times[beside].append(time.perf_counter() - start)
        if statistics.median(times[True]) < BESIDE_MARGIN * statistics.median(times[False]):
            return n
    return NEVER


def pool_for(beside: bool):
    return POOL if beside else INLINE


class SidePlan:
    """One engine's side_rows: `measure()` once, on first need (or FIXED, or what `fix` set), and the pool it
    implies for a call's rows with text."""

    def __init__(self, measure: Callable[[], int]):
        self._measure, self._rows, self._lock = measure, None, threading.Lock()

    @property
    def rows(self) -> int:
        if FIXED is not None:
            return FIXED
        if self._rows is None:
            with self._lock:
                if self._rows is None:
                    self._rows = self._measure()
        return self._rows

    def fix(self, rows: int) -> None:
        self._rows = max(1, int(rows))

    def pool(self, n: int):
        return POOL if n and n >= self.rows else INLINE
