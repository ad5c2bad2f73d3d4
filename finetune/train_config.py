"""The settings of one fine-tuning run (finetune/train.py), torch-free: finetune/config.py builds k-fold's flags
from them, and `--help` or a typo must not wait for torch to load."""

from __future__ import annotations

from dataclasses import dataclass

from textdata.numerics import check_precision

SWITCHES = ("auto", "on", "off")
# graphs: compile with mode="reduce-overhead", which replays each static shape's step as a CUDA graph.
COMPILE_CHOICES = (*SWITCHES, "graphs")


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 4
    batch_size: int = 32
    lr: float = 1e-4
    layer_decay: float = 0.8  # ELECTRA-Base's fine-tuning value; 1.0 turns it off
    weight_decay: float = 0.01
    warmup: float = 0.1  # fraction of all steps
    max_grad_norm: float = 1.0
    patience: int = 2  # epochs without inner-validation improvement before stopping; 0 = never stop early
    class_weights: bool = False
    precision: str = "auto"  # one of textdata.numerics.PRECISIONS
    static_shapes: str = "auto"  # auto (on CUDA) | on | off: pad to (batch_size, width bucket) shapes
    compile: str = "off"  # off | auto (on CUDA) | on: torch.compile the training forward and backward;
    # graphs: the same, replayed as CUDA graphs (CUDA only, implies static shapes)

    def __post_init__(self):
        for name, choices in (("static_shapes", SWITCHES), ("compile", COMPILE_CHOICES)):
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} {getattr(self, name)!r}: use one of {choices}")
        check_precision(self.precision)
