"""Score a CSV/Parquet file with a classifier, streaming, resumable, one output row per input row.

    python -m serving.score --model onnx/ --input in.csv --output out.csv \\
        [--text-column text] [--id-column id] [--top-k K] [--resume] [--batch-rows 2048]

Every input row comes out in the same order with all its columns, plus `pred_label`, `pred_score`,
one `prob_<label>` column per label (or, with --top-k K, `top1_label`, `top1_score` … `topK_score`)
and `error`: rows whose text is empty, whitespace or nothing after normalisation get an empty
prediction and the reason in `error`, never dropped.

The input is read --batch-rows rows at a time. Each scored chunk is written atomically to
`OUT.parts/`; at the end the parts are joined into OUT through a temp file and one rename, and the
parts are removed. After a kill, `--resume` skips the rows whose parts exist (checking that the
input, model and options are unchanged) and continues, so no row is scored twice or lost.

`--engine ray [--address auto] [--num-workers N] [--gpus-per-worker F]` scores on Ray Data workers
instead, with the same output: see serving/score_ray.py.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from serving.engine import Classifier
from serving.run_folder import model_in_run
from textdata.errors import DataError, exits_2_on_user_error
from textdata.tables import (
    atomic_path,
    count_rows,
    iter_table,
    missing_text,
    table_format,
    write_json,
    write_table,
)

log = logging.getLogger("serving.score")
PARTS_SUFFIX = ".parts"
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class ScoreConfig:
    model: Path
    input: Path
    output: Path
    text_column: str = "text"
    id_column: str | None = None
    top_k: int | None = None
    resume: bool = False
    batch_rows: int = 2048
    encoding: str = "utf-8"
    provider: str = "auto"
    max_length: int | None = None
    truncation: str = "head"
    batch_tokens: int | None = None  # None: the engine's default for the device (1,024 CPU, 8,192 GPU)
    threads: int | None = None
    quantized: bool | None = None  # None: the CPU default export_report.json names (INT8 only where faster)
    progress: bool = True
    # --engine ray (serving/score_ray.py): Ray Data workers, each with one Classifier
    engine: str = "local"
    address: str | None = None
    num_workers: int | None = None
    gpus_per_worker: float | None = None


def prediction_columns(labels: list[str], top_k: int | None) -> list[str]:
    cols = ["pred_label", "pred_score"]
    if top_k:
        for i in range(1, top_k + 1):
            cols += [f"top{i}_label", f"top{i}_score"]
    else:
        cols += [f"prob_{lab}" for lab in labels]
    return cols + ["error"]


def score_frame(clf: Classifier, df: pd.DataFrame, text_column: str, top_k: int | None) -> pd.DataFrame:
    """`df` with the prediction columns appended; rows without usable text get `error` and no prediction."""
    labels = clf.labels
    raw = df[text_column]
    errors = np.where(missing_text(raw), "empty text", None).astype(object)
    texts = raw.where(~missing_text(raw), "").astype(str).tolist()
    ok = np.flatnonzero(pd.isna(errors))
    # Normalisation can empty a text (e.g. only emoji under the `kc` recipe): a prediction on the
    # bare [CLS][SEP] would be noise, so it is an error like an empty cell.
    cleaned = [clf.normalizer(texts[i]) for i in ok]
    for i, t in zip(ok, cleaned):
        if not t:
            errors[i] = "no text after normalisation"
    ok = np.flatnonzero(pd.isna(errors))
    probs = np.full((len(df), len(labels)), np.nan, np.float32)
    if len(ok):
        probs[ok] = clf.predict_proba([texts[i] for i in ok])
    have = np.zeros(len(df), bool)
    have[ok] = True
    best = np.where(have, np.nan_to_num(probs, nan=-1).argmax(1), -1)
    label_arr = np.array(labels, dtype=object)
    out = {"pred_label": np.where(have, label_arr[np.maximum(best, 0)], None),
           "pred_score": np.where(have, probs[np.arange(len(df)), np.maximum(best, 0)], np.nan)}
    if top_k:
        order = np.argsort(-np.nan_to_num(probs, nan=-1), axis=1, kind="stable")[:, :top_k]
        for i in range(order.shape[1]):
            out[f"top{i + 1}_label"] = np.where(have, label_arr[order[:, i]], None)
            out[f"top{i + 1}_score"] = np.where(have, probs[np.arange(len(df)), order[:, i]], np.nan)
    else:
        for j, lab in enumerate(labels):
            out[f"prob_{lab}"] = probs[:, j]
    out["error"] = errors
    preds = pd.DataFrame(out, index=df.index)
    # Fixed dtypes so every part has the same schema, also a part where every value is missing.
    for col in preds.columns:
        preds[col] = preds[col].astype("float64" if col.endswith("_score") or col.startswith("prob_") else "string")
    return pd.concat([df, preds], axis=1)


# ---------------------------------------------------------------- parts and resume
def _parts_dir(output: Path) -> Path:
    return output.with_name(output.name + PARTS_SUFFIX)


def _part_name(index: int, rows: int, ext: str) -> str:
    return f"part-{index:06d}.n{rows}{ext}"  # the row count in the name: resume needs no reading


def _existing_parts(parts: Path, ext: str) -> list[tuple[Path, int]]:
    found = []
    for p in sorted(parts.glob(f"part-*{ext}")):
        index, rows = p.name[len("part-"):-len(ext)].split(".n")
        if int(index) != len(found):
            break  # a gap means a later part without its predecessor; stop trusting from here
        found.append((p, int(rows)))
    return found


def result_options(cfg: ScoreConfig) -> dict:
    """The options that shape the output (a resumed run must keep them), as JSON values."""
    opts = asdict(cfg)
    for k in ("resume", "progress", "provider", "threads", "batch_tokens",  # don't change results
              "engine", "address", "num_workers", "gpus_per_worker"):
        opts.pop(k)
    opts = {k: str(v) if isinstance(v, Path) else v for k, v in opts.items()}
    opts["input"], opts["model"] = str(cfg.input.resolve()), str(cfg.model.resolve())
    return opts


def _fingerprint(cfg: ScoreConfig, clf: Classifier, columns: list[str]) -> dict:
    st = cfg.input.stat()
    return {"options": result_options(cfg), "input_size": st.st_size, "input_mtime_ns": st.st_mtime_ns,
            "model_file": clf.info()["model_file"], "columns": columns}


def prepare_parts(cfg: ScoreConfig, manifest: dict, ext: str) -> tuple[Path, list[tuple[Path, int]]]:
    """The parts folder for `cfg.output`: on --resume with the same manifest, the parts already written;
    otherwise a fresh folder holding the manifest."""
    parts = _parts_dir(cfg.output)
    if parts.exists() and cfg.resume:
        try:
            old = json.loads((parts / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            old = None
        if old is not None and old != manifest:
            diff = sorted(k for k in set(old) | set(manifest) if old.get(k) != manifest.get(k))
            diff += sorted(k for k in manifest["options"] if old.get("options", {}).get(k) != manifest["options"][k])
            raise DataError(f"--resume: {parts} was made from a different input, model or options ({', '.join(diff)}); "
                            "delete it or run without --resume to start over")
        if old is not None:
            done = _existing_parts(parts, ext)
            log.info("resuming: %d rows already scored in %d parts", sum(n for _, n in done), len(done))
            return parts, done
    if parts.exists():
        if not cfg.resume:
            log.info("removing %s from an earlier interrupted run (use --resume to continue one)", parts)
        shutil.rmtree(parts)
    elif cfg.resume:
        log.info("--resume: nothing to resume at %s; starting from the first row", parts)
    parts.mkdir(parents=True)
    write_json(parts / MANIFEST, manifest)
    return parts, []


def _write_part(df: pd.DataFrame, path: Path, fmt: str) -> None:
    write_table(df, path, fmt, header=False)  # headerless: parts are concatenated under one header


def _join_parts(done: list[tuple[Path, int]], columns: list[str], output: Path, fmt: str) -> None:
    with atomic_path(output) as tmp:
        if fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            writer = None
            for path, _ in done:
                table = pq.read_table(path)
                if writer is None:
                    writer = pq.ParquetWriter(tmp, table.schema)
                writer.write_table(table.cast(writer.schema))
            if writer is None:  # no rows at all: still a valid file with the columns
                writer = pq.ParquetWriter(tmp, pa.schema([(c, pa.string()) for c in columns]))
            writer.close()
            return
        with open(tmp, "wb") as out:
            if fmt != "jsonl":
                out.write(pd.DataFrame(columns=columns).to_csv(index=False, sep="\t" if fmt == "tsv" else ",")
                          .encode("utf-8"))
            for path, _ in done:
                with open(path, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)


# ---------------------------------------------------------------- the run
def check_output(output: Path) -> None:
    """Fail before scoring, not after an hour of it: the output must be a file path in a folder we can write."""
    if output.is_dir():
        raise DataError(f"{output}: is a folder; give the output file's path (e.g. {output / 'scored.csv'})")
    folder = output.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".probe", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise DataError(f"{output}: cannot write in {folder}: {e.strerror or e}") from None


def run(cfg: ScoreConfig) -> dict:
    if cfg.batch_rows < 1:
        raise DataError("--batch-rows must be positive")
    if cfg.top_k is not None and cfg.top_k < 1:
        raise DataError("--top-k must be at least 1")
    check_output(cfg.output)
    # once here, so Ray workers get the model folder itself and no note each
    cfg = replace(cfg, model=model_in_run(cfg.model, use=("model",)))
    if cfg.engine == "ray":
        from serving.score_ray import run as run_ray

        return run_ray(cfg)
    ray_only = [f for f, v in (("--address", cfg.address), ("--num-workers", cfg.num_workers),
                               ("--gpus-per-worker", cfg.gpus_per_worker)) if v is not None]
    if ray_only:
        raise DataError(f"{', '.join(ray_only)}: only with --engine ray")
    table_format(cfg.input)  # an unsupported input type fails before anything else
    out_fmt = table_format(cfg.output)
    if cfg.output.resolve() == cfg.input.resolve():
        raise DataError(f"{cfg.output}: the output would overwrite the input")
    needed = {cfg.text_column: "--text-column", **({cfg.id_column: "--id-column"} if cfg.id_column else {})}
    chunks = iter_table(cfg.input, cfg.batch_rows, columns=needed, encoding=cfg.encoding)
    first = next(chunks)  # parses the header and checks columns before the model loads
    t0 = time.time()
    clf = Classifier.load(cfg.model, provider=cfg.provider, max_length=cfg.max_length,
                          batch_tokens=cfg.batch_tokens, threads=cfg.threads, truncation=cfg.truncation,
                          quantized=cfg.quantized)
    top_k = min(cfg.top_k, len(clf.labels)) if cfg.top_k else None
    pred_cols = prediction_columns(clf.labels, top_k)
    clash = [c for c in pred_cols if c in first.columns]
    if clash:
        raise DataError(f"{cfg.input}: already has column(s) {clash}, which the output adds; rename them first")
    columns = [str(c) for c in first.columns] + pred_cols
    ext = cfg.output.suffix
    parts, done = prepare_parts(cfg, _fingerprint(cfg, clf, columns), ext)
    skip = sum(n for _, n in done)

    from tqdm import tqdm

    total = count_rows(cfg.input)
    bar = tqdm(total=total, initial=min(skip, total or skip), unit="rows",
               disable=not cfg.progress, desc="scoring", file=sys.stderr)
    rows_in, scored_now, t_score = 0, 0, time.time()
    tally = _Tally(cfg.id_column)
    for path, _ in done:
        tally.add_part(path, out_fmt, columns)

    def all_chunks():
        yield first
        yield from chunks

    for chunk in all_chunks():
        start, rows_in = rows_in, rows_in + len(chunk)
        if rows_in <= skip or len(chunk) == 0:
            continue  # already in a part (resume), or a header-only file
        if start < skip:
            raise DataError(f"--resume: the parts end at row {skip}, inside a chunk of --batch-rows "
                            f"{cfg.batch_rows}; delete {parts} and start over")
        out = score_frame(clf, chunk, cfg.text_column, top_k)
        append_part(parts, done, out, ext, out_fmt, tally)
        scored_now += len(out)
        bar.update(len(out))
    bar.close()
    elapsed = time.time() - t_score
    finish_parts(parts, done, rows_in, columns, cfg.output, out_fmt)
    return summary(cfg, rows_in, scored_now, elapsed, time.time() - t0, tally, clf.info())


# Shared with serving/score_ray.py, which writes the batches its workers return the same way.
def append_part(parts: Path, done: list[tuple[Path, int]], df: pd.DataFrame, ext: str, fmt: str,
                tally: _Tally) -> None:
    """Write one scored chunk as the next part (atomic) and count it."""
    path = parts / _part_name(len(done), len(df), ext)
    _write_part(df, path, fmt)
    done.append((path, len(df)))
    tally.add(df)


def finish_parts(parts: Path, done: list[tuple[Path, int]], rows_in: int, columns: list[str], output: Path,
                 fmt: str) -> None:
    """Check that the parts hold every input row, join them into `output`, remove them."""
    written = sum(n for _, n in done)
    if written != rows_in:
        raise DataError(f"row count check failed: the input has {rows_in} rows but the parts hold {written}; "
                        f"{parts} is kept for inspection")
    _join_parts(done, columns, output, fmt)
    shutil.rmtree(parts)


def summary(cfg: ScoreConfig, rows_in: int, scored_now: int, elapsed: float, seconds: float, tally: _Tally,
            info: dict) -> dict:
    return {
        "rows": rows_in, "scored_this_run": scored_now, "errors": sum(tally.errors.values()),
        "error_kinds": dict(tally.errors), "error_ids": tally.error_ids if cfg.id_column else None,
        "labels": dict(tally.labels.most_common()), "seconds": round(seconds, 2),
        "rows_per_second": round(scored_now / elapsed, 1) if elapsed > 0 and scored_now else None,
        "output": str(cfg.output), "backend": info["backend"], "provider": info["provider"],
        "model_file": info["model_file"],
    }


class _Tally:
    """Label and error counts for the summary; parts from before a resume are read back once."""

    def __init__(self, id_column: str | None):
        self.labels, self.errors, self.error_ids, self.id_column = Counter(), Counter(), [], id_column

    def add(self, df: pd.DataFrame) -> None:
        self.labels.update(df["pred_label"].dropna())
        bad = df["error"].notna()
        self.errors.update(df.loc[bad, "error"])
        if self.id_column and len(self.error_ids) < 20:
            self.error_ids += df.loc[bad, self.id_column].astype(str).tolist()[: 20 - len(self.error_ids)]

    def add_part(self, path: Path, fmt: str, columns: list[str]) -> None:
        if fmt == "parquet":
            df = pd.read_parquet(path)
        elif fmt == "jsonl":
            df = pd.read_json(path, lines=True, dtype=False)
        else:
            df = pd.read_csv(path, header=None, names=columns, dtype=str, keep_default_na=False,
                             sep="\t" if fmt == "tsv" else ",").replace("", None)
        self.add(df)


def parse_args(argv: list[str] | None = None) -> ScoreConfig:
    ap = argparse.ArgumentParser(prog="python -m serving.score", description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, type=Path, help="exported folder (serving.export) or transformers folder")
    ap.add_argument("--input", required=True, type=Path, help="CSV, TSV, JSONL or Parquet")
    ap.add_argument("--output", required=True, type=Path, help="CSV, TSV, JSONL or Parquet (by extension)")
    ap.add_argument("--text-column", default="text")
    ap.add_argument("--id-column", default=None, help="column naming rows in the summary of errors")
    ap.add_argument("--top-k", type=int, default=None, help="write the K best labels instead of every probability")
    ap.add_argument("--resume", action="store_true", help="continue an interrupted run to the same --output")
    ap.add_argument("--batch-rows", type=int, default=2048, help="rows read, scored and written per chunk")
    ap.add_argument("--encoding", default="utf-8", help="text encoding of CSV/TSV/JSONL input, e.g. cp949")
    ap.add_argument("--provider", default="auto", choices=["auto", "cpu", "cuda", "tensorrt", "torch"])
    ap.add_argument("--max-length", type=int, default=None, help="tokens per text (default: the training length)")
    ap.add_argument("--truncation", default="head", choices=["head", "head+tail"])
    ap.add_argument("--batch-tokens", type=int, default=None,
                    help="padded tokens per inference pass (default: 1024 on CPU, 8192 on a GPU)")
    ap.add_argument("--threads", type=int, default=None,
                    help="CPU threads (default: usable cores; with --engine ray: per worker, default 1)")
    ap.add_argument("--fp32", dest="quantized", action="store_const", const=False, default=None,
                    help="use model.onnx even where export_report.json makes model_quantized.onnx the default")
    ap.add_argument("--int8", dest="quantized", action="store_const", const=True,
                    help="use model_quantized.onnx even where export_report.json makes model.onnx the default")
    ap.add_argument("--no-progress", dest="progress", action="store_false")
    ap.add_argument("--engine", default="local", choices=["local", "ray"],
                    help="ray: score on Ray Data workers (pip install -e '.[ray]'), see serving/score_ray.py")
    ap.add_argument("--address", default=None, help="Ray cluster to join (e.g. auto); default: start Ray here")
    ap.add_argument("--num-workers", type=int, default=None, help="Ray workers (default: CPUs or GPUs // per worker)")
    ap.add_argument("--gpus-per-worker", type=float, default=None, help="GPUs per Ray worker, e.g. 0.5")
    return ScoreConfig(**vars(ap.parse_args(argv)))


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("serving").setLevel(logging.INFO)
    cfg = parse_args(argv)
    try:
        s = run(cfg)
    except OSError as e:  # e.g. the disk filled up mid-run: one line, and what to do
        where = f"{e.filename}: " if e.filename else ""
        print(f"error: {where}{e.strerror or e}; fix it and rerun with --resume to continue", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        parts = _parts_dir(cfg.output)
        kept = f"the rows scored so far are kept in {parts}; " if parts.exists() else ""
        print(f"interrupted: {kept}rerun the same command with --resume to continue", file=sys.stderr)
        return 130
    rate = f", {s['rows_per_second']} rows/s" if s["rows_per_second"] else ""
    print(f"scored {s['rows']} rows ({s['scored_this_run']} this run{rate}) in {s['seconds']} s "
          f"with {s['backend']}/{s['provider']} {s['model_file'] or ''} -> {s['output']}")
    print(f"errors: {s['errors']} {s['error_kinds'] or ''}" + (f" ids: {s['error_ids']}" if s["error_ids"] else ""))
    print("labels: " + ", ".join(f"{k} {v}" for k, v in s["labels"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
