"""The manifest of the model folder (issue 41): one module names every file; the modules that use them import
the names, and serving.export carries what the manifest says travels."""

from __future__ import annotations

import ast
from pathlib import Path

from textdata import model_files

ROOT = Path(__file__).resolve().parents[2]
NAMES = {model_files.CONFIG, model_files.NORMALIZATION, model_files.TRAINING_CONFIG, model_files.THRESHOLDS,
         model_files.CALIBRATION, model_files.REFERENCE, model_files.BASELINE_DIR, model_files.BLEND,
         model_files.LABEL_ISSUES, model_files.EXPORT_REPORT, model_files.ONNX, model_files.ONNX_INT8,
         model_files.VERSION, *model_files.WEIGHTS}


def test_no_module_but_the_manifest_defines_a_model_file_name():
    """A module-level `X = "thresholds.json"` (or a tuple of such names) anywhere but textdata/model_files.py
    is a second definition that can drift from the first (THRESHOLDS_FILE was defined twice)."""
    found = []
    for package in ("app", "baseline", "finetune", "serving", "textdata"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "model_files.py":
                continue
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                    values = [c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)]
                    if any(v in NAMES for v in values):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, found


def test_export_carries_what_the_manifest_says():
    from serving import export
    from serving.model_folder import ONNX_FILE, REPORT_FILE

    assert export.SIDECARS == model_files.CARRIED
    assert set(model_files.CARRIED) == {model_files.NORMALIZATION, model_files.TRAINING_CONFIG,
                                        model_files.THRESHOLDS, model_files.CALIBRATION, model_files.REFERENCE,
                                        model_files.LABEL_ISSUES}
    assert (ONNX_FILE, REPORT_FILE) == (model_files.ONNX, model_files.EXPORT_REPORT)
    named = {f.name for f in model_files.MANIFEST}
    assert set(model_files.CARRIED) <= named and model_files.CONFIG in named
    assert all(f.writer and f.readers and f.holds for f in model_files.MANIFEST)
