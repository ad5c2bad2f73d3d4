"""A model folder as the engine reads it, once: `ModelFolder.read(path)` finds its files, reads export_report.json,
config.json, the tokenizer and normalization.json, and answers the questions `Classifier.load` asks of them (which
ONNX file, which PyTorch weights, how long a text may be). A bad folder fails here with one line saying why."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from baseline.blend import BASELINE_DIR, BLEND_FILE
from serving.quantize import cpu_isa
from textdata.errors import ModelError
from textdata.labels import labels_from_config
from textdata.model_files import CONFIG
from textdata.model_files import EXPORT_REPORT as REPORT_FILE
from textdata.model_files import ONNX as ONNX_FILE
from textdata.model_files import ONNX_INT8 as ONNX_INT8_FILE
from textdata.model_files import WEIGHTS as WEIGHT_FILES
from textdata.normalize import Normalizer
from textdata.plain_files import plain_files
from textdata.run_folder import check_classifier, model_in_run

log = logging.getLogger("serving.engine")



@dataclass(frozen=True)
class ModelFolder:
    path: Path  # the folder (for a path to one .onnx file, the folder holding it)
    onnx_files: tuple[Path, ...]  # model.onnx and model_quantized.onnx where present, or the one .onnx file given
    report: dict | None  # export_report.json; None for a transformers folder (or an unreadable report)
    config: object  # transformers' config (id2label)
    tokenizer: object  # a fast tokenizer
    normalizer: Normalizer  # normalization.json: the text normalisation training used
    labels: list[str]  # config.json's id2label, in id order
    has_blend: bool  # baseline/ holds a TF-IDF blend (finetune --final)

    @classmethod
    def read(cls, path: str | Path) -> ModelFolder:
        path = Path(path)
        if not path.exists():
            raise ModelError(f"{path}: no such model folder")
        path = model_in_run(path, use=("model",))
        if path.is_file():
            if path.suffix != ".onnx":
                raise ModelError(f"{path}: expected a model folder or an .onnx file")
            folder, files = path.parent, (path,)
        else:
            folder = path
            files = tuple(p for p in (path / ONNX_FILE, path / ONNX_INT8_FILE) if p.exists())
        if not (folder / CONFIG).exists():
            raise ModelError(f"{folder}: no config.json, so not a model folder (expected the output of "
                             "serving.export or a transformers save_pretrained folder)")
        plain_files(folder)  # links, devices, oversized files refused before any is read, as the registry does
        check_classifier(folder)
        config, tokenizer = _config_and_tokenizer(folder)
        try:
            normalizer = Normalizer.load(folder)
        except (ValueError, json.JSONDecodeError) as e:
            raise ModelError(str(e)) from None
        report = _read_report(folder / REPORT_FILE)
        return cls(folder, files, report, config, tokenizer, normalizer, labels_from_config(config),
                   (folder / BASELINE_DIR / BLEND_FILE).exists())

    def torch_weights(self) -> Path | None:
        """The folder holding PyTorch weights for this model: its own, or those of the model it was exported from."""
        candidates = [self.path]
        if self.report and self.report.get("source"):
            candidates.append(Path(self.report["source"]))
        return next((c for c in candidates if any((c / w).exists() for w in WEIGHT_FILES)), None)

    def max_length(self, requested: int | None) -> int:
        """Tokens a text may take: `requested`, else the tokenizer's training length; never beyond the positions."""
        positions = getattr(self.config, "max_position_embeddings", None) or 512
        trained = self.tokenizer.model_max_length
        length = requested or (trained if trained < 1_000_000 else positions)
        if length > positions:
            log.warning("max_length %d > the model's %d positions; using %d", length, positions, positions)
            length = positions
        if length < 3:
            raise ValueError(f"max_length {length} leaves no room for text")
        return int(length)

    def pick_file(self, provider: str, quantized: bool | None) -> tuple[Path | None, str]:
        """(the ONNX file to serve on `provider`, why: for info())."""
        by_name = {f.name: f for f in self.onnx_files}
        if len(self.onnx_files) == 1 and self.onnx_files[0].name not in (ONNX_FILE, ONNX_INT8_FILE):
            return self.onnx_files[0], "the .onnx file given"
        if provider != "cpu":
            # Dynamic INT8 (MatMulInteger/DynamicQuantizeLinear) has no CUDA/TensorRT kernels.
            return (None if quantized else by_name.get(ONNX_FILE)), f"{provider}: INT8 runs on CPU only"
        if quantized is not None:
            return by_name.get(ONNX_INT8_FILE if quantized else ONNX_FILE), f"forced (quantized={quantized})"
        default = (self.report or {}).get("cpu_default") or {}
        if default.get("file") in by_name:
            return by_name[default["file"]], f"{REPORT_FILE} cpu_default: {default.get('why', '')}"
        if ONNX_INT8_FILE in by_name:
            return by_name[ONNX_INT8_FILE], f"{ONNX_INT8_FILE} present and {REPORT_FILE} has no speed decision (older export)"
        return by_name.get(ONNX_FILE), f"no {ONNX_INT8_FILE}"

    def warn_other_isa(self, model_file: Path) -> None:
        """The INT8 choice (weight format and speed) holds for the instruction set it was measured on."""
        report = self.report or {}
        measured = report.get("isa") or (report.get("quantization") or {}).get("isa")
        here = cpu_isa()
        if measured and measured != here and (model_file.parent / ONNX_INT8_FILE).exists():
            log.warning("%s: the export chose its INT8 format and CPU default on %s, this CPU is %s: serving %s may "
                        "be slower than the other file (or, for INT8 made for VNNI on a CPU without it, less "
                        "accurate); re-export here with `python -m serving.export --quantize`, or force the file "
                        "with --fp32/--int8", model_file.parent, measured, here, model_file.name)


MAX_REPORT_BYTES = 4 << 20  # an export report is tens of KB
MAX_TEXT_CHARS, MAX_ITEMS, MAX_DEPTH = 4000, 1000, 8  # what /v1/model may echo of it


def _read_report(path: Path) -> dict | None:
    """export_report.json, or None (a transformers folder, or an unreadable report: decided without it).
    /v1/model shows it as it is, so a report that is not small, plain JSON is refused, naming the field."""
    try:
        if path.stat().st_size > MAX_REPORT_BYTES:
            raise ModelError(f"{path}: {path.stat().st_size:,} bytes, over the {MAX_REPORT_BYTES >> 20} MB an "
                             "export report may take")
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        if isinstance(e, ModelError):
            raise
        return None
    if not isinstance(report, dict):
        raise ModelError(f"{path}: expected a JSON object, got {type(report).__name__}")
    check_plain_json(report, path)
    for key, kind in (("cpu_default", dict), ("source", str), ("isa", str), ("quantization", dict)):
        if report.get(key) is not None and not isinstance(report[key], kind):
            raise ModelError(f"{path}: {key}: expected {'an object' if kind is dict else 'a text'}")
    return report


def check_plain_json(value, path: Path, field: str = "", depth: int = 0) -> None:
    """ModelError naming the field where `value` holds a text over MAX_TEXT_CHARS, a list or object over
    MAX_ITEMS, or nesting deeper than MAX_DEPTH."""
    where = f"{path}: {field or '(top)'}"
    if isinstance(value, str) and len(value) > MAX_TEXT_CHARS:
        raise ModelError(f"{where}: {len(value):,} characters, over the {MAX_TEXT_CHARS:,} a report field may hold")
    if isinstance(value, (list, dict)):
        if len(value) > MAX_ITEMS or depth >= MAX_DEPTH:
            raise ModelError(f"{where}: over {MAX_ITEMS:,} items or {MAX_DEPTH} levels deep")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for k, v in items:
            if isinstance(k, str) and len(k) > 200:
                raise ModelError(f"{where}: a key of {len(k):,} characters")
            check_plain_json(v, path, f"{field}.{k}" if field else str(k), depth + 1)


def _config_and_tokenizer(folder: Path):
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
    return config, tokenizer


def special_tokens(tok) -> tuple[list[int], list[int]]:
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
