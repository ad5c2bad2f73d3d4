"""Padded widths for fixed-shape batches, shared by fine-tuning (static shapes) and the torch serving runner
(CUDA graph buckets), so a width compiled in training is one serving captures too."""

from __future__ import annotations

WIDTHS = (16, 32, 48, 64, 96, 128, 192, 256, 384, 512)


def bucket_widths(max_length: int) -> list[int]:
    """Padded widths for fixed-shape batches: steps of 1.33x to 2x, few enough to compile or capture each."""
    return sorted({w for w in WIDTHS if w < max_length} | {max_length})
