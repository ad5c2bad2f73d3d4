"""The manifest of a model folder: every file k-fold `--final` and serving.export put in one, what it holds, who
writes it and who reads it. Every module names these files through this one (no other file-name constants), and
serving.export's list of files carried beside model.onnx is `CARRIED`.

A model folder is a transformers save_pretrained folder (config.json, weights, tokenizer) plus our own small
files; each is optional except config.json and a tokenizer, and code that reads one must work without it.
"""

from __future__ import annotations

from dataclasses import dataclass

CONFIG = "config.json"
NORMALIZATION = "normalization.json"
TRAINING_CONFIG = "training_config.json"
THRESHOLDS = "thresholds.json"
CALIBRATION = "calibration.json"
REFERENCE = "reference.json"
BASELINE_DIR = "baseline"
BLEND = "blend.json"  # in BASELINE_DIR
LABEL_ISSUES = "label_issues.csv"
EXPORT_REPORT = "export_report.json"
ONNX = "model.onnx"
ONNX_INT8 = "model_quantized.onnx"
WEIGHTS = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json")
VERSION = "version.json"  # in an app registry's version folder, around the model folder
RECIPE = "finetune_recipe.json"  # in an encoder folder to fine-tune from: k-fold settings that suit it


@dataclass(frozen=True)
class ModelFile:
    name: str
    holds: str
    writer: str
    readers: str
    carried: bool = False  # serving.export copies it from the model folder beside model.onnx as it is


MANIFEST = (
    ModelFile(CONFIG, "architecture, id2label (the labels in id order), problem_type (the label kind)",
              "transformers save_pretrained (finetune/train.py --final; serving.export through Optimum)",
              "serving/model_folder.py, textdata/labels.py LabelSpace.from_config"),
    ModelFile("tokenizer files", "the tokenizer (tokenizer.json, vocab, special tokens)",
              "transformers save_pretrained; serving.export through Optimum", "serving/model_folder.py"),
    ModelFile(NORMALIZATION, "the text normalisation training used", "finetune (--normalize)",
              "textdata/normalize.py Normalizer.load (the engine, k-fold)", carried=True),
    ModelFile(TRAINING_CONFIG, "the k-fold flags that made the model", "finetune/kfold.py --final",
              "textdata/learned.py (the app's Train tab, version notes)", carried=True),
    ModelFile(THRESHOLDS, "multi-label: a threshold per label and the label separator",
              "finetune/multilabel_run.py", "serving/multilabel.py load_thresholds, app/versions/trainset.py", carried=True),
    ModelFile(CALIBRATION, "the calibrator and the served confidence threshold", "finetune/confidence.py",
              "textdata/calibration.py (serving/calibration.py)", carried=True),
    ModelFile(REFERENCE, "histograms of what the model answered out of fold, for drift",
              "finetune (textdata/drift.py)", "app/monitoring/monitor.py", carried=True),
    ModelFile(LABEL_ISSUES, "the suspected label errors of the k-fold run", "finetune/label_issues.py",
              "app/labeling/review.py (Review suspects)", carried=True),
    ModelFile(f"{BASELINE_DIR}/{BLEND}", "the TF-IDF baseline and its blend with the model",
              "baseline/blend.py (finetune --final --blend)", "baseline/blend.py ServedBlend (the engine)"),
    ModelFile(EXPORT_REPORT, "the export's gate: agreement, F1, timings, the CPU default",
              "serving/export.py", "serving/model_folder.py, app/versions/registry.py"),
    ModelFile(RECIPE, "in an encoder to start from (not a fine-tuned model): the k-fold settings that suit it, used "
                      "where no flag sets them", "pretraining/e5.py (carried by e5_prune.py and pretraining/train.py)",
              "finetune/models.py model_recipe (finetune/config.py)"),
    ModelFile(ONNX, "the model as ONNX", "serving/export.py", "serving/model_folder.py"),
    ModelFile(ONNX_INT8, "the INT8 model, where one passed the gate", "serving/export.py", "serving/model_folder.py"),
)
# Our own files serving.export copies beside model.onnx (the tokenizer, config.json and the blend go their own ways).
CARRIED = tuple(f.name for f in MANIFEST if f.carried)
