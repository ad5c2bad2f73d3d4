"""What the engine asks of a backend. `serving.onnx_runner.OrtRunner` and `serving.torch_runner.TorchRunner`
both provide it; `Classifier` calls nothing else on them (the torch runner's `finish_load`, its reduced-precision
check, is called once at load)."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Runner(Protocol):
    backend: str  # "onnx" or "torch"
    provider: str  # where it runs: cpu, cuda, tensorrt
    max_batch: int | None  # most rows one call takes (TensorRT's profile); None: any

    def width(self, longest: int) -> int:
        """The padded width to build for a batch whose longest text has `longest` tokens."""

    def describe(self) -> dict:
        """precision, cuda_graphs (count), cuda_graph_error, precision_check: what `Classifier.info()` reports."""

    def __call__(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """Logits (float32) for input_ids, attention_mask and token_type_ids of one padded batch."""
