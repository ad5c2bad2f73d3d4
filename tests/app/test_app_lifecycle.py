"""Process lifecycle: SIGTERM drains in-flight work; the Dockerfile's commands; CLI settings."""

from __future__ import annotations

import logging
import re
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest
from app_testkit import dockerfile_exec_forms, free_port, start_server

from app.config import Config, parse_args


def test_sigterm_finishes_in_flight_requests_and_refuses_new_ones(drain_server, engine):
    srv = drain_server  # batches wait 2 s here, so the request below is still in flight at SIGTERM
    got: dict = {}

    def in_flight():
        got["r"] = httpx.post(srv.url + "/v1/classify", json={"texts": ["꿈 메모", "에러"]}, timeout=30)

    t = threading.Thread(target=in_flight)
    t.start()
    time.sleep(0.5)
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    with pytest.raises(httpx.TransportError):  # the listening socket is closed
        httpx.post(srv.url + "/v1/classify", json={"text": "late"}, timeout=5)
    t.join(30)
    r = got["r"]
    assert r.status_code == 200, r.text
    expected = engine.predict(["꿈 메모", "에러"])
    assert [p["label"] for p in r.json()["predictions"]] == [p.label for p in expected]
    assert srv.proc.wait(20) == 0
    assert '"msg": "stopped"' in srv.log()


def test_sigterm_during_start_up_exits_0_at_once(spread_model_dir, tmp_path):
    # Before uvicorn serves there is nothing to drain; as a container's PID 1 an unhandled SIGTERM would be
    # ignored and `docker stop` would kill after its grace period (tests/docker checks it in the image).
    srv = start_server(spread_model_dir, tmp_path, "--no-ui")
    time.sleep(0.5)  # past interpreter start-up, inside the imports or the model load
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.proc.wait(20) == 0, srv.log()
    srv.stop()
    assert '"msg": "ready"' not in srv.log()


def test_dockerfile_commands_are_the_tested_ones(server):
    forms = dockerfile_exec_forms()
    assert forms["ENTRYPOINT"] == ["python", "-m", "app", "--model", "/model", "--host", "0.0.0.0"]
    # The session's main server was started from ENTRYPOINT + CMD (conftest.docker_argv).
    assert server.proc.args[1:7] == ["-m", "app", "--model", server.proc.args[4], "--host", "0.0.0.0"]
    health = forms["HEALTHCHECK"]
    assert health[0] == "python"

    def probe(port: int) -> int:
        argv = [sys.executable] + [a.replace("8000", str(port)) for a in health[1:]]
        return subprocess.run(argv, check=False, capture_output=True, timeout=30).returncode

    assert probe(server.port) == 0
    assert probe(free_port()) != 0  # nothing listening: unhealthy


def test_dockerfile_runs_as_non_root_and_installs_what_ci_tests():
    import tomllib
    from app_testkit import DOCKERFILE

    root = DOCKERFILE.parent
    lines = [x.strip() for x in DOCKERFILE.read_text().splitlines()]
    users = [x.split()[1] for x in lines if x.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")
    # The image installs what CI tests: the same torch pin as .ci/run, CPU wheels, and constraints.txt.
    ci = (root / ".ci" / "run").read_text()
    (torch_pin,) = re.findall(r"torch==([0-9.]+)", ci)
    assert {x for x in lines if x.startswith("ARG TORCH_VERSION")} == {f"ARG TORCH_VERSION={torch_pin}"}
    assert "ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu" in lines
    assert "pip install -c constraints.txt -r serve.txt" in DOCKERFILE.read_text()
    copied = [name for x in lines if x.startswith("COPY ") and "--from" not in x for name in x.split()[1:-1]]
    assert "constraints.txt" in copied
    assert all((root / name).exists() for name in copied), copied
    # The project is installed from the build context: no package pyproject finds may be left out of it.
    include = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {p.name for pattern in include for p in root.glob(pattern) if (p / "__init__.py").exists()}
    ignored = {x.strip().strip("/") for x in (root / ".dockerignore").read_text().splitlines()}
    assert {"app", "serving"} <= packages and not packages & ignored
    assert any(x.startswith("HEALTHCHECK") and "/healthz" in x for x in lines)
    assert "ARG VARIANT=cpu" in lines


def test_cli_flags_build_a_frozen_config(monkeypatch, tmp_path):
    monkeypatch.delenv("ELECTRA_API_KEY", raising=False)
    cfg = parse_args(["--model", "m", "--max-batch-tokens", "4096", "--max-wait-ms", "2", "--max-queue", "9",
                      "--no-batching", "--cors-origin", "https://a.example", "--data-dir", str(tmp_path)])
    assert (cfg.max_batch_tokens, cfg.max_wait_ms, cfg.max_queue, cfg.batching) == (4096, 2.0, 9, False)
    assert cfg.cors_origins == ("https://a.example",) and cfg.api_key is None
    with pytest.raises(AttributeError):
        cfg.port = 1  # frozen
    monkeypatch.setenv("ELECTRA_API_KEY", "from-env")
    assert parse_args(["--model", "m"]).api_key == "from-env"
    assert parse_args(["--model", "m", "--api-key", "flag"]).api_key == "flag"
    defaults = Config(model="m")
    assert (defaults.max_texts, defaults.max_chars, defaults.max_body_bytes) == (64, 5000, 2 * 1024 * 1024)
    with pytest.raises(SystemExit):
        parse_args(["--model", "m", "--max-texts", "0"])
    with pytest.raises(SystemExit):
        parse_args(["--model", "m", "--engine-batch-tokens", "0"])


def test_fp32_and_int8_force_a_file_and_exclude_each_other():
    from app.config import quantized

    assert quantized(parse_args(["--model", "m"])) is None  # export_report.json's cpu_default decides
    assert quantized(parse_args(["--model", "m", "--fp32"])) is False
    assert quantized(parse_args(["--model", "m", "--int8"])) is True
    with pytest.raises(SystemExit):
        parse_args(["--model", "m", "--fp32", "--int8"])


def test_pass_size_follows_the_device_unless_given():
    from app.config import pass_size

    auto = pass_size(parse_args(["--model", "m"]))
    assert (auto.on("cpu"), auto.on("cuda"), auto.on("tensorrt")) == (512, 8192, 8192)
    given = parse_args(["--model", "m", "--engine-batch-tokens", "2048"])
    assert pass_size(given) == 2048


def test_bad_model_folder_exits_with_a_message(tmp_path, capsys):
    from app.__main__ import main

    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        assert main(["--model", str(tmp_path / "nope"), "--no-ui"]) == 2
    finally:  # main() installs the JSON log handler; give pytest its own back
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    assert "no such model folder" in capsys.readouterr().err
