"""Batch scoring on Ray Data: `serving.score`'s output, with the model running on N Ray workers.

    python -m serving.score --engine ray --model onnx/ --input notes/ --output scored.parquet \\
        [--address auto] [--num-workers N] [--gpus-per-worker F] [--threads T] [--batch-rows 2048]

- Input: one CSV/TSV/Parquet file, a folder of them or a glob, read in Ray tasks, never whole on the driver:
  Parquet by Ray Data's `read_parquet`; CSV/TSV by local mode's own reader (textdata/tables.py `iter_rows`,
  one task per file, streaming it in `--batch-rows` blocks), so the rows and their problems are local
  mode's: cells as strings ("NA" stays text), a row with more fields than the header (an unquoted comma:
  a shifted row) or without the text/id column kept unscored with local mode's text in `error` (and named
  on stderr), a shorter row filled with empty cells, a cell over the limit cut and noted. The output holds
  every input row once, in input order (files sorted by name, rows in file order), with all its columns
  plus the same prediction and `error` columns as local mode, written by `serving.score`'s own part/join code.
- Each worker is a Ray actor holding one `Classifier`, loaded once in its constructor from
  `--model`; Ray ships it only the scoring options (a few hundred bytes) and the input batches.
  The model folder and input files must be readable at the same path on every node.
- Without `--address`, Ray starts on this machine only (`ray.init`), sized to its usable cores.
- A worker that dies (OOM killer, preemption, crash) is restarted by Ray and its batch retried, up to
  `TASK_RETRIES` times per batch (Ray Data's default, forever, would loop on a batch that kills every
  worker); then the run stops with one line, its parts kept for `--resume`. The driver checks the row count
  (each file's, counted first in Ray tasks by the same reader: Parquet from its metadata).
- A killed driver: rerun with `--resume`. Parts never span two input files, so the rerun keeps the parts
  of every finished file and scores again from the first row of the file that was in progress (Ray Data
  cannot start a read mid-file): at most one file's work is redone. Changed input files (size, mtime),
  model or options are refused, as in local mode.
- Not supported here: JSONL input.
"""

from __future__ import annotations

import dataclasses
import glob
import logging
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

import pandas as pd

from serving import scoring
from serving.onnx_runner import usable_cores
from textdata.errors import DataError
from textdata.flags import Flag
from textdata.parquet_rows import parquet_checked
from textdata.tables import FORMATS, check_encoding, iter_rows, read_encoding, require_columns, table_format
from textdata.text_rows import delimited_rows

log = logging.getLogger("serving.score")
INSTALL_HINT = "--engine ray needs Ray Data, which is not installed: pip install -e '.[ray]'"
READABLE = ("csv", "tsv", "parquet")
# Streaming execution keeps only in-flight batches in the object store; Ray's default (30% of RAM)
# would take memory the model actors need on a small machine.
_LOCAL_OBJECT_STORE = 256 * 2**20
# Ray Data's file-listing and read tasks each need one CPU: when the model actors hold every CPU,
# they are never scheduled and the run hangs (seen with 2 actors on 2 cores). So one logical CPU
# is kept for them: a local Ray gets cores + 1, and workers may take at most the cluster's CPUs - 1.
_IO_CPUS = 1
# A batch is retried this many times on a restarted actor (Ray Data's default is forever): a worker lost
# to preemption or the OOM killer is retried, while a batch that kills every worker it meets (a poison
# input, a batch too big for the memory) stops the run instead of looping; --resume continues it.
TASK_RETRIES = 3
# An actor serving ONNX on CPU reads the tokenizer through transformers, which imports torch (and scikit-learn)
# whenever torch is installed: most of an actor's start (29 s against 7 s on the loaded 2-core VM, 2026-11-26).
# Told torch is absent, transformers loads the same fast tokenizer without it. Set in the actor's own process only.
TORCH_FREE = {"USE_TORCH": "0"}
# How a DataError (or a subclass: textdata.table_limits.TableLimitError) raised in a Ray Data map reads in the
# driver's traceback text: "textdata.errors.DataError: <the message>".
_OUR_ERROR = re.compile(r"^textdata\.[\w.]+: (.+)$", re.MULTILINE)


@dataclass(frozen=True)
class RayScoreConfig(scoring.ScoreConfig):
    """The local options and the Ray-only ones."""

    engine: str = "ray"
    address: str | None = None
    num_workers: int | None = None
    gpus_per_worker: float | None = None


FLAGS = {
    "threads": Flag("CPU threads per worker", shown="1"),
    "address": Flag("Ray cluster to join (e.g. auto)", shown="start Ray here"),
    "num_workers": Flag("Ray workers", shown="CPUs, or GPUs // --gpus-per-worker"),
    "gpus_per_worker": Flag("GPUs per Ray worker, e.g. 0.5", shown="none: score on CPUs"),
}


def settle_fsspec_http() -> None:
    """Import fsspec's HTTP filesystem once, or mark it absent.

    Without aiohttp this import fails, and Ray Data retries it on every read plan, from more than one thread:
    a thread can then see the half-imported module and fail with an ImportError that Ray does not catch (it
    catches ModuleNotFoundError only; seen in the test suite, in the driver and in a worker's ListFiles task).
    Marked absent, every later try fails at once with ModuleNotFoundError. Runs in the driver and, as Ray's
    worker_process_setup_hook, in every worker process before its first task."""
    try:
        import fsspec.implementations.http  # noqa: F401
    except ImportError:
        sys.modules["fsspec.implementations.http"] = None


# Every ray.init of ours passes this (tests too): the hook runs in each worker process of the job.
RUNTIME_ENV = {"worker_process_setup_hook": settle_fsspec_http}


def import_ray():
    try:
        import ray
        import ray.data
    except ImportError:
        raise DataError(INSTALL_HINT) from None
    settle_fsspec_http()
    return ray


def input_files(path: Path) -> tuple[list[Path], str]:
    """The files to read, sorted by name (the output's order), and their one format."""
    text = str(path)
    if any(c in text for c in "*?["):
        files = sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
    elif path.is_dir():
        files = sorted(p for p in path.iterdir()
                       if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in FORMATS)
    elif path.exists():
        files = [path]
    else:
        raise DataError(f"{path}: no such file")
    if not files:
        raise DataError(f"{path}: no CSV, TSV or Parquet files there")
    fmts = {table_format(p) for p in files}
    if len(fmts) > 1:
        raise DataError(f"{path}: mixes formats {sorted(fmts)}; score each format separately")
    fmt = fmts.pop()
    if fmt not in READABLE:
        raise DataError(f"{files[0]}: --engine ray reads CSV, TSV or Parquet, not {fmt}; use --engine local")
    return files, fmt


def _header(path: Path, fmt: str, cfg: scoring.ScoreConfig) -> list[str]:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.read_schema(path).names
    # The header as the read tasks will name it (local mode's reader): the header and one row, not the file.
    encoding = read_encoding(cfg.encoding)
    try:
        with closing(delimited_rows(path, "\t" if fmt == "tsv" else ",", encoding, 1, scoring.read_limits(cfg),
                                    None)) as rows:
            return next(rows).frame.columns.tolist()
    except UnicodeDecodeError:
        check_encoding(path, encoding)  # raises naming the line
        raise


def _flag_columns(columns_in: list[str]) -> tuple[str, str]:
    """The two columns that carry the reader's flags (a row's error, a cut cell's note) from the read tasks to
    the workers, named apart from the input's columns; the workers drop them."""
    names = []
    for name in ("_read_error", "_read_note"):
        while name in columns_in:
            name = "_" + name
        names.append(name)
    return names[0], names[1]


def _file_rows(path: str, cfg: scoring.ScoreConfig):
    """One CSV/TSV file's chunks as local mode reads them; the row counts and the read tasks both use this."""
    return iter_rows(path, cfg.batch_rows, scoring.needed_columns(cfg), cfg.encoding, scoring.read_limits(cfg))


def _read_text_files(paths: pd.DataFrame, cfg: scoring.ScoreConfig, flags: tuple[str, str]) -> Iterator[pd.DataFrame]:
    """A Ray Data map over file paths: each file's rows by local mode's own reader, `--batch-rows` at a time. A row
    that does not fit the header (a field too many: a shifted row) is kept, its reason in the `flags[0]` column."""
    for path in paths["path"]:
        for frame, errors, notes in _file_rows(path, cfg):
            if len(frame):
                yield frame.reset_index(drop=True).assign(**{flags[0]: _by_position(errors, len(frame)),
                                                             flags[1]: _by_position(notes, len(frame))})


def _by_position(flagged: dict[int, str], n: int) -> list[str]:
    return [flagged.get(i, "") for i in range(n)]  # "" for none: a column of all None has no Arrow type


def read_dataset(ray, files: list[Path], fmt: str, cfg: scoring.ScoreConfig, flags: tuple[str, str]):
    if fmt == "parquet":
        return ray.data.read_parquet([str(p) for p in files])
    # One read task per file, streaming it; its rows leave in blocks of --batch-rows (the repartition is fused into
    # the read task). Without it a file left as one block, and one block goes to one worker: seen with one file and
    # 2 workers, one worker scored every row.
    paths = ray.data.from_items([{"path": str(p)} for p in files], override_num_blocks=len(files))
    return paths.map_batches(_read_text_files, fn_args=(cfg, flags), batch_size=1,
                             batch_format="pandas").repartition(target_num_rows_per_block=cfg.batch_rows)


def _text_file_rows(path: str, cfg: scoring.ScoreConfig) -> tuple[int, dict[int, str]]:
    """Rows of one CSV/TSV file by the reader the read tasks use (so the counts agree: a Ray task, one per file),
    and the first rows it flags, by row index, for the driver to name on stderr."""
    n, flagged = 0, {}
    for frame, errors, _ in _file_rows(path, cfg):
        flagged.update({n + i: errors[i] for i in sorted(errors)[: max(0, scoring.WARN_ROWS - len(flagged))]})
        n += len(frame)
    return n, flagged


def row_counts(ray, files: list[Path], fmt: str, cfg: scoring.ScoreConfig) -> tuple[list[int], list[dict[int, str]]]:
    """Rows per input file and the first rows the reader flags in each: Parquet from its metadata (nothing
    flagged), CSV/TSV parsed once, the files in parallel."""
    if fmt == "parquet":  # checked as local mode checks it (footer against page headers) before Ray reads it
        return [parquet_checked(p, scoring.read_limits(cfg))[1].num_rows for p in files], [{} for _ in files]
    task = ray.remote(_text_file_rows)
    found = ray.get([task.remote(str(p), cfg) for p in files])
    return [n for n, _ in found], [flagged for _, flagged in found]


def cut_at_file_ends(batches, ends: list[int], offset: int):
    """The scored batches, cut where an input file ends (`ends`: the files' cumulative row counts; the
    batches start at row `offset`), so no part spans two files and --resume can restart at a file's first row."""
    ends = iter(ends)
    boundary = next(ends, None)
    for batch in batches:
        while len(batch):
            while boundary is not None and boundary <= offset:
                boundary = next(ends, None)
            # Rows past the last end come only from a miscount, which finish_parts' row check reports.
            take = len(batch) if boundary is None else min(len(batch), boundary - offset)
            yield batch.iloc[:take]
            batch, offset = batch.iloc[take:], offset + take


def manifest_for(cfg: scoring.ScoreConfig, files: list[Path], counts: list[int], model_file, columns: list[str]) -> dict:
    files_seen = []
    for p, n in zip(files, counts, strict=True):
        st = p.stat()
        files_seen.append([str(p.resolve()), st.st_size, st.st_mtime_ns, n])
    return {"options": scoring.result_options(cfg), "files": files_seen, "model_file": model_file, "columns": columns}


def resume_point(parts: Path, done: list[tuple[Path, int]], counts: list[int]) -> tuple[list[tuple[Path, int]], int]:
    """(the parts of the files already finished, index of the first file to score). Parts never span two
    files, so the kept parts end exactly where a file ends; the parts of a file in progress are deleted
    and that file is scored again from its first row."""
    written, ends = sum(n for _, n in done), list(accumulate(counts))
    first = sum(1 for e in ends if e <= written)
    boundary = ends[first - 1] if first else 0
    kept, total = [], 0
    for path, n in done:
        if total + n > boundary:
            break
        kept.append((path, n))
        total += n
    if total != boundary:
        raise DataError(f"--resume: the parts in {parts} do not end where an input file ends; "
                        "delete the folder and start over")
    keep = {path for path, _ in kept}
    for path in parts.glob("part-*"):
        if path not in keep:
            path.unlink()
    return kept, first


class _Scorer:
    """One per Ray actor: the model loads once, here, and then scores every batch the actor is given."""

    def __init__(self, cfg: scoring.ScoreConfig, top_k: int | None, threads: int | None, flags: tuple[str, str]):
        if cfg.provider == "cpu":  # ONNX on CPU (_worker_config): the tokenizer needs no torch (see TORCH_FREE)
            os.environ.update(TORCH_FREE)
        self.clf = scoring.load_model(cfg, threads)
        self.text_column, self.top_k, self.flags = cfg.text_column, top_k, list(flags)

    def __call__(self, batch: pd.DataFrame) -> pd.DataFrame:
        if self.flags[0] not in batch:  # Parquet: read by Ray Data, nothing flagged
            return scoring.score_frame(self.clf, batch, self.text_column, self.top_k)
        errors, notes = ({i: why for i, why in enumerate(batch[c]) if why} for c in self.flags)
        return scoring.score_frame(self.clf, batch.drop(columns=self.flags), self.text_column, self.top_k, errors, notes)


@contextmanager
def _ray_session(ray, cfg: RayScoreConfig):
    """Join `--address`, reuse a session the caller started, or start one on this machine only."""
    if ray.is_initialized():
        yield
        return
    if cfg.address:
        ray.init(address=cfg.address, include_dashboard=False, log_to_driver=False, runtime_env=RUNTIME_ENV)
    else:
        ray.init(num_cpus=usable_cores() + _IO_CPUS, include_dashboard=False, object_store_memory=_LOCAL_OBJECT_STORE,
                 log_to_driver=False, runtime_env=RUNTIME_ENV)
    try:
        yield
    finally:
        ray.shutdown()


def _worker_config(cfg: RayScoreConfig, model_file: str | None, resources: dict) -> RayScoreConfig:
    """What the actors load: on CPU workers an ONNX model runs on ONNX Runtime's CPU provider, said outright, so
    that loading it asks no GPU question of torch (a CPU worker was given no GPU) and `_Scorer` can keep torch out."""
    if cfg.provider == "auto" and model_file and "num_gpus" not in resources:
        return dataclasses.replace(cfg, provider="cpu")
    return cfg


def _worker_resources(ray, cfg: RayScoreConfig) -> tuple[int, dict]:
    """(actor count, per-actor resources): by default as many actors as the cluster's CPUs or GPUs hold."""
    have = ray.cluster_resources()
    if cfg.gpus_per_worker:
        if have.get("GPU", 0) < cfg.gpus_per_worker:
            raise DataError(f"--gpus-per-worker {cfg.gpus_per_worker}: the Ray cluster has {have.get('GPU', 0):g} "
                            "GPUs; drop the flag to score on CPUs")
        default = int(have["GPU"] // cfg.gpus_per_worker)
        return cfg.num_workers or max(1, default), {"num_gpus": cfg.gpus_per_worker}
    cpus, room = cfg.threads or 1, have.get("CPU", 0) - _IO_CPUS
    workers = cfg.num_workers or max(1, int(room // cpus))
    if workers * cpus > room:
        raise DataError(f"{workers} workers x {cpus} CPUs: the Ray cluster has {have.get('CPU', 0):g} CPUs and "
                        f"{_IO_CPUS} must stay free for reading; use fewer --num-workers or --threads")
    return workers, {"num_cpus": cpus}


def _ray_failure(e: Exception, files: list[Path], fmt: str) -> Exception:
    """A task that failed on one of the input files is the user's problem: our reader's own message (CSV/TSV:
    file, line and what is wrong, as in local mode), or one line naming the file; anything else as it is."""
    cause = getattr(e, "cause", None) or e
    if isinstance(cause, DataError):  # from a Ray task (the row counts)
        return DataError(str(cause))
    # From a Ray Data map, the cause is Ray's UserCodeException and ours survives only in the traceback's text.
    if ours := _OUR_ERROR.findall(str(e)):
        return DataError(ours[-1])
    for p in files:
        if str(p) in str(cause):
            return DataError(f"{p}: cannot read as {fmt}: {str(cause).strip().splitlines()[0]}")
    return e


def run(cfg: scoring.ScoreConfig) -> dict:
    """`serving.score.run` with --engine ray; the options both engines share are checked there."""
    if not isinstance(cfg, RayScoreConfig):
        cfg = RayScoreConfig(**dataclasses.asdict(cfg))
    ray = import_ray()
    if cfg.num_workers is not None and cfg.num_workers < 1:
        raise DataError("--num-workers must be at least 1")
    out_fmt = table_format(cfg.output)
    files, fmt = input_files(cfg.input)
    if cfg.output.resolve() in {p.resolve() for p in files}:
        raise DataError(f"{cfg.output}: the output would overwrite the input")
    columns_in = _header(files[0], fmt, cfg)
    for p in files[1:]:
        if (other := _header(p, fmt, cfg)) != columns_in:
            raise DataError(f"{p}: columns {other} differ from {files[0]}'s {columns_in}")
    require_columns(pd.DataFrame(columns=columns_in), scoring.needed_columns(cfg), files[0])
    t0 = time.time()
    # Loaded here too, once, with one thread: a bad model fails in one line before any worker starts,
    # and the driver learns the labels (the output's columns) and what the workers will run.
    clf = scoring.load_model(dataclasses.replace(cfg, batch_tokens=None), threads=1)
    info = clf.info()
    columns, top_k = scoring.output_columns(columns_in, clf.decision, cfg, files[0])
    del clf

    with _ray_session(ray, cfg):
        try:
            rows_in, scored_now, elapsed, tally = _score(ray, cfg, files, fmt, columns_in, columns, top_k, out_fmt,
                                                         info["model_file"])
        except ray.exceptions.RayActorError:
            raise DataError(f"a batch failed {TASK_RETRIES + 1} times, each time losing its worker (a row that "
                            "crashes the model, or a batch too big for a worker's memory: try a smaller "
                            f"--batch-rows); the rows scored before it are kept in {scoring.parts_dir(cfg.output)}: "
                            "rerun with --resume") from None
        except ray.exceptions.RayError as e:
            raise _ray_failure(e, files, fmt) from None
    return scoring.summary(cfg, rows_in, scored_now, elapsed, time.time() - t0, tally, info) | {"engine": "ray"}


def _score(ray, cfg, files, fmt, columns_in, columns, top_k, out_fmt, model_file):
    from tqdm import tqdm

    workers, resources = _worker_resources(ray, cfg)  # a bad --num-workers fails before any file is written
    counts, flagged = row_counts(ray, files, fmt, cfg)
    rows_in = sum(counts)
    parts, done = scoring.prepare_parts(cfg, manifest_for(cfg, files, counts, model_file, columns), cfg.output.suffix)
    done, first = resume_point(parts, done, counts)
    tally = scoring.Tally(cfg.id_column)
    for path, _ in done:
        tally.add_part(path, out_fmt, columns)
    offset = sum(n for _, n in done)
    if first:
        log.info("resuming: %d files (%d rows) already scored; starting at %s", first, offset, files[first])
    warned = 0
    for path, rows in zip(files[first:], flagged[first:]):
        warned = scoring.warn_rows(path, rows, warned)

    scored_now, t_score = 0, time.time()
    bar = tqdm(total=rows_in, initial=offset, unit="rows", disable=not cfg.progress, desc="scoring (ray)",
               file=sys.stderr)
    if offset < rows_in:
        scored = _scored_dataset(ray, cfg, files[first:], fmt, columns_in, top_k, workers, resources, model_file)
        log.info("ray: %d files, %d rows to score, %d workers with %s each", len(files) - first, rows_in - offset,
                 workers, resources)
        batches = scored.iter_batches(batch_size=None, batch_format="pandas")
        # Cut where each file ends, so that no part spans two files.
        for piece in cut_at_file_ends(batches, list(accumulate(counts)), offset):
            scoring.append_part(parts, done, piece[columns], cfg.output.suffix, out_fmt, tally)
            scored_now += len(piece)
            bar.update(len(piece))
    bar.close()
    elapsed = time.time() - t_score
    scoring.finish_parts(parts, done, rows_in, columns, cfg.output, out_fmt)
    return rows_in, scored_now, elapsed, tally


def _scored_dataset(ray, cfg, files, fmt, columns_in, top_k, workers, resources, model_file):
    ctx = ray.data.DataContext.get_current()
    saved = ctx.execution_options.preserve_order, ctx.enable_progress_bars
    # Datasets copy the context when created, so the settings hold for these only and are restored after.
    ctx.execution_options.preserve_order = True  # blocks come back in input order; actors may finish out of order
    ctx.enable_progress_bars = False  # one bar, ours, in rows
    try:
        flags = _flag_columns(columns_in)
        ds = read_dataset(ray, files, fmt, cfg, flags)
        scored = ds.map_batches(
            _Scorer, fn_constructor_args=(_worker_config(cfg, model_file, resources), top_k, resources.get("num_cpus"),
                                          flags), batch_size=cfg.batch_rows,
            batch_format="pandas", compute=ray.data.ActorPoolStrategy(size=workers),
            max_task_retries=TASK_RETRIES, **resources)
    finally:
        ctx.execution_options.preserve_order, ctx.enable_progress_bars = saved
    return scored
