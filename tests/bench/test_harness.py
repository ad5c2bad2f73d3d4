import json

import pytest

from bench import harness


def test_record_carries_machine_and_figures(tmp_path):
    out = tmp_path / "sub" / "r.json"
    harness.write_record(out, {"ratio": 2.5})
    data = json.loads(out.read_text())
    assert data["ratio"] == 2.5
    assert set(data["machine"]) >= {"cpu", "cores", "load", "commit", "date"}
    assert len(data["machine"]["load"]) == 3


def test_failed_write_leaves_old_file_and_no_temp(tmp_path):
    out = tmp_path / "r.json"
    harness.write_record(out, {"a": 1})
    with pytest.raises(TypeError):
        harness.write_record(out, {"a": object()})
    assert json.loads(out.read_text())["a"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_median_ms():
    assert harness.median_ms([0.001, 0.003, 0.002]) == 2.0
