"""The learning-rate schedule of fine-tuning and pretraining (ELECTRA's: linear warmup, linear decay, power 1).

Twin: `pretraining/train.py` `lr_at` (pretraining imports no other package); tests/textdata/test_schedule.py
checks that the two agree.
"""

from __future__ import annotations


def lr_at(step: int, total_steps: int, peak: float, warmup_steps: int) -> float:
    """Linear warmup to `peak`, then linear decay to zero at `total_steps`."""
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    return peak * max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
