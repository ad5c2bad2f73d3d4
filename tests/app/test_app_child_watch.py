"""A training child never outlives its server (issue 29, app/versions/child_watch.py): after a SIGKILL of the server the
child kept training and a restarted server started a second one beside it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from app.config import Config
from app.versions.child_watch import start_time
from app.versions.jobs import Jobs
from app.versions.registry import Registry

ROOT = Path(__file__).resolve().parents[2]
SLEEPER = "import sys, time\nfrom app.versions.child_watch import watch_lifeline\nwatch_lifeline(int(sys.argv[-1]))\ntime.sleep(120)"


def _gone(pid: int, within_s: float = 20) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def test_the_child_dies_with_its_server_however_the_server_ends(tmp_path):
    server_code = ("import sys\nfrom app.versions.child_watch import spawn\n"
                   f"proc, _ = spawn(['-c', {SLEEPER!r}], None)\nprint(proc.pid, flush=True)\nimport time\n"
                   "time.sleep(120)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen([sys.executable, "-c", server_code], stdout=subprocess.PIPE, text=True, env=env)
    child = int(server.stdout.readline())
    time.sleep(1.0)
    assert not _gone(child, within_s=0.5)  # alive while its server is
    server.send_signal(signal.SIGKILL)
    server.wait(10)
    assert _gone(child), "the training child outlived its SIGKILLed server"


def test_a_child_left_running_is_ended_at_start_and_only_that_process(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    kw = {"env": env, "start_new_session": True, "stdin": subprocess.DEVNULL}
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], **kw)
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], **kw)
    try:
        reg = Registry(tmp_path / "models")
        for job_id, proc, started in (("20250101-000000-aaaaaa", orphan, start_time(orphan.pid)),
                                      ("20250101-000001-bbbbbb", stranger, start_time(stranger.pid) - 50)):  # pid reused
            folder = reg.root / ".jobs" / job_id
            folder.mkdir(parents=True)
            (folder / "job.json").write_text(json.dumps({"id": job_id, "status": "running", "pid": proc.pid,
                                                         "pid_started": started}))
        Jobs(Config(data_dir=tmp_path, models_dir=reg.root), reg, switcher=None)
        assert orphan.wait(10) == -signal.SIGKILL
        assert stranger.poll() is None  # another process with a recorded pid is left alone
        records = {r["id"]: r for r in Jobs(Config(data_dir=tmp_path, models_dir=reg.root), reg, None).list()}
        assert records["20250101-000000-aaaaaa"]["status"] == "failed"
        assert f"(pid {orphan.pid}) was still running and was ended" in records["20250101-000000-aaaaaa"]["error"]
        assert "was ended" not in records["20250101-000001-bbbbbb"]["error"]
    finally:
        for p in (orphan, stranger):
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.parametrize("argv", [["job", "--lifeline"], ["job", "x", "y"]])
def test_train_child_usage(argv):
    from app.versions.train_child import main

    assert main(argv) == 2
