"""Training log: sums of per-step statistics -> one JSONL record per N steps, TensorBoard if installed,
and a PNG of the replaced-token-detection accuracy curve."""

from __future__ import annotations

import json
from pathlib import Path


def summarize(sums: dict[str, float], steps: int) -> dict[str, float]:
    """Losses are per-step means (averaged over steps); everything else is a count (ratios of sums)."""

    def ratio(a, b):
        return sums[a] / sums[b] if a in sums and sums.get(b) else None

    record = {k: v / steps for k, v in sums.items() if k.endswith("loss")}
    record.update({
        "gen_acc": ratio("gen_correct", "n_masked"),
        "disc_acc": ratio("disc_correct", "n_disc"),
        "disc_precision": ratio("true_positive", "predicted_replaced"),
        "disc_recall": ratio("true_positive", "actual_replaced"),
        "replaced_rate": ratio("n_replaced", "n_tokens"),
        "main_mlm_acc": ratio("main_correct", "n_masked"),
    })
    return {k: (round(v, 6) if v is not None else None) for k, v in record.items()
            if v is not None or k in ("disc_acc", "gen_acc")}


class Logbook:
    def __init__(self, output: Path, resume_step: int | None = None):
        self.path = output / "log.jsonl"
        if resume_step is not None and self.path.exists():
            # Records written after the checkpoint we resume from would be duplicated: drop them.
            kept = [line for line in self.path.read_text().splitlines() if json.loads(line)["step"] <= resume_step]
            self.path.write_text("".join(line + "\n" for line in kept))
        elif resume_step is None:
            self.path.write_text("")
        self.tensorboard = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tensorboard = SummaryWriter(str(output / "tensorboard"))
        except ImportError:  # tensorboard is optional
            pass

    def write(self, record: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self.tensorboard:
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)):
                    self.tensorboard.add_scalar(key, value, record["step"])

    def close(self) -> None:
        if self.tensorboard:
            self.tensorboard.close()


def _nan(value) -> float:
    return float("nan") if value is None else value


def plot_rtd_curve(log_path: Path, png_path: Path) -> bool:
    """Discriminator accuracy against the all-"original" baseline (1 - replaced rate): RTD is learning only
    where the first line is above the second. Beside it: precision/recall on replaced tokens and the
    generator's accuracy at masked positions."""
    records = [json.loads(line) for line in Path(log_path).read_text().splitlines() if line.strip()]
    records = [r for r in records if r.get("disc_acc") is not None or r.get("gen_acc") is not None]
    if not records:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in records]

    def series(key):
        return [_nan(r.get(key)) for r in records]

    # Left: accuracy against its baseline, on its own scale (the gap is a few points early on).
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(steps, series("disc_acc"), label="discriminator accuracy (RTD)")
    left.plot(steps, [1 - v for v in series("replaced_rate")], "--", color="gray",
              label="baseline: call every token original")
    baseline = [1 - r["replaced_rate"] for r in records if r.get("replaced_rate") is not None]
    if baseline:  # early steps below the baseline are cut off: the gap above it is what matters
        top = max([r["disc_acc"] for r in records if r.get("disc_acc") is not None] + baseline)
        left.set_ylim(min(baseline) - 0.03, min(1.0, top + 0.02))
    left.set_title("replaced token detection accuracy")
    for key, label in [("disc_recall", "recall on replaced tokens"), ("disc_precision", "precision on replaced tokens"),
                       ("gen_acc", "generator accuracy at masked positions")]:
        right.plot(steps, series(key), label=label)
    right.set_ylim(0, 1)
    right.set_title("discriminator and generator")
    for ax in (left, right):
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        # Below the panel: inside it, any corner hides the curves that sit low early in training.
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    plt.close(fig)
    return True
