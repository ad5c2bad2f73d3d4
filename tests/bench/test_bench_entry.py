"""`python -m bench` (bench/__main__.py): one entry that lists every benchmark with one line and runs one by name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)


def test_the_listing_names_every_runnable_script_and_no_shared_module():
    out = run().stdout
    names = {line.split()[0] for line in out.splitlines()[1:]}
    scripts = {p.stem for p in (ROOT / "bench").glob("*.py")
               if not p.name.startswith("_") and '__name__ == "__main__"' in p.read_text(encoding="utf-8")}
    assert names == scripts and "stage_report" in names and not names & {"harness", "resplits"}
    assert out.splitlines()[0].startswith(f"{len(scripts)} benchmarks")
    assert len(names) <= 20  # issue 60: a suite, not a lab notebook; a new experiment replaces one or is a flag
    line = next(x for x in out.splitlines() if x.split()[0] == "stage_report")
    assert "hand-written ONNX Runtime service" in line


def test_a_benchmark_runs_by_name_with_its_own_flags():
    r = run("stage_report", "--help")
    assert r.returncode == 0 and "--requests" in r.stdout and "usage: stage_report.py" in r.stdout


def test_an_unknown_name_is_refused_with_the_list():
    r = run("no_such_bench")
    assert r.returncode == 2 and "no benchmark 'no_such_bench'" in r.stderr and "stage_report" in r.stderr
