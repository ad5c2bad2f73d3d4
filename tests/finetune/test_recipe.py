"""An encoder's fine-tuning recipe (textdata/model_files.py RECIPE; e5-small's in pretraining/e5.py): k-fold takes
its settings where no flag sets them, a flag given wins, a bad recipe is refused naming its file."""

import json
import shutil

import pytest

from finetune.config import parse_args
from finetune.train_config import TrainConfig
from pretraining import e5
from textdata.model_files import RECIPE


@pytest.fixture
def encoder(tmp_path, tiny_electra_dir):
    folder = tmp_path / "encoder"
    shutil.copytree(tiny_electra_dir, folder)
    (folder / RECIPE).write_text(json.dumps(e5.FINETUNE_RECIPE))
    return folder


def test_the_recipe_fills_the_settings_no_flag_sets(encoder, tmp_path, capsys):
    cfg = parse_args(["--model", str(encoder), "--data", "bbcnews", "--output", str(tmp_path / "run")])
    recipe = e5.FINETUNE_RECIPE
    assert (cfg.train.lr, cfg.train.layer_decay, cfg.train.batch_size) == (recipe["lr"], recipe["layer_decay"],
                                                                            recipe["batch_size"])
    assert (cfg.max_length, cfg.train.class_weights, cfg.train.epochs) == (recipe["max_length"], True, recipe["epochs"])
    assert (cfg.train.lr, cfg.max_length) != (TrainConfig().lr, 128)  # the recipe is not k-fold's defaults
    said = capsys.readouterr().err
    assert f"its recipe ({RECIPE}) sets" in said and "--lr 0.0002" in said and "--class-weights" in said


def test_a_flag_given_wins_even_at_the_default_value(encoder, tmp_path, capsys):
    cfg = parse_args(["--model", str(encoder), "--data", "bbcnews", "--lr", "1e-4", "--max-length=128",
                      "--no-class-weights", "--output", str(tmp_path / "run")])
    assert (cfg.train.lr, cfg.max_length, cfg.train.class_weights) == (1e-4, 128, False)
    assert cfg.train.batch_size == e5.FINETUNE_RECIPE["batch_size"]  # the settings not named still come from it
    assert "--lr" not in capsys.readouterr().err


def test_no_recipe_keeps_the_defaults(tiny_electra_dir, tmp_path, capsys):
    cfg = parse_args(["--model", str(tiny_electra_dir), "--data", "bbcnews", "--output", str(tmp_path / "run")])
    assert cfg.train == TrainConfig() and cfg.max_length == 128
    assert "recipe" not in capsys.readouterr().err


@pytest.mark.parametrize("recipe, says", [({"lr": 2e-4, "learning_rate": 1}, "learning_rate"),
                                          ({"class_weights": "yes"}, "class_weights = 'yes' is not a bool"),
                                          ("[1, 2", "not a readable JSON object")])
def test_a_bad_recipe_is_refused_naming_its_file(encoder, tmp_path, capsys, recipe, says):
    (encoder / RECIPE).write_text(recipe if isinstance(recipe, str) else json.dumps(recipe))
    with pytest.raises(SystemExit):
        parse_args(["--model", str(encoder), "--data", "bbcnews", "--output", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert str(encoder / RECIPE) in err and says in err


def test_the_command_line_of_a_run_reproduces_it_without_depending_on_the_recipe(encoder, tmp_path):
    import shlex

    from finetune.config import command_line

    cfg = parse_args(["--model", str(encoder), "--data", "bbcnews", "--no-class-weights", "--batch-size", "32",
                      "--output", str(tmp_path / "run")])
    line = command_line(cfg)
    assert "--no-class-weights" in line and "--batch-size 32" in line  # at k-fold's defaults, but not the recipe's
    again = parse_args(shlex.split(line)[2:])
    assert again == cfg


def test_the_apps_retrain_config_takes_the_recipe_for_what_it_leaves_out(encoder, tmp_path):
    """app/versions/train_child.py builds its k-fold config from a dict (finetune.config.config_from_json)."""
    from finetune.config import config_from_json

    cfg = config_from_json({"model": str(encoder), "data": "d.csv", "output": str(tmp_path), "max_length": 128,
                            "train": {"lr": 1e-4}})
    assert (cfg.train.lr, cfg.max_length) == (1e-4, 128)  # given, at k-fold's defaults: kept
    assert (cfg.train.batch_size, cfg.train.class_weights) == (e5.FINETUNE_RECIPE["batch_size"], True)
