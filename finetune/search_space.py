"""The hyperparameters finetune/search.py tunes, and how a user narrows or widens them (`--space`).

The default space suits an encoder of unknown size (ELECTRA-Small to -Base): learning rates from 1e-5 (the
usual -Base range) to 3e-3 (what a tiny encoder pretrained here wants), 2-12 epochs (early stopping still ends a
fold sooner), and the rest of ELECTRA's fine-tuning recipe. `--space` takes a JSON object (inline or a file) laid
over it, one entry per parameter:

    {"lr": {"low": 1e-4, "high": 1e-3, "log": true},   a range (log: sampled on a log scale; "step" allowed)
     "batch_size": {"choices": [16, 32]},               a list of values
     "warmup": 0.1,                                      a fixed value: not searched
     "layer_decay": null}                                removed from the search: the flag's value is used

Anything else is refused with the parameter and the reason (unknown name or key, low > high, a wrong type).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from textdata.errors import UsageError

# name -> (type, smallest allowed, largest allowed, where: "train" for TrainConfig, "" for the k-fold Config)
TUNABLE: dict[str, tuple[type, float, float, str]] = {
    "lr": (float, 1e-8, 1.0, "train"),
    "epochs": (int, 1, 1000, "train"),
    "batch_size": (int, 1, 4096, "train"),
    "warmup": (float, 0.0, 0.99, "train"),
    "layer_decay": (float, 0.01, 1.0, "train"),
    "weight_decay": (float, 0.0, 1.0, "train"),
    "class_weights": (bool, 0, 1, "train"),
    "patience": (int, 0, 1000, "train"),
    "max_grad_norm": (float, 1e-3, 1e3, "train"),
    "dropout": (float, 0.0, 0.9, ""),
}
DEFAULT_SPACE: dict[str, Any] = {
    "lr": {"low": 1e-5, "high": 3e-3, "log": True},
    "epochs": {"low": 2, "high": 12},
    "batch_size": {"choices": [8, 16, 32, 64]},
    "warmup": {"low": 0.0, "high": 0.2},
    "layer_decay": {"low": 0.6, "high": 1.0},
    "class_weights": {"choices": [False, True]},
}
KEYS = {"low", "high", "log", "step", "choices"}


@dataclass(frozen=True)
class Space:
    searched: dict  # name -> optuna distribution
    fixed: dict  # name -> value

    def as_json(self) -> dict:
        from optuna.distributions import distribution_to_json

        return {"searched": {k: json.loads(distribution_to_json(d)) for k, d in self.searched.items()},
                "fixed": self.fixed}


def _fits(name: str, value: Any, where: str) -> Any:
    kind, lo, hi, _ = TUNABLE[name]
    ok = isinstance(value, bool) if kind is bool else (
        isinstance(value, int) and not isinstance(value, bool) if kind is int else
        isinstance(value, (int, float)) and not isinstance(value, bool))
    if not ok:
        raise UsageError(f"{where}: {name} needs {'true/false' if kind is bool else kind.__name__} values, "
                         f"not {json.dumps(value)}")
    if kind is not bool and not lo <= value <= hi:
        raise UsageError(f"{where}: {name} {value} is outside [{lo:g}, {hi:g}]")
    return kind(value)


def _distribution(name: str, spec: dict, where: str):
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    unknown = sorted(set(spec) - KEYS)
    if unknown:
        raise UsageError(f"{where}: {name}: unknown keys {unknown}; use low/high (with log, step) or choices")
    if "choices" in spec:
        if set(spec) != {"choices"}:
            raise UsageError(f"{where}: {name}: give either choices or low/high, not both")
        choices = spec["choices"]
        if not isinstance(choices, list) or not choices:
            raise UsageError(f"{where}: {name}: choices must be a non-empty list")
        return CategoricalDistribution([_fits(name, c, where) for c in choices])
    if "low" not in spec or "high" not in spec:
        raise UsageError(f"{where}: {name}: a range needs both low and high (or give choices)")
    kind = TUNABLE[name][0]
    if kind is bool:
        raise UsageError(f"{where}: {name} is true/false: give choices, e.g. [false, true]")
    low, high = _fits(name, spec["low"], where), _fits(name, spec["high"], where)
    if low > high:
        raise UsageError(f"{where}: {name}: low {low} is greater than high {high}")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise UsageError(f"{where}: {name}: log must be true or false, not {json.dumps(log)}")
    if log and low <= 0:
        raise UsageError(f"{where}: {name}: a log scale needs low > 0, not {low}")
    step = spec.get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, (int, float)) or step <= 0 or log):
        raise UsageError(f"{where}: {name}: step must be a positive number, and does not go with log")
    if kind is int:
        return IntDistribution(low, high, log=log, step=int(step or 1))
    return FloatDistribution(low, high, log=log, step=step)


def load_space(given: str | None) -> Space:
    """The default space with `given` (inline JSON or a JSON file) laid over it; a UsageError names what is wrong."""
    spec = dict(DEFAULT_SPACE)
    where = "--space"
    if given:
        text = given
        if not given.lstrip().startswith(("{", "[")):
            path = Path(given)
            if not path.is_file():
                raise UsageError(f"--space {given}: no such file (give a JSON file or an inline JSON object)")
            where, text = f"--space {path}", path.read_text(encoding="utf-8")
        try:
            over = json.loads(text)
        except json.JSONDecodeError as e:
            raise UsageError(f"{where}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
        if not isinstance(over, dict):
            raise UsageError(f"{where}: expected a JSON object of parameter: range, e.g. "
                             '{"lr": {"low": 1e-4, "high": 1e-3, "log": true}}')
        unknown = sorted(set(over) - set(TUNABLE))
        if unknown:
            raise UsageError(f"{where}: unknown parameters {unknown}; tunable: {sorted(TUNABLE)}")
        spec.update(over)
    searched, fixed = {}, {}
    for name, value in spec.items():
        if value is None:
            continue
        if isinstance(value, dict):
            searched[name] = _distribution(name, value, where)
        else:
            fixed[name] = _fits(name, value, where)
    if not searched:
        raise UsageError(f"{where}: nothing left to search; give at least one range or list of choices")
    return Space(searched, fixed)


def apply(cfg, params: dict):
    """The k-fold Config with these parameter values."""
    train = {k: v for k, v in params.items() if TUNABLE[k][3] == "train"}
    top = {k: v for k, v in params.items() if TUNABLE[k][3] == ""}
    return replace(cfg, train=replace(cfg.train, **train), **top)


def current(cfg, space: Space) -> dict:
    """The searched parameters as the given flags set them (a search's first trial), where the space holds them."""
    values = {k: getattr(cfg.train if TUNABLE[k][3] == "train" else cfg, k) for k in space.searched}
    return {k: v for k, v in values.items() if v is not None and _inside(space.searched[k], v)}


def _inside(distribution, value) -> bool:
    try:
        return distribution._contains(distribution.to_internal_repr(value))
    except ValueError:  # a categorical distribution without this value
        return False
