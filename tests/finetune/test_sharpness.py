"""--calibration-share (finetune/sharpness.py): the final model, sharper than the fold models, is cooled on rows
it never saw: one factor on top of the folds' calibrator, cooling only, and carried into calibration.json."""

import json

import numpy as np
import pytest
from scipy.special import softmax

from finetune import sharpness
from finetune.calibration import fit_temperature, fit_vector, scores
from finetune.data import LabeledData
from finetune.kfold import main
from textdata.calibration import Calibrator, calibrator_from_json


def draw(n: int, classes: int, sharp: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows whose labels are drawn from softmax(z) (calibrated there), served as softmax(sharp * z)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 1.5, (n, classes))
    y = np.array([rng.choice(classes, p=p) for p in softmax(z, axis=1)])
    return softmax(sharp * z, axis=1), y


@pytest.mark.parametrize("cal", [Calibrator("none"), Calibrator("temperature", temperature=1.7),
                                 Calibrator("vector", weights=(0.8, 1.2, 1.0), bias=(0.1, -0.2, 0.0))])
def test_cooled_is_a_temperature_on_the_calibrators_output(cal):
    p, _ = draw(50, 3, 1.0, 0)
    tau = 2.5
    want = softmax(np.log(cal(p)) / tau, axis=1)
    np.testing.assert_allclose(sharpness.cooled(cal, tau)(p), want, atol=1e-9)
    np.testing.assert_array_equal(sharpness.cooled(cal, tau)(p).argmax(1), cal(p).argmax(1))  # answers never move
    assert sharpness.cooled(cal, 1.0) is cal


def test_tau_recovers_how_much_sharper_the_final_model_is():
    # the folds' calibrator fitted where scores were calibrated; the final model is twice as sharp on new rows
    p_folds, y_folds = draw(3000, 5, 1.0, 1)
    cal = fit_temperature(p_folds, y_folds)
    p_final, y_final = draw(400, 5, 2.0, 2)
    tau = sharpness.fit_tau(cal, p_final, y_final)
    assert 1.7 < tau < 2.4
    before, after = scores(cal(p_final), y_final), scores(sharpness.cooled(cal, tau)(p_final), y_final)
    assert after["ece"] < before["ece"] and after["log_loss"] < before["log_loss"]
    # vector scaling too (the weights scaled, not replaced)
    vec = fit_vector(p_folds, y_folds)
    assert 1.7 < sharpness.fit_tau(vec, p_final, y_final) < 2.4


def test_cooling_only_a_final_model_no_sharper_keeps_the_calibrator():
    p_folds, y_folds = draw(3000, 4, 1.0, 3)
    cal = fit_temperature(p_folds, y_folds)
    p_final, y_final = draw(400, 4, 0.6, 4)  # less sharp: tau < 1 would fit, and is never served
    assert sharpness.fit_tau(cal, p_final, y_final) == 1.0


def test_share_positions_hold_whole_groups_gold_rows_and_never_too_few():
    n = 600
    y = np.arange(n) % 2
    groups = np.array([f"g{i // 6}" for i in range(n)])
    data = LabeledData(table=None, keep=np.arange(n), texts=[f"t{i}" for i in range(n)], y=y, groups=groups,
                       labels=["a", "b"], dropped={})
    train, held = sharpness.share_positions(data, 0.1, 0)
    assert len(held) == pytest.approx(60, abs=12) and not set(train) & set(held)
    assert not set(groups[train]) & set(groups[held])  # whole groups
    assert set(np.bincount(y[held])) != {0}  # both classes held
    train, held = sharpness.share_positions(data, 0.0, 0)
    assert len(held) == 0 and len(train) == n
    small = LabeledData(table=None, keep=np.arange(100), texts=["t"] * 100, y=y[:100], groups=None,
                        labels=["a", "b"], dropped={})
    train, held = sharpness.share_positions(small, 0.1, 0)  # 10 rows: under MIN_ROWS, every row trains
    assert len(held) == 0 and len(train) == 100


def test_final_model_is_cooled_on_its_held_out_rows(tmp_path, tiny_electra_dir, toy_rows, monkeypatch, capsys):
    from serving.calibration import ServedCalibration
    from serving.engine import Classifier

    monkeypatch.setattr(sharpness, "MIN_ROWS", 10)  # a tiny run: 36 held-out rows fit tau here
    # a tiny random model's scores are flat on every row, so no factor would fit: the wiring is what is tested
    # here (fit_tau above), with the factor a sharper model would get
    fitted = []
    monkeypatch.setattr(sharpness, "fit_tau", lambda cal, p, y: fitted.append(len(y)) or 2.0)
    data = tmp_path / "notes.csv"
    rows = toy_rows(n_per_class=36, seed=2)
    rows.to_csv(data, index=False)
    out = tmp_path / "run"
    assert main(["--model", str(tiny_electra_dir), "--data", str(data), "--folds", "3", "--epochs", "2",
                 "--batch-size", "8", "--output", str(out), "--final", "--calibration-share", "0.3",
                 "--blend", "off"]) == 0
    report = json.loads((out / "report.json").read_text())
    share = report["calibration"]["share"]
    assert share["rows"] == pytest.approx(36, abs=6) and report["final_model"]["n_train"] == 108 - share["rows"]
    assert share["tau"] == 2.0 and fitted == [share["rows"]]
    spec = json.loads((out / "model" / "calibration.json").read_text())
    before = calibrator_from_json({**share["final_before"], "problem_type": "single_label"}, 3)
    want = sharpness.cooled(before, share["tau"])
    assert spec["method"] == want.method and report["calibration"]["final"]["method"] == want.method
    assert spec["cooled"] == {"tau": 2.0, "rows": share["rows"], "final_trained_on": 108 - share["rows"]}
    # the engine serves exactly the cooled calibrator on the model's own scores
    texts = rows["text"].tolist()[:20]
    served = Classifier.load(out / "model", provider="torch")
    raw = Classifier.load(out / "model", provider="torch")
    raw.calibration = ServedCalibration()
    np.testing.assert_allclose(served.predict_proba(texts), want(raw.predict_proba(texts)), atol=1e-5)
    assert not np.allclose(served.predict_proba(texts), before(raw.predict_proba(texts)), atol=1e-5)
    assert "calibration cooled by 2.00" in capsys.readouterr().out
