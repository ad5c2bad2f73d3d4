"""Pictures of a k-fold run: where the classifier confuses classes, and how each fold learned."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on servers and CI
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator


def confusion_png(matrix: np.ndarray, labels: list[str], path: Path, title: str) -> None:
    """Row-normalised (recall) colours, raw counts written in each cell."""
    matrix = np.asarray(matrix)
    rates = matrix / matrix.sum(1, keepdims=True).clip(min=1)
    size = max(4.0, 0.6 * len(labels) + 2)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    im = ax.imshow(rates, cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(title)
    for i in range(len(labels)):
        for j in range(len(labels)):
            ax.text(j, i, str(matrix[i, j]), ha="center", va="center", fontsize=8,
                    color="white" if rates[i, j] > 0.5 else "black")
    fig.colorbar(im, ax=ax, fraction=0.046, label="share of true class")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def learning_curves_png(histories: list[dict], path: Path) -> None:
    """Per fold: training loss by step (smoothed) and inner-validation macro-F1 by epoch."""
    fig, (ax_loss, ax_f1) = plt.subplots(1, 2, figsize=(11, 4))
    for k, h in enumerate(histories):
        loss = np.asarray(h["train_loss"], dtype=float)
        if len(loss):
            w = max(1, len(loss) // 50)
            smooth = np.convolve(loss, np.ones(w) / w, mode="valid")
            ax_loss.plot(np.arange(len(smooth)) + w, smooth, label=f"fold {k}")
        if h["epochs"]:
            ax_f1.plot(h["epochs"], h["val_macro_f1"], marker="o", label=f"fold {k}")
    ax_loss.set(xlabel="step", ylabel="training loss", title="training loss")
    ax_f1.set(xlabel="epoch", ylabel="macro-F1", title="inner validation (early stopping)")
    ax_f1.set_ylim(0, 1)
    # Whole epochs from 1, with room either side: one epoch alone would get an axis of 0.95-1.05.
    last = max([max(h["epochs"]) for h in histories if h["epochs"]], default=1)
    ax_f1.set_xlim(0.5, last + 0.5)
    ax_f1.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    for ax in (ax_loss, ax_f1):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def fold_scores_png(model_f1: list[float], baseline_f1: list[float], path: Path,
                    blend_f1: list[float] | None = None) -> None:
    """Bars per fold: model, baseline (NaN where it could not be fitted) and the nested blend when there is one."""
    x = np.arange(len(model_f1))
    bars = [("model", model_f1), ("TF-IDF + LR", baseline_f1)] + ([("blend, nested", blend_f1)] if blend_f1 else [])
    width = 0.8 / len(bars)
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(x) + 2), 3.5))
    for i, (name, values) in enumerate(bars):
        ax.bar(x + (i - (len(bars) - 1) / 2) * width, values, width, label=f"{name} (mean {np.nanmean(values):.3f})")
    ax.set_xticks(x, [f"fold {k}" for k in x])
    ax.set(ylabel="macro-F1", ylim=(0, 1), title="macro-F1 per fold")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def search_trials_png(rows: list[dict], path: Path) -> None:
    """Mean macro-F1 per trial (pruned ones at their running mean when stopped) and the best so far."""
    fig, ax = plt.subplots(figsize=(7, 3.8))
    best, best_x, best_y = -np.inf, [], []
    for state, marker in (("complete", "o"), ("pruned", "x"), ("fail", "s")):
        pts = [(r["trial"], r["macro_f1"]) for r in rows if r["state"] == state and r["macro_f1"] is not None]
        if pts:
            ax.scatter(*zip(*pts), marker=marker, label=state if state != "pruned" else "pruned (running mean)")
    for r in rows:
        if r["state"] == "complete":
            best = max(best, r["macro_f1"])
            best_x.append(r["trial"])
            best_y.append(best)
    if best_x:
        ax.step(best_x, best_y, where="post", color="gray", alpha=0.6, label="best so far")
    ax.set(xlabel="trial", ylabel="mean macro-F1 over folds", title="k-fold search")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def importance_png(importance: dict[str, float], path: Path) -> None:
    """Horizontal bars of each parameter's importance (Optuna's evaluator; they sum to 1)."""
    names = list(importance)[::-1]
    fig, ax = plt.subplots(figsize=(6, 0.45 * len(names) + 1.2))
    ax.barh(names, [importance[n] for n in names])
    ax.set(xlabel="importance (Optuna, sums to 1)", title="parameter importance")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def class_joint(ax_j, joint: np.ndarray, labels: list[str]):
    """Single-label: the confident joint, given label x likely true label (counts; colour: the row's share)."""
    counts = np.asarray(joint, dtype=float)
    rates = counts / counts.sum(1, keepdims=True).clip(min=1)
    im = ax_j.imshow(rates, cmap="Blues", vmin=0, vmax=1)
    ax_j.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
    ax_j.set_yticks(range(len(labels)), labels)
    ax_j.set(xlabel="likely true label", ylabel="given label", title="confident joint (counts; colour: row share)")
    for (i, j), v in np.ndenumerate(counts):
        colour = "white" if rates[i, j] > 0.5 else ("red" if i != j and v else "black")
        ax_j.text(j, i, str(int(v)), ha="center", va="center", fontsize=8, color=colour)
    return im


def label_joint(ax_j, joint: np.ndarray, labels: list[str]):
    """Multi-label: per label, given 1 but likely 0 and given 0 but likely 1 (one-vs-rest)."""
    cells = np.stack([joint[:, 1, 0], joint[:, 0, 1]], axis=1)  # (L, 2): given 1 likely 0, given 0 likely 1
    im = ax_j.imshow(cells, cmap="Reds", aspect="auto")
    ax_j.set_xticks([0, 1], ["given, likely not", "not given, likely"])
    ax_j.set_yticks(range(len(labels)), labels)
    for (i, j), v in np.ndenumerate(cells):
        ax_j.text(j, i, str(int(v)), ha="center", va="center", fontsize=8)
    ax_j.set_title("confident joint, off-diagonal (one-vs-rest)")
    return im


JOINTS = {"class_joint": class_joint, "label_joint": label_joint}  # label_issues.py's finders name theirs


def label_issues_png(joint: np.ndarray, per_class: dict, labels: list[str], path: Path, draw_joint=class_joint) -> None:
    """Left: the confident joint, drawn by the kind's `draw_joint` (class_joint, label_joint). Right: the
    flagged rows per class beside the estimated noise rate."""
    fig, (ax_j, ax_c) = plt.subplots(1, 2, figsize=(max(9.0, 1.1 * len(labels) + 5), max(4.0, 0.45 * len(labels) + 2)))
    im = draw_joint(ax_j, joint, labels)
    fig.colorbar(im, ax=ax_j, fraction=0.046)
    flagged = [per_class[n]["flagged"] for n in labels]
    ax_c.barh(range(len(labels)), flagged, color="tab:red")
    ax_c.set_yticks(range(len(labels)), [f"{n} ({per_class[n]['estimated_noise_rate']:.1%})" for n in labels])
    ax_c.invert_yaxis()
    ax_c.set(xlabel="flagged rows", title="suspects per class (estimated noise rate)")
    ax_c.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
