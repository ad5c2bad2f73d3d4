"""k-fold's settings: the Config dataclass, its flags (built from its fields), parsing and checking, the rules
for --resume, a config from its JSON, and the command line that reproduces a config (finetune/search.py writes it as best_command.txt).

Used by finetune/kfold.py (the entry point) and finetune/search.py; nothing here imports torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from finetune.adapt import AdaptConfig
from finetune.models import list_models, model_recipe, resolve_model
from finetune.train_config import COMPILE_CHOICES, SWITCHES, TrainConfig
from textdata.errors import ModelError
from textdata.flags import DefaultsHelp, Flag, Parser, add_flags, config_from
from textdata.inputs import check_file, check_table
from textdata.labels import DEFAULT_SEP, sep_problem
from textdata.numerics import PRECISIONS

BLEND_MODES = ("auto", "off", "on")  # finetune/blend.py
LABEL_ISSUE_MODES = ("auto", "off")  # finetune/label_issues.py (kept here: --help must not import pandas)
BUILTIN_DATA_NAMES = ("bbcnews",)  # --data names finetune/kfold.py resolves itself (BUILTIN_DATA)
DESCRIPTION = "Stratified k-fold fine-tuning of an ELECTRA discriminator (or any encoder) as a text classifier."

@dataclass(frozen=True)
class Config:
    model: str
    data: str
    output: str
    text_column: str = "text"
    label_column: str = "label"
    teacher_column: str | None = None  # an LLM's labels beside the gold ones (finetune/teacher_data.py)
    gold_weight: float = 0.0  # --teacher-column: times each gold row is trained on; 0: auto
    multi_label: bool = False  # several labels per row (finetune/multilabel_data.py)
    label_sep: str = DEFAULT_SEP
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
    calibration_share: float = 0.1  # --final: share of rows kept from the final model to cool its calibration
    random_init: bool = False  # same architecture, random weights: what pretraining is worth
    device: str = "auto"
    final: bool = False
    resume: bool = False
    blend: str = "auto"  # auto | off | on: blend with the baseline (finetune/blend.py)
    target_precision: float | None = None  # the served "confident" threshold's precision (finetune/coverage.py)
    confidence: float = 0.9  # the probability with which that precision is stated to hold (1 - delta of the bound)
    label_issues: str = "auto"  # auto | off: rank likely label errors (finetune/label_issues.py)
    engine: str = "local"  # local | ray: where the folds train (finetune/fold_runner.py)
    address: str | None = None  # a Ray cluster to join; none: start Ray on this machine
    gpus_per_fold: float = 0.0  # Ray resources per fold task (fractions share a GPU)
    cpus_per_fold: int = 1
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    adapt: AdaptConfig = dataclasses.field(default_factory=AdaptConfig)


# Settings that may change on --resume: they change neither the folds nor their numbers (the fast-path
# switches give the plain path's losses: tests/finetune/test_fast_path.py).
# The blend only reads the saved folds; where a fold runs does not change its numbers.
RESUMABLE = frozenset({"resume", "final", "calibration_share", "blend", "label_issues", "target_precision", "confidence",
                       "train.static_shapes", "train.compile", "engine", "address",
                       "gpus_per_fold", "cpus_per_fold"})


def config_json(cfg) -> dict:
    """A config dataclass as the JSON every output records (paths and other values as strings)."""
    return json.loads(json.dumps(asdict(cfg), default=str))


def flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def resume_differences(before: dict, now: dict) -> list[str]:
    """Settings (dotted, e.g. 'train.lr') whose value differs from the run being resumed. A setting the old
    run did not record yet (added in a later version) counts as equal when it is at its default, which is
    what the old version did."""
    old, new = flat(before), flat(now)
    defaults = flat(config_json(Config(model="", data="", output="")))
    return sorted(k for k, v in new.items() if k not in RESUMABLE
                  and old.get(k, defaults.get(k)) != v)


FLAGS = {
    "text_column": Flag("the column holding the texts"),
    "label_column": Flag("the column holding the labels"),
    "teacher_column": Flag("a teacher's labels (an LLM's: finetune.teach) beside --label-column, which then holds "
                           "gold labels only where a person gave one (8 a class is enough): teacher labels are "
                           "corrected where the gold rows show the teacher unreliable, and every score is measured "
                           "on gold rows only; with --multi-label an empty cell is no answer in both columns and "
                           "[] is the empty set (docs/finetune.md#teach-from-an-llm)", metavar="COL"),
    "gold_weight": Flag("--teacher-column: times each gold row is trained on (0: auto, the gold rows together "
                        "weigh as much as the teacher rows, at most 50 each; bench/teacher.py)"),
    "multi_label": Flag("each row may carry several labels (or none): the label column holds them separated by "
                        "--label-sep (a JSON list in JSONL/Parquet); one sigmoid per label, per-label thresholds "
                        "tuned on out-of-fold rows (docs/finetune.md#multi-label)"),
    "label_sep": Flag("--multi-label: the separator between labels in a label cell"),
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
                    "OUTPUT/holdout.csv for serving.export --eval-csv (0: off); with --teacher-column, gold rows only",
                    metavar="FRACTION"),
    "calibration_share": Flag("--final, single-label: keep this share of rows (stratified; whole groups with "
                              "--group-column) from the final model, which is sharper than the fold models the "
                              "calibration was fitted on, and cool its calibration on them (one factor; "
                              "finetune/sharpness.py); skipped under 50 rows; 0: the final model trains on every row",
                              metavar="FRACTION"),
    "random_init": Flag("same architecture with random weights (ablation)"),
    "device": Flag("where training runs", choices=("auto", "cpu", "cuda")),
    "final": Flag("after CV, train on all rows and save OUTPUT/model"),
    "resume": Flag("reuse finished folds in --output"),
    "blend": Flag("blend the model with the TF-IDF baseline, fitted on out-of-fold rows and scored nested; "
                  "auto: keep it (report, --final model) only where it beats the model", choices=BLEND_MODES),
    "label_issues": Flag("rank likely label errors with cleanlab from the out-of-fold probabilities of what is "
                         "served (the blend where kept): OUTPUT/label_issues.csv, most likely first, and a plot; "
                         "auto: wherever every class has enough rows", choices=LABEL_ISSUE_MODES),
    "target_precision": Flag("answers count as 'confident' above the calibrated-score threshold whose answered "
                             "out-of-fold rows reach this precision (e.g. 0.9); chosen on out-of-fold rows, "
                             "served with the --final model", shown="none: every answer confident",
                             metavar="P"),
    "confidence": Flag("with --target-precision: the probability with which the served precision is stated to "
                       "hold on texts like the training rows (a finite-sample bound; higher states more and "
                       "answers fewer texts confident)", metavar="C"),
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
    p = Parser(description=DESCRIPTION, formatter_class=DefaultsHelp, allow_abbrev=False)
    p.add_argument("--model", help="local folder, hub id, or alias (see --list-models) (required)")
    p.add_argument("--data", help="CSV/TSV/JSONL/Parquet with text and label columns, or 'bbcnews' (built in) "
                                  "(required)")
    p.add_argument("--list-models", action="store_true", help="print the model aliases and exit (default: off)")
    p.add_argument("--output", help="output folder (default: runs/<timestamp>-<model>)")
    add_flags(p, Config, FLAGS, skip=("model", "data", "output", "train", "adapt"))
    add_flags(p, TrainConfig, TRAIN_FLAGS)
    p.add_argument("--no-class-weights", dest="class_weights", action="store_false",
                   help="turn --class-weights off where --model's recipe turns it on (default: not given; docs/finetune.md)")
    add_flags(p, AdaptConfig, ADAPT_FLAGS, prefix="adapt_")
    return p


def parse_args(argv=None) -> Config | None:
    p = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    a = p.parse_args(argv)
    if a.list_models:
        print(list_models())
        return None
    return config_from_args(p, a, given=given_flags(p, argv))


def given_flags(p: argparse.ArgumentParser, argv: list[str]) -> frozenset[str]:
    """The settings (argparse dests) the command line names, so a model's recipe fills only the others."""
    named = (arg.split("=", 1)[0] for arg in argv if arg.startswith("--"))
    return frozenset(p._option_string_actions[n].dest for n in named if n in p._option_string_actions)


def apply_recipe(p: argparse.ArgumentParser, a: argparse.Namespace, given: frozenset[str]) -> None:
    """The settings of --model's recipe (finetune/models.py model_recipe) that no flag set, into `a`, said in
    one line; a flag given wins. Recorded in config.json like any flag, so --resume and the app's retrain see
    the values, not the recipe."""
    try:
        found = model_recipe(a.model)
    except ModelError as e:
        p.error(str(e))
    if found is None:
        return
    path, settings = found
    used = {}
    for key, value in settings.items():
        default = getattr(a, key)
        if key in given or value == default:
            continue
        kind = float if default is None else type(default)  # None: dropout, a float when set
        if isinstance(value, bool) is not (kind is bool) or not isinstance(value, (int, float)):
            p.error(f"{path}: {key} = {value!r} is not a {kind.__name__}")
        used[key] = kind(value)
    vars(a).update(used)
    if used:
        flags = " ".join(f"--{k.replace('_', '-')}" + ("" if v is True else f" {v:g}") for k, v in used.items())
        print(f"--model {a.model}: its recipe ({path.name}) sets {flags}; a flag given overrides it",
              file=sys.stderr)


def config_from_args(p: argparse.ArgumentParser, a: argparse.Namespace, given: frozenset[str] | None = None) -> Config:
    """The Config from parsed flags, checked (p.error on a bad combination); finetune/search.py adds its own.
    `given`: the settings the command line named; with it, --model's recipe fills the rest (`apply_recipe`)."""
    if not a.model or not a.data:
        p.error("--model and --data are required (try --model minilm --data bbcnews offline)")
    if given is not None:
        apply_recipe(p, a, given)
    if a.folds < 2:
        p.error("--folds must be at least 2")
    if a.multi_label and sep_problem(a.label_sep):
        p.error(f"--label-sep {a.label_sep[:20]!r} {sep_problem(a.label_sep)}")
    if a.teacher_column and a.gold_weight < 0:
        p.error("--gold-weight must be 0 (auto) or more")
    if not 0 <= a.calibration_share < 0.5:
        p.error("--calibration-share must be a fraction in [0, 0.5), e.g. 0.1")
    if not 0 <= a.holdout < 1:
        p.error("--holdout must be a fraction in [0, 1), e.g. 0.2")
    if a.target_precision is not None and not 0 < a.target_precision < 1:
        p.error(f"--target-precision {a.target_precision:g}: must be a precision in (0, 1), e.g. 0.9")
    if not 0.5 <= a.confidence < 1:
        p.error(f"--confidence {a.confidence:g}: must be a probability in [0.5, 1), e.g. 0.9 or 0.975")
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


def check_inputs(cfg: Config) -> None:
    """The files and folders the flags name exist (and a CSV's header has the named columns), checked before
    torch loads, so that a typo answers in a second."""
    if cfg.data not in BUILTIN_DATA_NAMES:
        columns = {cfg.text_column: "--text-column", cfg.label_column: "--label-column"}
        if cfg.group_column:
            columns[cfg.group_column] = "--group-column"
        if cfg.teacher_column:
            columns[cfg.teacher_column] = "--teacher-column"
        check_table(cfg.data, columns, cfg.encoding, flag="--data")
    if not Path(cfg.model).expanduser().is_dir():
        resolve_model(cfg.model)  # an alias without its package, a path that is not there
    for path in cfg.adapt.corpus:
        check_file(path, "--adapt-corpus")


def config_from_json(values: dict) -> Config:
    """The Config from a dict shaped as config.json records one (`train` and `adapt` nested), as the app's
    training child is given it: settings left out take --model's recipe where it names them, else their defaults;
    an unknown one is refused."""
    values, train_values = dict(values), dict(values.get("train", {}))
    found = model_recipe(values["model"]) if values.get("model") else None
    for key, value in (found or ((), {}))[1].items():  # --model's recipe fills what is left out, as on the CLI
        (values if key == "max_length" else train_values).setdefault(key, value)
    values["train"] = train_values
    train = config_from(TrainConfig, values.pop("train", {}))
    adapt_cfg = config_from(AdaptConfig, values.pop("adapt", {}))
    return config_from(Config, values, train=train, adapt=adapt_cfg)


def command_line(cfg: Config) -> str:
    """The k-fold command that runs `cfg`: every setting away from its default as its flag."""
    import shlex

    default = config_json(Config(model="", data="", output=""))
    now = config_json(cfg)
    try:  # the settings --model's recipe names are written out: the command must not depend on the recipe
        recipe = {f"train.{k}" if k != "max_length" else k for k in (model_recipe(cfg.model) or ((), {}))[1]}
    except ModelError:
        recipe = set()
    parts = ["python", "finetune/kfold.py", "--model", cfg.model, "--data", cfg.data]
    for key, value in flat(now).items():
        if key in ("model", "data", "output", "resume") or (value == flat(default).get(key) and key not in recipe):
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

