"""How the engine cuts texts into forward passes: planned once per call, here; `Classifier._logits` only pads and
runs what `plan` returns. The API's batcher hands the engine a whole batch and batch scoring a whole chunk: neither
sorts nor cuts by length itself.

A pass is padded to its longest text, and a padded token costs as much as a real one; each pass also has a fixed
cost (`call_overhead_tokens`, in tokens' worth of compute: 10-20 for ONNX on CPU, ~150 for eager PyTorch, far more
for a very small model). Texts are sorted by length and a pass is cut where the padding that the next, longer text
would add to it costs more than a new pass, or where it would hold more than the pass size's padded tokens, or more
rows than the backend takes. One rule for both regimes: ONNX on CPU gets several tight passes, PyTorch one wide pass.
Only the server's batches (`Classifier.predict_encoded`) plan with the measured cost; calls on texts (`predict`,
`predict_proba`, `predict_logits`: the UI, batch scoring, the export's gate) plan with `FIXED`.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

# The most a pass's fixed cost is taken to be, in tokens' worth: beyond it the pass size cuts first anyway.
MAX_OVERHEAD_TOKENS = 1000.0
# The overhead for a plan that must not depend on this machine's timing: cut at the pass size only. Calls on texts
# take it: with a dynamic-INT8 file a row's probabilities follow the pass it ran in (activations are quantised per
# pass), so a measured cost would make a resumed file differ from an uninterrupted one, and predict() from scoring.
FIXED = math.inf


def plan(lengths: Sequence[int], budget: int, overhead: float, width: Callable[[int], int] | None = None,
         max_batch: int | None = None) -> list[np.ndarray]:
    """Row indices per pass. Each pass lists its rows longest first (ties in input order), the order it is padded
    in. `width(n)`: the padded width the backend builds for a longest text of n tokens (a CUDA graph's bucket)."""
    lengths = np.asarray(lengths, np.int64).reshape(-1)
    order = np.argsort(lengths, kind="stable")
    passes, start, widest = [], 0, 0
    for k, i in enumerate(order):
        w = max(1, int(lengths[i]))
        w = width(w) if width is not None else w
        size = k - start
        if size and (size * (w - widest) > overhead or (size + 1) * w > budget
                     or (max_batch is not None and size >= max_batch)):
            passes.append(order[start:k])
            start = k
        widest = w
    if start < len(order):
        passes.append(order[start:])
    # longest first within a pass; the stable sort keeps ties in input order
    return [p[np.argsort(-lengths[p], kind="stable")] for p in passes]


def measure_overhead(run_pass: Callable[[list], object], ids: Sequence[int], repeats: int = 5) -> float:
    """The fixed cost of one pass in tokens' worth: medians of one pass over a 16-token text and one over 8 x 64
    tokens give the cost per token, and what one pass costs beyond its tokens. `ids`: real token ids, at least 64
    where the model takes that many."""

    def median_time(seqs):
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            run_pass(seqs)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    short, wide = list(ids[: min(16, len(ids))]), list(ids[:64])
    t_short, t_wide = median_time([short]), median_time([wide] * 8)
    per_token = max(t_wide - t_short, 1e-9) / max(1, 8 * len(wide) - len(short))
    return float(min(MAX_OVERHEAD_TOKENS, max(0.0, t_short / per_token - len(short))))


# Seconds of model passes run on each thread since `pass_seconds()` last read them (serving/engine.py adds to it):
# the server's Server-Timing times the pass inside its own request path, at two clock reads a pass.
CLOCK = threading.local()


def pass_seconds() -> float:
    """Seconds the model's passes took on this thread since the last call (and reset)."""
    seconds, CLOCK.seconds = getattr(CLOCK, "seconds", 0.0), 0.0
    return seconds
