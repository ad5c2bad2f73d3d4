"""The label <-> id map: sorted, so the same labels always get the same ids across folds and runs."""

from __future__ import annotations

from collections.abc import Iterable


def label_order(labels: Iterable) -> list[str]:
    """Unique labels as strings, numerically sorted when all are integers ("2" < "10"), else lexically."""
    unique = {str(x) for x in labels}
    try:
        return sorted(unique, key=int)
    except ValueError:
        return sorted(unique)


def labels_from_config(config) -> list[str]:
    """Label names in id order from a transformers config (what `--final` and exports write)."""
    id2label = {int(k): v for k, v in config.id2label.items()}
    return [id2label[i] for i in range(len(id2label))]
