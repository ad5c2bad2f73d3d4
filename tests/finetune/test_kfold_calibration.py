"""k-fold end to end with calibration: the report's section and pictures, calibration.json in the final model
as the engine serves it, --target-precision on --resume, and the one-line errors."""

import json

import numpy as np
import pytest

from finetune.calibration import calibrate
from finetune.kfold import main

LABELS = ["dream", "error", "memo"]


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_electra_dir, toy_rows):
    folder = tmp_path_factory.mktemp("kfold-calibration")
    data = folder / "notes.csv"
    rows = toy_rows(n_per_class=12, seed=5)
    # every other label moved to the next class: no 20 rows can be answered at a precision near 1
    flip = np.arange(len(rows)) % 2 == 0
    rows.loc[flip, "label"] = rows.loc[flip, "label"].map(lambda v: LABELS[(LABELS.index(v) + 1) % 3])
    rows.to_csv(data, index=False)
    out = folder / "run"
    args = [
        "--model",
        str(tiny_electra_dir),
        "--data",
        str(data),
        "--folds",
        "3",
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--output",
        str(out),
    ]
    assert main([*args, "--final"]) == 0
    return out, args


def test_report_section_pictures_and_table(run, capsys):
    import pandas as pd

    out, _args = run
    report = json.loads((out / "report.json").read_text())
    cal = report["calibration"]
    assert cal["nested"] and len(cal["folds"]) == 3 and cal["method"] in ("temperature", "vector", "none")
    assert cal["fitted_on"] == ("blend" if report["blend"]["kept"] else "model")
    assert [r["target"] for r in cal["coverage"]] == [0.8, 0.9, 0.95, 0.98, 0.99]
    assert (out / "calibration.png").stat().st_size > 0 and (out / "coverage.png").stat().st_size > 0
    # recomputed from oof_predictions.csv: the same section
    oof = pd.read_csv(out / "oof_predictions.csv")
    prefix = "blend_prob_" if cal["fitted_on"] == "blend" else "prob_"
    probs = oof[[prefix + c for c in LABELS]].to_numpy()
    again, _, _ = calibrate(
        probs, oof["label"].map(LABELS.index).to_numpy(), oof["fold"].to_numpy(), cal["fitted_on"]
    )
    assert again["method"] == cal["method"]
    assert again["after"]["ece_mean"] == pytest.approx(cal["after"]["ece_mean"], abs=1e-4)
    assert again["before"]["log_loss_mean"] == pytest.approx(cal["before"]["log_loss_mean"], abs=1e-4)


def test_final_model_serves_the_calibration(run):
    from serving.engine import Classifier

    out, _ = run
    report = json.loads((out / "report.json").read_text())
    spec = json.loads((out / "model" / "calibration.json").read_text())
    assert spec["method"] == report["calibration"]["final"]["method"] and spec["labels"] == LABELS
    assert spec["threshold"] is None and spec["target_precision"] is None  # no --target-precision
    assert spec["nested"]["ece_after"] == report["calibration"]["after"]["ece_mean"]
    # issue 42: --final carries the out-of-domain detector, measured on the out-of-fold rows
    assert (out / "model" / "ood" / "index.safetensors").exists() and (out / "model" / "ood" / "ood.json").exists()
    assert 0 <= report["out_of_domain"]["out_of_fold_confident_lost"] <= 0.015
    assert report["out_of_domain"]["combine"] == "centroid*length"  # what the cut was chosen for (baseline/ood.py)
    from finetune.confidence import out_of_domain_lines

    assert "length rank" in out_of_domain_lines(report["out_of_domain"])[0]  # the printed line says what it weighs
    config = json.loads((out / "model" / "training_config.json").read_text())
    assert config["calibration"]["method"] == spec["method"]
    clf = Classifier.load(out / "model", provider="torch")
    info = clf.info()["calibration"]
    assert info["calibrated"] and "every answer counts as confident" in info["why"]
    # texts of the training rows' length (3-7 words): the out-of-domain gate's length score flags texts shorter
    # than every training row ("꿈에서 봤다", 2 words, was flagged here)
    assert all(p.confident for p in clf.predict(["꿈에서 봤다 오늘 일기", "오류 발생했다 내일 회의"]))
    np.testing.assert_allclose(clf.predict_proba(["꿈에서 봤다"]).sum(), 1, atol=1e-5)


def test_target_precision_on_resume_and_bad_targets(run, capsys, put_back):
    out, args = run
    put_back(out)  # resumed in place: the other tests read the run without --target-precision
    assert main([*args, "--resume", "--target-precision", "0.999999"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(
        "error: --target-precision 0.999999: no threshold reaches it on the 36 out-of-fold rows"
    )
    assert "best precision reached is" in err[-1] and "the best reachable with 90% confidence is" in err[-1]
    best = float(err[-1].split("the best reachable with 90% confidence is ")[1].split(",")[0])
    target = round(max(0.01, best - 0.01), 4)  # one these rows reach with the stated confidence, by the message
    assert main([*args, "--resume", "--target-precision", str(target)]) == 0
    served = json.loads((out / "report.json").read_text())["calibration"]["served"]
    assert served["target_precision"] == target and served["scope"] in ("global", "per_class")
    # --confidence: the same rows state a lower target at 97.5% (a higher threshold, never a lower one), and say so
    assert main([*args, "--resume", "--target-precision", "0.3", "--confidence", "0.975"]) == 0
    report = json.loads((out / "report.json").read_text())
    high = report["calibration"]["served"]
    assert report["config"]["confidence"] == 0.975 and high["confidence"] == 0.975
    assert "with 97.5% confidence" in high["statement"]
    assert main([*args, "--resume", "--target-precision", "0.3"]) == 0
    low = json.loads((out / "report.json").read_text())["calibration"]["served"]
    assert "with 90% confidence" in low["statement"] and low["confidence"] == 0.9
    if high["scope"] == low["scope"] == "global":
        assert high["threshold"] >= low["threshold"]
    with pytest.raises(SystemExit) as e:
        main([*args, "--resume", "--confidence", "1"])
    assert e.value.code == 2 and "--confidence 1: must be a probability in [0.5, 1)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main([*args, "--resume", "--target-precision", "1.5"])
    assert (
        e.value.code == 2
        and "--target-precision 1.5: must be a precision in (0, 1)" in capsys.readouterr().err
    )


def test_grouped_run_states_the_bound_over_unseen_groups(tmp_path, tiny_electra_dir, toy_rows):
    """--group-column: the served threshold's bound counts a page's texts as correlated (finetune/group_bound.py),
    and report.json, calibration.json and the printed line say so."""
    data = tmp_path / "notes.csv"
    toy_rows(n_per_class=12, seed=6).to_csv(data, index=False)
    out = tmp_path / "run"
    assert main(["--model", str(tiny_electra_dir), "--data", str(data), "--folds", "3", "--epochs", "1",
                 "--batch-size", "8", "--group-column", "page", "--target-precision", "0.1", "--output", str(out),
                 "--final"]) == 0
    served = json.loads((out / "report.json").read_text())["calibration"]["served"]
    grouped = served["grouped"]
    assert grouped["column"] == "page" and grouped["groups"] == 15 and 0 <= grouped["icc"] <= 1
    assert "design effect" in served["rule"] and "over groups of 'page'" in served["rule"]
    assert "with 90% confidence on one batch of unseen 'page' groups" in served["statement"]
    assert grouped["bound"] == "prediction (batch 1x)"
    spec = json.loads((out / "model" / "calibration.json").read_text())
    assert spec["statement"] == served["statement"] and "design effect" in spec["nested"]["threshold_rule"]
    # --prior-correction's k-fold check (finetune/prior_check.py): 36 rows are too few, so the server never turns it on
    check = json.loads((out / "report.json").read_text())["calibration"]["prior_correction"]
    assert check["wins"] is False and "needs 200" in check["why"]
    assert spec["prior_correction"] == {"wins": False, "why": check["why"]}
