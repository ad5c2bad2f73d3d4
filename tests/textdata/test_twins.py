"""pretraining/ keeps its own copies of shared rules so that it imports no other package; each pair agrees."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from pretraining.config import TrainConfig
from pretraining.config import UsageError as PretrainUsageError
from pretraining.train import autocast_dtype
from pretraining.train import lr_at as pretrain_lr_at
from textdata.errors import UsageError
from textdata.precision import PRECISIONS, resolve_dtype
from textdata.schedule import lr_at


@pytest.mark.parametrize(("max_steps", "warmup_steps", "lr"), [(100, 10, 1e-3), (7, 1, 5e-4), (1000, 0, 2e-4)])
def test_lr_schedules_agree(max_steps, warmup_steps, lr):
    cfg = replace(TrainConfig(), max_steps=max_steps, warmup_steps=max(warmup_steps, 1), lr=lr)
    for step in range(max_steps + 2):
        assert pretrain_lr_at(step, cfg) == lr_at(step, max_steps, lr, cfg.warmup_steps)


def test_precision_rules_agree_on_this_device():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    for precision in PRECISIONS:
        cfg = replace(TrainConfig(), precision=precision)
        try:
            expected = resolve_dtype(precision, device.type)
        except UsageError:
            with pytest.raises(PretrainUsageError, match="fp16 needs CUDA"):
                autocast_dtype(cfg, device)
            continue
        assert autocast_dtype(cfg, device) == expected


def test_cpu_limits_copies_agree():
    """pretraining/cpu_limits.py is textdata/cpu_limits.py's code under another docstring, and answers the same."""
    import inspect

    import pretraining.cpu_limits as twin
    import textdata.cpu_limits as original

    def code(module):
        source = inspect.getsource(module)
        return source[source.index('"""', 3) + 3 :]  # after the module docstring

    assert code(twin) == code(original)
    for load in (0.0, 1.2, 7.5):
        limits = dict(machine=4, affinity=2, quota=1.5, load=load)
        assert twin.plan_threads(twin.CpuLimits(**limits)).as_dict() == \
            original.plan_threads(original.CpuLimits(**limits)).as_dict()
