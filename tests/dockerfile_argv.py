"""The command line a container of the Dockerfile runs: its ENTRYPOINT and CMD, each replaced where a compose
service (entrypoint, command) or a Kubernetes container (command, args) gives its own, as the runtimes do."""

from __future__ import annotations

import json
import re
from pathlib import Path

DOCKERFILE = Path(__file__).resolve().parents[1] / "Dockerfile"


def _instruction(name: str) -> list[str]:
    lines = re.findall(rf"^{name} (\[.*\])$", DOCKERFILE.read_text(encoding="utf-8"), re.MULTILINE)
    return json.loads(lines[-1])


def app_argv(entrypoint: list[str] | None, cmd: list[str] | None) -> list[str]:
    """The flags `python -m app` receives (an entrypoint that runs anything else fails the caller's test)."""
    argv = (entrypoint if entrypoint is not None else _instruction("ENTRYPOINT"))
    if entrypoint is None or cmd is not None:  # a new entrypoint drops the image's CMD (compose and k8s alike)
        argv = argv + (cmd if cmd is not None else _instruction("CMD"))
    assert argv[:3] == ["python", "-m", "app"], argv
    return argv[3:]
