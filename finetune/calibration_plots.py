"""calibration.png (reliability diagram before and after, nested) and coverage.png (precision of the
answered rows against coverage, with the nested estimate at each target precision)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on servers and CI
import matplotlib.pyplot as plt
import numpy as np

from finetune.calibration import BINS
from finetune.coverage import precision_curve


def _reliability(probs: np.ndarray, y: np.ndarray, bins: int):
    conf, correct = probs.max(1), probs.argmax(1) == y
    which = np.minimum((conf * bins).astype(int), bins - 1)
    mids, acc, mean_conf, counts = [], [], [], []
    for b in range(bins):
        rows = which == b
        if rows.any():
            mids.append((b + 0.5) / bins)
            acc.append(correct[rows].mean())
            mean_conf.append(conf[rows].mean())
            counts.append(rows.sum())
    return np.array(mids), np.array(acc), np.array(mean_conf), np.array(counts)


def calibration_png(before: np.ndarray, after: np.ndarray, y: np.ndarray, section: dict, path: Path) -> None:
    """Accuracy against mean confidence per bin (top label), before and after, out-of-fold rows pooled."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.4), sharey=True)
    for ax, probs, part, title in (
        (axes[0], before, "before", "served scores"),
        (axes[1], after, "after", f"calibrated ({section['method']}, nested)"),
    ):
        mids, acc, conf, counts = _reliability(np.asarray(probs, float), y, BINS)
        ax.plot([0, 1], [0, 1], ls="--", color="gray", lw=1, label="perfect")
        ax.bar(mids, acc, width=1 / BINS, edgecolor="black", alpha=0.6, label="accuracy in bin")
        ax.plot(conf, acc, marker="o", color="C3", lw=1, label="at the bin's mean confidence")
        for m, a, n in zip(mids, acc, counts):
            ax.text(m, min(a + 0.02, 0.97), str(n), ha="center", fontsize=6)
        s = section[part]
        ax.set(
            title=f"{title}\nECE {s['ece_mean']:.3f}±{s['ece_std']:.3f}, log-loss {s['log_loss_mean']:.3f}",
            xlabel="top-label confidence",
            xlim=(0, 1),
            ylim=(0, 1),
        )
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("accuracy (rows per bin above the bars)")
    axes[0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


MARKERS = ("o", "s", "^", "D", "v")


def coverage_png(after: np.ndarray, y: np.ndarray, table: list[dict], path: Path) -> None:
    """Precision of the answered rows against the share answered, threshold swept over the calibrated
    out-of-fold scores; each target's nested estimate (threshold from the other folds) as a point."""
    probs = np.asarray(after, float)
    thresholds, precision = precision_curve(probs.max(1), probs.argmax(1) == y)
    coverage = np.array([(probs.max(1) >= t).mean() for t in thresholds])
    fig, ax = plt.subplots(figsize=(6.5, 4.4))
    ax.plot(coverage, precision, color="C0", lw=1.5, label="all out-of-fold rows (calibrated, nested)")
    for i, row in enumerate(table):
        ax.axhline(row["target"], color=f"C{i + 1}", ls=":", lw=0.8)
        if row["precision_mean"] is not None:
            # targets often land on the same point (every row answered): a shape and a size of its own each,
            # hollow, so one marker does not hide another
            ax.errorbar(
                row["coverage_mean"],
                row["precision_mean"],
                xerr=row["coverage_std"],
                yerr=row["precision_std"],
                fmt=MARKERS[i % len(MARKERS)],
                markersize=10 - 2 * (i % 3),
                markerfacecolor="none",
                color=f"C{i + 1}",
                label=f"target {row['target']:.2f}: coverage {row['coverage_mean']:.2f}",
            )
    ax.set(
        xlabel="coverage (share of rows answered 'confident')",
        ylabel="precision of the answered rows",
        title="coverage at a precision",
        xlim=(0, 1.01),
        ylim=(max(0.0, min(precision.min(), min(r["target"] for r in table)) - 0.02), 1.005),
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
