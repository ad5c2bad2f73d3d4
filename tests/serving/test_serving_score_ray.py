"""`serving.score --engine ray`: same output as local mode, every row once in order, a killed worker retried.

One small Ray session (2 CPUs) serves the whole module; `score_ray.run` reuses a running session.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from serving import score, score_ray, scoring

ROOT = Path(__file__).resolve().parents[2]

EDGE_TEXTS = ["꿈에서 봤다", "", "   \t ", "오류 " * 3000, "naïve café ✓ 日本語", 'memo, "quoted", comma',
              "첫 줄\n둘째 줄", "에러 발생했다", "NA", "null", "메모 기록", "회의 약속"]


def _frame(n_repeat: int = 1) -> pd.DataFrame:
    texts = EDGE_TEXTS * n_repeat
    return pd.DataFrame({"id": [f"r{i}" for i in range(len(texts))], "text": texts,
                         "extra": [f"x{i}" for i in range(len(texts))]})


@pytest.fixture(scope="module")
def ray_session(raylet_errors_logged):
    ray = pytest.importorskip("ray")
    # What `score_ray` starts on a 2-core machine: 2 CPUs for the model workers + 1 for Ray Data's reads.
    ray.init(num_cpus=2 + score_ray._IO_CPUS, include_dashboard=False, object_store_memory=100 * 2**20,
             log_to_driver=False, runtime_env=score_ray.RUNTIME_ENV)
    yield ray
    ray.shutdown()


def test_workers_settle_fsspec_http_before_their_first_task(ray_session):
    # A worker that imports fsspec's HTTP module lazily, from several threads, can fail a read (see
    # settle_fsspec_http); the setup hook has already imported it, or marked it absent, when a task starts.
    @ray_session.remote
    def state():
        import sys

        mod = sys.modules.get("fsspec.implementations.http", "never imported")
        return mod if mod in (None, "never imported") else hasattr(mod, "HTTPFileSystem")

    assert set(ray_session.get([state.remote() for _ in range(4)])) <= {None, True}


def _run(model, inp, out, **kw):
    kw.setdefault("progress", False)
    config = score_ray.RayScoreConfig if kw.get("engine") == "ray" else score.ScoreConfig
    return score.run(config(model=model, input=inp, output=out, **kw))


def _read(path) -> pd.DataFrame:
    if str(path).endswith(".parquet"):
        return pd.read_parquet(path)
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def _assert_same_output(got: pd.DataFrame, want: pd.DataFrame) -> None:
    """Same cells; probabilities to fp32 noise. (Parity runs use fp32: dynamic INT8 quantises activations
    per batch, so its probabilities move with batch composition, in local mode too.)"""
    assert got.columns.tolist() == want.columns.tolist()
    scores = [c for c in want.columns if c.startswith("prob_") or c.endswith("_score")]
    pd.testing.assert_frame_equal(got.drop(columns=scores).astype(str), want.drop(columns=scores).astype(str))
    as_float = lambda df: df[scores].replace("", np.nan).astype(float)
    np.testing.assert_allclose(as_float(got), as_float(want), atol=1e-5)


def _killed_once(monkeypatch, marker):
    """The Ray scorer with a worker that dies (SIGKILL, as the OOM killer would) in its first batch, once."""

    class KilledOnce(score_ray._Scorer):  # a local class: Ray ships it by value to the workers
        def __call__(self, batch):
            if not marker.exists():
                marker.write_text(str(os.getpid()))
                os.kill(os.getpid(), signal.SIGKILL)
            return super().__call__(batch)

    monkeypatch.setattr(score_ray, "_Scorer", KilledOnce)


def test_csv_through_the_cli_equals_local_mode_with_a_worker_killed(ray_session, exported_dir, tmp_path, capsys,
                                                                    monkeypatch):
    # One Ray run (each costs two worker starts) holds three things: the CLI's output equals local mode's; a worker
    # killed mid-batch is retried with no row lost or doubled; an earlier run's parts go when --resume is not given.
    marker = tmp_path / "killed-once"
    _killed_once(monkeypatch, marker)
    inp = tmp_path / "in.csv"
    _frame(2).to_csv(inp, index=False)
    _run(exported_dir, inp, tmp_path / "local.csv", id_column="id", threads=1, quantized=False)
    stale = tmp_path / "ray.csv.parts"  # as an interrupted run leaves it
    stale.mkdir()
    (stale / scoring.MANIFEST).write_text("{}")
    (stale / "part-000000.n3.csv").write_text("stale,row,x\n" * 3)
    args = ["--model", str(exported_dir), "--input", str(inp), "--output", str(tmp_path / "ray.csv"), "--fp32",
            "--engine", "ray", "--num-workers", "2", "--batch-rows", "5", "--id-column", "id", "--no-progress"]
    assert score.main(args) == 0
    out = capsys.readouterr().out
    assert marker.exists()  # a worker really died
    assert f"scored {2 * len(EDGE_TEXTS)} rows" in out and "errors: 4 {'empty text': 4}" in out
    _assert_same_output(_read(tmp_path / "ray.csv"), _read(tmp_path / "local.csv"))  # each row once, in order
    assert _read(tmp_path / "ray.csv")["text"].tolist() == EDGE_TEXTS * 2  # "NA", quotes, newlines intact
    assert not stale.exists()


def test_parquet_folder_keeps_file_then_row_order(ray_session, exported_dir, tmp_path):
    df = _frame(3).assign(n=range(3 * len(EDGE_TEXTS)))
    folder = tmp_path / "in"
    folder.mkdir()
    # Names sort in the order the rows should come out; written in the other order to catch mtime order.
    df.iloc[20:].to_parquet(folder / "b.parquet", index=False)
    df.iloc[:20].to_parquet(folder / "a.parquet", index=False)
    df.to_parquet(tmp_path / "all.parquet", index=False)
    _run(exported_dir, tmp_path / "all.parquet", tmp_path / "local.parquet", top_k=2, threads=1, quantized=False)
    summary = _run(exported_dir, folder, tmp_path / "ray.parquet", top_k=2, engine="ray", num_workers=2,
                   batch_rows=4, quantized=False)
    got = _read(tmp_path / "ray.parquet")
    assert summary["rows"] == len(df) and got["n"].tolist() == list(range(len(df)))
    _assert_same_output(got, _read(tmp_path / "local.parquet"))


def _kill_driver_after(monkeypatch, rows: int, run) -> list[int]:
    """`run()` with a driver that dies (KeyboardInterrupt) once its parts hold over `rows` rows; the parts' sizes."""
    written, real_append = [], scoring.append_part  # the scoring core, which score_ray writes through

    def append_then_die(parts, done, frame, *rest):
        real_append(parts, done, frame, *rest)
        written.append(len(frame))
        if sum(written) > rows:
            raise KeyboardInterrupt

    monkeypatch.setattr(scoring, "append_part", append_then_die)
    with pytest.raises(KeyboardInterrupt):
        run()
    monkeypatch.setattr(scoring, "append_part", real_append)
    return written


def _odd_rows_folder(folder: Path) -> None:
    """a.csv, b.csv, c.csv (15, 13 and 12 rows; batches of 4 straddle them) with rows pyarrow would refuse the whole
    file for and local mode's reader keeps, flagged: a field too many (a shifted row), a short row, no text."""
    folder.mkdir()
    odd = ("r_shift,hello, world,x1\n"  # an unquoted comma: 4 fields under 3
           "r_short,짧은 행\n"  # no 'extra': filled with "", scored
           "r_bare\n")  # no 'text': flagged
    (folder / "a.csv").write_text(_frame().to_csv(index=False) + odd, encoding="utf-8")
    b = _frame().iloc[:6].assign(id=lambda d: "b" + d["id"]).to_csv(index=False)
    (folder / "b.csv").write_text(b + 'b_shift,"quoted, fine",x,extra field\n' + b.split("\n", 1)[1], encoding="utf-8")
    _frame().assign(id=lambda d: "c" + d["id"]).to_csv(folder / "c.csv", index=False)


def test_killed_driver_resumes_at_the_file_in_progress_with_odd_rows_flagged_as_in_local_mode(
        ray_session, exported_dir, tmp_path, monkeypatch, caplog):
    # Two Ray runs (a killed one, its resume) over files with shifted and short rows: pyarrow refused a whole file
    # for one row with a field too many, while local mode's reader keeps it, flagged.
    folder = tmp_path / "in"
    _odd_rows_folder(folder)
    opts = {"id_column": "id", "batch_rows": 4, "quantized": False}
    want = pd.concat([_read(_run(exported_dir, folder / f, tmp_path / f"local-{f}", threads=1, **opts)["output"])
                      for f in ("a.csv", "b.csv", "c.csv")], ignore_index=True)
    assert want["error"].str.contains("fields, the header has 3").sum() == 2  # the local reference flags them
    assert want["error"].str.contains(r"1 field, the header has 3: no 'text'").sum() == 1
    assert want["error"][12].startswith("row 13 (line 15): 4 fields")  # line 15: a text above spans two lines

    caplog.clear()  # the local runs' warnings
    caplog.set_level("INFO", logger="serving.score")
    out, ray_opts = tmp_path / "ray.csv", {**opts, "engine": "ray", "num_workers": 2}
    # The driver dies with a.csv written and part of b.csv.
    written = _kill_driver_after(monkeypatch, 15, lambda: _run(exported_dir, folder, out, **ray_opts))
    assert 15 < sum(written) < 28 and not out.exists()
    assert 15 in np.cumsum(written)  # a part ends where a.csv ends: no part spans two files
    for path, error in ((folder / "a.csv", want["error"][12]), (folder / "b.csv", want["error"][21])):
        assert f"{path}: {error}; kept with this in `error`" in caplog.text  # named on stderr, as in local mode

    # A changed input file is refused, naming what changed; the same bytes and mtime again are the same file.
    c, before = folder / "c.csv", (folder / "c.csv").stat()
    kept = c.read_bytes()
    c.write_bytes(kept.split(b"\n", 1)[0] + b"\nc_new,a row added later,x\n")
    with pytest.raises(score.DataError, match=r"different input, model or options \(files\)"):
        _run(exported_dir, folder, out, resume=True, **ray_opts)
    c.write_bytes(kept)
    os.utime(c, ns=(before.st_atime_ns, before.st_mtime_ns))

    summary = _run(exported_dir, folder, out, resume=True, **ray_opts)
    assert "resuming: 1 files (15 rows) already scored" in caplog.text
    assert summary["rows"] == len(want) == 40 and summary["scored_this_run"] == 25  # b.csv again from its first row
    _assert_same_output(_read(out), want)  # every row once, in order, the same error text, no prediction if flagged
    assert summary["errors"] == (want["error"] != "").sum()  # the tally counts the rows of the kept parts too


def test_parts_are_cut_at_file_ends_and_resume_keeps_whole_files(tmp_path):
    # Files of 13, 0, 11 and 12 rows; batches of 5 straddle them.
    counts, batches = [13, 0, 11, 12], [pd.DataFrame({"n": range(i, min(i + 5, 36))}) for i in range(0, 36, 5)]
    ends = np.cumsum([n for n in counts if n]).tolist()
    pieces = list(score_ray.cut_at_file_ends(iter(batches), ends, 0))
    assert [len(p) for p in pieces] == [5, 5, 3, 2, 5, 4, 1, 5, 5, 1]
    assert pd.concat(pieces)["n"].tolist() == list(range(36))
    # Resuming mid-way: the first pieces already written, the rest starts at the next row.
    assert [len(p) for p in score_ray.cut_at_file_ends(iter([batches[3].iloc[2:]]), ends, 17)] == [3]

    parts = tmp_path / "out.csv.parts"
    parts.mkdir()
    done = []
    for i, n in enumerate([5, 5, 3, 2, 5]):  # a.csv whole (13), then 7 of b.csv's 11 rows
        path = parts / f"part-{i:06d}.n{n}.csv"
        path.write_text("x\n" * n)
        done.append((path, n))
    (parts / "part-000009.n1.csv").write_text("stray\n")  # beyond a gap: never trusted
    kept, first = score_ray.resume_point(parts, done, counts)
    assert kept == done[:3] and first == 2  # a.csv and the empty file are done; b.csv is scored again
    assert sorted(p.name for p in parts.iterdir()) == [p.name for p, _ in done[:3]]
    with pytest.raises(score.DataError, match="do not end where an input file ends"):
        score_ray.resume_point(parts, [(parts / "x", 4)], [3, 3])


def test_a_batch_that_kills_every_worker_stops_the_run(ray_session, exported_dir, tmp_path, monkeypatch):
    kills = tmp_path / "kills"
    kills.mkdir()

    class Poisoned(score_ray._Scorer):  # as a row that segfaults the model, or a batch past the memory
        def __call__(self, batch):
            if (batch["text"] == "POISON").any():
                (kills / str(os.getpid())).touch()
                os.kill(os.getpid(), signal.SIGKILL)
            return super().__call__(batch)

    monkeypatch.setattr(score_ray, "_Scorer", Poisoned)
    inp = tmp_path / "in.csv"
    pd.DataFrame({"text": ["좋은 날"] * 20 + ["POISON"] + ["좋은 날"] * 20}).to_csv(inp, index=False)
    with pytest.raises(score.DataError, match=r"a batch failed 4 times.*rerun with --resume"):
        _run(exported_dir, inp, tmp_path / "out.csv", engine="ray", num_workers=1, batch_rows=5)  # 1: restarted each time
    assert not (tmp_path / "out.csv").exists() and (tmp_path / "out.csv.parts").is_dir()
    assert len(list(kills.iterdir())) == score_ray.TASK_RETRIES + 1  # tried, retried, then given up


def test_bad_input_messages(ray_session, exported_dir, tmp_path, capsys):
    def fails(*extra, match):
        args = ["--model", str(exported_dir), "--output", str(tmp_path / "o.csv"), "--engine", "ray", *extra]
        assert score.main(args) == 2
        last = capsys.readouterr().err.strip().splitlines()[-1]  # after any log lines
        assert last.startswith("error:") and match in last, last
        assert not (tmp_path / "o.csv").exists()

    mixed = tmp_path / "mixed"
    mixed.mkdir()
    _frame().to_csv(mixed / "a.csv", index=False)
    _frame().to_parquet(mixed / "b.parquet", index=False)
    fails("--input", str(mixed), match="mixes formats ['csv', 'parquet']")
    _frame().to_json(tmp_path / "in.jsonl", orient="records", lines=True)
    fails("--input", str(tmp_path / "in.jsonl"), match="use --engine local")
    fails("--input", str(mixed / "a.csv"), "--text-column", "body", match="no column 'body'")
    fails("--input", str(mixed / "a.csv"), "--gpus-per-worker", "1", match="the Ray cluster has 0 GPUs")
    bad = tmp_path / "cp949.csv"
    bad.write_bytes("id,text\n1,좋은 날\n".encode() + "2,꿈에서 봤다\n".encode("cp949"))
    fails("--input", str(bad), match="try --encoding cp949")  # found on the driver, in the header read
    bad.write_bytes(b"id,text\n" + "1,좋은 날\n".encode() * 60_000 + "2,꿈에서 봤다\n".encode("cp949"))
    fails("--input", str(bad), match="line 60002 is not valid utf-8")  # found by a Ray read task, past the header
    assert score.main(["--model", str(exported_dir), "--input", str(mixed / "a.csv"), "--output",
                       str(tmp_path / "o.csv"), "--num-workers", "2"]) == 2
    assert "--num-workers: only with --engine ray" in capsys.readouterr().err
    fails("--input", str(mixed / "a.csv"), "--num-workers", "3", match="must stay free for reading")


def test_without_ray_one_line_says_how_to_install(exported_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError, as when absent
    _frame().to_csv(tmp_path / "in.csv", index=False)
    args = ["--model", str(exported_dir), "--input", str(tmp_path / "in.csv"), "--output", str(tmp_path / "o.csv"),
            "--engine", "ray"]
    assert score.main(args) == 2
    assert capsys.readouterr().err == f"error: {score_ray.INSTALL_HINT}\n"
    assert "pip install -e '.[ray]'" in score_ray.INSTALL_HINT


def test_multi_label_model_writes_the_same_label_sets_as_local_mode(ray_session, multilabel_classifier_dir, tmp_path):
    inp = tmp_path / "in.csv"
    _frame(2).to_csv(inp, index=False)
    _run(multilabel_classifier_dir, inp, tmp_path / "local.csv", threads=1)
    summary = _run(multilabel_classifier_dir, inp, tmp_path / "ray.csv", engine="ray", num_workers=2, batch_rows=5)
    got = _read(tmp_path / "ray.csv")
    assert got.columns.tolist()[3:] == ["pred_labels", "confident", "prob_dream", "prob_error", "prob_memo", "error", "model_version"]
    _assert_same_output(got, _read(tmp_path / "local.csv"))
    assert summary["rows"] == 2 * len(EDGE_TEXTS) and got["pred_labels"].str.len().gt(0).any()


def test_a_cpu_worker_loads_an_onnx_model_without_torch(exported_dir):
    # transformers imports torch (and scikit-learn) when it is installed, and the GPU check did too: most of each
    # worker's start. A CPU worker serving ONNX is told so (provider cpu) and keeps both out, in a fresh process as
    # a new actor is; GPU workers and PyTorch folders keep the default.
    cfg = score_ray.RayScoreConfig(model=exported_dir, input=Path("in.csv"), output=Path("out.csv"))
    assert score_ray._worker_config(cfg, "model.onnx", {"num_cpus": 1}).provider == "cpu"
    assert score_ray._worker_config(cfg, "model.onnx", {"num_gpus": 1}) == cfg
    assert score_ray._worker_config(cfg, None, {"num_cpus": 1}) == cfg
    one_worker = ("import sys; from pathlib import Path; from serving import score_ray as s; "
                  "cfg = s.RayScoreConfig(model=Path(sys.argv[1]), input=Path('in.csv'), output=Path('out.csv')); "
                  "s._Scorer(s._worker_config(cfg, 'model.onnx', {'num_cpus': 1}), None, 1, ('_e', '_n')); "
                  "print([m for m in ('torch', 'sklearn') if m in sys.modules])")
    env = {k: v for k, v in os.environ.items() if k != "USE_TORCH"} | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", one_worker, str(exported_dir)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_a_reader_error_in_a_read_task_is_one_line(ray_session, tmp_path, monkeypatch):
    # Ray Data hands the driver its own UserCodeException, ours only as traceback text: the message is found there.
    from textdata.table_limits import TableLimitError

    def refuse(batch):
        raise TableLimitError(f"{batch['path'][0]}: line 7: a row of over 10 characters")

    monkeypatch.setattr(ray_session.data.DataContext.get_current(), "enable_progress_bars", False)
    ds = ray_session.data.from_items([{"path": str(tmp_path / "a.csv")}]).map_batches(refuse, batch_format="pandas")
    with pytest.raises(ray_session.exceptions.RayError) as info:
        ds.take_all()
    got = score_ray._ray_failure(info.value, [tmp_path / "a.csv"], "csv")
    assert isinstance(got, score.DataError) and str(got) == f"{tmp_path / 'a.csv'}: line 7: a row of over 10 characters"


def test_a_parquet_footer_that_lies_is_refused_before_ray_reads_it(tmp_path):
    """Issue 40: Ray Data's reader trusts the footer; the driver checks it against the page headers first."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from parquet_lie import lie

    path = tmp_path / "outside.parquet"
    pq.write_table(pa.table({"text": ["a" * 5000, "b"]}), path, compression="zstd", write_statistics=False)
    assert lie(path, pq.ParquetFile(path).metadata.row_group(0).column(0).total_compressed_size, 8000)
    cfg = scoring.ScoreConfig(model=tmp_path, input=path, output=tmp_path / "o.csv")
    with pytest.raises(score.DataError, match=r"outside.parquet: row group 0, column 'text': the footer places it"):
        score_ray.row_counts(None, [path], "parquet", cfg)
