"""Hyperparameter search over k-fold: Optuna's TPE proposes recipes, each scored by its mean macro-F1 over the
same saved folds, with pruning on the running fold mean.

    python finetune/search.py --model runs/pretrain/discriminator --data train.csv --group-column page \\
        --holdout 0.2 --max-length 64 --trials 12 --output runs/search --final
    python finetune/search.py ... --output runs/search --resume      # after a kill: finished trials are kept
    python finetune/search.py ... --engine ray [--address auto] [--gpus-per-fold 1]   # trials in parallel

Every k-fold flag is taken (finetune/kfold.py): the searched parameters (finetune/search_space.py: lr, epochs,
batch size, warm-up, layer-wise LR decay, class weights; `--space` narrows or widens them) replace their flags,
and the first trial is the recipe the flags give, so the table shows what the search gained over it.
- The folds are fixed once (OUTPUT/fold_ids.json) and every trial trains and scores on them; a fold is scored only
  on its held-out rows, which its model, early stopping and baseline never see. `--holdout` rows are seen by no
  trial at all.
- After each fold a trial reports its running mean; Optuna's MedianPruner stops a trial whose running mean is
  below the median of earlier trials after the same number of folds (from the `--prune-after`-th finished trial).
- Locally one trial at a time; with `--engine ray` as many trials at once as fold tasks fit (`--parallel`), each
  running its folds one after another (finetune/fold_runner.py).
- The study lives in OUTPUT/study.db (SQLite); `--resume` continues it: finished, pruned and failed trials are
  kept, a trial cut off by a kill is run again with the same parameters, and its finished folds are reused
  (trial folders are named by their parameters).
- Outputs: OUTPUT/trials.csv and the printed table, search_report.json, search_trials.png (score per trial),
  param_importance.png (Optuna's default importance evaluator), best_command.txt (the best recipe as a k-fold command), and
  best/: a k-fold run folder of the best trial (report, out-of-fold predictions, plots; with --final its model/,
  trained by k-fold's own final step and scored on the --holdout rows).
With --multi-label a trial's score is its nested tuned macro-F1 (per-label thresholds tuned on the other folds:
k-fold's headline; see `objective`), and pruning compares running means of the folds' macro-F1 at 0.5.
The best trial's CV score is optimistic: it was picked on the folds it is scored on (docs/finetune.md). With
--holdout and --final, best/report.json's holdout score is the honest number.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":  # flags and paths checked before torch loads: --help or a typo answers in a second
    try:
        from finetune.config import check_inputs
        from finetune.search_config import parse_args
        from textdata.inputs import check_before_imports
    except ModuleNotFoundError as e:  # run outside the project's environment
        sys.exit(f"error: {e}: activate the project's venv (source .venv/bin/activate) or install it: pip install -e .")
    check_before_imports(parse_args, lambda parsed: check_inputs(parsed[0]))

import dataclasses
import hashlib
import json
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from finetune import kfold
from finetune.config import RESUMABLE as KFOLD_RESUMABLE
from finetune.config import Config, command_line, config_json, flat
from finetune.data import FOLD_IDS
from finetune.fold_runner import FoldFailed, open_runner
from finetune.kfold import FoldJob
from finetune.search_config import SearchConfig, parse_args
from finetune.search_space import apply, current, load_space
from textdata.errors import DataError, exits_2_on_user_error
from textdata.tables import write_json, write_table

INSTALL_HINT = "finetune/search.py needs Optuna, which is not installed: pip install -e '.[search]'"
STUDY = "kfold-search"
# Settings of the k-fold Config that may change between a search and its --resume (they change no trial's numbers).
RESUMABLE = KFOLD_RESUMABLE | {"output"}


def import_optuna():
    try:
        import optuna
    except ImportError:
        raise DataError(INSTALL_HINT) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def _settings(base: Config, scfg: SearchConfig, space) -> dict:
    """What a --resume must find unchanged: the k-fold settings the trials share, and the space."""
    cfg = {k: v for k, v in flat(config_json(base)).items()
           if k not in RESUMABLE}
    return {"kfold": cfg, "space": space.as_json(), "random_trials": scfg.random_trials, "prune": scfg.prune,
            "prune_after": scfg.prune_after}


def open_study(optuna, out: Path, base: Config, scfg: SearchConfig, space):
    db, saved = out / "study.db", out / "search_config.json"
    settings = _settings(base, scfg, space)
    if db.exists() and not base.resume:
        raise DataError(f"{out} already holds a search ({db}); rerun with --resume to continue it, or use a new "
                        "--output")
    if base.resume and saved.exists():
        before = json.loads(saved.read_text())
        differs = sorted(k for k in set(before) | set(settings) if before.get(k) != settings.get(k))
        if "kfold" in differs:
            differs.remove("kfold")
            # a setting added since (e.g. multi_label) counts as unchanged when it is at its default
            default = flat(config_json(Config(model="", data="", output="")))
            differs += sorted(k for k in set(before["kfold"]) | set(settings["kfold"])
                              if before["kfold"].get(k, default.get(k)) != settings["kfold"].get(k, default.get(k)))
        if differs:
            raise DataError(f"--resume: the search in {out} was run with different {differs}; use a new --output")
    out.mkdir(parents=True, exist_ok=True)
    write_json(saved, settings)
    sampler = optuna.samplers.TPESampler(seed=base.seed, n_startup_trials=scfg.random_trials,
                                         constant_liar=base.engine == "ray")
    pruner = (optuna.pruners.MedianPruner(n_startup_trials=scfg.prune_after, n_warmup_steps=0)
              if scfg.prune else optuna.pruners.NopPruner())
    study = optuna.create_study(study_name=STUDY, storage=f"sqlite:///{db.resolve()}", direction="maximize",
                                sampler=sampler, pruner=pruner, load_if_exists=True)
    RUNNING, FAIL = optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.FAIL
    for t in study.get_trials(deepcopy=False, states=(RUNNING,)):  # cut off by a kill: run again, same parameters
        study._storage.set_trial_user_attr(t._trial_id, "interrupted", True)
        study.tell(t.number, state=FAIL)
        study.enqueue_trial(t.params, user_attrs={"rerun_of": t.number})
        print(f"trial {t.number} was cut off by a kill: queued again with the same parameters", file=sys.stderr)
    if not study.trials:  # the first trial is the recipe the flags give
        study.enqueue_trial(current(base, space), user_attrs={"recipe": "the given flags"})
    return study


def _counted(study, optuna) -> int:
    S = optuna.trial.TrialState
    return sum(1 for t in study.get_trials(deepcopy=False)
               if t.state in (S.COMPLETE, S.PRUNED) or (t.state == S.FAIL and not t.user_attrs.get("interrupted")))


def trial_config(base: Config, space, params: dict, out: Path) -> Config:
    """The k-fold Config of one trial, in a folder named by its parameters (a rerun finds its finished folds)."""
    values = {**space.fixed, **params}
    key = hashlib.sha1(json.dumps(values, sort_keys=True).encode()).hexdigest()[:10]
    cfg = dataclasses.replace(apply(base, values), output=str(out / "trials" / key), resume=True, final=False)
    folder = Path(cfg.output)
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "config.json", config_json(cfg))
    shutil.copyfile(out / FOLD_IDS, folder / FOLD_IDS)  # the search's folds, for k-fold's --resume of this folder
    return cfg


def run(base: Config, scfg: SearchConfig) -> dict:
    import transformers

    optuna = import_optuna()
    started = time.time()
    transformers.logging.set_verbosity_error()
    out = Path(base.output)
    space = load_space(scfg.space)
    study = open_study(optuna, out, base, scfg, space)
    accelerator = kfold.pick_accelerator(base.device)
    kfold.cpu_threads(accelerator)
    prep = kfold.prepare(dataclasses.replace(base, output=str(out)))
    if prep.held is not None:
        write_table(prep.data.table.iloc[prep.held.keep], out / "holdout.csv")
    print(f"{len(prep.data.texts)} rows, {base.folds} folds fixed in {out / FOLD_IDS}"
          + (f", {len(prep.held.texts)} rows held out" if prep.held is not None else "")
          + f"; {scfg.trials} trials, {_counted(study, optuna)} done before", file=sys.stderr)

    with open_runner(base, prep, accelerator, wrap_errors=True) as runner:
        width = min(runner.slots, scfg.parallel or runner.slots)
        active: dict[int, dict] = {}  # trial number -> its trial, config, fold scores
        while active or _counted(study, optuna) + len(active) < scfg.trials:
            while len(active) < width and _counted(study, optuna) + len(active) < scfg.trials:
                trial = study.ask(space.searched)
                cfg = trial_config(base, space, trial.params, out)
                trial.set_user_attr("folder", cfg.output)
                active[trial.number] = {"trial": trial, "cfg": cfg, "scores": [], "t0": time.time()}
                runner.submit(FoldJob(cfg, 0, trial.number))
            try:
                job, (saved, proba, _) = runner.next_done()
            except FoldFailed as e:
                state = active.pop(e.job.trial)
                state["trial"].set_user_attr("error", str(e))
                study.tell(state["trial"], state=optuna.trial.TrialState.FAIL)
                print(f"trial {e.job.trial}: failed, {e}", file=sys.stderr)
                continue
            state = active[job.trial]
            trial, scores = state["trial"], state["scores"]
            scores.append(saved["macro_f1"])  # multi-label: at 0.5, the fold's own number (pruning only)
            state.setdefault("proba", {})[job.k] = proba
            trial.set_user_attr("fold_macro_f1", scores)
            trial.set_user_attr("seconds", round(time.time() - state["t0"], 1))
            trial.report(float(np.mean(scores)), step=len(scores))
            if len(scores) == base.folds:
                value = objective(prep, state["proba"], scores)
                study.tell(trial, value)
                del active[job.trial]
                said = prep.data.space.pick("macro-F1 {mean:.4f} ± {std:.4f}", "nested tuned macro-F1 {value:.4f} "
                                            "(folds at 0.5: {mean:.4f} ± {std:.4f})")
                print(f"trial {job.trial}: {said.format(value=value, mean=np.mean(scores), std=np.std(scores))} "
                      f"{trial.params}", file=sys.stderr)
            elif trial.should_prune():
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                del active[job.trial]
                print(f"trial {job.trial}: pruned after {len(scores)} folds (running mean {np.mean(scores):.4f})",
                      file=sys.stderr)
            else:
                runner.submit(FoldJob(state["cfg"], len(scores), job.trial))
    return finish(optuna, study, base, scfg, space, out, started)


def objective(prep, proba_by_fold: dict, scores: list[float]) -> float:
    """A finished trial's score. Single-label: the mean fold macro-F1. Multi-label: macro-F1 at per-label
    thresholds tuned nested (each fold cut at thresholds tuned on the other folds' rows), k-fold's headline:
    macro- rather than micro-F1 because it weighs every label the same (micro-F1 is carried by the few frequent
    labels, which any recipe gets right), and it is what per-label thresholds maximise and what the export gate
    judges. Tuned rather than at 0.5, because recipes move the probabilities (--class-weights' pos_weight lifts
    them all) and 0.5 would rank recipes by calibration instead of by what the served model does."""
    return prep.data.space.pick(_mean_fold_score, _nested_tuned_score)(prep, proba_by_fold, scores)


def _mean_fold_score(prep, proba_by_fold: dict, scores: list[float]) -> float:
    return float(np.mean(scores))


def _nested_tuned_score(prep, proba_by_fold: dict, scores: list[float]) -> float:
    from finetune.multilabel import scored

    fold_of = np.full(len(prep.data.texts), -1)
    oof = np.zeros(prep.data.Y.shape)
    for k, (_, val_idx) in enumerate(prep.folds):
        fold_of[val_idx], oof[val_idx] = k, proba_by_fold[k]
    return float(scored(prep.data.Y, oof, fold_of, prep.data.labels)["macro_f1_mean"])


def trial_rows(study) -> list[dict]:
    rows = []
    for t in study.get_trials(deepcopy=False):
        folds = t.user_attrs.get("fold_macro_f1", [])
        rows.append({"trial": t.number, "state": t.state.name.lower(),
                     "macro_f1": t.value if t.value is not None else (float(np.mean(folds)) if folds else None),
                     "folds_run": len(folds), "fold_macro_f1": folds, "seconds": t.user_attrs.get("seconds"),
                     **({"note": "interrupted by a kill, rerun"} if t.user_attrs.get("interrupted") else {}),
                     **({"error": t.user_attrs["error"]} if "error" in t.user_attrs else {}),
                     **({"recipe": t.user_attrs["recipe"]} if "recipe" in t.user_attrs else {}),
                     "params": t.params, "folder": t.user_attrs.get("folder")})
    return rows


def table(rows: list[dict], names: list[str]) -> str:
    short = {"lr": "lr", "epochs": "ep", "batch_size": "bs", "warmup": "warmup", "layer_decay": "llrd",
             "class_weights": "cw"}
    head = f"{'trial':>5} {'state':>9} {'macro-F1':>9} {'folds':>5} " + " ".join(f"{short.get(n, n):>8}" for n in names)
    lines = [head, "-" * len(head)]
    for r in rows:
        vals = [r["params"].get(n) for n in names]
        cells = " ".join(f"{'' if v is None else (f'{v:.3g}' if isinstance(v, float) else str(v)):>8}" for v in vals)
        f1 = "" if r["macro_f1"] is None else f"{r['macro_f1']:.4f}"
        lines.append(f"{r['trial']:>5} {r['state']:>9} {f1:>9} {r['folds_run']:>5} {cells}")
    return "\n".join(lines)


def importances(optuna, study) -> tuple[dict, str | None]:
    """Optuna's default parameter importances (PED-ANOVA in Optuna 5, fANOVA before: both offline, no extra
    dependency), or why there are none."""
    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if len(done) < 3:
        return {}, f"{len(done)} finished trials: importances need at least 3"
    import warnings

    try:
        with warnings.catch_warnings():  # "importances will be equal" on a few similar trials: the plot says it
            warnings.simplefilter("ignore", UserWarning)
            return dict(optuna.importance.get_param_importances(study)), None
    except (RuntimeError, ValueError) as e:
        return {}, f"{type(e).__name__}: {e}"


def finish(optuna, study, base, scfg, space, out: Path, started: float) -> dict:
    from finetune.plots import importance_png, search_trials_png

    rows = trial_rows(study)
    names = list(space.searched)
    write_table(_flat_rows(rows), out / "trials.csv")
    imp, why_not = importances(optuna, study)
    search_trials_png(rows, out / "search_trials.png")
    if imp:
        importance_png(imp, out / "param_importance.png")
    report = {"trials": rows, "space": space.as_json(), "search": asdict(scfg),
              "config": config_json(base), "importance": imp,
              **({"importance_missing": why_not} if why_not else {})}
    print("\n" + table(rows, names))
    complete = [r for r in rows if r["state"] == "complete"]
    if not complete:
        report["best"] = None
        write_json(out / "search_report.json", report)
        print("\nno trial finished: no best recipe")
        return report
    best_trial = study.best_trial
    best_cfg = dataclasses.replace(apply(base, {**space.fixed, **best_trial.params}), output=str(out / "best"),
                                   resume=False, final=True)
    command = command_line(best_cfg)
    (out / "best_command.txt").write_text(command + "\n", encoding="utf-8")
    first = next((r for r in rows if r.get("recipe") and r["state"] == "complete"), None)
    report["best"] = {"trial": best_trial.number, "macro_f1_mean": best_trial.value,
                      "fold_macro_f1": best_trial.user_attrs["fold_macro_f1"], "params": best_trial.params,
                      "command": command, "folder": str(out / "best"),
                      "estimate": "optimistic: this recipe was picked on the same folds it is scored on"}
    if first:
        report["best"]["gain_over_given_flags"] = best_trial.value - first["macro_f1"]
    # best/: the best trial's folds read back by k-fold itself (report, out-of-fold predictions, plots) and, with
    # --final, its final model trained and scored on the held-out rows.
    best_dir = out / "best"
    shutil.rmtree(best_dir, ignore_errors=True)  # a rerun's best may be another trial: nothing of the old one stays
    shutil.copytree(best_trial.user_attrs["folder"], best_dir, ignore=shutil.ignore_patterns("adapt_*", "model"))
    write_json(best_dir / "config.json", config_json(best_cfg))  # its own output
    best_report = kfold.run(dataclasses.replace(best_cfg, resume=True, final=base.final, engine="local"))
    if "holdout" in best_report:
        report["best"]["holdout"] = {k: best_report["holdout"].get(k) for k in ("n_rows", "macro_f1", "accuracy")
                                     if k in best_report["holdout"]}
        report["best"]["holdout"]["baseline_macro_f1"] = best_report["holdout"]["baseline"].get("macro_f1")
    report["wall_seconds"] = round(time.time() - started, 1)
    write_json(out / "search_report.json", report)
    gain = report["best"].get("gain_over_given_flags")
    print(f"\nbest: trial {best_trial.number}, macro-F1 {best_trial.value:.4f} (CV on the folds it was picked on: "
          f"optimistic)" + (f", {gain * 100:+.1f} points over the given flags" if gain is not None else ""))
    if "holdout" in report["best"] and "macro_f1" in report["best"]["holdout"]:
        print(f"holdout ({report['best']['holdout']['n_rows']} rows no trial saw): final model macro-F1 "
              f"{report['best']['holdout']['macro_f1']:.4f}")
    print(f"best recipe: {command}\nwrote {out}/trials.csv, search_report.json, search_trials.png"
          + (", param_importance.png" if imp else "") + ", best_command.txt, best/")
    return report


def _flat_rows(rows: list[dict]):
    import pandas as pd

    return pd.DataFrame([{**{k: v for k, v in r.items() if k not in ("params", "fold_macro_f1")},
                          "fold_macro_f1": " ".join(f"{s:.4f}" for s in r["fold_macro_f1"]),
                          **{f"param_{k}": v for k, v in r["params"].items()}} for r in rows])


@exits_2_on_user_error
def main(argv=None) -> int:
    parsed = parse_args(argv)  # None after --list-models
    try:
        parsed and run(*parsed)
    except KeyboardInterrupt:  # a SIGKILL leaves the same state: the next --resume reruns the trial cut off
        print("interrupted: finished trials are kept; rerun with --resume --output <same folder>", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    import importlib

    sys.exit(importlib.import_module("finetune.search").main())
