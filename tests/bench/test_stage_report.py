"""bench/stage_report.py on a tiny exported model: the three ways answer, our stages nest as the request path does,
and the bar is what the report says it is."""

from __future__ import annotations

import json

import pytest

from bench import stage_report


@pytest.fixture(scope="module")
def exported(tiny_classifier_dir, tmp_path_factory):
    from serving.export import ExportConfig, run

    out = tmp_path_factory.mktemp("stage-report-onnx")
    run(ExportConfig(model=tiny_classifier_dir, output=out))
    return out


def test_a_short_run_reports_hand_written_echo_ours_and_our_stages(exported, tmp_path, capsys):
    out = tmp_path / "report.json"
    assert stage_report.main(["--model", str(exported), "--requests", "20", "--warmup", "3", "--rounds", "1",
                              "--text", "꿈에서 봤다", "--work", str(tmp_path / "work"), "--output", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["model_file"].endswith(".onnx") and r["machine"]["isa"] in ("avx512_vnni", "avx2", "other")
    assert isinstance(r["server_side_rows"], int) and r["server_side_rows"] >= 1  # the server measured it
    assert 0 < r["hand_written_ms"] and 0 < r["echo_ms"] < r["ours_ms"]
    assert r["bar_ms"] == pytest.approx(r["ours_ms"] - r["hand_written_ms"] - r["echo_ms"], abs=2e-3)
    s = r["rounds"][0]["stages_ms"]
    assert 0 < s["pass"] <= s["engine"] <= s["batch"] <= s["app"] <= r["ours_ms"]
    assert s["framework"] == pytest.approx(s["app"] - s["tok"] - s["queue"] - s["batch"], abs=2e-3)
    assert "bar" in capsys.readouterr().out
    assert (tmp_path / "work" / "data").is_dir()  # the server's data stays in the bench's folder, not the cwd
