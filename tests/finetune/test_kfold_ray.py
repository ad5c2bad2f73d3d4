"""`kfold.py --engine ray`: the same folds, numbers and files as local; a killed fold worker is retried.

One small local Ray session (2 CPUs) serves the module; `fold_runner.ray_session` reuses a running one.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from finetune import fold_runner, kfold

ARGS = ["--folds", "3", "--epochs", "2", "--batch-size", "8", "--group-column", "page"]


@pytest.fixture(scope="module")
def ray_session(raylet_errors_logged):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 2**20)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory, toy_rows):
    path = tmp_path_factory.mktemp("ray-data") / "notes.csv"
    toy_rows(n_per_class=12).to_csv(path, index=False)
    return path


def _kfold(model, data, out, *extra):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    assert kfold.main(["--model", str(model), "--data", str(data), "--output", str(out), *ARGS, *extra]) == 0
    return json.loads((out / "report.json").read_text())


def test_ray_folds_give_the_local_report_byte_for_byte_with_a_fold_worker_killed(ray_session, tiny_electra_dir,
                                                                                 toy_data, tmp_path, monkeypatch):
    # One Ray run holds both: the same report as local, and a killed fold worker retried with every fold reported once
    # (a retried fold gives the same numbers).
    marker = tmp_path / "killed-once"

    class KilledOnce(kfold.FoldJob):  # a local class: Ray ships it by value to the workers
        def __call__(self, prep, accelerator):
            if self.k == 1 and not marker.exists():
                marker.write_text(str(os.getpid()))
                os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would, mid-fold
            return super().__call__(prep, accelerator)

    local = _kfold(tiny_electra_dir, toy_data, tmp_path / "local")
    monkeypatch.setattr(kfold, "FoldJob", KilledOnce)
    out = tmp_path / "ray"
    ray = _kfold(tiny_electra_dir, toy_data, out, "--engine", "ray", "--cpus-per-fold", "1")
    assert marker.exists()  # a worker really died
    assert [f["fold"] for f in ray["folds"]] == [0, 1, 2]
    assert sorted(p.name for p in (out / "folds").glob("fold_*.json")) == ["fold_0.json", "fold_1.json", "fold_2.json"]
    assert [f["macro_f1"] for f in ray["folds"]] == [f["macro_f1"] for f in local["folds"]]
    assert [f["confusion_matrix"] for f in ray["folds"]] == [f["confusion_matrix"] for f in local["folds"]]
    assert ray["blend"]["folds"] == local["blend"]["folds"]
    for name in ("oof_predictions.csv", "fold_ids.json"):  # the same split, saved before any fold started
        assert (out / name).read_bytes() == (tmp_path / "local" / name).read_bytes()
    assert ray["config"]["engine"] == "ray"

    # --resume keeps the finished folds: none is trained again (the files are not rewritten).
    (out / "folds" / "fold_2.json").unlink()
    kept = {p.name: p.stat().st_mtime_ns for p in (out / "folds").glob("fold_[01].*")}
    again = _kfold(tiny_electra_dir, toy_data, out, "--engine", "ray", "--resume")
    assert {p.name: p.stat().st_mtime_ns for p in (out / "folds").glob("fold_[01].*")} == kept
    assert [f["macro_f1"] for f in again["folds"]] == [f["macro_f1"] for f in local["folds"]]


def test_a_fold_that_kills_every_worker_stops_with_one_line(ray_session, tiny_electra_dir, toy_data, tmp_path,
                                                            monkeypatch, capsys):
    kills = tmp_path / "kills"
    kills.mkdir()

    class AlwaysKilled(kfold.FoldJob):
        def __call__(self, prep, accelerator):
            if self.k == 0:
                (kills / str(os.getpid())).touch()
                os.kill(os.getpid(), signal.SIGKILL)
            return super().__call__(prep, accelerator)

    monkeypatch.setattr(kfold, "FoldJob", AlwaysKilled)
    code = kfold.main(["--model", str(tiny_electra_dir), "--data", str(toy_data), "--output", str(tmp_path / "run"),
                       *ARGS, "--engine", "ray"])
    err = capsys.readouterr().err
    assert code == 2 and "fold 0: its worker died 3 times" in err and "--resume" in err and "Traceback" not in err
    assert len(list(kills.iterdir())) == fold_runner.FOLD_RETRIES + 1  # tried, retried, then given up


def test_without_ray_a_one_line_install_hint(tiny_electra_dir, toy_data, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(__import__("sys").modules, "ray", None)  # as if not installed
    code = kfold.main(["--model", str(tiny_electra_dir), "--data", str(toy_data), "--output", str(tmp_path / "r"),
                       *ARGS, "--engine", "ray"])
    assert code == 2 and "pip install -e '.[ray]'" in capsys.readouterr().err


def test_saved_fold_ids_that_no_longer_fit_the_data_are_refused(tiny_electra_dir, toy_data, tmp_path, toy_rows):
    from finetune.data import fixed_folds, load_labeled

    data = load_labeled(toy_data, group_column="page", folds=3)
    first = fixed_folds(tmp_path, data, 3, 42, reuse=False)
    again = fixed_folds(tmp_path, data, 3, 7, reuse=True)  # read back, not made again with the new seed
    assert all((a[1] == b[1]).all() and (a[0] == b[0]).all() for a, b in zip(first, again))
    fewer = tmp_path / "fewer.csv"
    toy_rows(n_per_class=12).iloc[:-3].to_csv(fewer, index=False)
    with pytest.raises(kfold.DataError, match="the data changed"):
        fixed_folds(tmp_path, load_labeled(fewer, group_column="page", folds=3), 3, 42, reuse=True)


def test_search_runs_trials_in_parallel_on_ray(ray_session, tiny_electra_dir, toy_data, tmp_path, monkeypatch):
    import optuna

    from finetune import search

    class ScoreFromLr(kfold.FoldJob):  # no training: the search's scheduling is what is tested here
        def __call__(self, prep, accelerator):
            import time

            calls = tmp_path / "calls"
            calls.mkdir(exist_ok=True)
            (calls / f"{self.trial}-{self.k}-start").touch()
            if self.k == 0 and self.trial in (0, 1):
                # A barrier, not a clock: the first folds of trials 0 and 1 each wait for the other to start. Run
                # one trial after another, the first would wait out the deadline; a second Ray worker that starts
                # slowly on a loaded machine only delays the meeting.
                other = calls / f"{1 - self.trial}-0-start"
                deadline = time.monotonic() + 120
                while not other.exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
                (calls / f"{self.trial}-0-met" if other.exists() else calls / f"{self.trial}-0-alone").touch()
            return {"macro_f1": self.cfg.train.lr * 100}, None, None

    monkeypatch.setattr(search, "FoldJob", ScoreFromLr)
    monkeypatch.setattr(search, "finish", lambda *a, **k: None)
    out = tmp_path / "s"
    assert search.main(["--model", str(tiny_electra_dir), "--data", str(toy_data), "--output", str(out), *ARGS,
                        "--engine", "ray", "--trials", "4", "--no-prune"]) == 0
    trials = optuna.load_study(study_name=search.STUDY, storage=f"sqlite:///{out / 'study.db'}").get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE"] * 4
    assert [t.value for t in trials] == pytest.approx([t.params["lr"] * 100 for t in trials])
    calls = sorted(p.name.split("-") for p in (tmp_path / "calls").iterdir())
    assert sorted((int(n), int(k)) for n, k, what in calls if what == "start") == \
        [(n, k) for n in range(4) for k in range(3)]
    # Two fold tasks at once (2 CPUs): the first folds of trials 0 and 1 ran at the same time.
    assert sorted(f"{n}-{what}" for n, k, what in calls if what in ("met", "alone")) == ["0-met", "1-met"]
