"""The drift statistics every version is compared with (textdata/drift.py)."""

from __future__ import annotations

import numpy as np
import pytest

from textdata.drift import NONE_LABEL, build_reference, level, psi


def test_psi_is_zero_for_the_same_shares_and_grows_with_the_shift():
    ref = [500, 300, 200]
    assert psi(ref, [50, 30, 20]) == pytest.approx(0.0, abs=1e-12)  # same shares, any totals
    small, large = psi(ref, [480, 310, 210]), psi(ref, [100, 100, 800])
    assert 0 < small < 0.01 and large > 0.25
    assert psi(ref, [0, 0, 100]) > psi(ref, [100, 100, 800])  # an empty bin is floored, not infinite
    assert np.isfinite(psi(ref, [0, 0, 100]))
    assert level(small) == "ok" and level(0.15) == "watch" and level(large) == "alert"
    assert psi([0, 0], [1, 2]) == 0.0  # no reference rows: nothing to compare


def test_reference_counts_answers_confidence_and_lengths():
    p = np.array([[0.9, 0.1], [0.2, 0.8], [0.55, 0.45]])
    ref = build_reference(p, ["a" * 5, "b" * 40, "c" * 3000], ["x", "y"])
    assert ref["class_mix"] == {"x": 2, "y": 1}
    assert sum(ref["confidence"]["counts"]) == 3 and ref["confidence"]["counts"][5] == 1  # 0.55 in [0.5, 0.6)
    assert ref["confidence"]["counts"][8] == ref["confidence"]["counts"][9] == 1  # 0.8 and 0.9
    assert build_reference(np.array([[1.0, 0.0]]), ["a"], ["x", "y"])["confidence"]["counts"][9] == 1  # closed at 1
    assert ref["length"]["counts"][0] == 1 and ref["length"]["counts"][3] == 1 and ref["length"]["counts"][-1] == 1
    multi = build_reference(np.array([[0.7, 0.6], [0.1, 0.2]]), ["a", "b"], ["x", "y"], thresholds=[0.5, 0.5])
    assert multi["class_mix"] == {"x": 1, "y": 1, NONE_LABEL: 1} and multi["multi_label"] is True
