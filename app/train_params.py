"""What a retrain may set: one list for POST /v1/train's fields, the Train tab's inputs and what a retrain
inherits from the active version.

Each entry names its place in the k-fold config (`finetune/config.py` Config; "train.epochs" is
`Config.train.epochs`), so the training child is given the config itself ({"kfold": {...}}, nested as
config.json records it), never flags. A setting not given is the one the active version was trained with
(its training_config.json records that config), else k-fold's default.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ConfigDict, Field, StrictBool, StrictFloat, StrictInt, create_model


@dataclass(frozen=True)
class TrainParam:
    name: str  # in POST /v1/train, job.json's params and a version's "training"
    kind: type  # int, float, bool or str
    path: str  # where it lives in the k-fold config
    low: float | None = None
    high: float | None = None
    open_bounds: bool = False  # low < x < high rather than low <= x <= high
    help: str = ""
    api: bool = True  # POST /v1/train may set it (else it is only inherited)
    tab: bool = False  # the Train tab has an input for it


RETRAINABLE = (
    TrainParam("folds", int, "folds", 2, 20, help="cross-validation folds", tab=True),
    TrainParam("epochs", int, "train.epochs", 1, 100, tab=True),
    TrainParam("lr", float, "train.lr", 0, 1, open_bounds=True),
    TrainParam("batch_size", int, "train.batch_size", 1, 4096),
    TrainParam("max_length", int, "max_length", 8, 4096),
    TrainParam("seed", int, "seed"),
    TrainParam("class_weights", bool, "train.class_weights"),
    # the text normalisation the served model applies: a retrain keeps it
    TrainParam("normalize", str, "normalize", api=False),
)
BY_NAME = {p.name: p for p in RETRAINABLE}


def inherited(recorded: dict) -> dict:
    """The retrainable settings found in a recorded k-fold config (training_config.json's "config"): top-level
    ones first, then nested ones in the recorded order, the order job.json has always listed them in."""
    by_path = {p.path: p.name for p in RETRAINABLE}
    top = {p.name: recorded[p.path] for p in RETRAINABLE if "." not in p.path and p.path in recorded}
    nested = {by_path[f"{group}.{key}"]: value for group, values in recorded.items() if isinstance(values, dict)
              for key, value in values.items() if f"{group}.{key}" in by_path}
    return {**top, **nested}


def kfold_config(params: dict, **fixed) -> dict:
    """The k-fold config the training child builds (finetune.config.config_from_json): `fixed` (model, data,
    output, final) and each setting in `params` at its path."""
    config: dict = dict(fixed)
    for name, value in params.items():
        *groups, field = BY_NAME[name].path.split(".")
        where = config
        for group in groups:
            where = where.setdefault(group, {})
        where[field] = value
    return config


def request_model():
    """The pydantic model of POST /v1/train's body: every `api` entry, optional, with its bounds."""
    kinds = {int: StrictInt, float: StrictFloat, bool: StrictBool}
    fields = {}
    for p in RETRAINABLE:
        if not p.api:
            continue
        bounds = {}
        if p.low is not None:
            bounds = {"gt": p.low, "lt": p.high} if p.open_bounds else {"ge": p.low, "le": p.high}
        fields[p.name] = (kinds[p.kind] | None, Field(None, description=p.help or None, **bounds))
    return create_model("TrainRequest", __config__=ConfigDict(extra="forbid"), **fields)
