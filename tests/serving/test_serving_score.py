from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from serving import score, scoring
from textdata.errors import DataError

ROOT = Path(__file__).resolve().parents[2]

EDGE_TEXTS = ["꿈에서 봤다", "", "   \t ", "오류 " * 3000, "naïve café ✓ 日本語", 'memo, "quoted", comma',
              "첫 줄\n둘째 줄", "에러 발생했다", "NA", "null"]


def _edge_frame() -> pd.DataFrame:
    return pd.DataFrame({"id": [f"r{i}" for i in range(len(EDGE_TEXTS))], "text": EDGE_TEXTS,
                         "extra": [f"x{i}" for i in range(len(EDGE_TEXTS))]})


def _run(model, inp, out, **kw):
    kw.setdefault("progress", False)
    return score.run(score.ScoreConfig(model=model, input=inp, output=out, **kw))


def test_every_row_kept_in_order(exported_dir, tmp_path):
    inp, out = tmp_path / "in.csv", tmp_path / "out.csv"
    _edge_frame().to_csv(inp, index=False)
    summary = _run(exported_dir, inp, out, id_column="id", batch_rows=3)
    got = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert len(got) == len(EDGE_TEXTS) and summary["rows"] == len(EDGE_TEXTS)
    assert got["text"].tolist() == EDGE_TEXTS and got["extra"].tolist() == _edge_frame()["extra"].tolist()
    assert got.columns.tolist() == ["id", "text", "extra", "pred_label", "pred_score", "confident", "prob_dream", "prob_error",
                                    "prob_memo", "error", "model_version"]
    empty = got["error"] != ""
    assert empty.tolist() == [False, True, True] + [False] * 7
    assert (got.loc[empty, "pred_label"] == "").all() and (got.loc[~empty, "pred_label"] != "").all()
    probs = got.loc[~empty, ["prob_dream", "prob_error", "prob_memo"]].astype(float)
    np.testing.assert_allclose(probs.sum(axis=1), 1, atol=1e-5)
    assert summary["errors"] == 2 and summary["error_ids"] == ["r1", "r2"]
    assert sum(summary["labels"].values()) == 8
    assert not (tmp_path / "out.csv.parts").exists()


def test_parquet_in_and_out_with_top_k(exported_dir, tmp_path):
    inp = tmp_path / "in.parquet"
    df = _edge_frame().assign(n=range(len(EDGE_TEXTS)))
    df.to_parquet(inp, index=False)
    _run(exported_dir, inp, tmp_path / "out.parquet", top_k=2, batch_rows=4)
    got = pd.read_parquet(tmp_path / "out.parquet")
    assert got["n"].tolist() == list(range(len(EDGE_TEXTS))) and got["text"].tolist() == EDGE_TEXTS
    assert {"top1_label", "top1_score", "top2_label", "top2_score"} <= set(got.columns)
    assert not any(c.startswith("prob_") for c in got.columns)
    ok = got["error"].isna()
    assert (got.loc[ok, "top1_label"] == got.loc[ok, "pred_label"]).all()
    assert (got.loc[ok, "top1_score"] >= got.loc[ok, "top2_score"]).all()
    _run(exported_dir, inp, tmp_path / "out.csv")  # Parquet in, CSV out
    assert len(pd.read_csv(tmp_path / "out.csv")) == len(EDGE_TEXTS)


def test_predictions_match_engine(exported_dir, tmp_path):
    from serving.engine import Classifier

    texts = [t for t in EDGE_TEXTS if t.strip()] + ["꿈에서 봤다", "오류 발생했다", "메모 기록", "회의 시간 약속"] * 5
    rows = pd.DataFrame({"text": texts})
    rows.to_csv(tmp_path / "in.csv", index=False)
    # fp32: dynamic INT8 scales activations per batch, so other chunks give other (close) numbers.
    _run(exported_dir, tmp_path / "in.csv", tmp_path / "out.csv", batch_rows=7, quantized=False)
    got = pd.read_csv(tmp_path / "out.csv")
    clf = Classifier.load(exported_dir, quantized=False)
    expected = [p.label for p in clf.predict(rows["text"].tolist())]
    assert got["pred_label"].tolist() == expected
    # Every probability and the score, not only the argmax: chunking and normalising once change no number.
    proba = clf.predict_proba(texts)
    np.testing.assert_allclose(got[[f"prob_{lab}" for lab in clf.labels]].to_numpy(), proba, rtol=0, atol=1e-5)
    np.testing.assert_allclose(got["pred_score"].to_numpy(), proba.max(axis=1), rtol=0, atol=1e-5)


def test_each_text_is_normalised_once(exported_dir):
    from serving.engine import Classifier

    clf = Classifier.load(exported_dir)
    calls = []
    plain = clf.normalizer
    clf.normalizer = lambda text: calls.append(text) or plain(text)
    frame = _edge_frame()
    out = scoring.score_frame(clf, frame, "text", None)
    usable = [t for t in EDGE_TEXTS if t.strip()]
    assert len(calls) == len(usable)  # the empty cells are flagged without normalising
    assert out["error"].notna().sum() == len(EDGE_TEXTS) - len(usable)


def _big_input(path: Path, n: int = 600) -> None:
    words = ["꿈", "오류", "메모", "회의", "에러, 쉼표", "기록", "", "약속"]
    texts = [" ".join(words[(i * 7 + j) % len(words)] for j in range(1 + i % 13)) for i in range(n)]
    pd.DataFrame({"id": range(n), "text": texts}).to_csv(path, index=False)


def test_resume_after_interruption_equals_uninterrupted(exported_dir, tmp_path, monkeypatch):
    inp = tmp_path / "in.csv"
    _big_input(inp)
    _run(exported_dir, inp, tmp_path / "full.csv", batch_rows=50)

    real, calls = scoring._write_part, []

    def dying(df, path, fmt):
        if len(calls) == 4:
            raise KeyboardInterrupt  # as if killed after four parts
        calls.append(path)
        real(df, path, fmt)

    monkeypatch.setattr(scoring, "_write_part", dying)
    out = tmp_path / "resumed.csv"
    with pytest.raises(KeyboardInterrupt):
        _run(exported_dir, inp, out, batch_rows=50)
    assert not out.exists() and len(list((tmp_path / "resumed.csv.parts").glob("part-*"))) == 4
    monkeypatch.setattr(scoring, "_write_part", real)
    summary = _run(exported_dir, inp, out, batch_rows=50, resume=True)
    assert summary["scored_this_run"] == 600 - 200 and summary["rows"] == 600
    assert out.read_bytes() == (tmp_path / "full.csv").read_bytes()


def test_resume_refuses_changed_options(exported_dir, tmp_path, monkeypatch):
    inp = tmp_path / "in.csv"
    _big_input(inp, 120)
    monkeypatch.setattr(scoring, "_write_part", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        _run(exported_dir, inp, tmp_path / "out.csv", batch_rows=50)
    with pytest.raises(DataError, match=r"different input, model or options .*top_k"):
        _run(exported_dir, inp, tmp_path / "out.csv", batch_rows=50, top_k=1, resume=True)


def _cli(*args, **kw):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "serving.score", *map(str, args)], capture_output=True, text=True, check=False,
                          env=env, cwd=ROOT, timeout=300, **kw)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["kill", "ctrl-c"])
def test_cli_resume_after_kill(exported_dir, tmp_path, sig):
    inp, out = tmp_path / "in.csv", tmp_path / "out.csv"
    _big_input(inp, 1000)
    _run(exported_dir, inp, tmp_path / "full.csv", batch_rows=20)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "serving.score", "--model", str(exported_dir), "--input", str(inp),
                             "--output", str(out), "--batch-rows", "20", "--threads", "1"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    parts = tmp_path / "out.csv.parts"
    deadline = time.time() + 120
    while time.time() < deadline and len(list(parts.glob("part-*"))) < 2 and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(sig)
    stderr = proc.communicate()[1]
    killed_early = not out.exists()
    if sig == signal.SIGINT and killed_early:  # Ctrl-C: one line saying how to continue, no traceback
        assert proc.returncode == 130 and "Traceback" not in stderr, stderr
        assert f"interrupted: the rows scored so far are kept in {parts}; rerun the same command with --resume" in stderr
    r = _cli("--model", exported_dir, "--input", inp, "--output", out, "--batch-rows", "20", "--resume")
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == (tmp_path / "full.csv").read_bytes()
    if killed_early:  # the usual case; on a very fast machine the first run may have finished
        assert "scored 1000 rows (" in r.stdout and "(1000 this run" not in r.stdout


def test_cli_bad_inputs(exported_dir, tmp_path):
    inp = tmp_path / "in.csv"
    pd.DataFrame({"body": ["꿈"], "id": [1]}).to_csv(inp, index=False)
    r = _cli("--model", exported_dir, "--input", inp, "--output", tmp_path / "o.csv")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "error:" in r.stderr and "no column 'text'" in r.stderr and "['body', 'id']" in r.stderr
    assert "name yours with --text-column" in r.stderr

    assert not (tmp_path / "o.csv").exists()


def test_bad_encoding_and_bad_model_messages(exported_dir, tmp_path, capsys):
    bad = tmp_path / "cp949.csv"
    bad.write_bytes("text\n좋은 날\n".encode() + "꿈에서 봤다\n".encode("cp949"))
    assert score.main(["--model", str(exported_dir), "--input", str(bad), "--output", str(tmp_path / "o.csv")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "line 3" in err and "cp949" in err

    pd.DataFrame({"body": ["꿈"]}).to_csv(tmp_path / "in.csv", index=False)
    (tmp_path / "empty-model").mkdir()
    args = ["--model", str(tmp_path / "empty-model"), "--input", str(tmp_path / "in.csv"), "--output",
            str(tmp_path / "o.csv"), "--text-column", "body"]
    assert score.main(args) == 2
    assert "not a model folder" in capsys.readouterr().err


def test_header_only_and_column_clash(exported_dir, tmp_path):
    (tmp_path / "h.csv").write_text("id,text\n")
    summary = _run(exported_dir, tmp_path / "h.csv", tmp_path / "o.csv")
    assert summary["rows"] == 0
    assert pd.read_csv(tmp_path / "o.csv").columns.tolist()[:3] == ["id", "text", "pred_label"]
    pd.DataFrame({"text": ["꿈"], "pred_label": ["x"]}).to_csv(tmp_path / "c.csv", index=False)
    with pytest.raises(DataError, match="already has column"):
        _run(exported_dir, tmp_path / "c.csv", tmp_path / "o2.csv")


def test_output_path_is_checked_before_scoring(exported_dir, tmp_path, capsys):
    inp = tmp_path / "in.csv"
    pd.DataFrame({"text": ["꿈"]}).to_csv(inp, index=False)
    (tmp_path / "a-folder").mkdir()
    (tmp_path / "a-file").write_text("x")
    for out, says in ((tmp_path / "a-folder", "is a folder"), (tmp_path / "a-file" / "o.csv", "cannot write in")):
        assert score.main(["--model", str(exported_dir), "--input", str(inp), "--output", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error:") and says in err and len(err.strip().splitlines()) == 1, err


def test_a_carriage_return_in_a_text_reads_back_unchanged(exported_dir, tmp_path):
    inp, out = tmp_path / "in.csv", tmp_path / "out.csv"
    texts = ["꿈\r봤다", "메모", "=1+1"]
    pd.DataFrame({"text": texts}).to_csv(inp, index=False, quoting=1)
    _run(exported_dir, inp, out)
    back = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert back["text"].tolist() == texts and back["pred_label"].ne("").all()  # raw text kept for pipelines


def test_a_shifted_row_is_flagged_and_kept_never_scored_shifted(exported_dir, tmp_path, caplog):
    """`hello, world,1` under `text,id` once scored " world" and "2" with exit 0 and errors: 0."""
    inp, out = tmp_path / "in.csv", tmp_path / "out.csv"
    inp.write_text("text,id\nhello, world,1\nsecond row,2\nshort\n", encoding="utf-8")
    summary = _run(exported_dir, inp, out, id_column="id")
    got = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert got["text"].tolist() == ["hello", "second row", "short"] and got["id"].tolist() == [" world", "2", ""]
    assert got["error"][0].startswith("row 1 (line 2): 3 fields, the header has 2") and got["pred_label"][0] == ""
    assert got["error"][1] == "" and got["pred_label"][1] != ""
    assert got["error"][2].startswith("row 3 (line 4): 1 field, the header has 2: no 'id'")
    assert summary["errors"] == 2 and summary["error_kinds"] == {
        "3 fields, the header has 2 (a comma inside a text not in double quotes?)": 1,
        "1 field, the header has 2: no 'id'": 1}
    assert f"{inp}: row 1 (line 2): 3 fields" in caplog.text  # named on stderr as met


def test_the_summary_lists_ten_labels_and_how_many_more(monkeypatch, capsys):
    """Issue 45: a multi-label run printed every label set seen, 4,536 characters for 200 rows."""
    sets = {f"tag{i};tag{i + 1}": 100 - i for i in range(60)}
    monkeypatch.setattr(score, "run", lambda cfg: {
        "rows": 200, "scored_this_run": 200, "rows_per_second": None, "seconds": 1.0, "backend": "onnx",
        "provider": "cpu", "model_file": "model.onnx", "output": "o.csv", "errors": 0, "error_kinds": {},
        "error_ids": None, "labels": sets})
    assert score.main(["--model", "m", "--input", "i.csv", "--output", "o.csv"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("labels: "))
    assert line.startswith("labels: tag0;tag1 100, tag1;tag2 99") and line.endswith("tag9;tag10 91 and 50 more")


def test_no_progress_bar_copies_when_stderr_is_not_a_terminal(exported_dir, tmp_path, capsys):
    """Issue 45: redirected, the bar's redraws printed the progress line two and three times."""
    inp, out = tmp_path / "in.csv", tmp_path / "out.csv"
    _edge_frame().to_csv(inp, index=False)
    assert score.main(["--model", str(exported_dir), "--input", str(inp), "--output", str(out)]) == 0
    captured = capsys.readouterr()
    assert "scoring:" not in captured.err and captured.out.startswith(f"scored {len(EDGE_TEXTS)} rows")
