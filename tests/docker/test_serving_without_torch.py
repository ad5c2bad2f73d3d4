"""The slim image's promise, checked without Docker: the serving engine and the app import and serve an
exported ONNX folder when the modules the image leaves out (docker/deps.py TRAIN_ONLY, torch first) are
unimportable, a transformers folder gets a clear error instead of an ImportError, and so does a retrain."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Runs in a fresh interpreter: a module imported once in the test process cannot be made absent again.
# `sys.modules[name] = None` is what a missing package looks like to `import` and to importlib.util.find_spec.
SCRIPT = """
import json, sys
for name in json.loads(sys.argv[1]):
    sys.modules[name] = None
from fastapi.testclient import TestClient
from app.config import parse_args
from app.server import create_app
from app.__main__ import main
from app.versions.registry import Registry
from serving.engine import Classifier

cfg = parse_args(["--model", sys.argv[2], "--data-dir", sys.argv[4]])
clf = Classifier.load(cfg.model)
registry = Registry(cfg.registry_dir)
version, _new = registry.register_folder(cfg.model)
registry.set_active(version)
with TestClient(base_url="http://127.0.0.1", app=create_app(cfg, clf, None, registry, version)) as client:
    health = client.get("/healthz").status_code
    ui = client.get("/ui/").status_code
    got = client.post("/v1/classify", json={"texts": ["꿈에서 봤다", "오류 발생했다"]}).json()
    train = client.post("/v1/train", json={"folds": 2})
print("RESULT " + json.dumps({"health": health, "ui": ui, "classify": got, "backend": clf.info()["backend"],
                              "train": [train.status_code, train.json()["detail"]],
                              "loaded": sorted(n for n in json.loads(sys.argv[1]) if sys.modules.get(n))}))
sys.exit(main(["--model", sys.argv[3]]))
"""


def _train_only_modules() -> list[str]:
    spec = importlib.util.spec_from_file_location("docker_deps", ROOT / "docker" / "deps.py")
    deps = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(deps)
    return sorted(set(deps.TRAIN_ONLY.values()))


def test_serves_onnx_without_torch_and_refuses_a_transformers_folder(tiny_onnx_dir, tiny_classifier_dir, tmp_path):
    blocked = _train_only_modules()
    assert "torch" in blocked
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADIO_ANALYTICS_ENABLED": "False"}
    env.pop("ELECTRA_API_KEY", None)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(blocked), str(tiny_onnx_dir),
                           str(tiny_classifier_dir), str(tmp_path / "app-data")],
                          check=False, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"served nothing (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    result = json.loads(lines[0].removeprefix("RESULT "))
    assert result["backend"] == "onnx" and result["loaded"] == []
    assert result["health"] == 200 and result["ui"] == 200
    preds = result["classify"]["predictions"]
    assert len(preds) == 2 and {p["label"] for p in preds} <= {"dream", "error", "memo"}
    # retraining needs torch: refused at once with the way out, not a child process dying on its import
    status, detail = result["train"]
    assert status == 422 and detail.startswith("training needs torch") and "VARIANT=full" in detail, result["train"]
    # the un-exported folder: exit 2, one line naming the fix, no traceback
    assert proc.returncode == 2, proc.stderr[-3000:]
    error = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(error) == 1 and "Traceback" not in proc.stderr
    assert "needs PyTorch" in error[0] and "serving.export" in error[0] and "full image" in error[0]


BLEND_SCRIPT = """
import json, sys
for name in json.loads(sys.argv[1]):
    sys.modules[name] = None
from fastapi.testclient import TestClient
from app.config import parse_args
from app.server import create_app
from serving.engine import Classifier

cfg = parse_args(["--model", sys.argv[2], "--data-dir", sys.argv[3], "--no-ui"])
clf = Classifier.load(cfg.model)
with TestClient(base_url="http://127.0.0.1", app=create_app(cfg, clf)) as client:
    got = client.post("/v1/classify", json={"texts": json.loads(sys.argv[4])}).json()
print("RESULT " + json.dumps({"blend": clf.info()["blend"], "classify": got,
                              "loaded": sorted(n for n in json.loads(sys.argv[1]) if sys.modules.get(n))}))
"""


def test_serves_a_blended_onnx_folder_without_sklearn_or_scipy(tiny_onnx_dir, toy_rows, tmp_path):
    """The TF-IDF blend is served by baseline/tfidf.py (numpy): the slim image has no scikit-learn or scipy."""
    import shutil

    import numpy as np

    from baseline.blend import Blend, baseline_proba, fit_baseline, save_baseline
    from serving.engine import Classifier
    from textdata.normalize import Normalizer

    blocked = sorted({*_train_only_modules(), "scipy"})
    assert "sklearn" in blocked
    folder = tmp_path / "blended"
    shutil.copytree(tiny_onnx_dir, folder)
    rows = toy_rows(n_per_class=8, seed=4)
    baseline = fit_baseline(rows["text"].tolist(), rows["label"].map(["dream", "error", "memo"].index).to_numpy(), 0)
    save_baseline(baseline, folder, 3, Blend(1.5, 0.7), {"method": "test"})
    texts = ["꿈에서 봤다", "오류  발생했다 ERROR", "x", "메모 기록 " * 40]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADIO_ANALYTICS_ENABLED": "False"}
    env.pop("ELECTRA_API_KEY", None)
    proc = subprocess.run([sys.executable, "-c", BLEND_SCRIPT, json.dumps(blocked), str(folder),
                           str(tmp_path / "app-data"), json.dumps(texts)],
                          check=False, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"served nothing (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    result = json.loads(lines[0].removeprefix("RESULT "))
    assert result["loaded"] == [] and result["blend"]["model_weight"] == 1.5, result
    assert "predictions" in result["classify"], result
    got = np.array([list(p["probabilities"].values()) for p in result["classify"]["predictions"]])
    # what the sklearn pipeline blended with the same ONNX model's probabilities gives
    plain = Classifier.load(folder, blend=False).predict_proba(texts)
    want = Blend(1.5, 0.7)(plain, baseline_proba(baseline, [Normalizer()(t) for t in texts], 3))
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert np.abs(got - plain).max() > 1e-3  # the blend was applied
