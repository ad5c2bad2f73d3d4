"""A training child that dies with its server, and one left by an earlier server ended at start.

The child runs in its own session (a Ctrl-C meant for the server must not reach it), so the kernel does not
end it with the server: after a SIGKILL of the server it trained on, and a restarted server started a
second job beside it. Two guards:
- a lifeline: the server keeps the write end of a pipe whose read end the child watches in a thread; the
  server's end closes when its process ends, however it ends, and the child then kills its own process
  group (itself and any workers it started);
- at start, a job still marked running names its child's pid and the process's start time: a process with
  that pid *and* that start time (not a later process given the same pid) is killed.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading

log = logging.getLogger("app")
LIFELINE_FLAG = "--lifeline"


def start_time(pid: int) -> float | None:
    """The process's start time (seconds since the epoch), or None when there is no such process or no way to
    tell (psutil comes with the training install, through accelerate)."""
    try:
        import psutil

        return psutil.Process(pid).create_time()
    except Exception:  # noqa: BLE001 - no psutil, no such process, no access: nothing to compare
        return None


def spawn(args: list[str], log_file) -> tuple[subprocess.Popen, int]:
    """Start `python <args> --lifeline FD` in its own session; (the process, the server's end of the pipe).
    The caller closes its end (os.close) once the child has exited."""
    read_end, write_end = os.pipe()  # not inheritable: later children of the server do not hold it
    try:
        proc = subprocess.Popen([sys.executable, *args, LIFELINE_FLAG, str(read_end)], stdout=log_file,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                pass_fds=(read_end,))
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    return proc, write_end


def watch_lifeline(fd: int) -> None:
    """In the child: a thread that kills this process group when the server's end of the pipe closes."""

    def wait():
        try:
            while os.read(fd, 1):  # the server never writes: only the end of the file (or an error) returns
                pass
        except OSError:
            pass
        print("the server that started this training process is gone: stopping", file=sys.stderr, flush=True)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=wait, name="lifeline", daemon=True).start()


def end_orphan(pid: int | None, started: float | None) -> bool:
    """Kill the process group of a job's child left running by a server that died; True if one was killed."""
    if not pid or started is None:
        return False
    now = start_time(pid)
    if now is None or abs(now - started) > 0.01:
        return False  # gone, or the pid now belongs to another process
    try:
        os.killpg(pid, signal.SIGKILL)  # the child leads its own session: its workers go with it
    except ProcessLookupError:
        return False
    except PermissionError:
        os.kill(pid, signal.SIGKILL)
    log.warning("ended training process %d, left running by a server that stopped", pid,
                extra={"fields": {"event": "orphan_ended", "pid": pid}})
    return True
