"""A run folder given where a model folder is wanted: use the model inside it, or say which one to pass.

A k-fold run (finetune/kfold.py) keeps its deployable model in model/ (with --final), a pretraining run
(pretraining/train.py) its encoder in discriminator/; both runs also hold a config.json of their own, with
no `model_type`, so handing the run folder to transformers gives its error listing every model type.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from textdata.errors import ModelError
from textdata.model_files import CONFIG
from textdata.model_files import VERSION as VERSION_FILE  # app/versions/registry.py writes it in each version folder

# subfolder -> what the run folder is when it holds one
RUNS = {"model": "a k-fold run (finetune/kfold.py --final)", "discriminator": "a pretraining run (pretraining/train.py)"}


def is_model_folder(folder: Path) -> bool:
    """A transformers (or serving.export) folder: its config.json names a model_type."""
    try:
        return "model_type" in json.loads((folder / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return False


def model_in_run(path: str | Path, use: tuple[str, ...], flag: str = "--model") -> Path:
    """`path`, or its first subfolder in `use` ('model', 'discriminator') when `path` is a run folder,
    with a one-line note on stderr. A run folder without a usable model raises ModelError saying what
    to pass instead; anything else is returned as given, for the caller's own checks."""
    path = Path(path)
    if not path.is_dir() or is_model_folder(path):
        return path
    for sub in use:
        if is_model_folder(path / sub):
            print(f"note: {flag} {path} is {RUNS[sub]}; using {path / sub}", file=sys.stderr)
            return path / sub
    if is_model_folder(path / "discriminator"):  # wanted a classifier, got a pretraining run
        raise ModelError(
            f"{flag} {path} is {RUNS['discriminator']}: its discriminator/ has no classification head yet. "
            f"Fine-tune it first (python finetune/kfold.py --model {path / 'discriminator'} --data LABELED.csv "
            "--final) and pass that run's model/")
    if (path / "report.json").is_file() or (path / "folds").is_dir():
        raise ModelError(f"{flag} {path} is a k-fold run without model/: rerun finetune/kfold.py with the same "
                         "--output plus --resume --final (finished folds are reused) to train one")
    if (path / CONFIG).is_file():
        raise ModelError(f"{flag} {path}: its config.json has no model_type, so it is not a model folder "
                         "(expected a transformers save_pretrained folder or serving.export's output)")
    return path


_PLACEHOLDER_LABEL = re.compile(r"^LABEL_[0-9]+$")


MAX_CONFIG_BYTES = 4 << 20  # a config.json is a few KB; 10,000 labels of 60 characters fit
MAX_LABELS = 10_000


def check_classifier(folder: str | Path, flag: str = "--model") -> None:
    """Refuse a model folder with no trained classification head, before anything loads it: transformers
    would add a random head with only a warning, and its answers would look like a model's (issue 31). Such a
    folder is a pretrained encoder (pretraining/'s discriminator: ElectraForPreTraining, a masked LM), or has
    transformers' placeholder labels LABEL_0, LABEL_1, ... (never fine-tuned on named labels). serving.export,
    the engine (so batch scoring) and the app's registry all ask this; it reads config.json only."""
    folder = Path(folder)
    try:
        if (folder / CONFIG).stat().st_size > MAX_CONFIG_BYTES:
            raise ModelError(f"{folder / CONFIG}: {(folder / CONFIG).stat().st_size:,} bytes, over the "
                             f"{MAX_CONFIG_BYTES >> 20} MB a config.json may take")
        config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        if isinstance(e, ModelError):
            raise
        return  # missing or unreadable: the loader says so with its own message
    if not isinstance(config, dict):
        return
    fine_tune = f"fine-tune it first: python finetune/kfold.py --model {folder} --data LABELED.csv --final"
    arch = [a for a in config.get("architectures") or [] if isinstance(a, str)]
    if arch and not any(a.endswith("ForSequenceClassification") for a in arch):
        raise ModelError(f"{flag} {folder}: {arch[0]}, a pretrained encoder with no trained classification "
                         f"head (it would answer with a random one); {fine_tune}")
    check_label_names(config.get("id2label") or {}, folder / CONFIG)
    names = [str(v) for v in (config.get("id2label") or {}).values()]
    if not names or all(_PLACEHOLDER_LABEL.match(n) for n in names):
        shown = ", ".join(names[:3]) or "none: transformers' LABEL_0, LABEL_1"
        raise ModelError(f"{flag} {folder} has no label names (id2label: {shown}): never fine-tuned on named "
                         f"labels, its head may be random; {fine_tune} (trained elsewhere: put the label names "
                         "in config.json's id2label)")


def check_label_names(id2label, path: Path) -> None:
    """config.json's labels follow the one label-name rule (textdata/labels.py `name_problem`): they are shown
    in the UI, written into CSV files and echoed by /v1/model, so a model folder from outside may not bring a
    20 MB name, a control character, a bidirectional override or a duplicate (issue 40). ModelError naming
    the file and the label id."""
    from textdata.labels import name_problem

    if not isinstance(id2label, dict):
        raise ModelError(f"{path}: id2label must map ids to names, got {type(id2label).__name__}")
    if len(id2label) > MAX_LABELS:
        raise ModelError(f"{path}: id2label holds {len(id2label):,} labels (at most {MAX_LABELS:,})")
    if sorted(id2label, key=str) != sorted((str(i) for i in range(len(id2label))), key=str):
        raise ModelError(f"{path}: id2label's ids must be 0 to {len(id2label) - 1}")
    seen: dict[str, str] = {}
    for key, name in id2label.items():
        problem = name_problem(name) if isinstance(name, str) else f"is a {type(name).__name__}, not a text"
        if problem:
            shown = ascii(name[:40]) + ("..." if len(name) > 40 else "") if isinstance(name, str) else ""
            raise ModelError(f"{path}: id2label[{key}] {shown} {problem}".replace("  ", " "))
        if name in seen:
            raise ModelError(f"{path}: id2label[{seen[name]}] and id2label[{key}] are both {name!r}: label names "
                             "must differ")
        seen[name] = key




def model_version(folder: str | Path) -> str:
    """The version a model folder answers as: version.json's name in a registry version (v1, v2, ...), else
    the folder's own name. The API, the UI and `serving.score` (its `model_version` column) agree on it."""
    folder = Path(folder)
    try:
        return str(json.loads((folder / VERSION_FILE).read_text(encoding="utf-8"))["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return folder.resolve().name
