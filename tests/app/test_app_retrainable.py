"""One list of what a retrain may set (app/versions/train_params.py RETRAINABLE) drives POST /v1/train's fields, the
Train tab, inheritance from the active version and the k-fold config the training child builds."""

from __future__ import annotations

import dataclasses

from app.ui.train import TAB_PARAMS
from app.versions.admin import TrainRequest
from app.versions.train_params import RETRAINABLE, inherited, kfold_config
from finetune.config import Config, config_from_json, config_json, parse_args

# A value away from k-fold's default for every retrainable setting.
GIVEN = {"folds": 3, "epochs": 7, "lr": 0.002, "batch_size": 16, "max_length": 64, "seed": 9, "class_weights": True,
         "normalize": "kc", "target_precision": 0.9}
FLAGS = ["--folds", "3", "--epochs", "7", "--lr", "0.002", "--batch-size", "16", "--max-length", "64", "--seed", "9",
         "--class-weights", "--normalize", "kc", "--target-precision", "0.9"]


def test_every_retrainable_setting_is_given_and_away_from_its_default():
    assert set(GIVEN) == {p.name for p in RETRAINABLE}
    default = config_json(Config(model="m", data="d.csv", output="o"))
    assert all(inherited(default)[name] != value for name, value in GIVEN.items())


def test_child_config_is_what_the_kfold_flags_give():
    """The child builds the Config the command line `finetune/kfold.py ... --final` with the same settings builds."""
    spec = kfold_config(GIVEN, model="m", data="d.csv", output="o", final=True)
    from_spec = config_from_json(spec)
    from_flags = parse_args(["--model", "m", "--data", "d.csv", "--output", "o", "--final", *FLAGS])
    assert from_spec == from_flags
    assert config_from_json(kfold_config({}, model="m", data="d.csv", output="o", final=True)) == \
        parse_args(["--model", "m", "--data", "d.csv", "--output", "o", "--final"])


def test_a_retrain_inherits_each_setting_from_the_recorded_config():
    recorded = config_json(parse_args(["--model", "m", "--data", "d.csv", "--output", "o", *FLAGS]))
    got = inherited(recorded)
    assert got == GIVEN
    # the order job.json's params have always had: top-level settings, then train.* in Config order
    assert list(got) == ["folds", "max_length", "seed", "normalize", "target_precision", "epochs", "batch_size", "lr",
                         "class_weights"]


def test_api_fields_and_train_tab_come_from_the_list():
    assert list(TrainRequest.model_fields) == [p.name for p in RETRAINABLE if p.api]
    assert "normalize" not in TrainRequest.model_fields  # inherited only: the served model's normalisation
    assert [p.name for p in TAB_PARAMS] == ["folds", "epochs"]
    paths = {f"train.{f.name}" for f in dataclasses.fields(Config.__dataclass_fields__["train"].default_factory())}
    paths |= {f.name for f in dataclasses.fields(Config)}
    assert {p.path for p in RETRAINABLE} <= paths
