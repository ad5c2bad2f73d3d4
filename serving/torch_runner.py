"""The PyTorch backend of `serving.engine`: plain fp32 eager on CPU; on CUDA, bf16/fp16 weights and CUDA graphs.

Why graphs: one short text through a base-sized encoder is ~100 small kernels; launched one by one from
Python they take ~7 ms, replayed as one CUDA graph under 1 ms. A graph has fixed shapes, so inputs are
padded to a grid of (rows, width) buckets, all captured at load: widths 16, 32, 48, 64, 96, 128, ...
up to max_length (at most ~1.5x padding), rows 1, 2, 4, ... up to the engine's token budget per pass.
Padding columns carry attention mask 0 and padding rows are a lone [CLS]-like token whose logits are
dropped, so bucketing changes nothing but float rounding (tests/serving/test_serving_torch_runner.py).

Why a parity check: bf16 keeps 8 bits of mantissa. Before serving in reduced precision, the runner
scores a probe set in fp32 and in the reduced dtype and reports argmax agreement and the largest logit
difference in `Classifier.info()["precision_check"]`; below 99.5% agreement it keeps fp32.
"""

from __future__ import annotations

import copy
import logging
import threading
from pathlib import Path

import numpy as np

from textdata.errors import UsageError
from textdata.numerics import bucket_widths, resolve_dtype

log = logging.getLogger("serving.engine")

MIN_AGREEMENT = 0.995
# One load at a time in a process: transformers builds a model on the meta device by patching torch's module
# constructors process-wide, so two loads in threads (a fleet replica preparing a promotion while its own activation
# loads the same version) failed with "Cannot copy out of meta tensor" (seen in CI: a promotion answered 422).
_LOADING = threading.Lock()


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def check_options(precision: str, cuda_graphs: bool | None, device: str):
    """The torch dtype for `precision` on `device`; ValueError for a combination that cannot run."""
    if cuda_graphs and device != "cuda":
        raise UsageError("cuda_graphs=True needs a CUDA device")
    return resolve_dtype(precision, device)


def bucket_grid(max_length: int, batch_tokens: int) -> dict[int, list[int]]:
    """width -> row counts captured for it: powers of two up to the budget, plus the budget itself, so
    every batch the engine forms (rows <= batch_tokens // width) fits a bucket without exceeding it."""
    grid = {}
    for w in bucket_widths(max_length):
        cap = max(1, batch_tokens // w)
        rows = [1 << i for i in range(cap.bit_length()) if 1 << i <= cap]
        grid[w] = sorted(set(rows) | {cap})
    return grid


def probe_ids(vocab_size: int, max_length: int, n: int = 128, seed: int = 0) -> list[list[int]]:
    """Token sequences of spread-out lengths for the precision check when no texts are given."""
    rng = np.random.default_rng(seed)
    lengths = np.linspace(4, max_length, n).astype(int)
    low = min(1000, vocab_size // 2)  # past the special and rare-symbol ids of most vocabularies
    return [rng.integers(low, vocab_size, size=k).tolist() for k in lengths]


class TorchRunner:
    backend = "torch"
    max_batch = None

    def __init__(self, folder: Path, threads: int | None, *, precision: str = "auto", cuda_graphs: bool | None = None,
                 max_length: int = 512, batch_tokens: int = 8192, device: str | None = None, buckets: bool | None = None):
        import torch
        from transformers import AutoModelForSequenceClassification

        self.torch = torch
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.dtype = check_options(precision, cuda_graphs, self.device)
        self.cuda_graphs = self.device == "cuda" if cuda_graphs is None else cuda_graphs
        if threads and self.device == "cpu":
            torch.set_num_threads(getattr(threads, "threads", threads))  # a count, or a ThreadPlan's
        with _LOADING:
            self.model = AutoModelForSequenceClassification.from_pretrained(folder).eval().to(self.device)
        self.provider = self.device
        # Graphs need fixed shapes; `buckets` alone (no capture) exists so CPU tests run the padding logic.
        self.grid = bucket_grid(max_length, batch_tokens) if (self.cuda_graphs if buckets is None else buckets) else None
        self.precision_check = None
        self.graph_error = None
        self._graphs: dict = {}
        self._lock = threading.Lock()  # graph replay writes shared static buffers
        self._pad_id = self.model.config.pad_token_id or 0

    # ---------------------------------------------------------------- precision and graphs, once at load
    def finish_load(self, probe) -> None:
        """Check reduced precision against fp32 on the token ids `probe()` returns, then capture the graphs."""
        torch = self.torch
        if self.dtype != torch.float32:
            seqs = probe()
            fp32_logits = self._eager_logits(self.model, seqs)
            reduced = copy.deepcopy(self.model).to(self.dtype)  # the fp32 weights stay until the check passes
            low_logits = self._eager_logits(reduced, seqs)
            agreement = float((fp32_logits.argmax(1) == low_logits.argmax(1)).mean())
            self.precision_check = {
                "dtype": str(self.dtype).removeprefix("torch."), "probe_rows": len(seqs),
                "argmax_agreement": round(agreement, 5),
                "max_abs_logit_diff": round(float(np.abs(fp32_logits - low_logits).max()), 5),
                "threshold": MIN_AGREEMENT, "passed": agreement >= MIN_AGREEMENT,
            }
            if agreement >= MIN_AGREEMENT:
                self.model = reduced
            else:
                log.warning("%s agrees with fp32 on %.2f%% of probe rows (< %.1f%%): serving fp32",
                            self.dtype, 100 * agreement, 100 * MIN_AGREEMENT)
                self.dtype = torch.float32
            del reduced
        if self.cuda_graphs:
            self._capture_all()

    def _eager_logits(self, model, seqs: list[list[int]]) -> np.ndarray:
        out = []
        for start in range(0, len(seqs), 32):
            chunk = seqs[start:start + 32]
            width = max(len(s) for s in chunk)
            ids = np.full((len(chunk), width), self._pad_id, np.int64)
            mask = np.zeros_like(ids)
            for row, s in enumerate(chunk):
                ids[row, :len(s)], mask[row, :len(s)] = s, 1
            out.append(self._forward(ids, mask, model))
        return np.concatenate(out)

    def _capture_all(self) -> None:
        torch = self.torch
        # Largest first: later, smaller graphs reuse the pool's blocks instead of growing it.
        shapes = sorted(((r, w) for w, rows in self.grid.items() for r in rows), key=lambda s: -s[0] * s[1])
        try:
            self._pool = torch.cuda.graph_pool_handle()
            with torch.inference_mode():
                for rows, width in shapes:
                    self._graphs[rows, width] = self._capture(rows, width)
        except RuntimeError as e:
            # A model whose forward reads a value back (e.g. an SDPA mask check on all-ones masks) cannot
            # be captured: serve it eagerly rather than not at all.
            self.graph_error = str(e).splitlines()[0] if str(e) else type(e).__name__
            log.warning("CUDA graph capture failed (%s): serving eagerly", self.graph_error)
            self._graphs.clear()
            self.grid = None
            torch.cuda.synchronize()
            return
        log.info("captured %d CUDA graphs (%s)", len(self._graphs), str(self.dtype).removeprefix("torch."))

    def _capture(self, rows: int, width: int):
        torch = self.torch
        ids = torch.full((rows, width), self._pad_id, dtype=torch.long, device="cuda")
        mask = torch.ones_like(ids)
        types = torch.zeros_like(ids)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up runs outside the graph pick kernels and allocate workspaces
            for _ in range(2):
                self.model(input_ids=ids, attention_mask=mask, token_type_ids=types)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            logits = self.model(input_ids=ids, attention_mask=mask, token_type_ids=types).logits.float()
        return graph, ids, mask, logits

    # ---------------------------------------------------------------- inference
    def describe(self) -> dict:
        return {"precision": str(self.dtype).removeprefix("torch."), "cuda_graphs": len(self._graphs),
                "cuda_graph_error": self.graph_error, "precision_check": self.precision_check}

    def width(self, longest: int) -> int:
        """The padded width the engine should build for a batch whose longest text has `longest` tokens."""
        if self.grid is None:
            return longest
        return next((w for w in self.grid if w >= longest), longest)

    def __call__(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        ids, mask = feeds["input_ids"], feeds["attention_mask"]
        n, width = ids.shape
        rows = next((r for r in self.grid.get(width, ()) if r >= n), None) if self.grid else None
        if rows is None:
            return self._forward(ids, mask)
        if rows > n:  # padding rows: one real token each, so attention never sees an all-masked row
            ids = np.concatenate([ids, np.full((rows - n, width), self._pad_id, np.int64)])
            mask = np.concatenate([mask, np.zeros((rows - n, width), np.int64)])
            mask[n:, 0] = 1
        graph = self._graphs.get((rows, width))
        if graph is None:
            return self._forward(ids, mask)[:n]
        g, ids_buf, mask_buf, out = graph
        with self._lock, self.torch.inference_mode():
            ids_buf.copy_(self.torch.from_numpy(ids), non_blocking=False)
            mask_buf.copy_(self.torch.from_numpy(mask), non_blocking=False)
            g.replay()
            return out[:n].cpu().numpy()

    def _forward(self, ids: np.ndarray, mask: np.ndarray, model=None) -> np.ndarray:
        torch, model = self.torch, self.model if model is None else model
        with torch.inference_mode():
            ids_t = torch.from_numpy(ids).to(self.device)
            out = model(input_ids=ids_t, attention_mask=torch.from_numpy(mask).to(self.device),
                             token_type_ids=torch.zeros_like(ids_t))
            return out.logits.float().cpu().numpy()
