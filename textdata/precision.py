"""Which float type a run computes in: the choices every CLI offers and the one rule that picks the dtype.

torch is imported only when a dtype is asked for, so a torch-free install can still list the choices.
Twin: `pretraining/train.py` `autocast_dtype` (pretraining imports no other package).
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
