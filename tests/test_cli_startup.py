"""Every entry point answers --help and a typo before torch or transformers is imported (issue 31: it took
8-20 s), takes no abbreviated flags, and outside the project's venv prints a one-line hint, not a traceback.

Whether torch was imported is read from sys.modules by a small runner, not timed: timing on shared cores says
little, and an import that creeps back in is what makes it slow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers")
# Runs an entry point as `python SCRIPT` / `python -m MODULE` would, then reports its exit status and which
# heavy modules got imported.
RUNNER = """
import json, runpy, sys
target, *args = sys.argv[1:]
sys.argv = [target, *args]
code = 0
try:
    if target.endswith(".py"):
        runpy.run_path(target, run_name="__main__")
    else:
        runpy.run_module(target, run_name="__main__", alter_sys=True)
except SystemExit as e:
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
print("RUNNER " + json.dumps({"code": code, "heavy": [m for m in HEAVY if m in sys.modules]}))
""".replace("HEAVY", repr(HEAVY))


def start(target: str, *args) -> tuple[int, list[str], str]:
    """(exit status, heavy modules imported, stdout + stderr)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", RUNNER, target, *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RUNNER "))
    result = json.loads(line.removeprefix("RUNNER "))
    return result["code"], result["heavy"], proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "train.csv"
    path.write_text("text,label,page\n오늘 회의,memo,a\n꿈에서 봤다,dream,b\n", encoding="utf-8")
    return path


ENTRY_POINTS = ["finetune/kfold.py", "finetune/search.py", "pretraining/train.py", "serving.export", "serving.score",
                "app", "finetune.teach"]


@pytest.mark.parametrize("target", ENTRY_POINTS)
def test_help_imports_neither_torch_nor_transformers(target):
    code, heavy, out = start(target, "--help")
    assert code == 0 and "usage:" in out
    assert heavy == [], f"{target} --help imported {heavy}"


def typos(table: Path, classifier: Path) -> list[tuple[str, list, str]]:
    """(entry point, its arguments with one mistake, what the one-line error must say)."""
    return [
        ("finetune/kfold.py", ["--model", "minilm", "--data", "trian.csv"], "--data trian.csv: no such file"),
        ("finetune/kfold.py", ["--model", "minilm", "--data", table, "--group-column", "pages"],
         "no column 'pages'; the columns are ['text', 'label', 'page']; name yours with --group-column"),
        ("finetune/kfold.py", ["--model", "./runs/nope", "--data", table], "--model ./runs/nope: no such folder"),
        ("finetune/search.py", ["--model", "minilm", "--data", "trian.csv"], "--data trian.csv: no such file"),
        ("pretraining/train.py", ["--corpus", table, "--output", "unused", "--preset", "tinny"],
         "unknown preset 'tinny'"),
        ("pretraining/train.py", ["--corpus", "corpus.txt", "--output", "unused"], "corpus file not found: corpus.txt"),
        ("serving.export", ["--model", classifier, "--output", "unused", "--eval-csv", "trian.csv"],
         "--eval-csv trian.csv: no such file"),
        ("serving.score", ["--model", classifier, "--input", "trian.csv", "--output", "out.csv"],
         "trian.csv: no such file"),
        ("app", ["--model", classifier, "--train-data", "trian.csv", "--models-dir", table.parent / "models"],
         "--train-data trian.csv: no such file"),
    ]


@pytest.mark.parametrize("case", range(9))
def test_a_typo_is_one_line_before_torch_loads(case, table, tiny_classifier_dir):
    target, args, message = typos(table, tiny_classifier_dir)[case]
    code, heavy, out = start(target, *args)
    assert code == 2 and message in out and out.count("error: ") == 1 and "Traceback" not in out
    assert heavy == [], f"{target} imported {heavy} before saying: {message}"


@pytest.mark.parametrize("target, flag", [("finetune/kfold.py", "--epoch"), ("finetune/search.py", "--trial"),
                                          ("pretraining/train.py", "--max-step"), ("serving.score", "--eng"),
                                          ("serving.export", "--quant"), ("app", "--promote-tol")])
def test_abbreviated_flags_are_refused(target, flag):
    # argparse would take `--epoch 1` as --epochs 1; the runs it starts would differ from what was typed
    required = {"pretraining/train.py": ["--corpus", "c.txt", "--output", "o"],
                "serving.export": ["--model", "m", "--output", "o"],
                "serving.score": ["--model", "m", "--input", "i.csv", "--output", "o.csv"]}.get(target, [])
    code, _, out = start(target, *required, flag, "1")
    refused = [ln for ln in out.splitlines() if f"unknown flag {flag}: did you mean --" in ln]
    assert code == 2 and refused and "usage:" not in out, out  # one line naming the closest flag (issue 45)


@pytest.mark.parametrize("command", [["finetune/kfold.py", "--help"], ["finetune/search.py", "--help"],
                                     ["pretraining/train.py", "--help"], ["pretraining/ablate.py", "--help"],
                                     ["-m", "serving.export", "--help"], ["-m", "serving.score", "--help"],
                                     ["-m", "app", "--help"], ["-m", "app", "models", "list"]])
def test_outside_the_venv_a_one_line_hint(command):
    # -S: no site-packages (neither the libraries nor the editable install), -E: no PYTHONPATH
    proc = subprocess.run([sys.executable, "-S", "-E", *command], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "No module named" in proc.stderr and "activate the project's venv" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
