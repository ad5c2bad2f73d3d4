"""Score a CSV/Parquet file with a classifier, streaming, resumable, one output row per input row.

    python -m serving.score --model onnx/ --input in.csv --output out.csv \\
        [--text-column text] [--id-column id] [--top-k K] [--resume] [--batch-rows 2048]

Every input row comes out in the same order with all its columns, plus `pred_label`, `pred_score` (calibrated where the
model folder has calibration.json), `confident` (the score clears k-fold's threshold for --target-precision;
always True without one)
(for a multi-label model instead of the first two `pred_labels`: the labels over their thresholds joined by
thresholds.json's `label_sep`, empty for none; `confident`: every one of them clears its threshold), one `prob_<label>` column per label (or, with --top-k K, `top1_label`,
`top1_score` … `topK_score`)
and `error`: rows whose text is empty, whitespace or nothing after normalisation get an empty
prediction and the reason in `error`, never dropped; last `model_version`, the model that scored the row
(a registry version's name, app/versions/registry.py, or the model folder's name).

The input is read --batch-rows rows at a time. Each scored chunk is written atomically to
`OUT.parts/`; at the end the parts are joined into OUT through a temp file and one rename, and the
parts are removed. After a kill, `--resume` skips the rows whose parts exist (checking that the
input, model and options are unchanged) and continues, so no row is scored twice or lost.

`--engine ray [--address auto] [--num-workers N] [--gpus-per-worker F]` scores on Ray Data workers
instead, with the same output: see serving/score_ray.py.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":  # outside the project's venv: a one-line hint, not a traceback
    from textdata.inputs import hint_on_missing_module

    sys.excepthook = hint_on_missing_module

import argparse
import logging
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from serving.engine import CPU_BATCH_TOKENS, GPU_BATCH_TOKENS, PROVIDERS, TRUNCATIONS, Classifier
from serving.scoring import (
    ScoreConfig,
    Tally,
    append_part,
    finish_parts,
    load_model,
    needed_columns,
    output_columns,
    parts_dir,
    prepare_parts,
    read_limits,
    result_options,
    score_frame,
    summary,
    warn_rows,
)
from textdata.errors import DataError, UsageError, capped, exits_2_on_user_error
from textdata.flags import Flag, config_from, parser_for
from textdata.run_folder import model_in_run
from textdata.tables import count_rows, iter_rows, table_format

log = logging.getLogger("serving.score")
RAY_ONLY = ("--address", "--num-workers", "--gpus-per-worker")


def _fingerprint(cfg: ScoreConfig, clf: Classifier, columns: list[str]) -> dict:
    st = cfg.input.stat()
    return {"options": result_options(cfg), "input_size": st.st_size, "input_mtime_ns": st.st_mtime_ns,
            "model_file": clf.info()["model_file"], "columns": columns}


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
    table_format(cfg.input)  # an unsupported input type fails before anything else
    out_fmt = table_format(cfg.output)
    if cfg.output.resolve() == cfg.input.resolve():
        raise DataError(f"{cfg.output}: the output would overwrite the input")
    # Every row is kept: one the reader cannot read right (a field too many: a shifted row) is flagged in `error`.
    chunks = iter_rows(cfg.input, cfg.batch_rows, columns=needed_columns(cfg), encoding=cfg.encoding,
                       limits=read_limits(cfg))
    first = next(chunks)  # parses the header and checks columns before the model loads
    t0 = time.time()
    clf = load_model(cfg, cfg.threads)
    columns, top_k = output_columns(list(first.frame.columns), clf.decision, cfg, cfg.input)
    ext = cfg.output.suffix
    parts, done = prepare_parts(cfg, _fingerprint(cfg, clf, columns), ext)
    skip = sum(n for _, n in done)

    from tqdm import tqdm

    total = count_rows(cfg.input)
    bar = tqdm(total=total, initial=min(skip, total or skip), unit="rows",
               # a bar is for a terminal: into a file or a pipe each redraw is another copy of the line
               disable=not cfg.progress or not sys.stderr.isatty(), desc="scoring", file=sys.stderr)
    rows_in, scored_now, t_score = 0, 0, time.time()
    tally, warned = Tally(cfg.id_column), 0
    for path, _ in done:
        tally.add_part(path, out_fmt, columns)

    def all_chunks():
        yield first
        yield from chunks

    for chunk, row_errors, row_notes in all_chunks():
        start, rows_in = rows_in, rows_in + len(chunk)
        if rows_in <= skip or len(chunk) == 0:
            continue  # already in a part (resume), or a header-only file
        if start < skip:
            raise DataError(f"--resume: the parts end at row {skip}, inside a chunk of --batch-rows "
                            f"{cfg.batch_rows}; delete {parts} and start over")
        warned = warn_rows(cfg.input, row_errors, warned)
        out = score_frame(clf, chunk, cfg.text_column, top_k, row_errors, row_notes)
        append_part(parts, done, out, ext, out_fmt, tally)
        scored_now += len(out)
        bar.update(len(out))
    bar.close()
    elapsed = time.time() - t_score
    finish_parts(parts, done, rows_in, columns, cfg.output, out_fmt)
    return summary(cfg, rows_in, scored_now, elapsed, time.time() - t0, tally, clf.info())


ENGINES = ("local", "ray")
INT8_HELP = "use model_quantized.onnx even where export_report.json makes model.onnx the default"
FLAGS = {
    "model": Flag("exported folder (serving.export) or transformers folder"),
    "input": Flag("CSV, TSV, JSONL or Parquet"),
    "output": Flag("CSV, TSV, JSONL or Parquet (by extension)"),
    "text_column": Flag("the column holding the texts"),
    "id_column": Flag("column naming rows in the summary of errors"),
    "top_k": Flag("write the K best labels instead of every probability"),
    "resume": Flag("continue an interrupted run to the same --output"),
    "batch_rows": Flag("rows read, scored and written per chunk"),
    "encoding": Flag("text encoding of CSV/TSV/JSONL input, e.g. cp949"),
    "provider": Flag("where the model runs", choices=PROVIDERS),
    "max_length": Flag("tokens per text", shown="the training length"),
    "truncation": Flag("which tokens a long text keeps", choices=TRUNCATIONS),
    "batch_tokens": Flag("padded tokens per inference pass", shown=f"{CPU_BATCH_TOKENS} on CPU, {GPU_BATCH_TOKENS} on a GPU"),
    "threads": Flag("CPU threads", shown="usable cores (affinity, cgroup quota) not kept busy by other work"),
    "quantized": Flag("use model.onnx even where export_report.json makes model_quantized.onnx the default",
                      name="--fp32", const=False, shown="on CPU, the file export_report.json names",
                      also=(("--int8", True, INT8_HELP),)),
    "blend": Flag("score with the model alone where the folder has a TF-IDF blend (applied by default)"),
    "progress": Flag("no progress bar"),
    "engine": Flag("ray: score on Ray Data workers (pip install -e '.[ray]'), see serving/score_ray.py",
                   choices=ENGINES),
}


def build_parser(engine: str = "local") -> argparse.ArgumentParser:
    """The local CLI's flags, or for --engine ray those of serving/score_ray.py's RayScoreConfig."""
    if engine == "ray":
        from serving.score_ray import FLAGS as RAY_FLAGS
        from serving.score_ray import RayScoreConfig

        return parser_for(RayScoreConfig, "python -m serving.score --engine ray", __doc__.split("\n")[0],
                          {**FLAGS, **RAY_FLAGS})
    return parser_for(ScoreConfig, "python -m serving.score", __doc__.split("\n")[0], FLAGS,
                      epilog=f"With --engine ray: also {', '.join(RAY_ONLY)} (python -m serving.score --engine ray --help)")


def parse_args(argv: list[str] | None = None) -> ScoreConfig:
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--engine", choices=ENGINES, default=ScoreConfig.engine)
    engine = pre.parse_known_args(argv)[0].engine
    ap = build_parser(engine)
    if engine == "ray":
        from serving.score_ray import RayScoreConfig

        return config_from(RayScoreConfig, ap.parse_args(argv))
    args, extra = ap.parse_known_args(argv)
    ray_only = [f for f in RAY_ONLY if any(x == f or x.startswith(f + "=") for x in extra)]
    if ray_only:
        raise UsageError(f"{', '.join(ray_only)}: only with --engine ray")
    if extra:
        ap.error(f"unrecognized arguments: {' '.join(extra)}")
    return config_from(ScoreConfig, args)


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    from textdata.log_stream import StderrHandler

    logging.basicConfig(level=logging.WARNING, format="%(message)s", handlers=[StderrHandler()])
    logging.getLogger("serving").setLevel(logging.INFO)
    cfg = parse_args(argv)
    try:
        s = run(cfg)
    except OSError as e:  # e.g. the disk filled up mid-run: one line, and what to do
        where = f"{e.filename}: " if e.filename else ""
        print(f"error: {where}{e.strerror or e}; fix it and rerun with --resume to continue", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        parts = parts_dir(cfg.output)
        kept = f"the rows scored so far are kept in {parts}; " if parts.exists() else ""
        print(f"interrupted: {kept}rerun the same command with --resume to continue", file=sys.stderr)
        return 130
    rate = f", {s['rows_per_second']} rows/s" if s["rows_per_second"] else ""
    print(f"scored {s['rows']} rows ({s['scored_this_run']} this run{rate}) in {s['seconds']} s "
          f"with {s['backend']}/{s['provider']} {s['model_file'] or ''} -> {s['output']}")
    print(f"errors: {s['errors']} {s['error_kinds'] or ''}" + (f" ids: {s['error_ids']}" if s["error_ids"] else ""))
    # the ten commonest: a multi-label run has a set per combination (200 rows printed 4,536 characters)
    print("labels: " + capped(f"{k} {v}" for k, v in s["labels"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
