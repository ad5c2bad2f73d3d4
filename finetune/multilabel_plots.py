"""Pictures of a multi-label k-fold run: F1 per label, and which labels come together."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on servers and CI
import matplotlib.pyplot as plt
import numpy as np


def _pooled_f1(folds: list[dict], labels: list[str]) -> np.ndarray:
    """Per label, the mean over folds of its F1."""
    return np.array([np.mean([f["per_label"][n]["f1"] for f in folds]) for n in labels])


def per_label_f1_png(report: dict, path: Path) -> None:
    """Horizontal bars per label, most frequent on top: the model at its nested thresholds and at 0.5, and the
    baseline at its nested thresholds (mean over folds); the label's rows in brackets."""
    labels = report["labels"]
    support = np.sum([[f["tuned"]["per_label"][n]["support"] for n in labels] for f in report["folds"]], axis=0)
    order = np.argsort(-support, kind="stable")
    series = [("model, tuned (nested)", _pooled_f1([f["tuned"] for f in report["folds"]], labels)),
              ("model at 0.5", _pooled_f1([f["at_0_5"] for f in report["folds"]], labels))]
    base = report["baseline"]
    if "macro_f1_mean" in base:
        series.append(("TF-IDF baseline, tuned", _pooled_f1(base["folds"], labels)))
    height = 0.8 / len(series)
    y = np.arange(len(labels))
    fig, ax = plt.subplots(figsize=(8, max(3.0, 0.32 * len(labels) * len(series) / 2 + 1.5)))
    for i, (name, f1) in enumerate(series):
        ax.barh(y + (i - (len(series) - 1) / 2) * height, f1[order], height, label=f"{name} (macro {f1.mean():.3f})")
    ax.set_yticks(y, [f"{labels[j]} ({support[j]})" for j in order], fontsize=7)
    ax.invert_yaxis()
    ax.set(xlabel="F1 (mean over folds)", xlim=(0, 1), title="F1 per label (rows carrying it)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def cooccurrence_png(Y: np.ndarray, labels: list[str], path: Path) -> None:
    """Cell (i, j): the share of label i's rows that also carry label j (the diagonal: label i's row count)."""
    Y = np.asarray(Y, np.int64)
    counts = Y.T @ Y
    share = counts / np.maximum(np.diag(counts), 1)[:, None]
    np.fill_diagonal(share, np.nan)
    size = max(5.0, 0.28 * len(labels) + 3)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    im = ax.imshow(share, cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
    ax.set_yticks(range(len(labels)), [f"{n} ({counts[i, i]})" for i, n in enumerate(labels)], fontsize=7)
    ax.set(xlabel="also carries", ylabel="rows carrying (count)", title="label co-occurrence")
    if len(labels) <= 15:
        for i in range(len(labels)):
            for j in range(len(labels)):
                if i != j and counts[i, j]:
                    ax.text(j, i, str(counts[i, j]), ha="center", va="center", fontsize=7,
                            color="white" if share[i, j] > 0.5 else "black")
    fig.colorbar(im, ax=ax, fraction=0.046, label="share of the row label's rows")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
