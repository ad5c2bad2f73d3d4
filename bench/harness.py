"""What every benchmark repeats: the machine/commit/load record, medians, and the JSON written atomically.

Benchmarks import from here instead of keeping private copies (issue 60); server start and closed-loop
clients are still in bench/load_clients.py and bench/api_load.py until they are moved here.
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def machine() -> dict:
    """What the figures depend on: the CPU (INT8 kernels differ: AVX-512 VNNI or AVX2 only), cores, load."""
    flags: set[str] = set()
    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
            elif line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    isa = "avx512_vnni" if "avx512_vnni" in flags else "avx2" if "avx2" in flags else "other"
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], check=False,
                            capture_output=True, text=True).stdout.strip()
    return {"cpu": model, "isa": isa, "cores": os.cpu_count(), "load": list(os.getloadavg()), "commit": commit,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def median_ms(times: list[float]) -> float:
    return round(statistics.median(times) * 1000, 3)


def write_record(path: Path, figures: dict) -> dict:
    """The figures with the machine they were measured on, written so a killed run leaves no half file."""
    record = {"machine": machine(), **figures}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=2)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return record
