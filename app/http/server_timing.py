"""`--server-timing`: each answer says where its time went inside the server, in a `Server-Timing` header (W3C;
browsers' network panels show it), milliseconds per stage:

- `tok`: normalising and tokenizing the request's texts (app/http/api.py);
- `queue`: waiting for the engine (app/http/batcher.py): a batch forming, or the one before it running;
- `batch`: the request's batch, from its start to its answer: the engine thread and the hop to it and back;
- `engine`: the engine's own call inside that thread (`Classifier.predict_encoded`);
- `pass`: the model's forward passes inside it (serving/passes.py `pass_seconds`); `engine` − `pass` is the
  blend's baseline, the off-topic detector, calibration and the answers' objects;
- `app`: the gate's first byte in to the response's start: everything the server did for the request.

These are the stages timed inside the server's own request path, under whatever else it is doing, not alone
(bench/stage_report.py reads them). Off by default: it tells clients how busy the server is.
"""

from __future__ import annotations

import time

from serving.passes import pass_seconds

STAGES = ("tok", "queue", "batch", "engine", "pass")


class Timed(list):
    """A batch's answers with the stages the engine thread timed (`stages`, seconds)."""

    stages: dict


def timed(predict):
    """`predict` (the batcher's engine call) timing itself and the model's passes in the engine thread."""
    def run(*args):
        pass_seconds()  # what an earlier call on this thread left
        start = time.perf_counter()
        out = Timed(predict(*args))
        out.stages = {"engine": time.perf_counter() - start, "pass": pass_seconds()}
        return out
    return run


def header(timing: dict, app_seconds: float) -> bytes:
    """The header's value: each stage timed, in STAGES order, then `app`."""
    parts = [f"{k};dur={timing[k] * 1000:.3f}" for k in STAGES if k in timing]
    return ", ".join([*parts, f"app;dur={app_seconds * 1000:.3f}"]).encode()
