"""How many CPU threads a process should run, from the cores it may use and the work already on them.

One answer for ONNX Runtime (serving/onnx_runner.py), torch in k-fold (finetune/kfold.py) and pretraining
(pretraining/cpu_limits.py, a marked copy: pretraining imports none of the other packages).

- Cores this process may use: its CPU affinity (`os.sched_getaffinity`: taskset, cpuset, `docker --cpuset-cpus`)
  and its cgroup CPU quota (`cpu.max` in cgroup v2, `cpu.cfs_quota_us / cpu.cfs_period_us` in v1: `docker
  --cpus`, Kubernetes limits), whole cores only: with 1.5 cores of quota a second thread is throttled in every
  period and the first waits for it at each barrier.
- Work already on those cores: the 1-minute load average, scaled to this process's share of the machine, and
  no more than the CPUs /proc/stat shows busy over the last 0.1 s. The load average lags by a minute: right
  after a job of one's own (k-fold, then export, then scoring) an idle machine reads as busy, and a plan of one
  thread scored 0.53x the rows/s of two there (2026-11-25, docs/notes/log.md, "Shared cores and spin-waiting"); a CPU-bound neighbour shows in
  both.
  On a shared machine a thread per core means some threads wait for a core while the others spin or block at
  the next barrier: measured here, torch pretraining beside one CPU-bound process ran 4.6-9.9x faster with one
  thread than with two, and ONNX Runtime scored more rows/s with one (docs/serving.md, "Shared cores").
  So threads = usable cores minus the busy ones (at least one).
- Spinning: ONNX Runtime's intra-op threads spin between operators by default, which buys latency on idle
  cores and burns a core another process could use; off where cores are contended or quota-limited.

The load average is read once, when a session or a training job starts: a long job does not follow later
changes. An explicit thread count (`threads=`, `--threads`, OMP_NUM_THREADS) always wins.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/")  # tests point this at a fake /proc and /sys


@dataclass(frozen=True)
class CpuLimits:
    machine: int  # logical CPUs of the machine
    affinity: int  # CPUs this process may be scheduled on
    quota: float | None  # cgroup CPU quota in cores; None: no quota
    load: float  # the machine's 1-minute load average
    busy_now: float | None = None  # CPUs of the machine busy over the last SAMPLE_SECONDS; None: not measured

    @property
    def usable(self) -> int:
        """Cores this process may use: affinity, capped by whole cores of quota."""
        n = self.affinity if self.quota is None else min(self.affinity, int(self.quota))
        return max(1, n)

    @property
    def busy(self) -> int:
        """Of those, cores that other work keeps busy: the load average on our share of the machine, rounded
        (a job's own start-up adds a few tenths; rounding keeps that from costing it a thread)."""
        load = self.load if self.busy_now is None else min(self.load, self.busy_now)
        share = load * self.affinity / max(1, self.machine)
        return min(self.usable, int(share + 0.5))

    @property
    def quota_bound(self) -> bool:
        return self.quota is not None and self.quota < self.affinity


@dataclass(frozen=True)
class ThreadPlan:
    threads: int
    spinning: bool  # ONNX Runtime intra-op spin-waiting
    why: str

    def as_dict(self) -> dict:
        return {"threads": self.threads, "spinning": self.spinning, "why": self.why}


def _affinity() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def _cgroup_dirs(root: Path) -> list[Path]:
    """This process's cgroup folders holding CPU limits (v2 unified, v1 cpu controller), deepest first,
    then each parent up to the mount point: a limit on a parent binds its children too."""
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    dirs = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        mounts = [root / "sys/fs/cgroup"] if controllers == "" else \
            [root / "sys/fs/cgroup" / c for c in ("cpu", "cpu,cpuacct") if c.split(",")[0] in controllers.split(",")]
        for mount in mounts:
            here = mount / path.lstrip("/")
            while True:
                dirs.append(here)
                if here == mount or mount not in here.parents:
                    break
                here = here.parent
    return dirs


def _read_quota(folder: Path) -> float | None:
    """Cores of quota set in one cgroup folder, or None where it sets none."""
    try:
        quota, period = (folder / "cpu.max").read_text().split()[:2]  # v2: "max 100000" or "150000 100000"
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text())  # v1: -1 = none
        period = int((folder / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None


def cgroup_quota(root: Path | None = None) -> float | None:
    """The tightest CPU quota, in cores, on this process's cgroup or its parents; None where none is set."""
    quotas = [q for q in (_read_quota(d) for d in _cgroup_dirs(root or ROOT)) if q is not None]
    return min(quotas) if quotas else None


def load_average(root: Path | None = None) -> float:
    try:
        return float((((root or ROOT) / "proc/loadavg").read_text().split() or ["0"])[0])
    except (OSError, ValueError):
        return 0.0


SAMPLE_SECONDS = 0.1


def _cpu_times(root: Path) -> tuple[int, int]:
    """(all, idle) jiffies of the machine from /proc/stat's first line (idle: idle + iowait)."""
    values = [int(v) for v in (root / "proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return sum(values), values[3] + values[4]


def busy_cpus(root: Path | None = None, machine: int | None = None, seconds: float = SAMPLE_SECONDS) -> float | None:
    """CPUs of the machine busy over the next `seconds`, or None where /proc/stat is missing or does not move."""
    root = root or ROOT
    try:
        all0, idle0 = _cpu_times(root)
        time.sleep(seconds)
        all1, idle1 = _cpu_times(root)
    except (OSError, ValueError, IndexError):
        return None
    if all1 <= all0:
        return None
    return (1.0 - (idle1 - idle0) / (all1 - all0)) * (machine or os.cpu_count() or 1)


def read_limits(root: Path | None = None, affinity: int | None = None) -> CpuLimits:
    root = root or ROOT
    machine = max(os.cpu_count() or 1, affinity or 0)
    return CpuLimits(machine=machine, affinity=affinity or _affinity(), quota=cgroup_quota(root),
                     load=load_average(root), busy_now=busy_cpus(root, machine))


def plan_threads(limits: CpuLimits | None = None, requested: int | None = None, batch: bool = False) -> ThreadPlan:
    """Threads (and ONNX Runtime spinning) for a CPU job starting now; `requested` (a user's count) wins.
    `batch`: throughput work (batch scoring), where spin-waiting buys no latency, so it is off on idle cores too."""
    lim = limits or read_limits()
    contended = lim.busy > 0 or lim.quota_bound
    spinning = not contended and not batch
    if requested:
        return ThreadPlan(requested, spinning, f"requested {requested}")
    threads = max(1, lim.usable - lim.busy)
    quota = f", quota {lim.quota:g} cores" if lim.quota is not None else ""
    now = f", {lim.busy_now:.2f} busy now" if lim.busy_now is not None else ""
    why = (f"{threads} of {lim.usable} usable cores (affinity {lim.affinity}{quota}; load average {lim.load:.2f}"
           f"{now} on {lim.machine} CPUs)")
    if contended:
        why += ": contended, spinning off"
    elif batch:
        why += ": batch scoring, spinning off"
    return ThreadPlan(threads, spinning, why)


def omp_threads() -> int | None:
    """OMP_NUM_THREADS when set to a positive integer: the user's explicit choice for torch."""
    try:
        n = int(os.environ.get("OMP_NUM_THREADS", ""))
    except ValueError:
        return None
    return n if n > 0 else None
