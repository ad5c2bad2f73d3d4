"""Stratified k-fold fine-tuning of an ELECTRA discriminator (or any encoder) as a text classifier.

    python finetune/kfold.py --model KcELECTRA --data notes.csv
    python finetune/kfold.py --model minilm --data bbcnews --folds 3 --epochs 2     # offline demo
    python finetune/kfold.py --model runs/pretrain/discriminator --data train.csv --group-column page --final
    python finetune/kfold.py --model runs/pretrain/discriminator --data train.csv --group-column page \\
        --adapt-steps 300

Per fold: (with --adapt-steps) replaced-token detection continued on the fold's training texts only, see
finetune/adapt.py; a fresh model from the pretrained weights, early stopping on an inner split of the
training part, scores on the held-out fold, and a TF-IDF + logistic-regression baseline on the same
split. Writes OUTPUT/report.json, oof_predictions.csv, plots, and with --final a deployable model/.
--holdout 0.2 first sets a fifth of the rows aside (OUTPUT/holdout.csv): the final model's score on them
in report.json is the one measured on rows it never saw, and they are the export's --eval-csv.
Several GPUs: `accelerate launch finetune/kfold.py ...`, or each fold on its own GPU(s) as a Ray task:
`--engine ray [--address auto] [--gpus-per-fold 1] [--cpus-per-fold N]` (finetune/fold_runner.py).
A hyperparameter search over this k-fold: finetune/search.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from finetune.adapt import AdaptConfig, adapt
from finetune.baseline import baseline_predict
from finetune.blend import MODES, cv_blend, save_final_blend
from finetune.data import FOLD_IDS, bbcnews_csv, fixed_folds, inner_split, load_labeled, split_holdout
from finetune.fold_runner import open_runner, pick_accelerator, save_fold
from finetune.metrics import KEYS, fold_metrics, summarize
from finetune.models import list_models, load_classifier, load_tokenizer, resolve_model
from finetune.train import COMPILE_CHOICES, SWITCHES, TrainConfig, encode, fit, predict_proba
from textdata.blend import BaselineError, ServedBlend
from textdata.cpu_limits import omp_threads, plan_threads
from textdata.errors import DataError, exits_2_on_user_error
from textdata.flags import DefaultsHelp, Flag, add_flags, config_from
from textdata.normalize import Normalizer
from textdata.precision import PRECISIONS
from textdata.tables import write_json, write_table

BUILTIN_DATA = {"bbcnews": bbcnews_csv}


@dataclass(frozen=True)
class Config:
    model: str
    data: str
    output: str
    text_column: str = "text"
    label_column: str = "label"
    group_column: str | None = None
    encoding: str = "utf-8"
    on_missing: str = "drop"  # drop rows with empty text/label (with a warning) or fail
    normalize: str = "none"  # none | kc
    folds: int = 5
    seed: int = 42
    max_length: int = 128
    dropout: float | None = None
    inner_val: float = 0.1
    holdout: float = 0.0  # share of rows kept from the folds and the final model, to score the final model on
    random_init: bool = False  # same architecture, random weights: what pretraining is worth
    device: str = "auto"
    final: bool = False
    resume: bool = False
    blend: str = "auto"  # auto | off | on: blend with the baseline (finetune/blend.py)
    engine: str = "local"  # local | ray: where the folds train (finetune/fold_runner.py)
    address: str | None = None  # a Ray cluster to join; none: start Ray on this machine
    gpus_per_fold: float = 0.0  # Ray resources per fold task (fractions share a GPU)
    cpus_per_fold: int = 1
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    adapt: AdaptConfig = dataclasses.field(default_factory=AdaptConfig)


# Settings that may change on --resume: they change neither the folds nor their numbers (the fast-path
# switches give the plain path's losses: tests/finetune/test_fast_path.py).
# The blend only reads the saved folds; where a fold runs does not change its numbers.
RESUMABLE = frozenset({"resume", "final", "blend", "train.static_shapes", "train.compile", "engine", "address",
                       "gpus_per_fold", "cpus_per_fold"})


def config_json(cfg) -> dict:
    """A config dataclass as the JSON every output records (paths and other values as strings)."""
    return json.loads(json.dumps(asdict(cfg), default=str))


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def resume_differences(before: dict, now: dict) -> list[str]:
    """Settings (dotted, e.g. 'train.lr') whose value differs from the run being resumed. A setting the old
    run did not record yet (added in a later version) counts as equal when it is at its default, which is
    what the old version did."""
    old, new = _flat(before), _flat(now)
    defaults = _flat(config_json(Config(model="", data="", output="")))
    return sorted(k for k, v in new.items() if k not in RESUMABLE
                  and old.get(k, defaults.get(k)) != v)


FLAGS = {
    "text_column": Flag("the column holding the texts"),
    "label_column": Flag("the column holding the labels"),
    "group_column": Flag("keep each group (source document, user...) inside one fold"),
    "encoding": Flag("input encoding, e.g. cp949 for Korean Excel exports"),
    "on_missing": Flag("rows with empty text or label: drop them with a warning or fail", choices=("drop", "fail")),
    "normalize": Flag("kc: KcELECTRA-style cleaning of noisy text (emoji, URLs, repeats); stored with the model",
                      choices=("none", "kc")),
    "folds": Flag("cross-validation folds (at least 2)"),
    "seed": Flag("folds, initialisation and shuffling"),
    "max_length": Flag("tokens per text"),
    "dropout": Flag("override the model's dropout", shown="the model's"),
    "inner_val": Flag("share of each training fold used for early stopping"),
    "holdout": Flag("set this share of rows aside first (stratified; whole groups with --group-column): never "
                    "seen by the folds or the final model, which is scored on them in report.json; written as "
                    "OUTPUT/holdout.csv for serving.export --eval-csv (0: off)", metavar="FRACTION"),
    "random_init": Flag("same architecture with random weights (ablation)"),
    "device": Flag("where training runs", choices=("auto", "cpu", "cuda")),
    "final": Flag("after CV, train on all rows and save OUTPUT/model"),
    "resume": Flag("reuse finished folds in --output"),
    "blend": Flag("blend the model with the TF-IDF baseline, fitted on out-of-fold rows and scored nested; "
                  "auto: keep it (report, --final model) only where it beats the model", choices=MODES),
    "engine": Flag("where the folds train: here one after another, or as Ray tasks (pip install -e '.[ray]')",
                   choices=("local", "ray")),
    "address": Flag("--engine ray: the Ray cluster to join (e.g. auto)", shown="start Ray on this machine"),
    "gpus_per_fold": Flag("--engine ray: GPUs per fold task (0.5: two folds share a GPU)"),
    "cpus_per_fold": Flag("--engine ray: CPUs (threads) per fold task"),
}
TRAIN_FLAGS = {
    "epochs": Flag("training epochs per fold (early stopping may end sooner)"),
    "batch_size": Flag("texts per step"),
    "lr": Flag("peak learning rate"),
    "layer_decay": Flag("layer-wise LR decay (1 = off)"),
    "weight_decay": Flag("AdamW weight decay"),
    "warmup": Flag("warmup share of all steps"),
    "patience": Flag("early-stopping patience in epochs (0 = off)"),
    "max_grad_norm": Flag("gradient clipping"),
    "class_weights": Flag("weight the loss by inverse class frequency"),
    "precision": Flag("float type on CUDA (auto: bf16 where the GPU has it; fp32 on CPU)", choices=PRECISIONS),
    "static_shapes": Flag("pad batches to a few fixed shapes (auto: on CUDA); same loss, fewer distinct kernels",
                          choices=SWITCHES),
    "compile": Flag("torch.compile the training step (auto: on CUDA; first steps compile, slow); "
                    "graphs: also replay it as CUDA graphs (CUDA only)", choices=COMPILE_CHOICES),
}
ADAPT_FLAGS = {
    "steps": Flag("task-adaptive pretraining: this many replaced-token-detection steps per fold on the fold's "
                  "training texts, from --model (an ELECTRA folder from pretraining/train.py); 0 = off"),
    "lr": Flag("adaptation learning rate"),
    "batch_size": Flag("blocks of 128 tokens per step"),
    "warmup": Flag("adaptation warmup share of its steps"),
    "seq_len": Flag("tokens per adaptation block (capped at the model's positions)"),
    "corpus": Flag("extra unlabeled text files read in every fold"),
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=DefaultsHelp)
    p.add_argument("--model", help="local folder, hub id, or alias (see --list-models) (required)")
    p.add_argument("--data", help="CSV/TSV/JSONL/Parquet with text and label columns, or 'bbcnews' (built in) "
                                  "(required)")
    p.add_argument("--list-models", action="store_true", help="print the model aliases and exit (default: off)")
    p.add_argument("--output", help="output folder (default: runs/<timestamp>-<model>)")
    add_flags(p, Config, FLAGS, skip=("model", "data", "output", "train", "adapt"))
    add_flags(p, TrainConfig, TRAIN_FLAGS)
    add_flags(p, AdaptConfig, ADAPT_FLAGS, prefix="adapt_")
    return p


def parse_args(argv=None) -> Config | None:
    p = build_parser()
    a = p.parse_args(argv)
    if a.list_models:
        print(list_models())
        return None
    return config_from_args(p, a)


def config_from_args(p: argparse.ArgumentParser, a: argparse.Namespace) -> Config:
    """The Config from parsed flags, checked (p.error on a bad combination); finetune/search.py adds its own."""
    if not a.model or not a.data:
        p.error("--model and --data are required (try --model minilm --data bbcnews offline)")
    if a.folds < 2:
        p.error("--folds must be at least 2")
    if not 0 <= a.holdout < 1:
        p.error("--holdout must be a fraction in [0, 1), e.g. 0.2")
    if a.cpus_per_fold < 1 or a.gpus_per_fold < 0:
        p.error("--cpus-per-fold must be at least 1 and --gpus-per-fold at least 0")
    if a.adapt_steps < 0 or (a.adapt_steps and a.random_init):
        p.error("--adapt-steps must be >= 0, and adapts pretrained weights: it does not go with --random-init")
    values = vars(a)
    adapt_cfg = config_from(AdaptConfig, values, prefix="adapt_")
    train = config_from(TrainConfig, {f.name: values[f.name] for f in dataclasses.fields(TrainConfig)})
    output = a.output or f"runs/{datetime.now():%Y%m%d-%H%M%S}-{Path(a.model.rstrip('/')).name}"
    fields = {f.name for f in dataclasses.fields(Config)} - {"train", "adapt", "output"}
    return Config(output=output, train=train, adapt=adapt_cfg, **{k: values[k] for k in fields})


def cpu_threads(accelerator) -> None:
    import torch

    if accelerator.device.type == "cpu" and omp_threads() is None:
        # An explicit OMP_NUM_THREADS wins. Otherwise one thread per core this process may use that other work does
        # not keep busy: threads waiting for a shared core cost 5-10x (textdata/cpu_limits.py).
        torch.set_num_threads(plan_threads().threads)


def run_fold(cfg: Config, k: int, train_idx, val_idx, data, ids, tokenizer, resolved: str, fold_dir: Path,
             accelerator) -> tuple[dict, np.ndarray, np.ndarray]:
    """One fold: (its record, the model's and the baseline's probabilities on its held-out rows). On --resume a
    finished fold is read back; otherwise it is trained, scored and written whole."""
    import torch

    seed = cfg.seed * 1000 + k  # one seed per fold, derived from --seed
    done = fold_dir / f"fold_{k}.json"
    if cfg.resume and done.exists():
        saved = json.loads(done.read_text())
        arrays = np.load(fold_dir / f"fold_{k}.npz")
        proba, base_proba = arrays["proba"], arrays["baseline"]
        print(f"fold {k}: reused from {done}", file=sys.stderr)
    else:
        inner_tr, inner_va = inner_split(data.y[train_idx], None if data.groups is None else data.groups[train_idx],
                                         cfg.inner_val, seed)
        fit_idx, stop_idx = train_idx[inner_tr], train_idx[inner_va]
        start = resolved
        if cfg.adapt.steps:  # the fold's training texts only: the held-out rows are what it is scored on
            start = str(adapt(resolved, [data.texts[i] for i in train_idx], fold_dir / f"adapt_{k}", cfg.adapt, seed))
        torch.manual_seed(seed)
        model = load_classifier(cfg.model, start, data.labels, cfg.dropout, cfg.random_init)
        hist = fit(model, tokenizer, [ids[i] for i in fit_idx], data.y[fit_idx], [ids[i] for i in stop_idx],
                   data.y[stop_idx], cfg.train, seed, accelerator, desc=f"fold {k + 1}/{cfg.folds}")
        proba = predict_proba(model, [ids[i] for i in val_idx], tokenizer.pad_token_id or 0, accelerator.device,
                              cfg.train.precision)
        try:
            base_proba = baseline_predict(data.texts, data.y, train_idx, val_idx, seed)
            base_metrics = fold_metrics(data.y[val_idx], base_proba.argmax(1), data.labels)
        except BaselineError as e:  # the model's numbers stand; the report says why there is no baseline
            base_proba = np.full_like(proba, np.nan)
            base_metrics = {"error": str(e)}
        saved = {
            "fold": k, "seed": seed, "n_train": len(fit_idx), "n_early_stopping": len(stop_idx),
            "n_val": len(val_idx), **fold_metrics(data.y[val_idx], proba.argmax(1), data.labels),
            "best_epoch": hist.best_epoch, "train_seconds": round(hist.seconds, 2),
            "samples_per_second": round(hist.samples_per_second, 2),
            "baseline": base_metrics,
            "history": dataclasses.asdict(hist),
        }
        if accelerator.is_main_process:
            save_fold(fold_dir, k, saved, proba, base_proba)
        del model
    return saved, proba, base_proba


@dataclass(frozen=True)
class FoldJob:
    """One fold of one run (a search trial's run, with `trial` set): what a worker is sent, a few hundred bytes."""

    cfg: Config  # its output folder holds the fold's files
    k: int
    trial: int | None = None

    def __call__(self, prep, accelerator):
        train_idx, val_idx = prep.folds[self.k]
        fold_dir = Path(self.cfg.output) / "folds"
        fold_dir.mkdir(parents=True, exist_ok=True)
        return run_fold(self.cfg, self.k, train_idx, val_idx, prep.data, prep.ids, prep.tokenizer, prep.resolved,
                        fold_dir, accelerator)


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


def prepare(cfg: Config) -> Prepared:
    """Read and check the data, set the holdout aside, tokenize, and fix the folds (OUTPUT/fold_ids.json)
    before any fold starts."""
    cache = Path.home() / ".cache" / "electra-classify"
    data_path = BUILTIN_DATA[cfg.data](cache) if cfg.data in BUILTIN_DATA else Path(cfg.data)
    normalizer = Normalizer(cfg.normalize)
    data = load_labeled(data_path, cfg.text_column, cfg.label_column, cfg.group_column, cfg.folds,
                        cfg.on_missing, normalizer, cfg.encoding)
    held = None
    if cfg.holdout:  # set aside before anything is fitted: neither the folds nor the final model see them
        data, held = split_holdout(data, cfg.holdout, cfg.folds, cfg.seed, data_path)
    resolved = resolve_model(cfg.model)
    if cfg.adapt.steps and not Path(resolved).is_dir():
        raise DataError(f"--adapt-steps needs a local ELECTRA folder as --model, not {cfg.model!r}")
    tokenizer = load_tokenizer(cfg.model, resolved, cfg.max_length)
    ids = encode(tokenizer, data.texts, cfg.max_length)
    folds = fixed_folds(Path(cfg.output), data, cfg.folds, cfg.seed, reuse=cfg.resume)
    return Prepared(data_path, normalizer, data, held, resolved, tokenizer, ids, folds)


def run(cfg: Config) -> dict:
    import transformers

    started = time.time()
    transformers.logging.set_verbosity_error()  # "newly initialized: classifier.*" is the point of fine-tuning
    out = Path(cfg.output)
    accelerator = pick_accelerator(cfg.device)  # local folds, the final model
    main = accelerator.is_main_process
    cpu_threads(accelerator)

    recorded = config_json(cfg)
    if cfg.resume and (out / "config.json").exists():
        differs = resume_differences(json.loads((out / "config.json").read_text()), recorded)
        if differs:
            raise DataError(f"--resume: {out} was run with different {differs}; use a new --output")
    prep = prepare(cfg)
    data, held, resolved, tokenizer, ids = prep.data, prep.held, prep.resolved, prep.tokenizer, prep.ids
    data_path, normalizer = prep.data_path, prep.normalizer
    fold_dir = out / "folds"
    fold_dir.mkdir(parents=True, exist_ok=True)
    if main:
        write_json(out / "config.json", recorded)
        if held is not None:  # the rows as read, every column: serving.export --eval-csv takes it as is
            write_table(data.table.iloc[held.keep], out / "holdout.csv")
    print(f"{len(data.y)} rows, {len(data.labels)} classes, {cfg.folds} folds"
          f"{' grouped by ' + repr(cfg.group_column) if cfg.group_column else ''}; model {resolved} "
          f"on {accelerator.device if cfg.engine == 'local' else 'Ray workers'}; folds fixed in {out / FOLD_IDS}",
          file=sys.stderr)

    n = len(data.y)
    oof = np.full((n, len(data.labels)), np.nan, dtype=np.float32)
    base_oof = np.full((n, len(data.labels)), np.nan, dtype=np.float32)
    fold_of = np.full(n, -1)
    by_fold = {}
    with open_runner(cfg, prep, accelerator) as runner:
        for k in range(cfg.folds):
            runner.submit(FoldJob(cfg, k))
        for _ in range(cfg.folds):
            job, (saved, proba, base_proba) = runner.next_done()
            by_fold[job.k] = saved, proba, base_proba
            print(f"fold {job.k}: macro-F1 {saved['macro_f1']:.4f} (baseline {_f1(saved['baseline'])}), "
                  f"accuracy {saved['accuracy']:.4f}, best epoch {saved['best_epoch']}", file=sys.stderr)
    results, histories = [], []
    for k, (_, val_idx) in enumerate(prep.folds):  # in fold order, whatever order they finished in
        saved, proba, base_proba = by_fold[k]
        oof[val_idx], base_oof[val_idx], fold_of[val_idx] = proba, base_proba, k
        histories.append(saved.pop("history"))
        results.append(saved)

    report = {
        "model": cfg.model, "resolved_model": resolved, "data": str(data_path), "labels": data.labels,
        "n_rows": len(data.table), "n_used": int(n), "dropped": data.dropped,
        "folds": [{k: v for k, v in r.items() if k != "baseline"} for r in results],
        **summarize(results),
        "baseline": {"name": "char TF-IDF + logistic regression", "folds": [r["baseline"] for r in results]},
        "config": recorded, "seed": cfg.seed, "device": str(accelerator.device), "warnings": [],
    }
    fitted = [b for b in report["baseline"]["folds"] if "error" not in b]
    if fitted:
        report["baseline"].update(summarize(fitted))
        report["lift_macro_f1"] = report["macro_f1_mean"] - report["baseline"]["macro_f1_mean"]
    failed = [f"fold {r['fold']}: {r['baseline']['error']}" for r in results if "error" in r["baseline"]]
    if failed:
        report["warnings"].append(f"the TF-IDF baseline could not be fitted in {'; '.join(failed)}")
    report["blend"], blend_oof = cv_blend(oof, base_oof, data.y, fold_of, data.labels, cfg.blend, report["macro_f1_mean"])
    if held is not None:
        report["holdout"] = holdout_baseline(out, data, held, cfg)
    if main:
        write_outputs(out, cfg, data, oof, base_oof, blend_oof, fold_of, report, histories, held)
    if cfg.final:
        final_model(cfg, resolved, tokenizer, ids, data, normalizer, report, accelerator, held)
    report["wall_seconds"] = round(time.time() - started, 1)
    for w in report["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    if main:
        write_json(out / "report.json", report)
        print(summary_table(report))
        print(f"\nwrote {out}/report.json, oof_predictions.csv, confusion_matrix.png, learning_curves.png"
              + (", model/" if cfg.final else "") + (", holdout.csv" if held is not None else ""))
    return report


def command_line(cfg: Config) -> str:
    """The k-fold command that runs `cfg`: every setting away from its default as its flag."""
    import shlex

    default = config_json(Config(model="", data="", output=""))
    now = config_json(cfg)
    parts = ["python", "finetune/kfold.py", "--model", cfg.model, "--data", cfg.data]
    for key, value in _flat(now).items():
        if key in ("model", "data", "output", "resume") or value == _flat(default).get(key):
            continue
        group, _, name = key.rpartition(".")
        flag = "--" + ("adapt_" if group == "adapt" else "") + name
        flag = flag.replace("_", "-")
        if isinstance(value, bool):
            parts.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, list):
            parts += [flag, *map(str, value)]
        else:
            parts += [flag, repr(value) if isinstance(value, float) else str(value)]
    return " ".join(shlex.quote(p) for p in [*parts, "--output", cfg.output])


def _f1(metrics: dict | None) -> str:
    return "n/a" if not metrics or "error" in metrics else f"{metrics['macro_f1']:.4f}"


def holdout_baseline(out: Path, data, held, cfg: Config) -> dict:
    """The held-out rows' entry in report.json; the baseline trained on every fold row is scored now, the
    final model (with --final) in final_model."""
    texts = data.texts + held.texts
    y = np.concatenate([data.y, held.y])
    cv, ho = np.arange(len(data.y)), np.arange(len(data.y), len(y))
    try:
        base = fold_metrics(held.y, baseline_predict(texts, y, cv, ho, cfg.seed).argmax(1), data.labels)
    except BaselineError as e:
        base = {"error": str(e)}
    return {"path": str(out / "holdout.csv"), "fraction": cfg.holdout, "n_rows": len(held.y),
            "scored": "final model" if cfg.final else "baseline only (no --final, so no final model to score)",
            "baseline": base}


def write_outputs(out, cfg, data, oof, base_oof, blend_oof, fold_of, report, histories, held=None) -> None:
    from finetune.plots import confusion_png, fold_scores_png, learning_curves_png

    table = data.table.copy()
    n_rows = len(table)
    pred = np.full(n_rows, "", dtype=object)
    base_pred = np.full(n_rows, "", dtype=object)
    score = np.full(n_rows, np.nan)
    fold = np.full(n_rows, -1)
    labels = np.array(data.labels, dtype=object)
    pred[data.keep], score[data.keep] = labels[oof.argmax(1)], oof.max(1)
    base_pred[data.keep] = np.where(np.isnan(base_oof).any(1), "", labels[np.nan_to_num(base_oof).argmax(1)])
    fold[data.keep] = fold_of
    table["fold"], table["pred_label"], table["pred_score"] = fold, pred, score
    for prefix, probs in (("", oof), ("baseline_", base_oof), ("blend_", blend_oof)):
        if probs is None:
            continue
        if prefix == "blend_":  # nested: each row blended with parameters fitted on the other folds
            blend_pred = np.full(n_rows, "", dtype=object)
            blend_pred[data.keep] = labels[probs.argmax(1)]
            table["blend_pred_label"] = blend_pred
        for j, name in enumerate(data.labels):
            col = np.full(n_rows, np.nan)
            col[data.keep] = probs[:, j]
            table[f"{prefix}prob_{name}"] = col
    table["baseline_pred_label"] = base_pred
    error = np.full(n_rows, "", dtype=object)
    error[np.setdiff1d(np.arange(n_rows), data.keep)] = "dropped: empty text or label"
    if held is not None:
        error[held.keep] = "held out (--holdout): in holdout.csv"
    table["error"] = error
    write_table(table, out / "oof_predictions.csv")

    total = np.sum([r["confusion_matrix"] for r in report["folds"]], axis=0)
    confusion_png(total, data.labels, out / "confusion_matrix.png",
                  f"out-of-fold confusion, macro-F1 {report['macro_f1_mean']:.3f}")
    learning_curves_png(histories, out / "learning_curves.png")
    blend = report["blend"] or {}
    fold_scores_png([r["macro_f1"] for r in report["folds"]],
                    [b.get("macro_f1", np.nan) for b in report["baseline"]["folds"]], out / "fold_scores.png",
                    [b["macro_f1"] for b in blend["folds"]] if "folds" in blend else None)


def final_model(cfg, resolved, tokenizer, ids, data, normalizer, report, accelerator, held=None) -> None:
    """Train on every fold row for the median best epoch of the folds, then save a serving-ready folder;
    score it on the held-out rows (--holdout), which it never saw."""
    import torch

    epochs = int(np.median([f["best_epoch"] for f in report["folds"]])) or cfg.train.epochs
    train_cfg = dataclasses.replace(cfg.train, epochs=max(1, epochs), patience=0)
    if cfg.adapt.steps:  # every row is training data for the final model
        resolved = str(adapt(resolved, data.texts, Path(cfg.output) / "adapt_final", cfg.adapt, cfg.seed))
    torch.manual_seed(cfg.seed)
    model = load_classifier(cfg.model, resolved, data.labels, cfg.dropout, cfg.random_init)
    fit(model, tokenizer, ids, data.y, [], np.array([], dtype=np.int64), train_cfg, cfg.seed, accelerator, desc="final")
    if held is not None:
        proba = predict_proba(model, encode(tokenizer, held.texts, cfg.max_length), tokenizer.pad_token_id or 0,
                              accelerator.device, cfg.train.precision)
        report["holdout"].update(fold_metrics(held.y, proba.argmax(1), data.labels))
        print(f"holdout ({len(held.y)} rows never trained on): final model macro-F1 "
              f"{report['holdout']['macro_f1']:.4f}, baseline {_f1(report['holdout']['baseline'])}",
              file=sys.stderr)
    if not accelerator.is_main_process:
        return
    folder = Path(cfg.output) / "model"
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    normalizer.save(folder)
    blend = save_final_blend(folder, data.texts, data.y, len(data.labels), cfg.seed, report["blend"], report["warnings"])
    write_json(folder / "training_config.json", {
        "config": config_json(cfg), "seed": cfg.seed, "final_epochs": train_cfg.epochs,
        "labels": data.labels, "cv": {k: report[k] for k in report if k.endswith(("_mean", "_std"))}, "blend": blend,
    })
    report["final_model"] = {"path": str(folder), "epochs": train_cfg.epochs, "n_train": len(data.y),
                             "blend": blend is not None}
    if blend and held is not None:  # the blend as served (baseline/ read back), on rows nothing was fitted on
        served = ServedBlend(folder, len(data.labels))(proba, held.texts)
        report["holdout"]["blend"] = fold_metrics(held.y, served.argmax(1), data.labels)


def summary_table(report: dict) -> str:
    """Per fold and mean ± std; baseline and blend columns are macro-F1 (the blend's nested)."""
    base, blend = report["baseline"], report.get("blend") or {}
    blend_folds = blend.get("folds", [None] * len(report["folds"]))
    head = (f"{'fold':>6} {'n_val':>6} {'accuracy':>9} {'macro-F1':>9} {'weighted-F1':>12} {'baseline':>14}"
            + (f" {'blend':>14}" if "folds" in blend else ""))
    lines = ["", head, "-" * len(head)]
    for r, b, bl in zip(report["folds"], base["folds"], blend_folds):
        lines.append(f"{r['fold']:>6} {r['n_val']:>6} {r['accuracy']:>9.4f} {r['macro_f1']:>9.4f} "
                     f"{r['weighted_f1']:>12.4f} {_f1(b):>14}" + (f" {_f1(bl):>14}" if bl else ""))
    lines.append("-" * len(head))
    m = {k: f"{report[f'{k}_mean']:.4f}±{report[f'{k}_std']:.3f}" for k in KEYS}
    pm = lambda d: f"{d['macro_f1_mean']:.4f}±{d['macro_f1_std']:.3f}" if "macro_f1_mean" in d else "n/a"
    lines.append(f"{'mean':>6} {'':>6} {m['accuracy']:>9} {m['macro_f1']:>9} {m['weighted_f1']:>12} {pm(base):>14}"
                 + (f" {pm(blend):>14}" if "folds" in blend else ""))
    lines.append(f"\nmacro-F1 {report['macro_f1_mean']:.4f} ± {report['macro_f1_std']:.4f} vs baseline {pm(base)}"
                 + (f" (lift {report['lift_macro_f1']:+.4f})" if "lift_macro_f1" in report else ""))
    if blend:
        score = f"{pm(blend)} (nested), weights model {blend['model_weight']:g}, baseline {blend['baseline_weight']:g}; " \
            if "folds" in blend else ""
        lines.append(f"blend {score}{'kept' if blend['kept'] else 'not kept'}: {blend['why']}")
    held = report.get("holdout")
    if held:
        final = f"final model {held['macro_f1']:.4f}, " if "macro_f1" in held else ""
        lines.append(f"holdout ({held['n_rows']} rows, never trained on): {final}"
                     f"baseline {_f1(held['baseline'])}" + (f", blend {_f1(held['blend'])}" if "blend" in held else ""))
    return "\n".join(lines)


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
