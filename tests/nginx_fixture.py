"""Debian's nginx running docker/nginx-fleet.conf in front of replicas on this host (tests/docker/test_fleet_nginx.py,
bench/fleet.py): the compose file's configuration itself, with only its addresses and
file paths moved, so what is measured and tested here is what the fleet runs.

Where no nginx binary exists the tests that need it are skipped, saying why (`apt-get install nginx-light`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLEET_CONF = ROOT / "docker" / "nginx-fleet.conf"
REPLICAS = ("replica1", "replica2", "replica3")


def nginx_binary() -> str | None:
    found = shutil.which("nginx") or "/usr/sbin/nginx"
    return found if Path(found).exists() else None


def local_conf(ports: list[int], listen: int, work: Path, conf: str | None = None) -> str:
    """`conf` (docker/nginx-fleet.conf's text by default) for up to three replicas on 127.0.0.1:`ports` (the lines
    of the others dropped, the tries cut to the replicas left), nginx on 127.0.0.1:`listen`, its pid, logs and
    buffers in `work`."""
    if not 1 <= len(ports) <= len(REPLICAS):
        raise ValueError(f"the fleet's configuration names {len(REPLICAS)} replicas; got {len(ports)} ports")
    text = FLEET_CONF.read_text(encoding="utf-8") if conf is None else conf
    for name in REPLICAS[len(ports):]:
        text = re.sub(rf"^\s*server {name}:8000[^;]*;\n", "", text, flags=re.MULTILINE)
    text = re.sub(r"proxy_next_upstream_tries (\d+);", lambda m: f"proxy_next_upstream_tries {min(int(m[1]), len(ports))};",
                  text)
    for name, port in zip(REPLICAS, ports):
        text = text.replace(f"{name}:8000", f"127.0.0.1:{port}")
    temp = " ".join(f"{kind}_temp_path {work}/tmp-{kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi",
                                                                         "scgi"))
    text = text.replace("http {", "http {\n    " + temp, 1)
    text = re.sub(r"^pid .*;$", f"pid {work}/nginx.pid;", text, flags=re.MULTILINE)
    text = re.sub(r"^error_log .*;$", f"error_log {work}/error.log warn;", text, flags=re.MULTILINE)
    text = re.sub(r"access_log \S+ fleet;", f"access_log {work}/access.log fleet;", text)
    text = re.sub(r"^\s*listen \[::\]:8080;\n", "", text, flags=re.MULTILINE)
    text = text.replace("listen 8080;", f"listen 127.0.0.1:{listen};")
    if os.geteuid() == 0:  # nginx's workers would run as nobody, who cannot write to `work`
        text = "user root;\n" + text
    return text


@contextlib.contextmanager
def running_nginx(conf_text: str, work: Path, listen: int):
    """nginx in the foreground on `conf_text` (written to work/nginx.conf); stopped gracefully at the end."""
    work.mkdir(parents=True, exist_ok=True)
    conf = work / "nginx.conf"
    conf.write_text(conf_text, encoding="utf-8")
    proc = subprocess.Popen([nginx_binary(), "-c", str(conf), "-p", str(work), "-g", "daemon off;"],
                            stdout=subprocess.DEVNULL, stderr=open(work / "stderr.log", "ab"))  # noqa: SIM115
    try:
        deadline = time.monotonic() + 20
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"nginx exited {proc.returncode}: {(work / 'stderr.log').read_text()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", listen), timeout=0.5):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"nginx not listening on {listen} after 20 s")
            time.sleep(0.05)
        yield proc
    finally:
        proc.send_signal(signal.SIGQUIT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
