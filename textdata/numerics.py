"""The numeric choices a training run and the torch runner share: which float type a run computes in, the
learning-rate schedule, and the padded widths of fixed-shape batches.

torch is imported only when a dtype is asked for, so a torch-free install can still list the choices.
Twins: `pretraining/train.py` `autocast_dtype` and `lr_at` (pretraining imports no other package);
tests/textdata/test_twins.py checks that each pair agrees.
"""

from __future__ import annotations

from textdata.errors import UsageError

PRECISIONS = ("auto", "fp32", "bf16", "fp16")


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise UsageError(f"precision {precision!r}: use one of {PRECISIONS}")


def resolve_dtype(precision: str, device: str):
    """The torch dtype for `precision` on `device` ("cuda" or another type): auto = bf16 (fp16 where the GPU
    lacks bf16) on CUDA, fp32 elsewhere; fp16 off CUDA is refused."""
    import torch

    check_precision(precision)
    if precision == "auto":
        if device != "cuda":
            return torch.float32  # CPU bf16 matmuls are slower than fp32 on most CPUs without AMX
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if precision == "fp16" and device != "cuda":
        raise UsageError("precision fp16 needs CUDA; use fp32 or bf16 on CPU")
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def lr_at(step: int, total_steps: int, peak: float, warmup_steps: int) -> float:
    """ELECTRA's schedule for fine-tuning and pretraining: linear warmup to `peak`, then linear decay (power 1)
    to zero at `total_steps`."""
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    return peak * max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


# Shared by fine-tuning (static shapes) and the torch serving runner (CUDA graph buckets), so a width
# compiled in training is one serving captures too.
WIDTHS = (16, 32, 48, 64, 96, 128, 192, 256, 384, 512)


def bucket_widths(max_length: int) -> list[int]:
    """Padded widths for fixed-shape batches: steps of 1.33x to 2x, few enough to compile or capture each."""
    return sorted({w for w in WIDTHS if w < max_length} | {max_length})
