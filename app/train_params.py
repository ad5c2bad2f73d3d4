"""What a retrain may set, with its bounds: one list for POST /v1/train, the Train tab and the kfold flags.

The Train tab once skipped the API's limits (epochs 1e9 started a job, folds had no bound) and the API let
`seed: -1` through to a child that died with a traceback. Both now check the same list here, in
`check_params`, which `Jobs.start` runs on every request whoever sends it; the API's request model is
built from the same list, so its 422 and its OpenAPI page say the same bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pydantic import ConfigDict, Field, StrictBool, StrictFloat, StrictInt, create_model

from .trainset import TrainingDataError


@dataclass(frozen=True)
class TrainParam:
    name: str
    kind: type  # int, float or bool
    flag: str  # the finetune/kfold.py flag it becomes
    low: float | None = None
    high: float | None = None
    open_bounds: bool = False  # low < x < high rather than low <= x <= high
    help: str = ""

    def bounds(self) -> str:
        if self.kind is bool:
            return "true or false"
        lt = "<" if self.open_bounds else "<="
        return f"{self.low:g} {lt} {self.name} {lt} {self.high:g}"


TRAIN_PARAMS = (
    TrainParam("folds", int, "--folds", 2, 20, help="cross-validation folds"),
    TrainParam("epochs", int, "--epochs", 1, 100),
    TrainParam("lr", float, "--lr", 0, 1, open_bounds=True, help="learning rate"),
    TrainParam("batch_size", int, "--batch-size", 1, 4096),
    TrainParam("max_length", int, "--max-length", 8, 4096, help="tokens per text"),
    TrainParam("seed", int, "--seed", 0, 2**32 - 1),
    TrainParam("class_weights", bool, "--class-weights", help="weight classes by their inverse frequency"),
    TrainParam("target_precision", float, "--target-precision", 0, 1, open_bounds=True,
               help="precision the served 'confident' threshold is chosen for (default: the active version's)"),
)
BY_NAME = {p.name: p for p in TRAIN_PARAMS}


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
    """The given settings (None: not given) checked against TRAIN_PARAMS; unknown names are refused."""
    unknown = sorted(set(given) - set(BY_NAME))
    if unknown:
        raise TrainingDataError(f"unknown training setting(s) {unknown}; known: {sorted(BY_NAME)}")
    return {k: check_value(BY_NAME[k], v) for k, v in given.items() if v is not None}


def request_model():
    """The pydantic model of POST /v1/train's body, from TRAIN_PARAMS."""
    fields = {}
    for p in TRAIN_PARAMS:
        if p.kind is bool:
            fields[p.name] = (StrictBool | None, Field(None, description=p.help or None))
            continue
        kind = StrictInt if p.kind is int else StrictFloat
        bounds = {"gt": p.low, "lt": p.high} if p.open_bounds else {"ge": p.low, "le": p.high}
        fields[p.name] = (kind | None, Field(None, description=p.help or None, **bounds))
    return create_model("TrainRequest", __config__=ConfigDict(extra="forbid"), **fields)
