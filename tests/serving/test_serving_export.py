from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from serving import export, export_gate
from serving.engine import ModelError
from serving.model_folder import ModelFolder

ROOT = Path(__file__).resolve().parents[2]


def test_export_folder_contents(exported_dir, trained_classifier_dir):
    names = {p.name for p in exported_dir.iterdir()}
    assert {"model.onnx", "model_quantized.onnx", "config.json", "tokenizer.json", "export_report.json"} <= names
    assert not any(n.startswith(".export-") for n in names)  # the work folder is gone
    # the labels travel in config.json's id2label, the one place the engine reads them from
    assert "labels.json" not in names and ModelFolder.read(exported_dir).labels == ["dream", "error", "memo"]
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
    # Timed against model.onnx on this CPU; the fixture asks for no speedup, so INT8 is the default.
    from serving.quantize import cpu_isa

    speed = r["int8_attempts"][-1]["speed"]
    assert speed["fp32_s"] > 0 and speed["int8_s"] > 0 and speed["rows"] == 36 and speed["passes"] == 3
    assert r["cpu_default"]["file"] == "model_quantized.onnx" and r["isa"] == r["cpu_default"]["isa"] == cpu_isa()
    # Issue 44: what users see is judged and reported, per file.
    assert r["gate"]["confident"] == "served score >= 0.9" and r["gate"]["near_tie_margin"] == 0.1
    assert r["gate"]["max_ece_rise_points"] == 1.0
    for f in (fp32, int8):
        s = f["served"]
        assert {"agreement", "confident_rows", "confident_agreement", "near_tie_rows", "changed_in_near_ties",
                "changed_beyond_near_ties", "beyond_near_tie_agreement", "macro_f1", "macro_f1_change_points", "ece",
                "ece_reference", "ece_change_points"} <= set(s)
        assert s["macro_f1_change_points"] >= -0.5 and s["ece_change_points"] <= 1.0
    assert fp32["served"]["agreement"] == 1.0 and abs(fp32["served"]["ece_change_points"]) < 1e-3


def test_int8_is_judged_on_served_answers_not_plain_agreement(trained_classifier_dir, tmp_path, monkeypatch, toy_rows):
    """Recipe 1 keeps every argmax but changes answers fp32 is confident of: refused. Recipe 2 moves half the
    argmaxes (near-ties, as far as the gate sees): written and served. The decision follows the served numbers."""
    judged = []  # one entry per file judged: model.onnx, then each recipe
    real_compare, real_served = export_gate.compare, export_gate.served_stats

    def compare(ref, got, *a):
        stats = real_compare(ref, got, *a)
        if len(judged) == 2:  # recipe 2
            stats["argmax_agreement"] = 0.5
        return stats

    def served(ref, got, margin):
        judged.append(True)
        stats = real_served(ref, got, margin)
        if len(judged) == 2:  # recipe 1
            stats["confident_agreement"] = 0.9
        return stats

    monkeypatch.setattr(export_gate, "compare", compare)
    monkeypatch.setattr(export_gate, "served_stats", served)
    eval_csv = tmp_path / "eval.csv"
    toy_rows(n_per_class=15, seed=2).to_csv(eval_csv, index=False)
    r = export.run(export.ExportConfig(model=trained_classifier_dir, output=tmp_path / "onnx", quantize=True,
                                       eval_csv=eval_csv, min_agreement=0.95, min_int8_speedup=0,
                                       int8_recipes=("dynamic", "dynamic-per-channel")))
    first, second = r["int8_attempts"]
    assert first["argmax_agreement"] >= 0.95 and first["passed"] is False
    assert first["why"] == [(f"agreement on the {first['served']['confident_rows']} answers fp32 is confident of "
                             "(served score >= 0.9) 0.9000 < 0.95")]
    assert second["argmax_agreement"] == 0.5 and second["passed"] is True and second["why"] == []
    assert r["quantization"]["recipe"] == "dynamic-per-channel" == r["files"]["model_quantized.onnx"]["recipe"]
    assert r["cpu_default"]["file"] == "model_quantized.onnx"


def test_normalization_and_training_config_travel(trained_classifier_dir, tmp_path):
    src = tmp_path / "model"
    src.mkdir()
    for p in trained_classifier_dir.iterdir():
        (src / p.name).write_bytes(p.read_bytes())
    (src / "normalization.json").write_text('{"kind": "kc", "max_repeats": 2}')
    (src / "training_config.json").write_text('{"max_length": 128}')
    (src / "reference.json").write_text('{"class_mix": {}}')  # the drift monitor's reference (app/monitoring/monitor.py)
    (src / "label_issues.csv").write_text("rank,row,text\n1,3,x\n")  # finetune --final: the suspects travel too
    out = tmp_path / "onnx"
    report = export.run(export.ExportConfig(model=src, output=out))
    assert (out / "normalization.json").read_text() == '{"kind": "kc", "max_repeats": 2}'
    assert (out / "training_config.json").exists()
    assert (out / "reference.json").read_text() == '{"class_mix": {}}'
    assert (out / "label_issues.csv").read_text() == "rank,row,text\n1,3,x\n"
    assert set(report["files"]) == {"model.onnx"} and not (out / "model_quantized.onnx").exists()


def test_parity_gate_failure_deletes_file(trained_classifier_dir, tmp_path, monkeypatch):
    real = export_gate.served_stats

    def worse(ref, got, margin):
        stats = real(ref, got, margin)
        stats["confident_agreement"] = 0.5  # every file's served answers (the ONNX ones, not PyTorch's own)
        return stats

    monkeypatch.setattr(export_gate, "served_stats", worse)
    out = tmp_path / "onnx"
    with pytest.raises(ModelError, match=r"parity gate failed .*answers fp32 is confident of .* 0\.5000 < 0\.99"):
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
    real = export_gate.check_file

    def int8_fails(cfg, file, *a):
        stats, why, clf = real(cfg, file, *a)
        return stats, why + (["forced"] if file.name == export.CANDIDATE else []), clf

    monkeypatch.setattr(export_gate, "check_file", int8_fails)
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
                              "max_f1_drop_points": None, "max_ece_rise_points": None, "near_tie_margin": 0.1,
                              "confident": "served score >= 0.9", "judges": report["gate"]["judges"]}
    served = report["files"]["model.onnx"]["served"]
    assert served["agreement"] == 1.0 and "macro_f1" not in served and "ece" not in served
    assert report["files"]["model.onnx"]["texts"] == 120 and "macro_f1" not in report["files"]["model.onnx"]
    assert "no --eval-csv" in caplog.text and "120 built-in texts" in caplog.text


def test_cli_refuses_unknown_recipe_and_negative_f1_drop(trained_classifier_dir, tmp_path):
    with pytest.raises(export.DataError, match=r"unknown \['nope'\]; known: dynamic"):
        export.run(export.ExportConfig(model=trained_classifier_dir, output=tmp_path, int8_recipes=("nope",)))
    with pytest.raises(export.DataError, match="--max-f1-drop -1"):
        export.run(export.ExportConfig(model=trained_classifier_dir, output=tmp_path, max_f1_drop=-1))
    assert export.parse_args(["--model", "m", "--output", "o", "--int8-recipes", "static-qdq, dynamic"]).int8_recipes \
        == ("static-qdq", "dynamic")


def _speed_gate(exported_dir, tmp_path, monkeypatch, speedups: list[float]):
    """_quantize_gated on a copy of the export with injected timings (speed depends on the CPU; the
    decision must not). The accuracy reference is model.onnx itself, on built-in texts."""
    import shutil

    from serving.engine import Classifier
    from serving.parity import builtin_sample

    folder = tmp_path / "onnx"
    shutil.copytree(exported_dir, folder)
    (folder / "model_quantized.onnx").unlink()
    timed = iter(speedups)

    def fake_timing(fp32, int8, seqs, passes):
        s = next(timed)
        return {"fp32_s": 1.0, "int8_s": 1 / s, "speedup": s, "rows": len(seqs), "passes": passes}

    monkeypatch.setattr(export_gate, "time_engines", fake_timing)
    texts = builtin_sample(40)
    fp32 = Classifier.load(folder / "model.onnx")
    cfg = export.ExportConfig(model=folder, output=folder, quantize=True, min_agreement=0.9, speed_rows=16,
                              int8_recipes=("dynamic", "dynamic-per-channel"))
    judged = export_gate.Judged(texts, fp32.labels, fp32.predict_logits(texts), None, None, None)
    info, attempts, default = export_gate.quantize_gated(cfg, judged, texts[:10])
    assert [a["passed"] for a in attempts] == [True, True]  # both pass accuracy: only speed decides
    assert [a["speed"]["rows"] for a in attempts] == [16, 16]
    assert not (folder / export.CANDIDATE).exists() and not (folder / export_gate.SLOW_CANDIDATE).exists()
    return folder, info, attempts, default


def test_speed_gate_keeps_fp32_as_default_when_int8_is_not_faster(exported_dir, tmp_path, monkeypatch, caplog):
    from serving.engine import Classifier
    from serving.quantize import cpu_isa
    from textdata.tables import write_json

    folder, info, attempts, default = _speed_gate(exported_dir, tmp_path, monkeypatch, [0.8, 1.1])
    assert [a["fast_enough"] for a in attempts] == [False, False]
    assert default["file"] == "model.onnx" and default["speedup"] == 1.1 and default["isa"] == cpu_isa()
    assert "not faster" in default["why"] and "1.10x" in default["why"] and "1.15x" in default["why"]
    # The faster of the two slow recipes stays on disk for --int8 (another CPU may run it faster).
    assert info["recipe"] == "dynamic-per-channel" and (folder / "model_quantized.onnx").exists()

    write_json(folder / "export_report.json", {"isa": cpu_isa(), "cpu_default": default})
    clf = Classifier.load(folder)
    assert clf.info()["model_file"] == "model.onnx" and "not faster" in clf.info()["model_file_why"]
    forced = Classifier.load(folder, quantized=True).info()
    assert forced["model_file"] == "model_quantized.onnx" and forced["model_file_why"].startswith("forced")
    # An export from before the speed check has no cpu_default: INT8 when present, as before.
    write_json(folder / "export_report.json", {"isa": cpu_isa()})
    assert "older export" in Classifier.load(folder).info()["model_file_why"]
    # Served on another instruction set than the one measured: one warning that says what to do.
    other = "avx2" if cpu_isa() != "avx2" else "avx512_vnni"
    write_json(folder / "export_report.json", {"isa": other, "cpu_default": default})
    with caplog.at_level("WARNING", logger="serving.engine"):
        Classifier.load(folder)
    assert f"on {other}, this CPU is {cpu_isa()}" in caplog.text and "--fp32/--int8" in caplog.text


def test_speed_gate_tries_the_next_recipe_when_the_first_is_too_slow(exported_dir, tmp_path, monkeypatch):
    folder, info, attempts, default = _speed_gate(exported_dir, tmp_path, monkeypatch, [1.05, 1.6])
    assert [a["fast_enough"] for a in attempts] == [False, True]
    assert info["recipe"] == "dynamic-per-channel" and default["file"] == "model_quantized.onnx"
    assert "1.60x" in default["why"] and (folder / "model_quantized.onnx").exists()
