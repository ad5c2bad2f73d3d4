"""Helpers shared by the app tests: start `python -m app` on a free port, read the Dockerfile's commands.

A module of its own (not conftest.py) so test files can import it: tests/ has no __init__.py, and a
package named `app` here would shadow the real one.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
API_KEY = "test-key-7f3a"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dockerfile_exec_forms() -> dict[str, list[str]]:
    """ENTRYPOINT, CMD and HEALTHCHECK's CMD of the final stage, as argv lists (exec form only)."""
    found: dict[str, list[str]] = {}
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    for line in text.splitlines():
        line = line.strip()
        m = re.match(r"^(ENTRYPOINT|CMD)\s+(\[.*\])\s*$", line)
        if m:
            found[m.group(1)] = json.loads(m.group(2))
        m = re.match(r"^HEALTHCHECK\s+.*?\bCMD\s+(\[.*\])\s*$", line)
        if m:
            found["HEALTHCHECK"] = json.loads(m.group(1))
    return found


def docker_argv(model: Path, port: int) -> list[str]:
    forms = dockerfile_exec_forms()
    argv = [str(model) if a == "/model" else a for a in forms["ENTRYPOINT"] + forms.get("CMD", [])]
    return [sys.executable if a == "python" else a.replace("8000", str(port)) for a in argv]


class Server:
    def __init__(self, argv: list[str], cwd: Path, port: int, env: dict | None = None):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.cwd = cwd
        self.log_path = cwd / "server.log"
        # A key in the developer's shell must not silently switch auth on for every test server.
        full_env = {k: v for k, v in os.environ.items() if k != "ELECTRA_API_KEY"}
        full_env.update({"PYTHONPATH": str(ROOT), "GRADIO_ANALYTICS_ENABLED": "False", **(env or {})})
        self.log_file = open(self.log_path, "wb")  # noqa: SIM115 - open for the process lifetime
        self.proc = subprocess.Popen(argv, cwd=cwd, env=full_env, stdout=self.log_file, stderr=subprocess.STDOUT)

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_ready(self, timeout: float = 300, headers: dict | None = None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
            try:
                if httpx.get(self.url + "/readyz", headers=headers, timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"server not ready after {timeout} s:\n{self.log()[-3000:]}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log_file.close()
        return self.proc.returncode


def two_version_registry(model: Path, root: Path):
    """A registry under root/models: `model` as v1 (active) and a copy with one file more as v2 (not active)."""
    import shutil

    from app.versions.registry import Registry

    reg = Registry(root / "models")
    reg.set_active(reg.register_folder(model)[0])
    other = root / "src-v2"
    shutil.copytree(model, other)
    (other / "note.txt").write_text("v2")
    assert reg.register_folder(other) == ("v2", True)
    return reg


def start_server(model: Path, cwd: Path, *args: str, env: dict | None = None) -> Server:
    port = free_port()
    argv = [sys.executable, "-m", "app", "--model", str(model), "--port", str(port), *args]
    return Server(argv, cwd, port, env)


@contextmanager
def training_server(model: Path, encoder: Path, rows, root: Path, *args: str) -> Iterator[Server]:
    """A server on `model` that can retrain: `rows` (a toy_rows frame) as --train-data, `encoder` to fine-tune,
    any new version promoted (tolerance 1), the training child on one thread."""
    base = root / "base.csv"
    rows[["text", "label"]].to_csv(base, index=False)
    server = start_server(model, root, *args, "--train-data", str(base), "--train-model", str(encoder),
                          "--promote-tolerance", "1", env={"OMP_NUM_THREADS": "1"})
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@contextmanager
def team_server(model: Path, root: Path, people: dict[str, str], ready_as: str) -> Iterator[tuple[Server, dict]]:
    """A server on a fresh label store in `root` whose users are `people` ({name: role}): (server, {name: token}),
    ready once `ready_as` may read it."""
    from labelstore import open_store, users

    engine = open_store(f"sqlite:///{root / 'app-data' / 'app.db'}")
    tokens = {name: users.add_user(engine, name, role) for name, role in people.items()}
    engine.dispose()
    server = start_server(model, root, "--no-monitor")
    try:
        server.wait_ready(headers={"Authorization": f"Bearer {tokens[ready_as]}"})
        yield server, tokens
    finally:
        server.stop()


@contextmanager
def chromium(executable: Path, args: list[str]):
    """Debian's chromium through Playwright (the browser tests skip without Playwright)."""
    import pytest

    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(executable), args=args)
        try:
            yield browser
        finally:
            browser.close()


def metric(text: str, name: str, **labels) -> float:
    """Value of one Prometheus sample (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = re.escape(name) + (r"\{" + re.escape(want) + r"\}" if want else "") + r" ([0-9.e+-]+)$"
    m = re.search(pattern, text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


def gradio_event(url: str, fn_index: int, data: list, session: str | None = None, headers: dict | None = None) -> dict:
    """One event through Gradio's queue, as any HTTP client can send it: the final message. A fixed `session`
    keeps the event's gr.State (the row on screen) across calls, as one browser tab does."""
    import uuid

    session = session or uuid.uuid4().hex[:12]
    r = httpx.post(url + "/ui/gradio_api/queue/join", headers=headers,
                   json={"data": data, "fn_index": fn_index, "session_hash": session, "event_data": None,
                         "trigger_id": None})
    r.raise_for_status()
    with httpx.stream("GET", url + "/ui/gradio_api/queue/data", params={"session_hash": session},
                      headers=headers, timeout=120) as stream:
        for line in stream.iter_lines():
            if line.startswith("data:"):
                message = json.loads(line[5:])
                if message.get("msg") == "process_completed":
                    return message
    raise AssertionError("no process_completed message")


def session_outputs(url: str, session: str, fn_index: int, data: list) -> list:
    """The outputs of one successful event in a fixed session."""
    done = gradio_event(url, fn_index, data, session)
    assert done["success"], done
    return done["output"]["data"]
