"""The scoring core that local (`serving.score`) and Ray (`serving.score_ray`) batch scoring share: the
options, the prediction columns of a scored frame, and the parts a run writes, resumes from and joins.

Both engines write the same output through these functions, so a file scored either way is the same file.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from serving.engine import Classifier
from textdata.cpu_limits import plan_threads
from textdata.errors import DataError
from textdata.run_folder import model_version
from textdata.table_limits import TableLimits
from textdata.tables import atomic_path, missing_text, write_json, write_table

log = logging.getLogger("serving.score")
PARTS_SUFFIX = ".parts"
# "row 3 (line 4): 3 fields, ...; the row begins '...'" counts as "3 fields, ...": kinds, not one per row
_ROW_PARTS = re.compile(r"^row \d+ \(line \d+\): |; the row begins .*$", re.DOTALL)
MANIFEST = "manifest.json"
WARN_ROWS = 10  # rows the reader flagged that are named on stderr too (all of them are in `error`)


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
    blend: bool = True  # the model folder's TF-IDF blend, when it has one (baseline/blend.py)
    progress: bool = True
    engine: str = "local"  # ray: serving/score_ray.py, whose RayScoreConfig adds the Ray-only settings


def needed_columns(cfg: ScoreConfig) -> dict[str, str]:
    """The columns the reader must find, each with the flag that names it (for the missing-column message)."""
    return {cfg.text_column: "--text-column", **({cfg.id_column: "--id-column"} if cfg.id_column else {})}


def read_limits(cfg: ScoreConfig) -> TableLimits:
    """The reader's bounds: a cell cut keeps what the engine reads (`--truncation`)."""
    return TableLimits(cut=cfg.truncation)


def warn_rows(path: Path, row_errors: dict[int, str], warned: int) -> int:
    """The first rows the reader flagged, named on stderr as they are met (all of them are in `error`)."""
    for i in sorted(row_errors)[: max(0, WARN_ROWS - warned)]:
        log.warning("%s: %s; kept with this in `error`, not scored", path, row_errors[i])
    return warned + len(row_errors)


def load_model(cfg: ScoreConfig, threads: int | None) -> Classifier:
    # Batch scoring wants throughput: intra-op spin-waiting off even on idle cores (measured: docs/serving.md,
    # "Shared cores"); a transformers folder on CPU gets the plan's thread count for torch.
    plan = plan_threads(requested=threads, batch=True)
    return Classifier.load(cfg.model, provider=cfg.provider, max_length=cfg.max_length, batch_tokens=cfg.batch_tokens,
                           threads=plan, truncation=cfg.truncation, quantized=cfg.quantized, blend=cfg.blend)


def output_columns(columns_in: list[str], decision, cfg: ScoreConfig, where: Path) -> tuple[list[str], int | None]:
    """(the output's columns: the input's, then the predictions' (the model's `decision`, serving/decision.py),
    and top-k as it applies to these labels); an input column the output would add is refused."""
    labels = list(decision.space.labels)
    top_k = min(cfg.top_k, len(labels)) if cfg.top_k else None
    pred_cols = prediction_columns(decision, top_k)
    clash = [c for c in pred_cols if c in columns_in]
    if clash:
        raise DataError(f"{where}: already has column(s) {clash}, which the output adds; rename them first")
    return [str(c) for c in columns_in] + pred_cols, top_k


def prediction_columns(decision, top_k: int | None) -> list[str]:
    """The decision's answer columns (single-label: pred_label, pred_score, confident; multi-label: pred_labels, the
    labels over their thresholds joined by the model's separator, empty for none, and confident), then
    prob_<label> per label (or top-k), error, model_version."""
    labels = list(decision.space.labels)
    cols = list(decision.columns)
    if top_k:
        for i in range(1, top_k + 1):
            cols += [f"top{i}_label", f"top{i}_score"]
    else:
        cols += [f"prob_{lab}" for lab in labels]
    return cols + ["error", "model_version"]


def score_frame(clf: Classifier, df: pd.DataFrame, text_column: str, top_k: int | None,
                row_errors: dict[int, str] | None = None, row_notes: dict[int, str] | None = None) -> pd.DataFrame:
    """`df` with the prediction columns appended; rows without usable text get `error` and no prediction.

    `row_errors` / `row_notes` (by position; textdata.tables.iter_rows): rows the reader could not read
    right (no prediction, the reason in `error`) and rows it changed (a cell cut: predicted, the note in
    `error`)."""
    labels = clf.labels
    raw = df[text_column]
    errors = np.where(missing_text(raw), "empty text", None).astype(object)
    for i, why in (row_errors or {}).items():
        errors[i] = why
    texts = raw.where(~missing_text(raw), "").astype(str).tolist()
    ok = np.flatnonzero(pd.isna(errors))
    # Normalisation can empty a text (e.g. only emoji under the `kc` recipe): a prediction on the
    # bare [CLS][SEP] would be noise, so it is an error like an empty cell.
    cleaned = clf.normalize([texts[i] for i in ok])  # once per text: the engine is told they are normalised
    for i, t in zip(ok, cleaned):
        if not t:
            errors[i] = "no text after normalisation"
    ok = np.flatnonzero(pd.isna(errors))
    probs = np.full((len(df), len(labels)), np.nan, np.float32)
    if len(ok):
        probs[ok] = clf.predict_proba([t for t in cleaned if t], normalized=True)
    have = np.zeros(len(df), bool)
    have[ok] = True
    label_arr = np.array(labels, dtype=object)
    sure = np.ones(len(df), bool)
    out, sure[have] = clf.decision.scored(probs, have, [t for t in cleaned if t])
    out["confident"] = pd.array(np.where(have, sure, False), dtype="boolean")
    out["confident"][~have] = pd.NA
    if top_k:
        order = np.argsort(-np.nan_to_num(probs, nan=-1), axis=1, kind="stable")[:, :top_k]
        for i in range(order.shape[1]):
            out[f"top{i + 1}_label"] = np.where(have, label_arr[order[:, i]], None)
            out[f"top{i + 1}_score"] = np.where(have, probs[np.arange(len(df)), order[:, i]], np.nan)
    else:
        for j, lab in enumerate(labels):
            out[f"prob_{lab}"] = probs[:, j]
    for i, note in (row_notes or {}).items():
        if errors[i] is None:
            errors[i] = note
    out["error"] = errors
    out["model_version"] = model_version(clf.folder)  # the version that scored each row: registry versions say v1, v2
    preds = pd.DataFrame(out, index=df.index)
    # Fixed dtypes so every part has the same schema, also a part where every value is missing.
    for col in preds.columns:
        if col != "confident":  # boolean (True/False, empty without a prediction)
            preds[col] = preds[col].astype("float64" if col.endswith("_score") or col.startswith("prob_") else "string")
    return pd.concat([df, preds], axis=1)


# ---------------------------------------------------------------- parts and resume
def parts_dir(output: Path) -> Path:
    return output.with_name(output.name + PARTS_SUFFIX)


def part_name(index: int, rows: int, ext: str) -> str:
    return f"part-{index:06d}.n{rows}{ext}"  # the row count in the name: resume needs no reading


def existing_parts(parts: Path, ext: str) -> list[tuple[Path, int]]:
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
        opts.pop(k, None)
    if opts.get("blend", True):
        opts.pop("blend", None)  # the default: absent, like in manifests written before --no-blend existed
    opts = {k: str(v) if isinstance(v, Path) else v for k, v in opts.items()}
    opts["input"], opts["model"] = str(cfg.input.resolve()), str(cfg.model.resolve())
    return opts


def prepare_parts(cfg: ScoreConfig, manifest: dict, ext: str) -> tuple[Path, list[tuple[Path, int]]]:
    """The parts folder for `cfg.output`: on --resume with the same manifest, the parts already written;
    otherwise a fresh folder holding the manifest."""
    parts = parts_dir(cfg.output)
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
            done = existing_parts(parts, ext)
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


def append_part(parts: Path, done: list[tuple[Path, int]], df: pd.DataFrame, ext: str, fmt: str,
                tally: Tally) -> None:
    """Write one scored chunk as the next part (atomic) and count it."""
    path = parts / part_name(len(done), len(df), ext)
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


def summary(cfg: ScoreConfig, rows_in: int, scored_now: int, elapsed: float, seconds: float, tally: Tally,
            info: dict) -> dict:
    return {
        "rows": rows_in, "scored_this_run": scored_now, "errors": sum(tally.errors.values()),
        "error_kinds": dict(tally.errors), "error_ids": tally.error_ids if cfg.id_column else None,
        "labels": dict(tally.labels.most_common()), "seconds": round(seconds, 2),
        "rows_per_second": round(scored_now / elapsed, 1) if elapsed > 0 and scored_now else None,
        "output": str(cfg.output), "backend": info["backend"], "provider": info["provider"],
        "model_file": info["model_file"],
    }


class Tally:
    """Label and error counts for the summary; parts from before a resume are read back once."""

    def __init__(self, id_column: str | None):
        self.labels, self.errors, self.error_ids, self.id_column = Counter(), Counter(), [], id_column

    def add(self, df: pd.DataFrame) -> None:
        bad = df["error"].notna()
        if "pred_labels" in df:  # multi-label: label sets, "(none)" where no label is over its threshold
            # predicted rows have probabilities (a row with a note in `error` too); "" reads back from CSV as missing
            scored = df[[c for c in df.columns if c.startswith("prob_") or c == "top1_score"]].notna().any(axis=1)
            self.labels.update(df.loc[scored, "pred_labels"].fillna("").replace("", "(none)"))
        else:
            self.labels.update(df["pred_label"].dropna())
        self.errors.update(_ROW_PARTS.sub("", str(e)) for e in df.loc[bad, "error"])
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
