from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from serving import export
from serving.engine import ModelError

ROOT = Path(__file__).resolve().parents[2]


def test_export_folder_contents(exported_dir, trained_classifier_dir):
    names = {p.name for p in exported_dir.iterdir()}
    assert {"model.onnx", "model_quantized.onnx", "config.json", "tokenizer.json", "labels.json",
            "export_report.json"} <= names
    assert not any(n.startswith(".export-") for n in names)  # the work folder is gone
    assert json.loads((exported_dir / "labels.json").read_text()) == ["dream", "error", "memo"]
    graph = onnx.load(exported_dir / "model.onnx").graph
    # Dynamic batch and sequence axes, and the O2 fusions actually happened.
    dims = graph.input[0].type.tensor_type.shape.dim
    assert all(d.dim_param and not d.dim_value for d in dims)
    ops = {n.op_type for n in graph.node}
    assert {"Attention", "SkipLayerNormalization"} <= ops
    assert "MatMulInteger" in {n.op_type for n in onnx.load(exported_dir / "model_quantized.onnx").graph.node}


def test_export_report_numbers(exported_dir):
    r = json.loads((exported_dir / "export_report.json").read_text())
    # 45 labeled rows: 9 calibrate static INT8, the other 36 are judged.
    assert r["passed"] is True and r["target"] == "cpu" and r["eval_rows"] == 36
    assert r["gate"]["judged_on"] == "eval_csv" and r["gate"]["rows"] == 36
    fp32, int8 = r["files"]["model.onnx"], r["files"]["model_quantized.onnx"]
    assert fp32["max_abs_logit_diff"] < 1e-4 and fp32["argmax_agreement"] == 1.0
    assert int8["argmax_agreement"] >= 0.95 and int8["macro_f1_change_points"] >= -0.5
    assert 0 <= int8["macro_f1"] <= 1 and r["pytorch"]["macro_f1"] > 0.5  # the fixture did learn
    assert abs(fp32["macro_f1"] - r["pytorch"]["macro_f1"]) < 1e-9
    # The first recipe tried that passed is the one written, and the report says which.
    assert r["int8_attempts"][-1]["passed"] and not any(a["passed"] for a in r["int8_attempts"][:-1])
    assert int8["recipe"] == r["quantization"]["recipe"] == r["int8_attempts"][-1]["recipe"]


def test_normalization_and_training_config_travel(trained_classifier_dir, tmp_path):
    src = tmp_path / "model"
    src.mkdir()
    for p in trained_classifier_dir.iterdir():
        (src / p.name).write_bytes(p.read_bytes())
    (src / "normalization.json").write_text('{"kind": "kc", "max_repeats": 2}')
    (src / "training_config.json").write_text('{"max_length": 128}')
    out = tmp_path / "onnx"
    report = export.run(export.ExportConfig(model=src, output=out))
    assert (out / "normalization.json").read_text() == '{"kind": "kc", "max_repeats": 2}'
    assert (out / "training_config.json").exists()
    assert set(report["files"]) == {"model.onnx"} and not (out / "model_quantized.onnx").exists()


def test_parity_gate_failure_deletes_file(trained_classifier_dir, tmp_path, monkeypatch):
    real = export.compare

    def worse(ref, got, labels, y_true):
        stats = real(ref, got, labels, y_true)
        if not (ref == got).all():  # the ONNX comparisons, not PyTorch against itself
            stats["argmax_agreement"] = 0.5
        return stats

    monkeypatch.setattr(export, "compare", worse)
    out = tmp_path / "onnx"
    with pytest.raises(ModelError, match=r"parity gate failed .*argmax agreement 0\.5000"):
        export.run(export.ExportConfig(model=trained_classifier_dir, output=out, quantize=True))
    report = json.loads((out / "export_report.json").read_text())
    assert report["passed"] is False
    assert not (out / "model.onnx").exists() and not (out / "model_quantized.onnx").exists()


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "serving.export", *map(str, args)], capture_output=True, text=True, check=False,
                          env=env, cwd=ROOT, timeout=300)


def test_cli_refuses_int8_for_cuda_and_bad_folders(trained_classifier_dir, tmp_path):
    r = _cli("--model", trained_classifier_dir, "--output", tmp_path / "o", "--target", "cuda", "--quantize")
    assert r.returncode == 2
    assert "error: --quantize with --target cuda" in r.stderr and "Traceback" not in r.stderr
    r = _cli("--model", tmp_path / "nope", "--output", tmp_path / "o")
    assert r.returncode == 2 and "error:" in r.stderr and "no such model folder" in r.stderr
    assert "Traceback" not in r.stderr


def test_int8_fallback_keeps_fp32_and_names_every_recipe(trained_classifier_dir, tmp_path, monkeypatch):
    real = export._check

    def int8_fails(cfg, file, *a):
        stats, why = real(cfg, file, *a)
        return stats, why + (["forced"] if file.name == export.CANDIDATE else [])

    monkeypatch.setattr(export, "_check", int8_fails)
    out = tmp_path / "onnx"
    cfg = export.ExportConfig(model=trained_classifier_dir, output=out, quantize=True, sample_size=60,
                              int8_recipes=("dynamic", "dynamic-keep-ffn-out"))
    with pytest.raises(ModelError, match=r"model_quantized.onnx: every recipe failed \(dynamic: .*forced; "
                                         r"dynamic-keep-ffn-out: .*forced\)\); model.onnx \(fp32\) passed and is kept"):
        export.run(cfg)
    r = json.loads((out / "export_report.json").read_text())
    assert [a["recipe"] for a in r["int8_attempts"]] == ["dynamic", "dynamic-keep-ffn-out"]
    assert r["passed"] is False and r["files"]["model.onnx"]["passed"] is True and r["quantization"] is None
    assert (out / "model.onnx").exists() and not (out / "model_quantized.onnx").exists()
    assert not (out / export.CANDIDATE).exists()
    # The fp32 model that stayed still serves.
    from serving.engine import Classifier

    assert Classifier.load(out).predict(["memo: buy milk"])[0].label in ("dream", "error", "memo")


def test_gate_without_labels_uses_builtin_sample_and_warns(trained_classifier_dir, tmp_path, caplog):
    out = tmp_path / "onnx"
    with caplog.at_level("WARNING", logger="serving.export"):
        report = export.run(export.ExportConfig(model=trained_classifier_dir, output=out, sample_size=120))
    assert report["gate"] == {"judged_on": "builtin_sample", "rows": 120, "min_agreement": 0.99,
                              "max_f1_drop_points": None}
    assert report["files"]["model.onnx"]["texts"] == 120 and "macro_f1" not in report["files"]["model.onnx"]
    assert "no --eval-csv" in caplog.text and "120 built-in texts" in caplog.text


def test_cli_refuses_unknown_recipe_and_negative_f1_drop(trained_classifier_dir, tmp_path):
    with pytest.raises(export.DataError, match=r"unknown \['nope'\]; known: dynamic"):
        export.run(export.ExportConfig(model=trained_classifier_dir, output=tmp_path, int8_recipes=("nope",)))
    with pytest.raises(export.DataError, match="--max-f1-drop -1"):
        export.run(export.ExportConfig(model=trained_classifier_dir, output=tmp_path, max_f1_drop=-1))
    assert export.parse_args(["--model", "m", "--output", "o", "--int8-recipes", "static-qdq, dynamic"]).int8_recipes \
        == ("static-qdq", "dynamic")
