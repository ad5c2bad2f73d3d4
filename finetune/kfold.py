"""Stratified k-fold fine-tuning of an ELECTRA discriminator (or any encoder) as a text classifier.

    python finetune/kfold.py --model KcELECTRA --data notes.csv
    python finetune/kfold.py --model minilm --data bbcnews --folds 3 --epochs 2     # offline demo
    python finetune/kfold.py --model runs/pretrain/discriminator --data train.csv --group-column page --final
    python finetune/kfold.py --model runs/pretrain/discriminator --data train.csv --group-column page \\
        --adapt-steps 300
    python finetune/kfold.py --model minilm --data debtags.csv --label-column labels --multi-label --final

Per fold: (with --adapt-steps) replaced-token detection continued on the fold's training texts only, see
finetune/adapt.py; a fresh model from the pretrained weights, early stopping on an inner split of the
training part, scores on the held-out fold, and a TF-IDF + logistic-regression baseline on the same
split. Writes OUTPUT/report.json, oof_predictions.csv, plots, and with --final a deployable model/.
--holdout 0.2 first sets a fifth of the rows aside (OUTPUT/holdout.csv): the final model's score on them
in report.json is the one measured on rows it never saw, and they are the export's --eval-csv.
Several GPUs: `accelerate launch finetune/kfold.py ...`, or each fold on its own GPU(s) as a Ray task:
`--engine ray [--address auto] [--gpus-per-fold 1] [--cpus-per-fold N]` (finetune/fold_runner.py).
A hyperparameter search over this k-fold: finetune/search.py.
--multi-label: a row carries several labels (or none), separated by --label-sep in its label cell; folds
iteratively stratified, a sigmoid per label, per-label thresholds tuned nested (finetune/multilabel_run.py).
"""

from __future__ import annotations

import sys

if __name__ == "__main__":  # flags and paths checked before torch loads: --help or a typo answers in a second
    try:
        from finetune.config import check_inputs, parse_args
        from textdata.inputs import check_before_imports
    except ModuleNotFoundError as e:  # run outside the project's environment
        sys.exit(f"error: {e}: activate the project's venv (source .venv/bin/activate) or install it: pip install -e .")
    check_before_imports(parse_args, check_inputs)

import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from baseline.blend import load_baseline
from baseline.ood import read_as, save_ood
from finetune import label_issues, sharpness, teacher_data, teacher_report, unknown_tokens
from finetune.adapt import adapt
from finetune.confidence import save_calibration
from finetune.config import (  # noqa: F401
    RESUMABLE,
    Config,
    build_parser,
    command_line,
    config_from_args,
    config_json,
    parse_args,
    resume_differences,
)
from finetune.data import (
    FOLD_IDS,
    bbcnews_csv,
    fixed_folds,
    inner_split,
    load_labeled,
    rows_at,
    split_holdout,
)
from finetune.fold_runner import open_runner, pick_accelerator, save_fold
from finetune.models import list_models, load_classifier, load_tokenizer, resolve_model  # noqa: F401
from finetune.tasks import Task, task_for
from finetune.train import encode, fit, predict_proba
from textdata.cpu_limits import omp_threads, plan_threads
from textdata.drift import save_reference
from textdata.errors import DataError, exits_2_on_user_error
from textdata.model_files import TRAINING_CONFIG
from textdata.normalize import Normalizer
from textdata.tables import write_json, write_table

BUILTIN_DATA = {"bbcnews": bbcnews_csv}


def cpu_threads(accelerator) -> None:
    import torch

    if accelerator.device.type == "cpu" and omp_threads() is None:
        # An explicit OMP_NUM_THREADS wins. Otherwise one thread per core this process may use that other work does
        # not keep busy: threads waiting for a shared core cost 5-10x (textdata/cpu_limits.py).
        torch.set_num_threads(plan_threads().threads)


@dataclass
class Prepared:
    """What every fold reads, made once by the driver (and shipped once to Ray workers): the rows, their
    token ids, the tokenizer, the model to start from and the fixed folds."""

    data_path: Path
    normalizer: Normalizer
    data: object  # LabeledData of the rows the folds use (the held-out ones removed)
    held: object  # LabeledData of the --holdout rows, or None
    resolved: str
    tokenizer: object
    ids: list
    folds: list
    task: Task  # the kind of labels' task (finetune/tasks.py), picked once from the rows' label space
    unknown: dict | None = None  # report.json's unknown_tokens (finetune/unknown_tokens.py)


def prepare(cfg: Config) -> Prepared:
    """Read and check the data, set the holdout aside, tokenize, and fix the folds (OUTPUT/fold_ids.json)
    before any fold starts."""
    cache = Path.home() / ".cache" / "electra-classify"
    data_path = BUILTIN_DATA[cfg.data](cache) if cfg.data in BUILTIN_DATA else Path(cfg.data)
    normalizer = Normalizer(cfg.normalize)
    data = teacher_data.load(data_path, cfg, normalizer) if cfg.teacher_column else load_labeled(
        data_path, cfg.text_column, cfg.label_column, cfg.group_column, cfg.folds, cfg.on_missing, normalizer,
        cfg.encoding, cfg.multi_label, cfg.label_sep)
    held = None
    if cfg.holdout:  # set aside before anything is fitted: neither the folds nor the final model see them
        split = teacher_data.gold_holdout if cfg.teacher_column else split_holdout  # teacher: gold rows held out
        data, held = split(data, cfg.holdout, cfg.folds, cfg.seed, data_path)
    resolved = resolve_model(cfg.model)
    if cfg.adapt.steps and not Path(resolved).is_dir():
        raise DataError(f"--adapt-steps needs a local ELECTRA folder as --model, not {cfg.model!r}")
    tokenizer = load_tokenizer(cfg.model, resolved, cfg.max_length)
    ids = encode(tokenizer, data.texts, cfg.max_length)
    folds = fixed_folds(Path(cfg.output), data, cfg.folds, cfg.seed, reuse=cfg.resume)
    # a vocabulary pruned to another corpus says how much of these texts it could not cut into pieces
    unknown = unknown_tokens.entry(ids, tokenizer, None if held is None else encode(tokenizer, held.texts,
                                                                                    cfg.max_length))
    return Prepared(data_path, normalizer, data, held, resolved, tokenizer, ids, folds, task_for(data.space), unknown)


def step_reporter(on_progress, **where):
    """fit's per-step callback that reports `where` (stage, fold) with the step, the steps and the epoch."""
    if on_progress is None:
        return None
    return lambda step, steps, epoch: on_progress({**where, "epoch": epoch, "step": step, "steps": steps})


def run_fold(cfg: Config, k: int, prep: Prepared, fold_dir: Path, accelerator,
             on_progress=None) -> tuple[dict, np.ndarray, np.ndarray]:
    """One fold: (its record, the model's and the baseline's probabilities on its held-out rows). On --resume a
    finished fold is read back; otherwise it is trained, scored and written whole."""
    seed = cfg.seed * 1000 + k  # one seed per fold, derived from --seed
    done = fold_dir / f"fold_{k}.json"
    if cfg.resume and done.exists():
        arrays = np.load(fold_dir / f"fold_{k}.npz")
        print(f"fold {k}: reused from {done}", file=sys.stderr)
        return json.loads(done.read_text()), arrays["proba"], arrays["baseline"]
    import torch

    data, ids, tokenizer = prep.data, prep.ids, prep.tokenizer
    train_idx, val_idx = prep.folds[k]
    targets = data.targets  # y, or Y (n, L) with --multi-label
    inner_tr, inner_va = inner_split(targets[train_idx], None if data.groups is None else data.groups[train_idx],
                                     cfg.inner_val, seed)
    fit_idx, stop_idx = train_idx[inner_tr], train_idx[inner_va]
    if cfg.teacher_column:  # teacher rows corrected on this fold's gold rows only; gold rows repeated
        targets, fit_idx = teacher_data.fold_training(data, train_idx, fit_idx, seed, cfg.gold_weight)
    start = prep.resolved
    if cfg.adapt.steps:  # the fold's training texts only: the held-out rows are what it is scored on
        start = str(adapt(start, [data.texts[i] for i in train_idx], fold_dir / f"adapt_{k}", cfg.adapt, seed))
    torch.manual_seed(seed)
    model = load_classifier(cfg.model, start, data.space, cfg.dropout, cfg.random_init)
    hist = fit(model, tokenizer, [ids[i] for i in fit_idx], targets[fit_idx], [ids[i] for i in stop_idx],
               targets[stop_idx], cfg.train, seed, accelerator, desc=f"fold {k + 1}/{cfg.folds}",
               on_step=step_reporter(on_progress, stage="fold", fold=k + 1, folds=cfg.folds))
    cpu = time.process_time()
    proba = predict_proba(model, [ids[i] for i in val_idx], tokenizer.pad_token_id or 0, accelerator.device,
                          cfg.train.precision)
    cpu = time.process_time() - cpu
    del model
    base_proba, metrics, base_metrics = prep.task.fold_scores(data, targets, train_idx, val_idx, proba, seed)
    saved = {
        "fold": k, "seed": seed, "n_train": len(fit_idx), "n_early_stopping": len(stop_idx),
        "n_val": len(val_idx), **metrics,
        "best_epoch": hist.best_epoch, "train_seconds": round(hist.seconds, 2),
        "samples_per_second": round(hist.samples_per_second, 2), "predict_cpu_seconds": round(cpu, 4),
        "baseline": base_metrics,
        "history": dataclasses.asdict(hist),
    }
    if accelerator.is_main_process:
        save_fold(fold_dir, k, saved, proba, base_proba)
    return saved, proba, base_proba


@dataclass(frozen=True)
class FoldJob:
    """One fold of one run (a search trial's run, with `trial` set): what a worker is sent, a few hundred bytes."""

    cfg: Config  # its output folder holds the fold's files
    k: int
    trial: int | None = None

    def __call__(self, prep, accelerator, on_progress=None):
        fold_dir = Path(self.cfg.output) / "folds"
        fold_dir.mkdir(parents=True, exist_ok=True)
        return run_fold(self.cfg, self.k, prep, fold_dir, accelerator, on_progress)


@dataclass
class FoldResults:
    """The folds gathered in fold order: their records, learning curves and out-of-fold probabilities."""

    results: list
    histories: list
    oof: np.ndarray  # the model's probabilities, one row per data row
    base_oof: np.ndarray  # the baseline's (NaN where it could not be fitted)
    fold_of: np.ndarray  # each row's fold


def run_folds(cfg: Config, prep: Prepared, accelerator, on_progress=None) -> FoldResults:
    """Every fold through the runner (here or on Ray), gathered in fold order whatever order they finished in.
    Local folds report every step to `on_progress`; Ray folds, each fold as it finishes."""
    by_fold = {}
    with open_runner(cfg, prep, accelerator, on_progress=on_progress) as runner:
        for k in range(cfg.folds):
            runner.submit(FoldJob(cfg, k))
        for _ in range(cfg.folds):
            job, (saved, proba, base_proba) = runner.next_done()
            by_fold[job.k] = saved, proba, base_proba
            if on_progress is not None:
                on_progress({"stage": "fold done", "fold": job.k + 1, "folds": cfg.folds, "done": len(by_fold)})
            print(prep.task.fold_line(job.k, saved), file=sys.stderr)
    n, c = len(prep.data.texts), len(prep.data.labels)
    got = FoldResults([], [], np.full((n, c), np.nan, dtype=np.float32), np.full((n, c), np.nan, dtype=np.float32),
                      np.full(n, -1))
    for k, (_, val_idx) in enumerate(prep.folds):
        saved, proba, base_proba = by_fold[k]
        got.oof[val_idx], got.base_oof[val_idx], got.fold_of[val_idx] = proba, base_proba, k
        got.histories.append(saved.pop("history"))
        got.results.append(saved)
    return got


def start_run(cfg: Config, accelerator) -> tuple[Prepared, dict]:
    """Check a --resume against the recorded config, prepare the rows and write config.json (and holdout.csv)
    before any fold starts."""
    out = Path(cfg.output)
    recorded = config_json(cfg)
    if cfg.resume and (out / "config.json").exists():
        differs = resume_differences(json.loads((out / "config.json").read_text()), recorded)
        if differs:
            raise DataError(f"--resume: {out} was run with different {differs}; use a new --output")
    prep = prepare(cfg)
    data, held = prep.data, prep.held
    (out / "folds").mkdir(parents=True, exist_ok=True)
    if accelerator.is_main_process:
        write_json(out / "config.json", recorded)
        if held is not None:  # the rows as read, every column: serving.export --eval-csv takes it as is
            write_table(data.table.iloc[held.keep], out / "holdout.csv")
    print(f"{len(data.texts)} rows, {len(data.labels)} {prep.task.rows_kind(data)}, {cfg.folds} folds"
          f"{' grouped by ' + repr(cfg.group_column) if cfg.group_column else ''}; model {prep.resolved} "
          f"on {accelerator.device if cfg.engine == 'local' else 'Ray workers'}; folds fixed in {out / FOLD_IDS}",
          file=sys.stderr)
    return prep, recorded


def run(cfg: Config, on_progress=None) -> dict:
    """The whole k-fold run of `cfg`; `on_progress(event)`, when given, receives a dict per training step (its
    "stage": "fold" or "final", the fold, "epoch", "step", "steps") and one as each fold finishes ("fold done")."""
    import transformers

    started = time.time()
    transformers.logging.set_verbosity_error()  # "newly initialized: classifier.*" is the point of fine-tuning
    out = Path(cfg.output)
    accelerator = pick_accelerator(cfg.device)  # local folds, the final model
    main = accelerator.is_main_process
    cpu_threads(accelerator)
    prep, recorded = start_run(cfg, accelerator)
    data, held = prep.data, prep.held
    got = run_folds(cfg, prep, accelerator, on_progress)
    full = (data, got) if cfg.teacher_column else None
    if full:  # teacher rows trained the folds; every score from here on is on gold rows only
        data, got = teacher_report.gold_only(data, got)

    task = prep.task  # the kind's numbers, files and table (finetune/tasks.py)
    report, blend_oof = task.cv_report(cfg, got, data, recorded, prep, accelerator.device)
    if report["learned"]["message"]:
        report["warnings"].append(report["learned"]["message"])
    report["unknown_tokens"] = prep.unknown
    if unknown_tokens.warning(prep.unknown):
        report["warnings"].append(unknown_tokens.warning(prep.unknown))
    # Before anything is written: an unreachable --target-precision stops here (the folds are kept for --resume).
    report["calibration"], served_oof, calibrated_oof = task.calibration(got, report, blend_oof, data,
                                                                         cfg.target_precision, 1 - cfg.confidence)
    # --final: carried in model/ood/ (baseline/ood.py), off-topic texts are never confident
    ood = task.out_of_domain(report, data, got.fold_of, calibrated_oof) if cfg.final else None
    if held is not None:
        report["holdout"] = task.holdout_entry(out, data, held, cfg, report)
    if main:
        report["label_issues"] = label_issues.run(cfg.label_issues, out, data, got.oof, blend_oof, report["blend"],
                                                  got.fold_of, prep.data_path, report["warnings"], task.issues)
        task.write_outputs(out, cfg, data, got.oof, got.base_oof, blend_oof, got.fold_of, report, got.histories,
                           held)
        task.pictures_of(out, report["calibration"], served_oof, calibrated_oof, data)
    if full and main:
        report["teacher"] = teacher_report.run(out, cfg, *full, blend_oof, report["blend"])
    if cfg.final:
        final_model(cfg, prep, report, accelerator, on_progress, ood)
        if main:  # what the served model answered out of fold: the drift monitor's reference (app/monitoring/monitor.py);
            # scores are served calibrated where calibration.json is written, so the reference is too (nested)
            ref, thresholds = task.reference(out / "model", served_oof, calibrated_oof)
            save_reference(out / "model", ref, data.texts, data.labels, thresholds)
    report["wall_seconds"] = round(time.time() - started, 1)
    for w in report["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    if main:
        write_json(out / "report.json", report)
        print(task.summary_table(report))
        print(unknown_tokens.line(report["unknown_tokens"]))
        print("\n".join(teacher_report.table_lines(report.get("teacher"))))
        print(f"\nwrote {out}/report.json, oof_predictions.csv, "
              + task.pictures + ", learning_curves.png, fold_scores.png"
              + (f", {label_issues.FILE}" if (out / label_issues.FILE).exists() else "")
              + (", model/" if cfg.final else "") + (", holdout.csv" if held is not None else "")
              + task.extra_files(cfg.final, held))
    return report


def final_model(cfg: Config, prep: Prepared, report: dict, accelerator, on_progress=None, ood=None) -> None:
    """Train on every fold row for the median best epoch of the folds, then save a serving-ready folder;
    score it on the held-out rows (--holdout), which it never saw."""
    import torch

    data, held, tokenizer = prep.data, prep.held, prep.tokenizer
    epochs = int(np.median([f["best_epoch"] for f in report["folds"]])) or cfg.train.epochs
    train_cfg = dataclasses.replace(cfg.train, epochs=max(1, epochs), patience=0)
    resolved = prep.resolved
    if cfg.adapt.steps:  # every row is training data for the final model
        resolved = str(adapt(resolved, data.texts, Path(cfg.output) / "adapt_final", cfg.adapt, cfg.seed))
    torch.manual_seed(cfg.seed)
    model = load_classifier(cfg.model, resolved, data.space, cfg.dropout, cfg.random_init)
    # --calibration-share: rows the final model never sees, to cool its calibration (finetune/sharpness.py)
    train_pos, share_pos = sharpness.share_positions(
        data, cfg.calibration_share if prep.task.cools_final and report.get("calibration") else 0, cfg.seed)
    rows = (teacher_data.repeated(data, train_pos, cfg.gold_weight) if cfg.teacher_column
            else train_pos)  # gold rows repeated as in the folds
    fit(model, tokenizer, [prep.ids[i] for i in rows], data.targets[rows], [], data.targets[:0], train_cfg, cfg.seed,
        accelerator, desc="final", on_step=step_reporter(on_progress, stage="final"))
    proba = None
    if held is not None:
        proba = predict_proba(model, encode(tokenizer, held.texts, cfg.max_length), tokenizer.pad_token_id or 0,
                              accelerator.device, cfg.train.precision)
    if held is not None:
        prep.task.score_final_holdout(report, held, proba, data)
    if not accelerator.is_main_process:
        return
    folder = Path(cfg.output) / "model"
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    prep.normalizer.save(folder)
    label_issues.carry(Path(cfg.output), folder)
    # baseline/ with a kept blend (multi-label: and thresholds.json), the held-out rows scored as served
    trained = rows_at(data, train_pos) if len(share_pos) else data  # the baseline trains on the same rows
    blend = prep.task.final_extras(folder, Path(cfg.output), trained, held, proba, cfg, report)
    if ood is not None and blend is not None and len(share_pos):  # the baseline saw fewer rows: read as it reads
        ood = read_as(ood, load_baseline(folder)[0], data.texts, data.targets, len(data.labels))
    if len(share_pos):
        share_proba = predict_proba(model, [prep.ids[i] for i in share_pos], tokenizer.pad_token_id or 0,
                                    accelerator.device, cfg.train.precision)
        sharpness.cool_final(report, folder, share_proba, [data.texts[i] for i in share_pos],
                             data.targets[share_pos], len(data.labels), blend is not None, len(train_pos))
    calibration = save_calibration(folder, report.get("calibration"), data.labels, blend is not None,
                                   report["warnings"])
    save_ood(folder, ood)  # None: a stale ood/ from an earlier run into this folder goes
    write_json(folder / TRAINING_CONFIG, {
        "config": config_json(cfg), "seed": cfg.seed, "final_epochs": train_cfg.epochs,
        "labels": data.labels, "cv": {k: report[k] for k in report if k.endswith(("_mean", "_std"))}, "blend": blend,
        "calibration": calibration,
        "learned": report.get("learned"),  # serving.export and the engine say it too
    })
    report["final_model"] = {"path": str(folder), "epochs": train_cfg.epochs, "n_train": len(train_pos),
                             "blend": blend is not None}


@exits_2_on_user_error
def main(argv=None) -> int:
    try:
        cfg = parse_args(argv)
        if cfg is None:
            return 0
        run(cfg)
    except KeyboardInterrupt:
        print("interrupted: finished folds are kept; rerun with --resume --output <same folder>", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    # Run as the module finetune.kfold, not __main__: Ray ships a Config to workers by reference to its module.
    import importlib

    sys.exit(importlib.import_module("finetune.kfold").main())
