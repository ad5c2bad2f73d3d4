"""The run configuration: one frozen dataclass, filled from a preset and then from command-line flags.

Every field is a flag (`--hidden-size 128`, `--two-stage`); a preset only changes defaults. The whole
config, seed included, is written to OUTPUT/config.json and into each checkpoint.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import sys
from dataclasses import asdict, dataclass, fields
from pathlib import Path

# The objectives pretraining/model.py implements (here so that checking flags needs no torch).
# electra: RTD on all tokens (the paper's method). electra-15: RTD loss only on the 15% masked positions.
# mlm: BERT baseline, a discriminator-sized MLM. replace-mlm: MLM whose input has generator samples instead
# of [MASK]. all-tokens-mlm: predict every token of the sampled input, with a copy gate (paper, section 3.2).
OBJECTIVES = ("electra", "electra-15", "mlm", "replace-mlm", "all-tokens-mlm")


# Twin of textdata.errors.UserError (pretraining imports no other package): tests/textdata/test_twins.py
class UsageError(Exception):
    """Bad input from the user: printed as one line, without a traceback; finetune/adapt.py turns it into a
    `DataError`."""


# Twin of textdata.errors.exits_2_on_user_error: tests/textdata/test_twins.py
def exits_2_on_usage_error(main):
    """Wrap a CLI `main`: a UsageError becomes `error: <message>` on stderr and exit status 2."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs) -> int:
        try:
            return main(*args, **kwargs)
        except UsageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2

    return wrapper


@dataclass(frozen=True)
class TrainConfig:
    corpus: tuple[str, ...] = ()
    output: str = ""
    tokenizer: str | None = None  # a folder; without it a WordPiece vocabulary is trained on the corpus
    vocab_size: int | None = None  # only for that tokenizer; None = sized to the corpus (tokenizer.vocab_size_for)
    # Continue from a pretrained discriminator (a run folder or a discriminator folder): its weights, vocabulary
    # and shape; the generator beside it when there is one, else a fresh one. Task-adaptive pretraining.
    init_from: str | None = None
    # with --init-from e5-small: "corpus" prunes its 250k vocabulary to the corpus (pretraining/e5_prune.py), "full"
    init_vocab: str = "corpus"
    text_column: str = "text"  # for corpus files that are tables (.csv, .tsv, .jsonl, .parquet)
    preset: str = "small"
    # Model (defaults: ELECTRA-Small, Clark et al. 2020, table 6)
    embedding_size: int = 128
    hidden_size: int = 256
    num_hidden_layers: int = 12
    num_attention_heads: int = 4
    intermediate_size: int = 1024
    max_position_embeddings: int = 512
    dropout: float = 0.1
    generator_ratio: float = 0.25
    # Objective
    objective: str = "electra"
    two_stage: bool = False
    mask_prob: float = 0.15
    disc_weight: float = 50.0
    # Data
    seq_len: int = 128
    cache_dir: str | None = None  # default OUTPUT/cache
    # Optimisation
    batch_size: int = 128
    lr: float = 5e-4
    warmup_steps: int = 10_000
    max_steps: int = 1_000_000
    weight_decay: float = 0.01
    adam_epsilon: float = 1e-6
    grad_clip: float = 1.0
    precision: str = "auto"  # auto: bf16 (or fp16 where bf16 is missing) on CUDA, fp32 on CPU
    compile: str = "auto"  # torch.compile the whole step: auto (on CUDA) | on | off | graphs (CUDA graphs too)
    seed: int = 42
    # Bookkeeping
    log_every: int = 100
    save_every: int = 1000
    stop_after: int | None = None  # stop (with a checkpoint) before max_steps; the schedule still targets max_steps
    resume: bool = False

    def __post_init__(self):
        checks = [
            (self.objective in OBJECTIVES, f"unknown objective {self.objective!r}; choose from {', '.join(OBJECTIVES)}"),
            (not self.two_stage or self.objective in ("electra", "electra-15"),
             "--two-stage needs objective electra or electra-15"),
            (self.hidden_size % self.num_attention_heads == 0,
             f"hidden size {self.hidden_size} is not a multiple of {self.num_attention_heads} attention heads"),
            (self.precision in ("auto", "fp32", "bf16", "fp16"), f"unknown precision {self.precision!r}"),
            (self.compile in ("auto", "on", "off", "graphs"),
             f"unknown compile {self.compile!r}; choose from auto, on, off, graphs"),
            (self.seq_len <= self.max_position_embeddings, "seq_len exceeds max_position_embeddings"),
            (self.seq_len >= 8, "seq_len must be at least 8"),
            (0 < self.mask_prob < 1, "mask_prob must be between 0 and 1"),
            (0 < self.generator_ratio <= 1, "generator_ratio must be in (0, 1]"),
            (not (self.init_from and self.tokenizer), "--init-from brings its own vocabulary; leave out --tokenizer"),
            (self.init_vocab in ("corpus", "full"), f"unknown init_vocab {self.init_vocab!r}; choose corpus or full"),
            (self.vocab_size is None or self.vocab_size > 5, f"vocab_size {self.vocab_size} is too small"),
            (min(self.batch_size, self.max_steps, self.log_every, self.save_every) > 0,
             "batch_size, max_steps, log_every and save_every must be positive"),
        ]
        for ok, message in checks:
            if not ok:
                raise UsageError(message)

    @classmethod
    def from_dict(cls, values: dict) -> TrainConfig:
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise UsageError(f"unknown config keys: {', '.join(unknown)}")
        values = dict(values)
        if "corpus" in values:
            values["corpus"] = tuple(values["corpus"])
        return cls(**values)

    def to_dict(self) -> dict:
        return asdict(self)


_MODEL_AND_SCHEDULE = ("embedding_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                       "intermediate_size", "max_position_embeddings", "seq_len", "batch_size", "lr",
                       "warmup_steps", "max_steps", "log_every", "save_every")
PRESETS: dict[str, dict] = {
    # Seconds on a laptop CPU: for tests and smoke runs.
    "tiny": dict(zip(_MODEL_AND_SCHEDULE, (64, 128, 2, 2, 256, 128, 128, 32, 1e-3, 100, 2000, 20, 200))),
    "small": {},  # the dataclass defaults
    # ELECTRA-Base (table 6; generator ratio left at 1/4, the paper's best range is 1/4 to 1/2).
    "base": dict(zip(_MODEL_AND_SCHEDULE, (768, 768, 12, 12, 3072, 512, 128, 256, 2e-4, 10_000, 766_000, 100,
                                           1000))),
}



def _vocab_size_flag(value: str) -> int | None:
    if value == "auto":
        return None
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number or 'auto', not {value!r}") from None


# Flags whose type cannot be read from the default (None).
_OPTIONAL_TYPES = {"tokenizer": str, "cache_dir": str, "stop_after": int, "init_from": str, "vocab_size": _vocab_size_flag}
# May differ between a run and its --resume: they change bookkeeping, not the trajectory.
RESUMABLE_CHANGES = frozenset({"resume", "stop_after", "log_every", "save_every", "cache_dir", "compile"})


def _default_help(name: str, default) -> str:
    """The default, and each preset's value where a preset sets one (a preset only changes defaults)."""
    shown = "none" if default is None else ("off" if default is False else default)
    by_preset = [f"--preset {p}: {values[name]}" for p, values in PRESETS.items() if name in values]
    return f"(default: {shown}" + ("; " + ", ".join(by_preset) if by_preset else "") + ")"


# Twin of textdata.flags.flag_hint: tests/textdata/test_twins.py
def flag_hint(message: str, known: list[str]) -> str:
    """argparse's error `message` with the closest known flag to each unrecognized one."""
    head = "unrecognized arguments: "
    if not message.startswith(head):
        return message
    said = []
    for token in message[len(head):].split():
        if not token.startswith("-"):
            continue  # the value that followed the unknown flag
        close = difflib.get_close_matches(token.split("=", 1)[0], known, n=1, cutoff=0.6)
        said.append(f"unknown flag {token}" + (f": did you mean {close[0]}?" if close else ""))
    return "; ".join(said) or message


# Twin of textdata.flags.Parser: tests/textdata/test_twins.py
class Parser(argparse.ArgumentParser):
    """argparse's parser with one-line errors: a mistyped flag names the closest one ("did you mean --folds?")
    instead of 24 lines of usage above "unrecognized arguments"."""

    def error(self, message: str):
        print(f"{self.prog}: error: {flag_hint(message, list(self._option_string_actions))} (--help lists every "
              "flag)", file=sys.stderr)
        raise SystemExit(2)


# Twin of textdata.flags.add_flags (which the other CLIs use): tests/textdata/test_twins.py
def build_parser(description: str) -> argparse.ArgumentParser:
    """One flag per TrainConfig field, each help line showing its default and each preset's value."""
    parser = Parser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter,
                    allow_abbrev=False)  # `--max-step 10` must not pass as --max-steps
    for f in fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.name == "corpus":
            parser.add_argument(flag, nargs="+", required=True,
                                help="text files, one paragraph a line (.gz ok), or tables (.csv .tsv .jsonl .parquet) "
                                     "whose --text-column is read, one row a paragraph (required)")
        elif f.name == "output":
            parser.add_argument(flag, type=str, default=argparse.SUPPRESS, required=True,
                                help="run folder: checkpoints, logs, discriminator/ and generator/ (required)")
        elif isinstance(f.default, bool):
            parser.add_argument(flag, action="store_true", default=argparse.SUPPRESS,
                                help=_default_help(f.name, f.default))
        else:
            kind = _OPTIONAL_TYPES.get(f.name) or type(f.default)
            about = f"one of {', '.join(PRESETS)} " if f.name == "preset" else ""
            parser.add_argument(flag, type=kind, default=argparse.SUPPRESS, help=about + _default_help(f.name, f.default))
    return parser


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    given = vars(args)
    preset = given.get("preset", "small")
    if preset not in PRESETS:
        raise UsageError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
    return TrainConfig.from_dict({**PRESETS[preset], **given})


def check_paths(cfg: TrainConfig) -> None:
    """The files and folders the flags name exist, checked before torch loads (a typo answers in a second);
    pretraining/corpus.py `check_corpus` reads them fully later."""
    for path in cfg.corpus:
        if not Path(path).is_file():
            raise UsageError(f"corpus file not found: {path}" + (" (a folder: give its files)" if Path(path).is_dir() else ""))
    for flag, folder in (("--tokenizer", cfg.tokenizer), ("--init-from", cfg.init_from)):
        if folder and not Path(folder).is_dir() and not (flag == "--init-from" and folder.lower() == "e5-small"):
            raise UsageError(f"{flag} {folder}: no such folder")


def hint_on_missing_module(kind, value, tb) -> None:
    """sys.excepthook for pretraining's scripts: a library missing from this Python (run outside the project's
    venv) is one line saying what to do, not a traceback. Twin of textdata/inputs.py's."""
    if issubclass(kind, ModuleNotFoundError):
        print(f"error: {value}: activate the project's venv (source .venv/bin/activate) or install it: "
              "pip install -e .", file=sys.stderr)
        return
    sys.__excepthook__(kind, value, tb)


def check_command_line(argv: list[str] | None, description: str) -> None:
    """pretraining/train.py's first step, before torch loads: parse (argparse exits on --help and bad flags) and
    check the paths; a UsageError is one line and exit 2. Twin of textdata/inputs.py `check_before_imports`
    (pretraining imports no other package), whose missing-library hint it also installs for the imports after."""
    sys.excepthook = hint_on_missing_module
    try:
        check_paths(config_from_args(build_parser(description).parse_args(argv)))
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def resume_differences(saved: dict, current: TrainConfig) -> list[str]:
    """Settings that differ from the checkpoint's. One the checkpoint does not record (added in a later
    version) counts as equal at its default, which is what the older version did."""
    now = current.to_dict()
    defaults = {f.name: f.default for f in fields(TrainConfig)}
    saved = {**defaults, **saved, "corpus": list(saved.get("corpus", ()))}
    now["corpus"] = list(now["corpus"])
    return [f"{k}: {saved[k]!r} -> {now[k]!r}" for k in now
            if k not in RESUMABLE_CHANGES and saved[k] != now[k]]

