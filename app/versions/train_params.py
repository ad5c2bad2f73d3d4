"""What a retrain may set, with its bounds: one list (RETRAINABLE) for POST /v1/train's fields, the Train tab's
inputs, what a retrain inherits from the active version, and the k-fold config the training child is given.

The Train tab once skipped the API's limits (epochs 1e9 started a job, folds had no bound) and the API let
`seed: -1` through to a child that died with a traceback. Both now check the same list here, in
`check_params`, which `Jobs.start` runs on every request whoever sends it; the API's request model is
built from the same list, so its 422 and its OpenAPI page say the same bounds.

Each entry names its place in the k-fold config (`finetune/config.py` Config; "train.epochs" is
`Config.train.epochs`), so the training child is given the config itself ({"kfold": {...}}, nested as
config.json records it), never flags. A setting not given is the one the active version was trained with
(its training_config.json records that config), else k-fold's default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pydantic import ConfigDict, Field, StrictBool, StrictFloat, StrictInt, create_model

from app.versions.trainset import TrainingDataError


@dataclass(frozen=True)
class TrainParam:
    name: str  # in POST /v1/train, job.json's params and a version's "training"
    kind: type  # int, float, bool or str
    path: str  # where it lives in the k-fold config
    low: float | None = None
    high: float | None = None
    open_bounds: bool = False  # low < x < high rather than low <= x <= high
    help: str = ""
    api: bool = True  # POST /v1/train and the Train tab may set it (else it is only inherited)
    tab: bool = False  # the Train tab has an input for it

    def bounds(self) -> str:
        if self.kind is bool:
            return "true or false"
        lt = "<" if self.open_bounds else "<="
        return f"{self.low:g} {lt} {self.name} {lt} {self.high:g}"


RETRAINABLE = (
    TrainParam("folds", int, "folds", 2, 20, help="cross-validation folds", tab=True),
    TrainParam("epochs", int, "train.epochs", 1, 100, tab=True),
    TrainParam("lr", float, "train.lr", 0, 1, open_bounds=True, help="learning rate"),
    TrainParam("batch_size", int, "train.batch_size", 1, 4096),
    TrainParam("max_length", int, "max_length", 8, 4096, help="tokens per text"),
    TrainParam("seed", int, "seed", 0, 2**32 - 1),
    TrainParam("class_weights", bool, "train.class_weights", help="weight classes by their inverse frequency"),
    # the text normalisation the served model applies: a retrain keeps it
    TrainParam("normalize", str, "normalize", api=False),
    # the served "confident" threshold's precision (calibration.json): a retrain carries its own
    TrainParam("target_precision", float, "target_precision", 0, 1, open_bounds=True,
               help="precision the served 'confident' threshold is chosen for (default: the active version's)"),
)
BY_NAME = {p.name: p for p in RETRAINABLE}
SETTABLE = {p.name: p for p in RETRAINABLE if p.api}


def check_value(p: TrainParam, value):
    """`value` as `p` takes it (a whole float from a number box is an int), or TrainingDataError saying why."""
    bad = TrainingDataError(f"{p.name} must be {'an integer' if p.kind is int else 'a number'} with "
                            f"{p.bounds()}; got {value!r}")
    if p.kind is bool:
        if not isinstance(value, bool):
            raise TrainingDataError(f"{p.name} must be true or false; got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise bad
    if p.kind is int:
        if isinstance(value, float) and not value.is_integer():
            raise bad
        value = int(value)
    inside = p.low < value < p.high if p.open_bounds else p.low <= value <= p.high
    if not inside:
        raise bad
    return value


def check_params(given: dict) -> dict:
    """The given settings (None: not given) checked against RETRAINABLE; unknown names, and those a retrain
    only inherits, are refused."""
    unknown = sorted(set(given) - set(SETTABLE))
    if unknown:
        raise TrainingDataError(f"unknown training setting(s) {unknown}; known: {sorted(SETTABLE)}")
    return {k: check_value(SETTABLE[k], v) for k, v in given.items() if v is not None}


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
    """The pydantic model of POST /v1/train's body: every settable entry, optional, with its bounds."""
    kinds = {int: StrictInt, float: StrictFloat}
    fields = {}
    for p in SETTABLE.values():
        if p.kind is bool:
            fields[p.name] = (StrictBool | None, Field(None, description=p.help or None))
            continue
        bounds = {"gt": p.low, "lt": p.high} if p.open_bounds else {"ge": p.low, "le": p.high}
        fields[p.name] = (kinds[p.kind] | None, Field(None, description=p.help or None, **bounds))
    return create_model("TrainRequest", __config__=ConfigDict(extra="forbid"), **fields)
