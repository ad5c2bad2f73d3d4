"""One validation for a retrain's settings, whoever asks (issue 29, app/versions/train_params.py): the Train tab started a
job with epochs 1e9 and unbounded folds, and the API let seed -1 and 1e20 through to a child that crashed."""

from __future__ import annotations

import asyncio
import math

import pytest
from starlette.testclient import TestClient

from app.config import Config
from app.server import create_app, load_classifier
from app.versions.jobs import Jobs
from app.versions.registry import Registry
from app.versions.train_params import RETRAINABLE, check_params
from app.versions.trainset import TrainingDataError

BAD = [("epochs", 1e9), ("epochs", 0), ("folds", 21), ("folds", 1), ("seed", -1), ("seed", 1e20), ("seed", 2**32),
       ("lr", 0), ("lr", 1.5), ("lr", math.nan), ("epochs", math.inf), ("epochs", 2.5), ("epochs", True),
       ("batch_size", "8"), ("class_weights", 1)]


@pytest.mark.parametrize("name, value", BAD)
def test_out_of_bounds_settings_are_refused_with_the_bounds(name, value):
    with pytest.raises(TrainingDataError, match=f"^{name} must be"):
        check_params({name: value})


def test_good_settings_pass_and_whole_floats_from_number_boxes_are_ints():
    assert check_params({"folds": 5.0, "epochs": 3, "lr": 5e-5, "seed": 2**32 - 1, "class_weights": True,
                         "max_length": None}) == {"folds": 5, "epochs": 3, "lr": 5e-5, "seed": 2**32 - 1,
                                                   "class_weights": True}
    with pytest.raises(TrainingDataError, match="unknown training setting"):
        check_params({"epoch": 3})
    # what a retrain only inherits (the served model's normalisation) cannot be set
    assert [p.name for p in RETRAINABLE if not p.api] == ["normalize"]
    with pytest.raises(TrainingDataError, match="unknown training setting"):
        check_params({"normalize": "kc"})


@pytest.fixture
def registry(spread_model_dir, tmp_path):
    reg = Registry(tmp_path / "models")
    reg.set_active(reg.register_folder(spread_model_dir)[0])
    return reg


def test_the_api_and_the_train_tab_path_refuse_the_same_values(registry, tmp_path):
    cfg = Config(ui=False, data_dir=tmp_path, models_dir=registry.root, train_model="m")
    app = create_app(cfg, load_classifier(cfg, registry.path("v1")), registry=registry, version="v1")
    with TestClient(app, base_url="http://127.0.0.1") as c:
        for name, value in [("seed", -1), ("seed", 1e20), ("epochs", 1_000_000_000), ("folds", 50)]:
            r = c.post("/v1/train", json={name: value})
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", name], (name, value)
        schema = c.get("/openapi.json").json()["components"]["schemas"]["TrainRequest"]["properties"]
        assert schema["epochs"]["anyOf"][0]["maximum"] == 100 and schema["seed"]["anyOf"][0]["minimum"] == 0
        assert c.get("/v1/jobs").json()["jobs"] == []
    # the Train tab calls Jobs.start with the number boxes' values: the same check, before anything starts
    jobs = Jobs(cfg, registry, switcher=None)
    for name, value in [("epochs", 1e9), ("folds", 1e9), ("folds", math.inf)]:
        with pytest.raises(TrainingDataError, match=f"{name} must be an integer with"):
            asyncio.run(jobs.start({"folds": None, "epochs": None, name: value}))
    assert jobs.list() == []
