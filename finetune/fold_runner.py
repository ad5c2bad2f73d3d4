"""Where the folds of a k-fold run train: here, one after another (`--engine local`), or each as a Ray task with
its own CPUs and GPUs, on this machine or a cluster (`--engine ray [--address auto]`).

Both run the jobs k-fold and the search hand them (`kfold.FoldJob`: `kfold.run_fold`, the same function), on the same fixed folds (OUTPUT/fold_ids.json) with the same
per-fold seed, so a fold gives the same numbers wherever it runs (on the same kind of device). A Ray worker
writes its fold folder atomically, as the local engine does, and returns the fold's record and probabilities to
the driver, which writes them too if its disk is not the worker's; the driver alone builds the report.

- Resources: `--cpus-per-fold N` (torch threads in the task), `--gpus-per-fold F` (1 on a GPU cluster; 0.5
  lets two small models share one GPU). As many folds run at once as the cluster's resources hold.
- A fold whose worker dies (OOM killer, preemption, a crash) is run again on a new worker, up to `FOLD_RETRIES`
  times; then the run stops with one line and the finished folds stay for `--resume`. An error raised by the
  fold's own code (bad data, a bug) is not retried: it would fail again.
- The driver and `--final` train nothing on Ray: the final model trains in the driver after the folds.
- Without `--address`, Ray starts on this machine only, quietly, sized to its usable cores.
"""

from __future__ import annotations

import logging
from collections import deque
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from textdata.errors import DataError, UserError
from textdata.tables import atomic_path, write_json

INSTALL_HINT = "--engine ray needs Ray, which is not installed: pip install -e '.[ray]'"
# A fold is run again at most this many times after losing its worker: a preempted or OOM-killed worker is
# retried, while a fold that kills every worker it meets stops the run instead of looping.
FOLD_RETRIES = 2
# Results are a few MB of probabilities per fold; Ray's default store (30% of RAM) would take memory the folds need.
_LOCAL_OBJECT_STORE = 256 * 2**20


def pick_accelerator(device: str):
    from accelerate import Accelerator

    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise DataError("--device cuda: no CUDA device is available")
    return Accelerator(cpu=device == "cpu")


def save_fold(fold_dir: Path, k: int, saved: dict, proba: np.ndarray, base_proba: np.ndarray) -> None:
    """A fold is written whole or not at all (the record last), so --resume never reads half a fold."""
    with atomic_path(fold_dir / f"fold_{k}.npz") as tmp, open(tmp, "wb") as f:
        np.savez(f, proba=proba, baseline=base_proba)
    write_json(fold_dir / f"fold_{k}.json", saved)


class FoldFailed(Exception):
    """A fold failed for a reason that is not the user's input (a crash, lost workers): a search records the trial
    as failed and goes on; k-fold stops."""

    def __init__(self, job, why: str, lost: bool = False):
        super().__init__(f"fold {job.k}: {why}")
        self.job, self.why, self.lost = job, why, lost


class LocalRunner:
    """Folds one after another, in this process."""

    slots = 1

    def __init__(self, prep, accelerator, wrap_errors: bool = False, on_progress=None):
        self.prep, self.accelerator, self.pending, self.wrap_errors = prep, accelerator, deque(), wrap_errors
        self.on_progress = on_progress  # given to each job: its steps are reported from this process

    def submit(self, job) -> None:
        self.pending.append(job)

    def next_done(self):
        job = self.pending.popleft()
        try:
            if self.on_progress is None:
                return job, job(self.prep, self.accelerator)
            return job, job(self.prep, self.accelerator, on_progress=self.on_progress)
        except UserError:
            raise
        except Exception as e:
            if not self.wrap_errors:  # k-fold: a bug keeps its traceback
                raise
            raise FoldFailed(job, f"{type(e).__name__}: {e}") from e


_ACCELERATOR = None


def _run_on_worker(job, prep, threads: int):
    """The Ray task: one fold on this worker's CPUs/GPU."""
    global _ACCELERATOR
    import torch
    import transformers

    torch.set_num_threads(threads)
    transformers.logging.set_verbosity_error()
    if _ACCELERATOR is None:  # one per worker process: Accelerator's state is process-wide
        _ACCELERATOR = pick_accelerator(job.cfg.device)
    return job(prep, _ACCELERATOR)


def import_ray():
    try:
        import ray
    except ImportError:
        raise DataError(INSTALL_HINT) from None
    return ray


def usable_cores() -> int:
    """Cores this process may use: affinity and cgroup quota (textdata/cpu_limits.py)."""
    from textdata.cpu_limits import read_limits

    return read_limits().usable


class RayRunner:
    """Each fold a Ray task with `--cpus-per-fold` CPUs and `--gpus-per-fold` GPUs; `slots` fit at once."""

    def __init__(self, ray, cfg, prep):
        self.ray, self.cfg = ray, cfg
        have = ray.cluster_resources()
        if cfg.gpus_per_fold and have.get("GPU", 0) < cfg.gpus_per_fold:
            raise DataError(f"--gpus-per-fold {cfg.gpus_per_fold:g}: the Ray cluster has {have.get('GPU', 0):g} GPUs; "
                            "drop the flag to train on CPUs")
        if have.get("CPU", 0) < cfg.cpus_per_fold:
            raise DataError(f"--cpus-per-fold {cfg.cpus_per_fold}: the Ray cluster has {have.get('CPU', 0):g} CPUs")
        fits = [have.get("CPU", 0) // cfg.cpus_per_fold]
        if cfg.gpus_per_fold:
            fits.append(have["GPU"] // cfg.gpus_per_fold)
        self.slots = max(1, int(min(fits)))
        self.prep = ray.put(prep)  # once: every fold task reads the same rows, ids and folds
        self.task = ray.remote(_run_on_worker).options(
            num_cpus=cfg.cpus_per_fold, num_gpus=cfg.gpus_per_fold or 0, max_retries=FOLD_RETRIES,
            retry_exceptions=False)
        self.running: dict = {}

    def submit(self, job) -> None:
        self.running[self.task.remote(job, self.prep, self.cfg.cpus_per_fold)] = job

    def next_done(self):
        ray = self.ray
        done, _ = ray.wait(list(self.running), num_returns=1)
        job = self.running.pop(done[0])
        try:
            result = ray.get(done[0])
        except ray.exceptions.RayTaskError as e:  # raised by the fold's own code: not retried
            cause = getattr(e, "cause", None)
            if isinstance(cause, UserError):
                raise cause from None
            raise FoldFailed(job, f"{type(cause).__name__}: {cause}" if cause else str(e)) from e
        except ray.exceptions.RayError as e:  # the worker died every time
            raise FoldFailed(job, f"its worker died {FOLD_RETRIES + 1} times ({type(e).__name__}: out of memory, "
                                  "preempted or crashed)", lost=True) from e
        fold_dir = Path(job.cfg.output) / "folds"
        if not (fold_dir / f"fold_{job.k}.json").exists():  # the worker's disk was not ours (a cluster)
            save_fold(fold_dir, job.k, *result)
        return job, result

    def cancel(self) -> None:
        for ref in self.running:
            self.ray.cancel(ref, force=True)
        self.running.clear()


@contextmanager
def ray_session(cfg):
    """Join `--address`, reuse a session the caller started, or start one on this machine only."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    quiet = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
    if cfg.address:
        ray.init(address=cfg.address, **quiet)
    else:
        ray.init(num_cpus=usable_cores(), object_store_memory=_LOCAL_OBJECT_STORE, **quiet)
    try:
        yield ray
    finally:
        ray.shutdown()


@contextmanager
def open_runner(cfg, prep, accelerator, wrap_errors: bool = False, on_progress=None):
    """The runner for `cfg.engine`. Unless `wrap_errors` (a search), a fold that lost its worker every time stops
    the run with one line naming it and --resume; a fold's own error is raised as it is. Local jobs are given
    `on_progress` for their steps (a Ray worker cannot call back into this process)."""
    try:
        if cfg.engine != "ray":
            yield LocalRunner(prep, accelerator, wrap_errors, on_progress)
            return
        with ray_session(cfg) as ray:
            runner = RayRunner(ray, cfg, prep)
            try:
                yield runner
            finally:
                runner.cancel()
    except FoldFailed as e:
        if wrap_errors:
            raise
        if not e.lost:
            raise e.__cause__ from None  # Ray's error carries the worker's traceback
        raise DataError(f"{e}; the finished folds are kept in {Path(cfg.output) / 'folds'}: rerun with --resume "
                        f"--output {cfg.output}") from None
