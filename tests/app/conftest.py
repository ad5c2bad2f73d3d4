"""Real server processes for the app tests: `python -m app` on free loopback ports.

The main server is started with the Dockerfile's own ENTRYPOINT and CMD (only the model path and the port
swapped), so the container's command line is the one these tests exercise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

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

    def wait_ready(self, timeout: float = 180, headers: dict | None = None) -> None:
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


def start_server(model: Path, cwd: Path, *args: str, env: dict | None = None) -> Server:
    port = free_port()
    argv = [sys.executable, "-m", "app", "--model", str(model), "--port", str(port), *args]
    return Server(argv, cwd, port, env)


@pytest.fixture(scope="session")
def spread_model_dir(tiny_classifier_dir, tmp_path_factory) -> Path:
    """The tiny classifier with its output layer re-centred and scaled: a random ELECTRA's [CLS] vectors
    are nearly identical, so every text would get the same label at ~0.34. Re-centred, labels and
    confidences differ from text to text, which is what routing, ordering and UI tests need to see."""
    import torch
    from transformers import AutoTokenizer, ElectraForSequenceClassification

    from tests.conftest import make_toy_rows

    folder = tmp_path_factory.mktemp("spread-classifier")
    shutil.copytree(tiny_classifier_dir, folder, dirs_exist_ok=True)
    tok = AutoTokenizer.from_pretrained(folder)
    model = ElectraForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        batch = tok(list(make_toy_rows(10, seed=9).text), padding=True, return_tensors="pt")
        logits = model(**batch).logits
        head = model.classifier.out_proj
        head.bias.sub_(logits.mean(0))
        scale = 2.0 / float((logits - logits.mean(0)).std())
        head.weight.mul_(scale)
        head.bias.mul_(scale)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def servers(spread_model_dir, tmp_path_factory):
    """Both long-lived servers start at once (startup is mostly imports; overlapping them saves time)."""
    main_dir = tmp_path_factory.mktemp("main-server")
    main = Server(docker_argv(spread_model_dir, free_port()), main_dir, 0)
    main.port = int(main.proc.args[main.proc.args.index("--port") + 1])
    main.url = f"http://127.0.0.1:{main.port}"
    # "strict": auth on, and a forming batch held for 1.5 s so the queue limit and the timeout can be hit.
    strict = start_server(spread_model_dir, tmp_path_factory.mktemp("strict-server"), "--api-key", API_KEY,
                          "--max-wait-ms", "1500", "--max-batch-tokens", "100000", "--max-queue", "4",
                          "--request-timeout", "1")
    try:
        main.wait_ready()
        strict.wait_ready(headers={"Authorization": f"Bearer {API_KEY}"})
        yield {"main": main, "strict": strict}
    finally:
        for s in (main, strict):
            s.stop()


@pytest.fixture(scope="session")
def server(servers) -> Server:
    return servers["main"]


@pytest.fixture(scope="session")
def strict_server(servers) -> Server:
    return servers["strict"]


@pytest.fixture(scope="session")
def engine(spread_model_dir):
    """The same model in-process: what a single, unbatched call returns."""
    from serving.engine import Classifier

    return Classifier.load(spread_model_dir)
