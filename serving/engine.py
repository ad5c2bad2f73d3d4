"""The one inference engine that the HTTP API, the UI and batch scoring share.

    from serving.engine import Classifier
    clf = Classifier.load("onnx/")            # or a transformers folder: PyTorch fallback
    clf.predict(["회의 일정 메모"], top_k=3)

What it does once, for every caller:
- normalises text exactly as training did (`normalization.json` beside the model);
- truncates to `max_length` tokens (the tokenizer's `model_max_length`, i.e. the training length,
  never more than the model's position table, so inputs beyond 512 tokens cannot crash). Policy
  `truncation="head"` keeps the first tokens, like the tokenizer did in training; `"head+tail"`
  keeps the first quarter and the last three quarters of the budget (Sun et al. 2019: the end of a
  long text often carries the conclusion);
- plans the forward passes once per call (serving/passes.py): texts sorted by length, a pass cut where padding
  would cost more than a new pass (`call_overhead_tokens`, measured once) or past `batch_tokens` padded tokens,
  each padded only to its own longest text, results back in input order;
- picks the provider: TensorRT, then CUDA, when present and a warm-up run works on them, else CPU;
  on CUDA, inputs and outputs go through IO binding; on CPU, intra-op threads = usable cores (affinity, cgroup
  quota) that other work does not keep busy, spin-waiting off where they are shared (textdata/cpu_limits.py);
  On a CUDA machine whose onnxruntime has no CUDA provider (the usual CPU wheel), `auto` serves the
  PyTorch weights instead of ONNX on CPU: bf16 weights and CUDA graphs (`serving/torch_runner.py`);
`predict` is thread-safe: sessions and tokenizers are only read after `load`.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from baseline.blend import TEXT_CAP, Encoded, ServedBlend
from serving import passes, side_work
from serving.calibration import ServedCalibration
from serving.decision import LabelSet, Prediction, TopLabel, decision_for
from serving.model_folder import ONNX_FILE, ONNX_INT8_FILE, WEIGHT_FILES, ModelFolder, special_tokens
from serving.onnx_runner import ORT_NAMES, OrtRunner
from serving.quantize import cpu_isa
from serving.runner import Runner
from serving.torch_runner import TorchRunner, check_options, cuda_available, probe_ids
from textdata.errors import ModelError
from textdata.labels import LabelSpace
from textdata.learned import folder_note
from textdata.numerics import check_precision

log = logging.getLogger("serving.engine")
_TOLD: set[str] = set()  # k-fold's findings (textdata/learned.py) already logged

PROVIDERS = ("auto", "cpu", "cuda", "tensorrt", "torch")
TRUNCATIONS = ("head", "head+tail")
# Default padded tokens per pass (Classifier.load(batch_tokens=None)). Measured (docs/notes/log.md, "Pass size"): on
# CPU smaller passes stay in cache, 1,024 tokens scored 15-23% more rows/s than 8,192 on two models; a GPU wants large.
CPU_BATCH_TOKENS, GPU_BATCH_TOKENS = 1024, 8192


@dataclass(frozen=True)
class PassSize:
    """Padded tokens per forward pass for each kind of device: `Classifier.load(batch_tokens=PassSize(...))`
    settles it once, when the device is known, and `Classifier.batch_tokens` holds the result."""

    cpu: int = CPU_BATCH_TOKENS
    gpu: int = GPU_BATCH_TOKENS

    def on(self, provider: str) -> int:
        return self.cpu if provider == "cpu" else self.gpu


class Classifier:
    """Use `Classifier.load(...)`; the constructor takes already-built parts."""

    def __init__(self, model: ModelFolder, runner: Runner, max_length: int, batch_tokens: int, truncation: str,
                 model_file: Path | None = None, blend: bool = True):
        self.model_folder = model
        self.folder = model.path
        self._run = runner
        self.normalizer = model.normalizer
        self.labels = model.labels
        space = LabelSpace.from_config(model.config)
        self.max_length = max_length
        self.batch_tokens = batch_tokens
        self.truncation = truncation
        self.model_file = model_file
        self.model_file_why = None  # why this file: set by load()
        # A private copy of the Rust tokenizer with truncation and padding off: we do both ourselves, and never
        # mutating it after load is what makes concurrent encode_batch calls safe.
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_str(model.tokenizer.backend_tokenizer.to_str())
        self._tok.no_truncation()
        self._tok.no_padding()
        self._prefix, self._suffix = special_tokens(self._tok)
        self._pad_id = model.tokenizer.pad_token_id or 0
        self._budget = max_length - len(self._prefix) - len(self._suffix)
        # Characters beyond this cannot reach the kept tokens after whitespace is collapsed (a token covers at
        # least one character); cutting first keeps a 50 MB cell from stalling the tokenizer.
        self._char_cap = max(4096, 32 * max_length)
        self._overhead: float | None = None  # call_overhead_tokens, measured on first need
        self._overhead_lock = threading.Lock()
        self._side = side_work.SidePlan(self._measure_side_rows)  # side_rows, measured on first need
        try:  # the folder's TF-IDF blend (baseline/, written by finetune --final) when asked and present
            self.blend = ServedBlend(self.folder, len(self.labels)) if blend and model.has_blend else None
        except ValueError as e:
            raise ModelError(str(e)) from None
        self.calibration = ServedCalibration.load(self.folder, self.labels, self.blend is not None, space)
        # What the scores answer (serving/decision.py): the top label, or the set over thresholds.json's thresholds
        self.decision: TopLabel | LabelSet = decision_for(space, self.calibration, self.folder)
        self.space = self.decision.space
        self.learned = folder_note(self.folder, blended=self.blend is not None)  # k-fold's finding (textdata/learned.py)
        if self.learned and self.learned not in _TOLD:  # once a process: export loads one model up to 4 times
            _TOLD.add(self.learned)
            log.warning("%s: %s", self.folder, self.learned)

    # ---------------------------------------------------------------- loading
    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        provider: str = "auto",
        max_length: int | None = None,
        batch_tokens: int | PassSize | None = None,
        threads: int | None = None,
        truncation: str = "head",
        quantized: bool | None = None,
        precision: str = "auto",
        cuda_graphs: bool | None = None,
        parity_texts: Sequence[str] | None = None,
        blend: bool = True,
    ) -> Classifier:
        """Load an exported folder (ONNX) or a transformers folder (PyTorch).

        quantized: None = on CPU, the file export_report.json's `cpu_default` names (INT8 only where the
        export measured it faster; older exports: INT8 when present), the fp32/fp16 one on GPU;
        True/False to force. threads: CPU intra-op threads (default: textdata/cpu_limits.py's plan). batch_tokens: padded
        tokens per pass, or a PassSize per device (default PassSize(): CPU_BATCH_TOKENS on CPU, GPU_BATCH_TOKENS
        on a GPU), settled once here into `.batch_tokens`.
        PyTorch backend only: precision auto = bf16 (fp16 without bf16) on CUDA, fp32 on CPU; cuda_graphs
        None = on CUDA; parity_texts: texts for the reduced-precision check against fp32 (default: random
        token sequences), reported in info()["precision_check"].
        blend: apply the folder's TF-IDF blend (baseline/, written by finetune --final) when it has one;
        probabilities and predictions are then blended, logits stay the model's own."""
        batch_tokens = _check_options(provider, truncation, batch_tokens, precision)
        model = ModelFolder.read(path)
        max_length = model.max_length(max_length)
        onnx_files, torch_folder = model.onnx_files, model.path
        if provider == "auto" and onnx_files and _gpu_without_ort_gpu() and (weights := model.torch_weights()):
            torch_folder, onnx_files = weights, ()
            log.warning("CUDA is here but onnxruntime has no CUDA provider (onnxruntime-gpu is not installed): "
                        "serving %s with PyTorch on the GPU", torch_folder)
        if provider == "torch" or not onnx_files:
            if provider not in ("auto", "torch"):
                raise ModelError(f"{model.path}: no {ONNX_FILE} here, so provider {provider!r} is not possible; "
                                 "export it with `python -m serving.export` or use provider='torch'")
            if isinstance(batch_tokens, PassSize):  # settled now: CUDA graphs are captured up to it
                batch_tokens = batch_tokens.on("cuda" if cuda_available() else "cpu")
            runner = cls._torch(torch_folder, threads, precision=precision, cuda_graphs=cuda_graphs,
                                max_length=max_length, batch_tokens=batch_tokens)
            model_file, why = None, "no ONNX file served: PyTorch weights"
        else:
            runner, model_file, why = cls._onnx(model, provider, threads, quantized, max_length)
        if isinstance(batch_tokens, PassSize):  # settled once, for the device the runner got
            batch_tokens = batch_tokens.on(runner.provider)
        if model_file and runner.provider == "cpu":
            model.warn_other_isa(model_file)
        clf = cls(model, runner, max_length, batch_tokens, truncation, model_file, blend)
        clf.model_file_why = why
        if runner.backend == "torch":
            runner.finish_load(lambda: clf.encode(parity_texts) if parity_texts
                               else probe_ids(model.config.vocab_size, max_length))
        clf.predict(["warm-up", "warm up " * (max_length // 4)])  # first run allocates arenas/kernels
        log.info("loaded %s: backend=%s provider=%s file=%s max_length=%d", model.path, runner.backend,
                 runner.provider, model_file.name if model_file else "(transformers)", max_length)
        return clf

    @staticmethod
    def _torch(folder: Path, threads, **options):
        if not any((folder / f).exists() for f in WEIGHT_FILES):
            what = "no PyTorch weights (model.safetensors)" + ("" if (folder / ONNX_FILE).exists() else f" and no {ONNX_FILE}")
            raise ModelError(f"{folder}: {what}")
        if importlib.util.find_spec("torch") is None:
            raise ModelError(f"{folder}: a transformers folder needs PyTorch, which is not installed here (the "
                             "slim ONNX-only image has none): export it first with `python -m serving.export "
                             f"--model {folder} --output onnx/` and serve that folder, or use the full image")
        check_options(options["precision"], options["cuda_graphs"], "cuda" if cuda_available() else "cpu")
        try:
            return TorchRunner(folder, threads, **options)
        except (OSError, ValueError) as e:
            raise ModelError(f"{folder}: cannot load the PyTorch model: {str(e).splitlines()[0]}") from None

    @staticmethod
    def _onnx(model: ModelFolder, provider: str, threads, quantized, max_length):
        import onnxruntime as ort

        available = ort.get_available_providers()
        candidates = ["tensorrt", "cuda", "cpu"] if provider == "auto" else [provider]
        errors = []
        for cand in candidates:
            if ORT_NAMES[cand] not in available:
                errors.append(f"{cand}: not in this onnxruntime build (it has {available})")
                continue
            model_file, why = model.pick_file(cand, quantized)
            if model_file is None:
                errors.append(f"{cand}: no suitable file among {[f.name for f in model.onnx_files]} "
                              "(INT8 runs on CPU only)")
                continue
            try:
                runner = OrtRunner(model_file, cand, threads, max_length)
                # Provider plugins can load and still fail on the first run (driver/library mismatch).
                n = 4
                feeds = {"input_ids": np.ones((1, n), np.int64), "attention_mask": np.ones((1, n), np.int64),
                         "token_type_ids": np.zeros((1, n), np.int64)}
                runner(feeds)
                if errors:
                    log.debug("provider fallbacks: %s", "; ".join(errors))
                return runner, model_file, why
            except Exception as e:  # noqa: BLE001 - any failure here means "try the next provider"
                errors.append(f"{cand}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
                log.warning("provider %s not usable: %s", cand, errors[-1])
        raise ModelError(f"{model.path}: no usable execution provider: " + "; ".join(errors))

    # ---------------------------------------------------------------- inference
    def info(self) -> dict:
        return {
            "name": self.folder.resolve().name,
            "labels": list(self.labels),
            "backend": self._run.backend,
            "provider": self._run.provider,
            "max_length": self.max_length,
            "quantized": bool(self.model_file and self.model_file.name == ONNX_INT8_FILE),
            "truncation": self.truncation,
            "model_file": self.model_file.name if self.model_file else None,
            "model_file_why": self.model_file_why,
            "cpu_isa": cpu_isa(),
            "export_report": self.model_folder.report,
            **self._run.describe(),  # precision, cuda_graphs, cuda_graph_error, precision_check
            "blend": self.blend.info() if self.blend else None,
            "blend_available": self.model_folder.has_blend,
            "calibration": self.calibration.info(),
            **self.decision.info(),  # multi_label, thresholds (multi-label: label_sep, how they were tuned)
            "warnings": [self.learned] if self.learned else [],
        }

    def normalize(self, texts: Sequence[str]) -> list[str]:
        """Each text as the model reads it: cut where no kept token can lie beyond, then normalised. Batch
        scoring calls this once to flag texts that normalise to nothing, then passes `normalized=True`."""
        cap = self._char_cap
        clean = []
        for t in texts:
            t = "" if t is None else str(t)
            if len(t) > cap:
                t = t[:cap] if self.truncation == "head" else t[: cap // 4] + " " + t[-(cap - cap // 4):]
            clean.append(self.normalizer(t))
        return clean

    def encode(self, texts: Sequence[str], normalized: bool = False) -> list[list[int]]:
        """Token ids per text exactly as the model sees them (normalised, truncated, special tokens).
        A server that needs lengths before batching encodes once and hands these to `predict_encoded`:
        for a very small model, tokenizing costs a third as much as the forward pass.
        normalized: the texts come from `normalize` already."""
        clean = list(texts) if normalized else self.normalize(texts)
        # encode_batch fans out to a thread pool: worth it for a batch, pure overhead for one text.
        if len(clean) == 1:
            encs = [self._tok.encode(clean[0], add_special_tokens=False)]
        else:
            encs = self._tok.encode_batch(clean, add_special_tokens=False)
        out = []
        budget = self._budget
        head = budget if self.truncation == "head" else budget // 4
        for e in encs:
            ids = e.ids
            if len(ids) > budget:
                ids = ids[:head] + (ids[len(ids) - (budget - head):] if budget > head else [])
            out.append(self._prefix + ids + self._suffix)
        if self.blend or self.calibration.ood:  # the baseline, the detector read the text: it travels with the ids
            out = [Encoded(ids, t) for ids, t in zip(out, self._blend_texts(texts, clean))]
        return out

    def _blend_texts(self, texts: Sequence[str], clean: list[str]) -> list[str]:
        """The texts the baseline reads: normalised like k-fold's, under its own (much larger) cap."""
        cap = self._char_cap
        out = []
        for t, c in zip(texts, clean):
            t = "" if t is None else str(t)
            out.append(c if len(t) <= cap else self.normalizer(t[:TEXT_CAP])[:TEXT_CAP])
        return out

    def predict_proba(self, texts: Sequence[str], normalized: bool = False) -> np.ndarray:
        """Probabilities, shape (len(texts), len(labels)), rows in input order (blended when `blend`, then
        calibrated where the folder has calibration.json). Passes cut at the pass size only (passes.FIXED): a file
        scored twice, or resumed, gets the same bytes whatever the machine's load."""
        seqs = self.encode(texts, normalized)
        return self._proba(seqs, plan=self.plan(seqs, passes.FIXED))

    def _proba(self, seqs: Sequence[Sequence[int]], logits: np.ndarray | None = None,
               plan: list[np.ndarray] | None = None, baseline=None) -> np.ndarray:
        return self._scored(seqs, logits, plan, baseline)[0]

    def _scored(self, seqs: Sequence[Sequence[int]], logits: np.ndarray | None = None,
                plan: list[np.ndarray] | None = None, baseline=None, pool=None) -> tuple[np.ndarray, np.ndarray]:
        """(probabilities as served, the model's logits); `baseline`: the blend's baseline probabilities of the
        rows with text, where the out-of-domain detector's read already made them; `pool`: where the baseline
        runs (default: `side_pool(seqs)`)."""
        # Ids that did not come from encode() carry no text: those rows keep the model's probabilities.
        rows = [i for i, s in enumerate(seqs) if isinstance(s, Encoded)] if self.blend else []
        texts = [seqs[i].text for i in rows]
        if rows and not baseline:  # beside the pass (GIL released) or after it, as side_rows measured
            pool = side_work.INLINE if logits is not None else pool or self.side_pool(seqs)
            baseline = pool.submit(self.blend.baseline_proba, texts).result
        logits = self._logits(seqs, plan) if logits is None else logits
        probs = self.decision.probabilities(logits)
        if rows:
            probs[rows] = self.blend.combine(probs[rows], baseline())
        return self.calibration(probs), logits

    def predict_logits(self, texts: Sequence[str], normalized: bool = False) -> np.ndarray:
        """Raw logits (float32), shape (len(texts), len(labels)), rows in input order; passes as `predict_proba`'s."""
        seqs = self.encode(texts, normalized)
        return self._logits(seqs, self.plan(seqs, passes.FIXED))

    @property
    def call_overhead_tokens(self) -> float:
        """The fixed cost of one forward pass in tokens' worth, measured here once, on first need (serving/passes.py).
        A server measures it before it says ready; setting it fixes the pass plan (benchmarks)."""
        if self._overhead is None:
            with self._overhead_lock:
                if self._overhead is None:
                    # real ids cut to the model's max length, tokenized here: a call's normalizer sees only its texts
                    text = self._tok.encode("warm up " * 64, add_special_tokens=False).ids[: self._budget]
                    ids = self._prefix + text + self._suffix
                    self._overhead = passes.measure_overhead(lambda seqs: self._logits(seqs, [np.arange(len(seqs))]), ids)
            self.side_rows  # noqa: B018 -- the other measurement a server makes before it says ready
        return self._overhead

    @call_overhead_tokens.setter
    def call_overhead_tokens(self, tokens: float) -> None:
        self._overhead = float(tokens)

    @property
    def side_rows(self) -> int:
        """The fewest rows with text from which the blend's baseline and the off-topic detector run beside the
        model's pass rather than after it (serving/side_work.py; side_work.NEVER: always after): measured here
        once, on first need, or side_work.FIXED. A server measures it before it says ready (with the pass's
        cost). Either way the answers are the same, bit for bit."""
        return self._side.rows

    @side_rows.setter
    def side_rows(self, rows: int) -> None:
        self._side.fix(rows)

    def _measure_side_rows(self) -> int:
        if not (self.blend or self.calibration.ood):
            return side_work.NEVER  # nothing to run beside the pass
        seqs = self.encode(["warm up the side work of the engine"] * max(side_work.SIZES))
        return side_work.measure_side_rows(
            lambda n, beside: self._predictions(seqs[:n], None, [np.arange(n)], side_work.pool_for(beside)))

    def side_pool(self, seqs: Sequence[Sequence[int]]):
        """Where the blend and the detector run for `seqs`: side_work.POOL or side_work.INLINE."""
        return self._side.pool(sum(isinstance(s, Encoded) for s in seqs))

    def plan(self, seqs: Sequence[Sequence[int]], overhead: float | None = None) -> list[np.ndarray]:
        """The forward passes for `seqs`: row indices per pass (serving/passes.py), planned once per call, with
        `overhead` tokens' worth per pass (default: the measured `call_overhead_tokens`)."""
        if len(seqs) <= 1:
            return [np.arange(len(seqs))] if seqs else []
        overhead = self.call_overhead_tokens if overhead is None else overhead
        return passes.plan([len(s) for s in seqs], self.batch_tokens, overhead, self._run.width, self._run.max_batch)

    def _logits(self, seqs: Sequence[Sequence[int]], plan: list[np.ndarray] | None = None) -> np.ndarray:
        """Logits in input order; each pass of `plan` (default: `self.plan(seqs)`) padded to its longest text."""
        logits = np.empty((len(seqs), len(self.labels)), np.float32)
        for idx in self.plan(seqs) if plan is None else plan:
            longest = self._run.width(max(1, max(len(seqs[i]) for i in idx)))  # a CUDA graph's bucket; else the longest
            ids = np.full((len(idx), longest), self._pad_id, np.int64)
            mask = np.zeros((len(idx), longest), np.int64)
            for row, i in enumerate(idx):
                s = seqs[i]
                ids[row, : len(s)] = s
                mask[row, : len(s)] = 1
            start = time.perf_counter()
            logits[idx] = self._run({"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
            passes.CLOCK.seconds = getattr(passes.CLOCK, "seconds", 0.0) + time.perf_counter() - start
        return logits

    def predict(self, texts: Sequence[str], top_k: int | None = None) -> list[Prediction]:
        """One Prediction per text, in input order. `probabilities` holds every label in id order,
        or with `top_k` the k most likely, most likely first. Passes as `predict_proba`'s: the same texts always
        get the same answers (the UI's files, batch scoring)."""
        if isinstance(texts, str):
            raise TypeError("predict takes a list of texts, not one string")
        seqs = self.encode(texts)
        return self._predictions(seqs, top_k, self.plan(seqs, passes.FIXED))

    def predict_encoded(self, seqs: Sequence[Sequence[int]], top_k: int | None = None) -> list[Prediction]:
        """`predict` for token ids from `encode` (with a blend, only those carry the text it reads): the server's
        batches, whose passes are also cut by the measured cost (a request's answer already depends on the batch
        it shares). A multi-label model answers `MultiLabelPrediction`s (serving/multilabel.py)."""
        return self._predictions(seqs, top_k, self.plan(seqs))

    def _predictions(self, seqs, top_k: int | None, plan: list[np.ndarray], pool=None) -> list[Prediction]:
        pool = pool or self.side_pool(seqs)
        pending = self.calibration.start_out_of_domain(seqs, pool, self.blend)  # beside the model's pass or after
        probs, logits = self._scored(seqs, plan=plan, baseline=pending.baseline, pool=pool)
        return self.decision.answers(probs, logits, top_k, pending())

    # ---------------------------------------------------------------- the decision, as callers read it
    @property
    def multi_label(self) -> bool:
        return self.space.multi_label

    @property
    def thresholds(self) -> np.ndarray | None:
        """Multi-label: the decision thresholds on the served scale; None for single-label."""
        return self.decision.thresholds

    @property
    def label_sep(self) -> str | None:
        return self.decision.label_sep


def _check_options(provider: str, truncation: str, batch_tokens, precision: str) -> int | PassSize:
    """Load's options checked before anything is read; the pass size, PassSize() by default."""
    if provider not in PROVIDERS:
        raise ValueError(f"provider {provider!r}: use one of {PROVIDERS}")
    if truncation not in TRUNCATIONS:
        raise ValueError(f"truncation {truncation!r}: use one of {TRUNCATIONS}")
    batch_tokens = PassSize() if batch_tokens is None else batch_tokens
    sizes = (batch_tokens.cpu, batch_tokens.gpu) if isinstance(batch_tokens, PassSize) else (batch_tokens,)
    if min(sizes) < 1:
        raise ValueError("batch_tokens must be positive")
    check_precision(precision)
    return batch_tokens


def _gpu_without_ort_gpu() -> bool:
    import onnxruntime as ort

    return cuda_available() and ORT_NAMES["cuda"] not in ort.get_available_providers()
