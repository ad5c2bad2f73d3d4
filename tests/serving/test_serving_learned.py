"""A model that learned nothing says so (issue 31, textdata/learned.py): k-fold's finding on out-of-fold rows,
recorded with the final model, repeated by serving.export's report and the engine's info() (so /v1/model)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from baseline.blend import Blend, fit_baseline, save_baseline
from textdata.learned import ADDS_NOTHING, AT_CHANCE, assess, chance_macro_f1, macro_f1

LABELS = ["dream", "error", "memo"]  # the fixture's id2label order


def test_macro_f1_is_scikit_learns():
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(0)
    y, pred = rng.integers(0, 4, 300), rng.integers(0, 3, 300)
    assert macro_f1(y, pred, 4) == pytest.approx(f1_score(y, pred, average="macro", zero_division=0))


def test_chance_level_and_no_weight_are_told_apart():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 5, 400)
    onehot = np.eye(5)[y]
    learned = onehot * 0.6 + 0.08  # right on every row
    found = assess(y, learned, None, 5)
    assert not found["at_chance"] and found["message"] is None and found["macro_f1"] == 1.0
    guessed = np.eye(5)[rng.integers(0, 5, 400)]  # predictions unrelated to the labels
    found = assess(y, guessed, None, 5)
    assert found["at_chance"] and found["macro_f1"] <= found["chance_macro_f1_p95"] < 0.3
    assert found["message"].startswith(AT_CHANCE) and "with the labels shuffled its answers score up to" in found["message"]
    one_class = np.tile(np.eye(5)[0], (400, 1))  # the 1-epoch model of the README's first try
    blend = {"kept": True, "model_weight": 0.0, "baseline_weight": 2.3}
    assert assess(y, one_class, blend, 5)["message"].startswith(ADDS_NOTHING)
    weightless = {"kept": True, "model_weight": 0.004, "baseline_weight": 1.0}  # a good model the blend ignores
    found = assess(y, learned, weightless, 5)
    assert found["adds_nothing"] and found["message"] == f"{ADDS_NOTHING} (the blend gives the model 0.40% of the " \
                                                         "baseline's weight)"
    assert assess(y, learned, {"kept": True, "model_weight": 0.5, "baseline_weight": 1.0}, 5)["message"] is None
    assert chance_macro_f1(y, one_class.argmax(1), 5) == macro_f1(y, one_class.argmax(1), 5)


@pytest.fixture(scope="module")
def learned_nothing(trained_classifier_dir, tmp_path_factory, toy_rows):
    """A --final folder as the README's first try leaves it: a blend that gives the model weight 0, and k-fold's
    finding that its out-of-fold answers were at chance level."""
    folder = tmp_path_factory.mktemp("learned-nothing")
    shutil.copytree(trained_classifier_dir, folder, dirs_exist_ok=True)
    rows = toy_rows(n_per_class=12, seed=5)
    y = rows["label"].map(LABELS.index).to_numpy()
    save_baseline(fit_baseline(rows["text"].tolist(), y, 0), folder, 3, Blend(0.0, 1.8), {"method": "test"})
    blend = {"kept": True, "model_weight": 0.0, "baseline_weight": 1.8}
    found = assess(y, np.tile([0.4, 0.3, 0.3], (len(y), 1)), blend, 3)
    (folder / "training_config.json").write_text(json.dumps({"config": {}, "blend": blend, "learned": found}))
    return folder


def test_engine_and_model_route_say_the_answers_are_the_baselines(learned_nothing, tmp_path):
    from starlette.testclient import TestClient

    from app.config import Config
    from app.server import create_app
    from serving.engine import Classifier

    clf = Classifier.load(learned_nothing, provider="torch")
    (warning,) = clf.info()["warnings"]
    assert warning.startswith(ADDS_NOTHING) and "with the labels shuffled its answers score up to" in warning
    alone = Classifier.load(learned_nothing, provider="torch", blend=False)  # the model's own answers
    assert alone.info()["warnings"][0].startswith(AT_CHANCE)
    with TestClient(create_app(Config(ui=False, data_dir=tmp_path), clf), base_url="http://127.0.0.1") as client:
        assert client.get("/v1/model").json()["warnings"] == [warning]


def test_export_reports_it_and_the_onnx_folder_says_it_too(learned_nothing, tmp_path, capsys):
    from serving import export
    from serving.engine import Classifier

    out = tmp_path / "onnx"
    assert export.main(["--model", str(learned_nothing), "--output", str(out), "--sample-size", "40"]) == 0
    assert f"warning: {ADDS_NOTHING}" in capsys.readouterr().out
    report = json.loads((out / "export_report.json").read_text())
    assert report["warnings"][0].startswith(ADDS_NOTHING)
    assert Classifier.load(out).info()["warnings"][0].startswith(ADDS_NOTHING)


def test_a_model_that_learned_keeps_quiet(trained_classifier_dir):
    from serving.engine import Classifier

    assert Classifier.load(trained_classifier_dir, provider="torch").info()["warnings"] == []


def test_a_multi_label_blend_is_not_misread(tmp_path):
    from textdata.learned import folder_note

    # per-label weights (a multi-label blend): no single share to judge, and never a crash at load
    (tmp_path / "training_config.json").write_text(json.dumps(
        {"blend": {"model_weight": [0.0, 0.5], "baseline_weight": [1.0, 1.0]}}))
    assert folder_note(tmp_path, blended=True) is None
    (tmp_path / "training_config.json").write_text(json.dumps({"blend": {"model_weight": 0.0, "baseline_weight": 2.0}}))
    assert folder_note(tmp_path, blended=True).startswith(ADDS_NOTHING)
    assert folder_note(tmp_path, blended=False) is None



def test_multi_label_runs_are_assessed_too():
    """debtags with MiniLM after 1 epoch: nested macro-F1 0.05 and a blend that ignores the model; said the same
    way as for single-label runs, and read back from the folder's record."""
    from sklearn.metrics import f1_score

    from textdata.learned import assess_multi, multi_label_macro_f1

    rng = np.random.default_rng(3)
    Y = (rng.random((500, 6)) < 0.25).astype(int)
    assert multi_label_macro_f1(Y, Y) == 1.0
    noisy = np.where(rng.random(Y.shape) < 0.2, 1 - Y, Y)
    assert multi_label_macro_f1(Y, noisy) == pytest.approx(f1_score(Y, noisy, average="macro", zero_division=0))
    found = assess_multi(Y, noisy, None)
    assert not found["at_chance"] and found["message"] is None
    unrelated = (rng.random(Y.shape) < 0.25).astype(int)
    found = assess_multi(Y, unrelated, None)
    assert found["at_chance"] and found["message"].startswith(AT_CHANCE)
    ignored = {"kept": True, "model_weight": [0.0, 0.001, 0.0, 0.0, 0.002, 0.0], "baseline_weight": [1.0] * 6}
    found = assess_multi(Y, noisy, ignored)
    assert found["adds_nothing"] and found["message"].startswith(ADDS_NOTHING)
    used_once = dict(ignored, model_weight=[0.0, 0.3, 0.0, 0.0, 0.0, 0.0])  # the model counts for one label
    assert assess_multi(Y, noisy, used_once)["message"] is None
    assert assess_multi(Y, unrelated, used_once)["message"].startswith(ADDS_NOTHING)  # at chance, blended


def test_a_multi_label_run_records_its_finding(tmp_path):
    from textdata.learned import assess_multi, folder_note

    rng = np.random.default_rng(4)
    Y = (rng.random((300, 4)) < 0.3).astype(int)
    blend = {"kept": True, "model_weight": [0.0] * 4, "baseline_weight": [1.0] * 4}
    found = assess_multi(Y, (rng.random(Y.shape) < 0.3).astype(int), blend)
    (tmp_path / "training_config.json").write_text(json.dumps({"blend": blend, "learned": found}))
    assert folder_note(tmp_path, blended=True).startswith(ADDS_NOTHING)
    assert folder_note(tmp_path, blended=False).startswith(AT_CHANCE)


def test_multi_label_score_and_export_say_it_once(multilabel_classifier_dir, multilabel_rows, tmp_path, caplog,
                                                  capsys):
    """Issue 45 (15): `python -m serving.score` on a multi-label model printed "the model adds nothing" twice; the
    command a user runs says it once, and export once per model it loads (then in its summary)."""
    import os
    import subprocess
    import sys

    from textdata.learned import assess_multi

    folder = tmp_path / "ml"
    shutil.copytree(multilabel_classifier_dir, folder)
    rng = np.random.default_rng(4)
    Y = (rng.random((300, 3)) < 0.3).astype(int)
    found = assess_multi(Y, (rng.random(Y.shape) < 0.3).astype(int), None)
    (folder / "training_config.json").write_text(json.dumps({"config": {}, "learned": found}))
    data = tmp_path / "in.csv"
    multilabel_rows(30).to_csv(data, index=False)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    said = subprocess.run([sys.executable, "-m", "serving.score", "--model", str(folder), "--input", str(data),
                           "--output", str(tmp_path / "out.csv")], capture_output=True, text=True, env=env, check=True)
    assert (said.stdout + said.stderr).count(AT_CHANCE) == 1, said.stderr
    from serving import export

    caplog.clear()
    assert export.main(["--model", str(folder), "--output", str(tmp_path / "onnx"), "--sample-size", "40"]) == 0
    logged = [m for m in caplog.messages if AT_CHANCE in m]
    assert len(logged) == 1, logged  # the reference, the ONNX file and each INT8 try each logged it
    assert capsys.readouterr().out.count(AT_CHANCE) == 1  # and the summary's warning line
