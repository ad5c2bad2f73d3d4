"""/v1/classify serves the model folder's TF-IDF blend (baseline/blend.py), and --no-blend turns it off."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from starlette.testclient import TestClient

from app.config import parse_args
from app.server import create_app
from baseline.blend import Blend, baseline_proba, fit_baseline, save_baseline
from serving.engine import Classifier
from textdata.normalize import Normalizer

TEXTS = ["꿈에서 봤다", "오류 발생했다", "메모 기록", "회의 시간 약속 메모 " * 30]


@pytest.fixture(scope="module")
def blended(tiny_classifier_dir, tmp_path_factory, toy_rows):
    folder = tmp_path_factory.mktemp("app-blend") / "model"
    shutil.copytree(tiny_classifier_dir, folder)
    rows = toy_rows(n_per_class=8, seed=3)
    labels = ["dream", "error", "memo"]
    baseline = fit_baseline(rows["text"].tolist(), rows["label"].map(labels.index).to_numpy(), 0)
    save_baseline(baseline, folder, 3, Blend(2.0, 0.8), {"method": "test"})
    return folder, baseline


def classify(folder, *flags):
    cfg = parse_args(["--model", str(folder), "--no-ui", *flags])
    clf = Classifier.load(folder, provider="torch", blend=cfg.blend)
    with TestClient(base_url="http://127.0.0.1", app=create_app(cfg, clf)) as c:
        r = c.post("/v1/classify", json={"texts": TEXTS})
        model = c.get("/v1/model").json()
    assert r.status_code == 200, r.text
    return np.array([list(p["probabilities"].values()) for p in r.json()["predictions"]]), model, clf


def test_api_returns_blended_probabilities_and_no_blend_turns_them_off(blended):
    folder, baseline = blended
    got, model, clf = classify(folder)
    assert model["blend"]["model_weight"] == 2.0
    logits = clf.predict_logits(TEXTS)
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    want = Blend(2.0, 0.8)(p, baseline_proba(baseline, [Normalizer()(t) for t in TEXTS], 3))  # as served
    np.testing.assert_allclose(got, want, atol=1e-5)
    plain, model, _ = classify(folder, "--no-blend")
    assert model["blend"] is None
    np.testing.assert_allclose(plain, p, atol=1e-5)
