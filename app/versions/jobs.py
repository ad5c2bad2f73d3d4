"""Retraining jobs, one at a time: build the table, start the training child, commit the version, decide.

A job lives in <models-dir>/.jobs/<id>/: job.json (its record, rewritten atomically at each change),
spec.json (what the child runs), train.csv and eval.csv (the tables), progress.json (written by the
child), train.log (everything the child printed) and work/ (k-fold's run folder, removed at the end).
The child builds the version in <models-dir>/.staging-<id>/; only when it exits 0 does the server write
version.json there and rename it to the next vN. A child that fails, is cancelled or is killed leaves the
staging folder, which is removed: no half-written version ever appears.

Then champion/challenger: the new version's macro-F1 against the active version's on the evaluation-slice rows
neither trained on (both measured by the child; app/versions/lineage.py), and the decision says how many rows that is.
With --promote auto it is activated (app/versions/swap.py) unless it is worse by more than --promote-tolerance;
otherwise it stays a candidate with both scores listed.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path

from app.label_kinds import active_space, space_fields
from app.llm.teacher_labels import TEACHER_COLUMN, attach
from app.versions import child_watch
from app.versions.lineage import describe
from app.versions.registry import Registry, RegistryError
from app.versions.swap import ActivationError, Switcher
from app.versions.train_params import check_params, inherited, kfold_config
from app.versions.trainset import TrainingDataError, build, check, eval_share
from textdata.model_files import TRAINING_CONFIG
from textdata.tables import write_json, write_table

log = logging.getLogger("app")
_JOB_ID = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$")
DEFAULT_FOLDS = 5
LOG_TAIL_LINES = 40


class JobConflict(Exception):
    """A job is already running (409), or the job asked about is not running (cancel)."""


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [ln for ln in re.split(r"[\r\n]+", text) if ln.strip()][-lines:]


def _exit_reason(rc: int) -> str:
    if rc < 0:
        try:
            return f"the training process was killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"the training process was killed by signal {-rc}"
    return f"the training process exited with status {rc}"


class Jobs:
    def __init__(self, cfg, registry: Registry, switcher: Switcher):
        self.cfg, self.registry, self.switcher = cfg, registry, switcher
        self.root = registry.root / ".jobs"
        self.current: dict | None = None
        self._proc: subprocess.Popen | None = None
        self._task: asyncio.Task | None = None
        self._lock = asyncio.Lock()
        for record in self.list():  # a server that died mid-job leaves it "running": it is not
            if record["status"] == "running":
                ended = child_watch.end_orphan(record.get("pid"), record.get("pid_started"))
                self._finish(record, "failed", error="the server stopped while the job was running" +
                             (f"; its training process (pid {record['pid']}) was still running and was ended"
                              if ended else ""))

    # ------------------------------------------------------------ reading
    def folder(self, job_id: str) -> Path:
        if not _JOB_ID.fullmatch(job_id or ""):
            raise KeyError(job_id)
        folder = self.root / job_id
        if not (folder / "job.json").is_file():
            raise KeyError(job_id)
        return folder

    def get(self, job_id: str) -> dict:
        folder = self.folder(job_id)
        record = json.loads((folder / "job.json").read_text(encoding="utf-8"))
        try:
            record["progress"] = json.loads((folder / "progress.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            record["progress"] = None
        record["log_tail"] = log_tail(folder / "train.log")
        return record

    def list(self) -> list[dict]:
        if not self.root.is_dir():
            return []
        out = []
        for p in sorted(self.root.glob("*/job.json"), reverse=True):
            try:
                out.append(json.loads(p.read_text(encoding="utf-8")))
            except (OSError, ValueError):
                continue
        return out

    def running(self) -> dict | None:
        return self.current if self.current and self.current["status"] == "running" else None

    # ------------------------------------------------------------ starting
    def settings(self, given: dict) -> dict:
        """The retrain's settings: what was asked, else what the active version was trained with."""
        # What a retrain may set, and inherits when not given: app/versions/train_params.py RETRAINABLE; the one check,
        # for the API and the Train tab alike.
        out = {**inherited(self._active_training_config().get("config", {})), **check_params(given)}
        out.setdefault("folds", DEFAULT_FOLDS)
        if int(out["folds"]) < 2:
            raise TrainingDataError("folds must be at least 2")
        return out

    def base_model(self) -> str:
        """The encoder the retrain fine-tunes: --train-model, else the one the active version was trained from."""
        if self.cfg.train_model:
            given = self.cfg.train_model
            return str(Path(given).resolve()) if Path(given).exists() else given
        active = self.registry.active()
        if active:
            meta = self.registry.meta(active)
            if meta.get("base_model"):
                return meta["base_model"]
            model = self._active_training_config().get("config", {}).get("model")
            if model and (Path(model).is_dir() or "/" not in model):  # a folder that is still there, or an alias
                return str(Path(model).resolve()) if Path(model).is_dir() else model
        raise TrainingDataError("no encoder to fine-tune: the active version does not say what it was trained from "
                                "(or that folder is gone); start the server with --train-model FOLDER (e.g. "
                                "runs/pretrain/discriminator)")

    def _active_training_config(self) -> dict:
        """The active version's training_config.json (finetune --final), or {} when there is none."""
        active = self.registry.active()
        try:
            return json.loads((self.registry.path(active) / TRAINING_CONFIG).read_text(encoding="utf-8")) \
                if active else {}
        except (OSError, ValueError, RegistryError):
            return {}

    async def start(self, given: dict) -> dict:
        async with self._lock:
            running = self.running()
            if running:
                raise JobConflict(f"job {running['id']} is running: one training job at a time; wait for it or "
                                  f"cancel it (DELETE /v1/jobs/{running['id']})")
            missing = [m for m in ("torch", "sklearn", "optimum") if importlib.util.find_spec(m) is None]
            if missing:
                raise TrainingDataError(f"training needs {', '.join(missing)}, not installed here (the slim ONNX "
                                        "image serves only): run the server from the full install or image "
                                        "(docker build --build-arg VARIANT=full)")
            params = self.settings(given)
            base = self.base_model()
            share = eval_share(self.registry.root, self.cfg.eval_share)
            label_root = Path(self.cfg.data_dir) / "label"
            space = active_space(self.registry)  # a multi-label active model retrains multi-label, its separator
            # Off the event loop: on a 1,000,000-row table the check, the table writes and the sha256 held it
            # 4.8 s, every request waiting.
            store = getattr(getattr(self.switcher, "state", None), "store", None)  # team datasets, as of event N
            ts = await asyncio.to_thread(build, label_root, self.cfg.train_data, share, space, store)
            await asyncio.to_thread(check, ts, int(params["folds"]), space)
            # the cascade's LLM answers as teacher labels beside the gold ones (app/llm/teacher_labels.py)
            ts.train, teacher = await asyncio.to_thread(attach, ts.train, share, self.cfg.data_dir, space)
            ts.sources.update({"teacher": teacher} if teacher else {})
            job_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
            record = await asyncio.to_thread(self._write_job, job_id, params, base, ts, space)
            return self._spawn(record, ts)

    def _write_job(self, job_id: str, params: dict, base: str, ts, space) -> dict:
        """The job's folder: its tables, spec.json and first job.json (the record, returned)."""
        folder = self.root / job_id
        folder.mkdir(parents=True)
        write_table(ts.train, folder / "train.csv")
        write_table(ts.eval, folder / "eval.csv")
        staging = self.registry.staging(job_id)
        extra = space_fields(space)  # k-fold's --multi-label --label-sep
        if TEACHER_COLUMN in ts.train.columns:  # k-fold's --teacher-column: every score on gold rows only
            extra["teacher_column"] = TEACHER_COLUMN
        kfold = kfold_config(params, model=base, data=str(folder / "train.csv"), output=str(folder / "work"),
                             final=True, **extra)
        active = self.registry.active()
        champion = {"version": active, "folder": str(self.registry.path(active).resolve())} if active else None
        write_json(folder / "spec.json", {"kfold": kfold, "staging": str(staging), "champion": champion,
                                          "nice": self.cfg.train_nice, **space_fields(space)})
        record = {"id": job_id, "status": "running", "created": round(time.time(), 3), "params": params,
                  "base_model": base, "parent": active, "data": ts.sources, "conflicts": ts.conflicts,
                  "n_conflicts": ts.n_conflicts, "version": None, "decision": None, "error": None,
                  "table_sha256": hashlib.sha256((folder / "train.csv").read_bytes()).hexdigest()}
        self._save(record)
        return record

    def _spawn(self, record: dict, ts) -> dict:
        job_id, folder = record["id"], self.root / record["id"]
        staging = self.registry.staging(job_id)
        with open(folder / "train.log", "wb") as out:
            # Its own session: a signal meant for the server (Ctrl-C) does not reach it; cancel sends its own.
            # It dies with the server, through the lifeline (app/versions/child_watch.py).
            self._proc, lifeline = child_watch.spawn(["-m", "app.versions.train_child", str(folder)], out)
        record["pid"], record["pid_started"] = self._proc.pid, child_watch.start_time(self._proc.pid)
        self._save(record)
        self.current = record
        self._task = asyncio.get_running_loop().create_task(self._watch(record, self._proc, staging, lifeline))
        log.info("training job started", extra={"fields": {"event": "train_start", "job": job_id,
                                                           "rows": ts.sources.get("train_rows"), "pid": record["pid"]}})
        return record

    # ------------------------------------------------------------ finishing
    async def _watch(self, record: dict, proc: subprocess.Popen, staging: Path, lifeline: int) -> None:
        rc = await asyncio.to_thread(proc.wait)
        os.close(lifeline)
        folder = self.root / record["id"]
        try:
            if record["status"] == "cancelled":
                self._finish(record, "cancelled")
            elif rc == 0 and (folder / "result.json").is_file():
                result = json.loads((folder / "result.json").read_text(encoding="utf-8"))
                version = self.registry.commit(staging, self._meta(record, result))
                record["version"] = version
                self._finish(record, "succeeded", result=result)
                record["decision"] = await self._decide(version, result, record["parent"])
                self._save(record)
            else:
                tail = "\n".join(log_tail(folder / "train.log", 8))
                self._finish(record, "failed", error=f"{_exit_reason(rc)}; no version was made. Last lines of "
                                                     f"its log:\n{tail}")
        except Exception as e:
            log.exception("training job %s: finishing failed", record["id"])
            self._finish(record, "failed", error=f"finishing the job failed: {e}")
        finally:
            shutil.rmtree(staging, ignore_errors=True)  # gone after a rename; a failed run's leftovers otherwise
            shutil.rmtree(folder / "work", ignore_errors=True)

    def _meta(self, record: dict, result: dict) -> dict:
        champion = None
        if record["parent"] and result.get("champion_eval"):
            champion = {"version": record["parent"], **result["champion_eval"]}
        return {"source": "trained", "parent": record["parent"], "base_model": record["base_model"], "job": record["id"],
                "rows": result["rows"], "table_sha256": record["table_sha256"], "training": record["params"],
                "data": record["data"], "labels": result["labels"], "cv_macro_f1": result["cv_macro_f1"],
                "cv_macro_f1_std": result["cv_macro_f1_std"], "export": result["export"],
                **{k: result[k] for k in ("cv_served_macro_f1", "cv_served", "teacher") if k in result},
                "trained_on": {"known": True, "table": "training/train.csv", "sha256": record["table_sha256"]},
                "eval": {**(result.get("eval") or {}), "champion": champion, "compared_on": result.get("compared_on")}}

    async def _decide(self, version: str, result: dict, parent: str | None) -> dict:
        cand = (result.get("eval") or {}).get("macro_f1")
        champ = (result.get("champion_eval") or {}).get("macro_f1")
        tol = self.cfg.promote_tolerance
        basis = result.get("compared_on")
        on = f" {describe(basis)}" if basis else ""
        if self.cfg.promote == "manual":
            promote, why = False, f"--promote manual: promote it with POST /v1/models/{version}/activate or the Train tab"
        elif cand is None:
            what = ("the evaluation slice is empty (too few labeled texts)" if not basis or not basis["slice_rows"]
                    else f"all {basis['slice_rows']} evaluation texts were trained on ({describe(basis)})")
            promote, why = False, (f"not compared: {what}; promote it by hand (Train tab: Promote / activate) "
                                   "if its cv macro-F1 is good enough")
        elif champ is None or cand >= champ - tol:
            vs = f"{parent}'s {champ:.4f}" if champ is not None else "no active version scored"
            promote, why = True, f"evaluation macro-F1 {cand:.4f} vs {vs}{on} (tolerance {tol:g})"
        else:
            promote, why = False, (f"evaluation macro-F1 {cand:.4f} is below {parent}'s {champ:.4f}{on} by more "
                                   f"than --promote-tolerance {tol:g}: kept as a candidate")
        self.registry.log("decision", version=version, promoted=promote, why=why)
        if promote:
            try:
                await self.switcher.activate(version, why=f"promoted: {why}")
            except ActivationError as e:
                promote, why = False, str(e)
                self.registry.log("decision", version=version, promoted=False, why=why)
        return {"promoted": promote, "why": why}

    def _finish(self, record: dict, status: str, **fields) -> None:
        record.update(status=status, finished=round(time.time(), 3), **fields)
        self._save(record)
        log.info("training job %s", status, extra={"fields": {"event": "train_end", "job": record["id"],
                                                             "status": status, "version": record.get("version")}})

    def _save(self, record: dict) -> None:
        write_json(self.root / record["id"] / "job.json", record)

    # ------------------------------------------------------------ stopping
    async def cancel(self, job_id: str, why: str = "cancelled") -> dict:
        record = self.running()
        if record is None or record["id"] != job_id:
            status = self.get(job_id)["status"]  # KeyError for an unknown id
            raise JobConflict(f"job {job_id} is not running ({status})")
        record["status"], record["error"] = "cancelled", why
        self._save(record)
        self._proc.terminate()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), 10)
        except asyncio.TimeoutError:
            self._proc.kill()
            await self._task
        return self.get(job_id)

    async def shutdown(self) -> None:
        if self.running():
            await self.cancel(self.current["id"], why="the server stopped")
