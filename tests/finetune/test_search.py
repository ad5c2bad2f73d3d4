"""finetune/search.py: trials on the same saved folds, pruning on the running fold mean, resume after a kill,
clear errors on a bad search space, and the best recipe as a k-fold run.

The pruning and kill tests replace a fold's training by a score made from its learning rate (the search's own
bookkeeping is what they test, in milliseconds); the end-to-end test trains real tiny models.
"""

from __future__ import annotations

import json
import os

import optuna
import pandas as pd
import pytest

from finetune import kfold, search
from finetune.search_space import load_space
from textdata.errors import UserError

ARGS = ["--folds", "3", "--group-column", "page", "--batch-size", "8", "--epochs", "1"]


@pytest.fixture
def toy_data(tmp_path, toy_rows):
    path = tmp_path / "notes.csv"
    toy_rows(n_per_class=12).to_csv(path, index=False)
    return path


def _args(model, data, out, *extra):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return ["--model", str(model), "--data", str(data), "--output", str(out), *ARGS, *extra]


class Calls(list):
    """The folds a fake run trained: (trial, fold, lr)."""


def fake_folds(monkeypatch, calls: Calls, die_at: int | None = None):
    """Folds score lr*100 (higher lr, better trial) without training; the `die_at`-th fold kills the process."""

    class Killed(BaseException):  # what SIGKILL leaves: nothing is cleaned up, the study keeps a running trial
        pass

    class ScoreFromLr(kfold.FoldJob):
        def __call__(self, prep, accelerator):
            if die_at is not None and len(calls) == die_at:
                raise Killed
            calls.append((self.trial, self.k, self.cfg.train.lr))
            return {"macro_f1": self.cfg.train.lr * 100}, None, None

    monkeypatch.setattr(search, "FoldJob", ScoreFromLr)
    monkeypatch.setattr(search, "finish", lambda *a, **k: None)  # no best/ run from fake folds
    return Killed


def _study(out):
    return optuna.load_study(study_name=search.STUDY, storage=f"sqlite:///{out / 'study.db'}")


def test_pruning_stops_a_bad_trial_after_its_first_fold(tiny_electra_dir, toy_data, tmp_path, monkeypatch):
    calls = Calls()
    fake_folds(monkeypatch, calls)
    out = tmp_path / "s"
    # lr is searched on [1e-6, 1e-2]: the first trial (the flags' 1e-3) scores 0.1, random ones mostly below
    space = '{"lr": {"low": 1e-6, "high": 1e-2, "log": true}, "epochs": null, "batch_size": null, "warmup": null, ' \
            '"layer_decay": null, "class_weights": null}'
    assert search.main(_args(tiny_electra_dir, toy_data, out, "--lr", "1e-3", "--trials", "6", "--space", space,
                             "--prune-after", "1", "--random-trials", "6")) == 0
    trials = _study(out).get_trials()
    assert len(trials) == 6 and trials[0].params == {"lr": 1e-3}
    pruned = [t for t in trials if t.state == optuna.trial.TrialState.PRUNED]
    assert pruned, [(t.params, t.state) for t in trials]
    for t in pruned:  # stopped after one fold, below the median of the earlier trials' first folds
        assert [k for n, k, _ in calls if n == t.number] == [0]
        assert t.params["lr"] < 1e-3
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert all(len([c for c in calls if c[0] == t.number]) == 3 for t in complete)


def test_search_resumes_after_a_kill_without_rerunning_finished_trials(tiny_electra_dir, toy_data, tmp_path,
                                                                       monkeypatch, capsys):
    calls = Calls()
    killed = fake_folds(monkeypatch, calls, die_at=7)  # trials 0, 1 finish (6 folds); trial 2 dies in its 2nd fold
    out = tmp_path / "s"
    args = _args(tiny_electra_dir, toy_data, out, "--trials", "4", "--no-prune")
    with pytest.raises(killed):
        search.main(args)
    before = {t.number: t.params for t in _study(out).get_trials()}
    assert len(calls) == 7 and len(before) == 3

    assert search.main(args) == 2  # the folder holds a search: continuing it must be asked for
    assert "--resume" in capsys.readouterr().err
    calls.clear()
    fake_folds(monkeypatch, calls)
    assert search.main([*args, "--resume"]) == 0
    trials = _study(out).get_trials()
    assert "trial 2 was cut off by a kill" in capsys.readouterr().err
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE", "FAIL", "COMPLETE", "COMPLETE"]
    assert trials[2].user_attrs["interrupted"] and trials[3].params == before[2]  # rerun with its parameters
    assert {n for n, _, _ in calls} == {3, 4}  # trials 0 and 1 were not run again
    changed = search.main([*args, "--resume", "--seed", "7"])
    assert changed == 2 and "different ['seed']" in capsys.readouterr().err


@pytest.mark.parametrize(("space", "message"), [
    ('{"learning_rate": {"low": 1e-5, "high": 1e-3}}', "unknown parameters ['learning_rate']; tunable: ["),
    ('{"lr": {"low": 1e-3, "high": 1e-5}}', "lr: low 0.001 is greater than high 1e-05"),
    ('{"epochs": {"low": 2.5, "high": 4}}', "epochs needs int values, not 2.5"),
    ('{"batch_size": {"choices": []}}', "batch_size: choices must be a non-empty list"),
    ('{"class_weights": {"low": 0, "high": 1}}', "class_weights is true/false: give choices"),
    ('{"lr": {"low": 0, "high": 1e-3, "log": true}}', "lr 0 is outside"),
    ('{"lr": {"min": 1e-5}}', "lr: unknown keys ['min']"),
    ('{"lr": [1e-4, 1e-3]}', "lr needs float values, not [0.0001, 0.001]"),
    ('{"lr": {"low": 1e-5, "high": 1e-3}', "not valid JSON"),
    ("missing.json", "missing.json: no such file"),
])
def test_bad_search_space_is_a_clear_error(space, message):
    with pytest.raises(UserError) as e:
        load_space(space)
    assert message in str(e.value)


def test_bad_space_file_stops_the_cli_with_one_line(tiny_electra_dir, toy_data, tmp_path, capsys):
    bad = tmp_path / "space.json"
    bad.write_text('{"lr": {"low": "1e-5", "high": 1e-3}}')
    assert search.main(_args(tiny_electra_dir, toy_data, tmp_path / "s", "--space", str(bad))) == 2
    err = capsys.readouterr().err
    assert f"--space {bad}: lr needs float values" in err and "Traceback" not in err


def test_space_overrides_fix_remove_and_narrow():
    space = load_space('{"lr": {"low": 1e-4, "high": 1e-3, "log": true}, "warmup": 0.05, "layer_decay": null}')
    assert space.fixed == {"warmup": 0.05} and "layer_decay" not in space.searched and "warmup" not in space.searched
    assert (space.searched["lr"].low, space.searched["lr"].high, space.searched["lr"].log) == (1e-4, 1e-3, True)
    assert set(space.searched) == {"lr", "epochs", "batch_size", "class_weights"}


def test_real_search_end_to_end_with_holdout_final_and_resume(tiny_electra_dir, toy_data, tmp_path, capsys):
    out = tmp_path / "s"
    space = '{"epochs": {"low": 1, "high": 2}, "batch_size": {"choices": [8, 16]}}'
    args = _args(tiny_electra_dir, toy_data, out, "--space", space, "--holdout", "0.2")
    assert search.main([*args, "--trials", "1"]) == 0
    first = {p: p.stat().st_mtime_ns for p in (out / "trials").glob("*/folds/fold_*.json")}
    assert len(first) == 3
    assert search.main([*args, "--trials", "2", "--resume", "--final"]) == 0
    assert {p: p.stat().st_mtime_ns for p in first} == first  # trial 0's folds were not trained again
    report = json.loads((out / "search_report.json").read_text())
    assert [t["state"] for t in report["trials"]] == ["complete", "complete"]
    assert report["trials"][0]["recipe"] == "the given flags" and report["trials"][0]["params"]["lr"] == 1e-4

    # Every trial trained and scored on the same saved folds, and no trial saw a held-out row.
    ids = (out / "fold_ids.json").read_text()
    assert all((out / "trials" / t).joinpath("fold_ids.json").read_text() == ids for t in os.listdir(out / "trials"))
    held = pd.read_csv(out / "holdout.csv")
    rows = {r for fold in json.loads(ids)["val_rows"] for r in fold}
    table = pd.read_csv(toy_data)
    assert rows.isdisjoint(table.index[table["page"].isin(held["page"])]) and len(rows) + len(held) == len(table)

    best = report["best"]
    assert best["macro_f1_mean"] == max(t["macro_f1"] for t in report["trials"])
    assert best["command"].startswith("python finetune/kfold.py --model ") and "--final" in best["command"]
    assert (out / "best_command.txt").read_text().strip() == best["command"]
    assert "macro_f1" in best["holdout"] and (out / "best" / "model" / "model.safetensors").exists()
    best_report = json.loads((out / "best" / "report.json").read_text())
    assert best_report["macro_f1_mean"] == pytest.approx(best["macro_f1_mean"])
    for png in ("search_trials.png", "best/fold_scores.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    assert len(pd.read_csv(out / "trials.csv")) == 2
    assert "trial     state  macro-F1" in capsys.readouterr().out


def test_best_command_line_gives_back_the_same_config():
    import shlex

    from finetune.kfold import command_line, parse_args

    cfg = parse_args(["--model", "runs/my model", "--data", "d.csv", "--output", "o", "--group-column", "page",
                      "--class-weights", "--lr", "0.0012345678901", "--blend", "off", "--adapt-steps", "5",
                      "--adapt-corpus", "a.txt", "b.txt", "--dropout", "0.2", "--final"])
    words = shlex.split(command_line(cfg))
    assert words[:2] == ["python", "finetune/kfold.py"] and parse_args(words[2:]) == cfg
