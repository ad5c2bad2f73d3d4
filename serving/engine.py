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
- batches by a token budget: texts are sorted by length, each batch is padded only to its own
  longest text and holds at most `batch_tokens` padded tokens, then results go back in input order;
- picks the provider: TensorRT, then CUDA, when present and a warm-up run works on them, else CPU;
  on CUDA, inputs and outputs go through IO binding; on CPU, intra-op threads = usable cores (affinity, cgroup
  quota) that other work does not keep busy, spin-waiting off where they are shared (textdata/cpu_limits.py);
  On a CUDA machine whose onnxruntime has no CUDA provider (the usual CPU wheel), `auto` serves the
  PyTorch weights instead of ONNX on CPU: bf16 weights and CUDA graphs (`serving/torch_runner.py`);
`predict` is thread-safe: sessions and tokenizers are only read after `load`.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from baseline.blend import BASELINE_DIR, BLEND_FILE, TEXT_CAP, Encoded, ServedBlend
from serving.calibration import ServedCalibration
from serving.multilabel import is_multi_label, load_thresholds, multi_label_predictions, sigmoid
from serving.onnx_runner import ORT_NAMES, OrtRunner
from serving.quantize import cpu_isa
from serving.runner import Runner
from serving.torch_runner import TorchRunner, check_options, cuda_available, probe_ids
from textdata.errors import ModelError
from textdata.labels import labels_from_config
from textdata.learned import folder_note
from textdata.normalize import Normalizer
from textdata.numerics import check_precision
from textdata.run_folder import check_classifier, model_in_run

log = logging.getLogger("serving.engine")

ONNX_FILE = "model.onnx"
ONNX_INT8_FILE = "model_quantized.onnx"
REPORT_FILE = "export_report.json"
PROVIDERS = ("auto", "cpu", "cuda", "tensorrt", "torch")
TRUNCATIONS = ("head", "head+tail")
# Default padded tokens per pass (Classifier.load(batch_tokens=None)). Measured (docs/serving.md, "Pass size"):
# on CPU smaller passes stay in cache, 1,024 tokens scored 15-23% more rows/s than 8,192 on two models; a GPU
# wants large passes.
CPU_BATCH_TOKENS, GPU_BATCH_TOKENS = 1024, 8192
# Blended rows from which the baseline runs beside the model in _BLEND_POOL (a thread hand-off costs more than
# it hides for a text or two); threads start on first use.
BLEND_OVERLAP_ROWS = 2
_BLEND_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="blend-baseline")


@dataclass(frozen=True)
class PassSize:
    """Padded tokens per forward pass for each kind of device: `Classifier.load(batch_tokens=PassSize(...))`
    settles it once, when the device is known, and `Classifier.batch_tokens` holds the result."""

    cpu: int = CPU_BATCH_TOKENS
    gpu: int = GPU_BATCH_TOKENS

    def on(self, provider: str) -> int:
        return self.cpu if provider == "cpu" else self.gpu


@dataclass
class Prediction:
    label: str
    score: float
    probabilities: dict[str, float]
    confident: bool = True  # the score clears the served threshold (calibration.json); always without one


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float32, copy=False)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def _resolve_files(path: Path) -> tuple[Path, list[Path]]:
    """(folder, ONNX files in it); a path to one .onnx file selects that file."""
    if not path.exists():
        raise ModelError(f"{path}: no such model folder")
    path = model_in_run(path, use=("model",))
    if path.is_file():
        if path.suffix != ".onnx":
            raise ModelError(f"{path}: expected a model folder or an .onnx file")
        return path.parent, [path]
    return path, [p for p in (path / ONNX_FILE, path / ONNX_INT8_FILE) if p.exists()]


class Classifier:
    """Use `Classifier.load(...)`; the constructor takes already-built parts."""

    def __init__(self, folder, runner: Runner, tokenizer, config, normalizer, max_length, batch_tokens, truncation,
                 model_file):
        self.folder = Path(folder)
        self._run = runner
        self._config = config
        self.normalizer = normalizer
        self.labels = labels_from_config(config)
        # Multi-label (serving/multilabel.py): sigmoid per label, labels over the thresholds in thresholds.json.
        self.multi_label = is_multi_label(config)
        self._thresholds = load_thresholds(self.folder, self.labels) if self.multi_label else None
        self.thresholds = self._thresholds.values if self.multi_label else None
        self.label_sep = self._thresholds.label_sep if self.multi_label else None
        self.max_length = max_length
        self.batch_tokens = batch_tokens
        self.truncation = truncation
        self.model_file = model_file
        self.model_file_why = None  # why this file: set by load()
        # A private copy of the Rust tokenizer with truncation and padding off: we do both ourselves,
        # and never mutating it after load is what makes concurrent encode_batch calls safe.
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
        self._tok.no_truncation()
        self._tok.no_padding()
        self._prefix, self._suffix = _special_tokens(self._tok)
        self._pad_id = tokenizer.pad_token_id or 0
        self._budget = max_length - len(self._prefix) - len(self._suffix)
        # Characters beyond this cannot reach the kept tokens after whitespace is collapsed (a token
        # covers at least one character); cutting first keeps a 50 MB cell from stalling the tokenizer.
        self._char_cap = max(4096, 32 * max_length)
        self._report = None
        self.blend: ServedBlend | None = None  # set by load(blend=True) when the folder has one
        self.blend_overlap = True  # False: the baseline runs after the model (same numbers; bench/serving.py)
        self._has_blend = False
        self.calibration = ServedCalibration()  # load() reads the folder's calibration.json (serving/calibration.py)
        self.learned = None  # "the model adds nothing; ..." when k-fold found so (textdata/learned.py)
        if (self.folder / REPORT_FILE).exists():
            self._report = json.loads((self.folder / REPORT_FILE).read_text(encoding="utf-8"))

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
        probabilities and predictions are then blended, logits stay the model's own.
        """
        if provider not in PROVIDERS:
            raise ValueError(f"provider {provider!r}: use one of {PROVIDERS}")
        if truncation not in TRUNCATIONS:
            raise ValueError(f"truncation {truncation!r}: use one of {TRUNCATIONS}")
        batch_tokens = PassSize() if batch_tokens is None else batch_tokens
        sizes = (batch_tokens.cpu, batch_tokens.gpu) if isinstance(batch_tokens, PassSize) else (batch_tokens,)
        if min(sizes) < 1:
            raise ValueError("batch_tokens must be positive")
        check_precision(precision)
        folder, onnx_files = _resolve_files(Path(path))
        if not (folder / "config.json").exists():
            raise ModelError(f"{folder}: no config.json, so not a model folder (expected the output of "
                             "serving.export or a transformers save_pretrained folder)")
        check_classifier(folder)
        from transformers import AutoConfig, AutoTokenizer  # after the checks: a wrong folder answers at once

        try:
            config = AutoConfig.from_pretrained(folder)
            tokenizer = AutoTokenizer.from_pretrained(folder, use_fast=True)
        except Exception as e:  # noqa: BLE001 - transformers raises many types for a broken folder
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ModelError(f"{folder}: cannot read config/tokenizer: {msg}") from None
        if not getattr(tokenizer, "is_fast", False):
            raise ModelError(f"{folder}: needs a fast tokenizer (tokenizer.json or a vocab a fast tokenizer can load)")
        if not getattr(config, "id2label", None):
            raise ModelError(f"{folder}: config.json has no id2label")
        try:
            normalizer = Normalizer.load(folder)
        except (ValueError, json.JSONDecodeError) as e:
            raise ModelError(str(e)) from None
        max_length = _resolve_max_length(max_length, tokenizer, config)

        torch_folder = folder
        if provider == "auto" and onnx_files and _gpu_without_ort_gpu():
            torch_folder = _torch_weights_folder(folder)
            if torch_folder is not None:
                log.warning("CUDA is here but onnxruntime has no CUDA provider (onnxruntime-gpu is not "
                            "installed): serving %s with PyTorch on the GPU", torch_folder)
                onnx_files = []
        if provider == "torch" or not onnx_files:
            if provider not in ("auto", "torch"):
                raise ModelError(f"{folder}: no {ONNX_FILE} here, so provider {provider!r} is not possible; "
                                 "export it with `python -m serving.export` or use provider='torch'")
            if isinstance(batch_tokens, PassSize):  # settled now: CUDA graphs are captured up to it
                batch_tokens = batch_tokens.on("cuda" if cuda_available() else "cpu")
            runner = cls._torch(torch_folder or folder, threads, precision=precision, cuda_graphs=cuda_graphs,
                                max_length=max_length, batch_tokens=batch_tokens)
            model_file = None
        else:
            runner, model_file, why = cls._onnx(folder, onnx_files, provider, threads, quantized, max_length)
        if isinstance(batch_tokens, PassSize):  # settled once, for the device the runner got
            batch_tokens = batch_tokens.on(runner.provider)
        clf = cls(folder, runner, tokenizer, config, normalizer, max_length, batch_tokens, truncation, model_file)
        clf.model_file_why = why if model_file else "no ONNX file served: PyTorch weights"
        if model_file and runner.provider == "cpu":
            _warn_other_isa(clf._report, model_file)
        clf._has_blend = (folder / BASELINE_DIR / BLEND_FILE).exists()
        if blend and clf._has_blend:
            try:
                clf.blend = ServedBlend(folder, len(clf.labels))
            except ValueError as e:
                raise ModelError(str(e)) from None
        clf.calibration = ServedCalibration.load(folder, clf.labels, blend_served=clf.blend is not None)
        if clf.multi_label:  # the tuned thresholds on the scale the scores are served (same label sets)
            clf._thresholds = clf.calibration.multi_label_thresholds(clf._thresholds)
            clf.thresholds = clf._thresholds.values
        clf.learned = folder_note(folder, blended=clf.blend is not None)
        if clf.learned:
            log.warning("%s: %s", folder, clf.learned)
        if runner.backend == "torch":
            runner.finish_load(lambda: clf.encode(parity_texts) if parity_texts
                               else probe_ids(config.vocab_size, max_length))
        clf.predict(["warm-up", "warm up " * (max_length // 4)])  # first run allocates arenas/kernels
        log.info("loaded %s: backend=%s provider=%s file=%s max_length=%d", folder, runner.backend,
                 runner.provider, model_file.name if model_file else "(transformers)", max_length)
        return clf

    @staticmethod
    def _torch(folder: Path, threads, **options):
        if not any((folder / f).exists() for f in ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json")):
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
    def _onnx(folder: Path, files: list[Path], provider: str, threads, quantized, max_length):
        import onnxruntime as ort

        available = ort.get_available_providers()
        candidates = ["tensorrt", "cuda", "cpu"] if provider == "auto" else [provider]
        errors = []
        for cand in candidates:
            if ORT_NAMES[cand] not in available:
                errors.append(f"{cand}: not in this onnxruntime build (it has {available})")
                continue
            model_file, why = _pick_file(files, cand, quantized, _read_report(folder))
            if model_file is None:
                errors.append(f"{cand}: no suitable file among {[f.name for f in files]} (INT8 runs on CPU only)")
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
        raise ModelError(f"{folder}: no usable execution provider: " + "; ".join(errors))

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
            "export_report": self._report,
            **self._run.describe(),  # precision, cuda_graphs, cuda_graph_error, precision_check
            "blend": self.blend.info() if self.blend else None,
            "blend_available": self._has_blend,
            "calibration": self.calibration.info(),
            "multi_label": self.multi_label,
            "thresholds": self._thresholds.as_dict(self.labels) if self.multi_label else None,
            **({"label_sep": self.label_sep, "thresholds_tuned": self._thresholds.tuned,
                "thresholds_source": self._thresholds.source} if self.multi_label else {}),
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
        if self.blend:  # the baseline reads the text, so it travels with the ids (through the API's batcher)
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

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens per text after normalisation, truncation and special tokens (what a batch costs)."""
        return [len(ids) for ids in self.encode(texts)]

    def predict_proba(self, texts: Sequence[str], normalized: bool = False) -> np.ndarray:
        """Probabilities, shape (len(texts), len(labels)), rows in input order (blended when `blend`, then
        calibrated where the folder has calibration.json)."""
        return self._proba(self.encode(texts, normalized))

    def _proba(self, seqs: Sequence[Sequence[int]], logits: np.ndarray | None = None) -> np.ndarray:
        # Ids that did not come from encode() carry no text: those rows keep the model's probabilities.
        rows = [i for i, s in enumerate(seqs) if isinstance(s, Encoded)] if self.blend else []
        texts = [seqs[i].text for i in rows]
        # The baseline runs in a side thread during the model's pass: ONNX Runtime and most of the baseline's numpy
        # release the GIL, so its cost mostly hides (docs/serving.md, "The blend's cost"). Same numbers either way.
        overlap = self.blend_overlap and logits is None and len(rows) >= BLEND_OVERLAP_ROWS
        side = _BLEND_POOL.submit(self.blend.baseline_proba, texts) if overlap else None
        logits = self._logits(seqs) if logits is None else logits
        probs = sigmoid(logits) if self.multi_label else _softmax(logits)
        if rows:
            probs[rows] = self.blend.combine(probs[rows], side.result() if side else self.blend.baseline_proba(texts))
        return self.calibration(probs)

    def predict_logits(self, texts: Sequence[str], normalized: bool = False) -> np.ndarray:
        """Raw logits (float32), shape (len(texts), len(labels)), rows in input order."""
        return self._logits(self.encode(texts, normalized))

    def _logits(self, seqs: Sequence[Sequence[int]]) -> np.ndarray:
        n = len(seqs)
        logits = np.empty((n, len(self.labels)), np.float32)
        if n == 0:
            return logits
        lengths = np.fromiter((len(s) for s in seqs), np.int64, n)
        order = np.argsort(-lengths, kind="stable")
        start = 0
        while start < n:
            longest = max(1, int(lengths[order[start]]))  # sorted longest first, so this pads the batch
            longest = self._run.width(longest)  # a CUDA graph's bucket; the longest text elsewhere
            size = max(1, self.batch_tokens // longest)
            if self._run.max_batch:
                size = min(size, self._run.max_batch)
            idx = order[start : start + size]
            ids = np.full((len(idx), longest), self._pad_id, np.int64)
            mask = np.zeros((len(idx), longest), np.int64)
            for row, i in enumerate(idx):
                s = seqs[i]
                ids[row, : len(s)] = s
                mask[row, : len(s)] = 1
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            logits[idx] = self._run(feeds)
            start += size
        return logits

    def predict(self, texts: Sequence[str], top_k: int | None = None) -> list[Prediction]:
        """One Prediction per text, in input order. `probabilities` holds every label in id order,
        or with `top_k` the k most likely, most likely first."""
        if isinstance(texts, str):
            raise TypeError("predict takes a list of texts, not one string")
        return self.predict_encoded(self.encode(texts), top_k)

    def predict_encoded(self, seqs: Sequence[Sequence[int]], top_k: int | None = None) -> list[Prediction]:
        """`predict` for token ids from `encode` (with a blend, only those carry the text it reads).
        A multi-label model answers `MultiLabelPrediction`s (serving/multilabel.py)."""
        if self.multi_label:
            logits = self._logits(seqs)
            probs = self._proba(seqs, logits)
            sure = self.calibration.confident_multi_label(probs, probs > self.thresholds[None, :])
            return multi_label_predictions(probs, logits, self.labels, self.thresholds, top_k, sure)
        probs = self._proba(seqs)
        labels = self.labels
        sure = self.calibration.confident(probs)
        out = []
        for p, ok in zip(probs, sure):
            best = int(p.argmax())
            if top_k is None:
                dist = {labels[j]: float(p[j]) for j in range(len(labels))}
            else:
                dist = {labels[j]: float(p[j]) for j in np.argsort(-p, kind="stable")[: max(1, top_k)]}
            out.append(Prediction(label=labels[best], score=float(p[best]), probabilities=dist, confident=bool(ok)))
        return out


def _special_tokens(tok) -> tuple[list[int], list[int]]:
    """The ids the tokenizer's post-processor puts before and after a text: what a fast tokenizer added in
    training, whatever its class. (`build_inputs_with_special_tokens` is not: a plain
    PreTrainedTokenizerFast returns the ids unchanged, and served inputs lost [CLS] and [SEP].)"""
    for probe in ("a", "0", "the", "가", "x y"):
        plain = tok.encode(probe, add_special_tokens=False).ids
        full = tok.encode(probe, add_special_tokens=True).ids
        if not plain:
            continue
        for cut in range(len(full) - len(plain) + 1):
            if full[cut : cut + len(plain)] == plain:
                return full[:cut], full[cut + len(plain) :]
    raise ModelError("cannot tell which special tokens the tokenizer adds around a text")


def _gpu_without_ort_gpu() -> bool:
    import onnxruntime as ort

    return cuda_available() and ORT_NAMES["cuda"] not in ort.get_available_providers()


def _torch_weights_folder(folder: Path) -> Path | None:
    """PyTorch weights for an exported folder: its own, or those of the model it was exported from."""
    candidates = [folder]
    report = folder / REPORT_FILE
    if report.exists():
        candidates.append(Path(json.loads(report.read_text(encoding="utf-8")).get("source", "")))
    weights = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json")
    return next((c for c in candidates if any((c / w).exists() for w in weights)), None)


def _read_report(folder: Path) -> dict | None:
    try:
        return json.loads((folder / REPORT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _pick_file(files: list[Path], provider: str, quantized: bool | None, report: dict | None) -> tuple[Path | None, str]:
    """(the ONNX file to serve, why: for info())."""
    by_name = {f.name: f for f in files}
    if len(files) == 1 and files[0].name not in (ONNX_FILE, ONNX_INT8_FILE):
        return files[0], "the .onnx file given"
    if provider != "cpu":
        # Dynamic INT8 (MatMulInteger/DynamicQuantizeLinear) has no CUDA/TensorRT kernels.
        return (None if quantized else by_name.get(ONNX_FILE)), f"{provider}: INT8 runs on CPU only"
    if quantized is not None:
        return by_name.get(ONNX_INT8_FILE if quantized else ONNX_FILE), f"forced (quantized={quantized})"
    default = ((report or {}).get("cpu_default") or {})
    if default.get("file") in by_name:
        return by_name[default["file"]], f"{REPORT_FILE} cpu_default: {default.get('why', '')}"
    if ONNX_INT8_FILE in by_name:
        return by_name[ONNX_INT8_FILE], f"{ONNX_INT8_FILE} present and {REPORT_FILE} has no speed decision (older export)"
    return by_name.get(ONNX_FILE), f"no {ONNX_INT8_FILE}"


def _warn_other_isa(report: dict | None, model_file: Path) -> None:
    """The INT8 choice (weight format and speed) holds for the instruction set it was measured on."""
    measured = (report or {}).get("isa") or ((report or {}).get("quantization") or {}).get("isa")
    here = cpu_isa()
    if measured and measured != here and (model_file.parent / ONNX_INT8_FILE).exists():
        log.warning("%s: the export chose its INT8 format and CPU default on %s, this CPU is %s: serving %s may be "
                    "slower than the other file (or, for INT8 made for VNNI on a CPU without it, less accurate); "
                    "re-export here with `python -m serving.export --quantize`, or force the file with "
                    "--fp32/--int8", model_file.parent, measured, here, model_file.name)


def _resolve_max_length(requested: int | None, tokenizer, config) -> int:
    positions = getattr(config, "max_position_embeddings", None) or 512
    trained = tokenizer.model_max_length if tokenizer.model_max_length < 1_000_000 else positions
    length = requested or trained
    if length > positions:
        log.warning("max_length %d > the model's %d positions; using %d", length, positions, positions)
        length = positions
    if length < 3:
        raise ValueError(f"max_length {length} leaves no room for text")
    return int(length)
