"""UI safety without a browser: upload size limit, no server files through Gradio, upload checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import gradio as gr
import httpx
import pandas as pd
import pytest
from app_testkit import gradio_event
from gradio.utils import get_upload_folder

from app.config import Config
from app.ui.uploads import read_upload as _read_upload


def test_upload_over_the_limit_gets_413(server, tmp_path):
    big = tmp_path / "big.csv"
    big.write_bytes(b"text\n" + b"a" * (20 * 1024 * 1024 + 10))
    with open(big, "rb") as f:
        r = httpx.post(server.url + "/ui/gradio_api/upload", files={"files": ("big.csv", f, "text/csv")}, timeout=60)
    assert r.status_code == 413
    r = httpx.post(server.url + "/ui/gradio_api/upload", files={"files": ("ok.csv", b"text\nhello\n", "text/csv")})
    assert r.status_code == 200


def test_no_server_files_through_the_ui(server):
    own_session_files = list((server.cwd / "app-data").rglob("*.csv"))
    for path in ["/etc/passwd", str(server.cwd / "server.log"), *map(str, own_session_files)]:
        r = httpx.get(server.url + "/ui/gradio_api/file=" + path)
        assert r.status_code in (403, 404), path


def gradio_call(url: str, fn_index: int, data: list, headers: dict | None = None) -> dict:
    """One event through Gradio's queue in a session of its own: the final message."""
    return gradio_event(url, fn_index, data, headers=headers)


def all_functions(url: str) -> list[tuple[int, str, list]]:
    """Every UI event with its inputs: (fn_index, api_name, input components)."""
    config = httpx.get(url + "/ui/config").json()
    components = {c["id"]: c for c in config["components"]}
    return [(i, d.get("api_name"), [components[c] for c in d["inputs"]]) for i, d in enumerate(config["dependencies"])]


def test_ui_functions_refuse_files_not_uploaded(server, tmp_path):
    """A Gradio call can name any server path as a file, in any input (Gradio copies file references it
    finds in a Dropdown's value too, and serves its copies): every UI function must refuse one it never
    uploaded, and no copy may reach Gradio's cache."""
    secret = tmp_path / f"secret-{uuid.uuid4().hex[:8]}.csv"  # a name no other run uploads
    secret.write_text("text,password\nhello,hunter2\n", encoding="utf-8")
    uploaded = httpx.post(server.url + "/ui/gradio_api/upload",
                          files={"files": ("mine.csv", b"text\nhello\n", "text/csv")}).json()[0]

    def ref(path):
        return {"path": path, "orig_name": Path(path).name, "meta": {"_type": "gradio.FileData"}}

    def args(inputs, path, everywhere):
        return [ref(path) if c["type"] == "file" or everywhere else c.get("props", {}).get("value") for c in inputs]

    functions = all_functions(server.url)
    with_file = [f for f in functions if any(c["type"] == "file" for c in f[2])]
    assert {name for _, name, _ in with_file} >= {"start", "score_file"}
    for fn_index, name, inputs in functions:
        if not inputs:
            continue
        for foreign in (str(secret), "/etc/passwd", "http://127.0.0.1:1/x.csv"):
            done = gradio_call(server.url, fn_index, args(inputs, foreign, everywhere=True))
            assert "hunter2" not in json.dumps(done) and "root:" not in json.dumps(done), (name, foreign)
            assert not done["success"] or not any(c["type"] == "file" for c in inputs), (name, foreign)
    for fn_index, name, inputs in with_file:  # uploads still work
        done = gradio_call(server.url, fn_index, args(inputs, uploaded, everywhere=False))
        if name == "create":  # Gradio took the file; the Team tab makes no datasets on an open server (as the API)
            assert not done["success"] and "--allow-admin" in done["output"]["error"], done
            continue
        assert done["success"], name
    assert not list(Path(get_upload_folder()).rglob(secret.name)), "a foreign file was copied into Gradio's cache"
    assert not list(Path(get_upload_folder()).rglob("passwd")), "a foreign file was copied into Gradio's cache"


def test_upload_checks(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))  # files here count as uploaded
    cfg = Config(model="m", max_upload_rows=3)
    two_cols = tmp_path / "two.csv"
    pd.DataFrame({"body": ["a", "b"], "id": [1, 2]}).to_csv(two_cols, index=False)
    with pytest.raises(gr.Error) as e:
        _read_upload(cfg, str(two_cols), "text")
    assert "No column 'text'" in e.value.message and "body" in e.value.message
    assert _read_upload(cfg, str(two_cols), "body")[1] == "body"
    one_col = tmp_path / "one.csv"
    pd.DataFrame({"sentence": ["a", "b"]}).to_csv(one_col, index=False)
    assert _read_upload(cfg, str(one_col), "text")[1] == "sentence"  # the only column is the text
    many = tmp_path / "many.csv"
    pd.DataFrame({"text": list("abcd")}).to_csv(many, index=False)
    with pytest.raises(gr.Error, match="limit is 3"):
        _read_upload(cfg, str(many), "text")
    broken = tmp_path / "broken.csv"
    broken.write_bytes(b"text\n\xff\xfe bad bytes\n")
    with pytest.raises(gr.Error) as e:
        _read_upload(cfg, str(broken), "text")
    assert str(tmp_path) not in e.value.message and "broken.csv" in e.value.message


def test_export_folder_is_removed_when_the_process_exits(tmp_path):
    code = ("from app.ui.handouts import Exports\n"
            "e = Exports()\n"
            "e.path('labeled.csv').write_text('text,label\\n')\n"
            "print(e.root)\n")
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True)
    root = Path(out.stdout.strip().splitlines()[-1])
    assert root.parent == tmp_path and root.name.startswith("electra-app-")
    assert not root.exists() and not list(tmp_path.glob("electra-app-*"))


def test_upload_bombs_are_refused_before_parsing(tmp_path, monkeypatch):
    """A million empty columns in 2 MB once took 90 s and 3.5 GB: the shape is checked before pandas sees it."""
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))
    cfg = Config(model="m")
    cases = {
        "wide.csv": b"," * 50_000 + b"\n" + b"," * 50_000 + b"\n",
        "named.csv": ",".join(f"c{i}" for i in range(5_000)).encode() + b"\n",
        "wide.tsv": b"\t" * 50_000 + b"\n",
        "wide.jsonl": (json.dumps({"text": "a"}) + "\n" + json.dumps({f"k{i}": 1 for i in range(5_000)}) + "\n").encode(),
        "endless-header.csv": b"a" * (2 << 20),
    }
    for name, body in cases.items():
        (tmp_path / name).write_bytes(body)
        with pytest.raises(gr.Error) as e:
            _read_upload(cfg, str(tmp_path / name), "text")
        assert len(e.value.message) <= 300 and name in e.value.message, (name, e.value.message[:400])
    wide = pd.DataFrame({f"c{i}": ["x"] for i in range(300)})
    wide.to_parquet(tmp_path / "wide.parquet")
    with pytest.raises(gr.Error, match="300 columns"):
        _read_upload(cfg, str(tmp_path / "wide.parquet"), "c0")
    # A file with many (but allowed) columns and no text column: the message stays short.
    pd.DataFrame({f"column_{i}": ["x"] for i in range(200)}).to_csv(tmp_path / "many.csv", index=False)
    with pytest.raises(gr.Error) as e:
        _read_upload(cfg, str(tmp_path / "many.csv"), "text")
    assert len(e.value.message) <= 300 and "180 more" in e.value.message


def test_downloads_for_people_neutralise_formulas():
    from app.ui.uploads import spreadsheet_safe

    df = pd.DataFrame({"text": ["=HYPERLINK(\"http://x\",\"y\")", "+1+2", "-x", "@SUM(A1)", "\tcmd", "plain", "-5",
                                "1e-3", "a=b"], "score": [0.5] * 9})
    safe = spreadsheet_safe(df)
    assert safe["text"].tolist() == ["'=HYPERLINK(\"http://x\",\"y\")", "'+1+2", "'-x", "'@SUM(A1)", "'\tcmd", "plain",
                                     "-5", "1e-3", "a=b"]
    assert safe["score"].tolist() == [0.5] * 9 and df["text"][0].startswith("=")  # the input is untouched


def _queue_big_score_job(server, session: str) -> None:
    rows = "text\n" + "".join(f"메모 기록 {i}\n" for i in range(20_000))
    uploaded = httpx.post(server.url + "/ui/gradio_api/upload",
                          files={"files": ("big.csv", rows.encode(), "text/csv")}).json()[0]
    fn_index, _, inputs = next(f for f in all_functions(server.url) if f[1] == "score_file")
    data = [{"path": uploaded, "orig_name": "big.csv", "meta": {"_type": "gradio.FileData"}}
            if c["type"] == "file" else c.get("props", {}).get("value") for c in inputs]
    httpx.post(server.url + "/ui/gradio_api/queue/join",
               json={"data": data, "fn_index": fn_index, "session_hash": session}).raise_for_status()


def _wait_for_cancel(server, before: int) -> None:
    deadline = time.monotonic() + 60
    while server.log().count("ui_cancelled") == before:
        assert time.monotonic() < deadline, "the job went on after its client left"
        time.sleep(0.2)


def test_ui_job_stops_when_its_client_is_gone(server):
    """64 abandoned 50k-row jobs once kept both cores busy until shutdown: a job whose stream closed stops,
    and so does one whose client queued it and never listened."""
    session = uuid.uuid4().hex[:12]
    before = server.log().count("ui_cancelled")
    _queue_big_score_job(server, session)
    with httpx.stream("GET", server.url + "/ui/gradio_api/queue/data", params={"session_hash": session},
                      timeout=60) as stream:
        for line in stream.iter_lines():
            if '"progress"' in line:
                break  # scoring has started: hang up
    _wait_for_cancel(server, before)
    _queue_big_score_job(server, uuid.uuid4().hex[:12])  # and never open its stream
    _wait_for_cancel(server, before + 1)


def _upload(server, name: str, body: bytes) -> dict:
    path = httpx.post(server.url + "/ui/gradio_api/upload", files={"files": (name, body, "text/csv")}).json()[0]
    return {"path": path, "orig_name": name, "meta": {"_type": "gradio.FileData"}}


def _call(server, api_name: str, file: dict) -> dict:
    fn_index, _, inputs = next(f for f in all_functions(server.url) if f[1] == api_name)
    return gradio_call(server.url, fn_index, [file if c["type"] == "file" else c.get("props", {}).get("value")
                                              for c in inputs])


def test_batch_tab_flags_a_shifted_row_and_the_label_tab_refuses_it(server):
    """The Batch tab read `hello, world,1` under `text,id` as text "hello"... shifted: now that row is kept,
    unscored, with the reason in `error`; the Label tab refuses the file naming the row."""
    shifted = _upload(server, "shifted.csv", b"text,id\nhello, world,1\nsecond row,2\n")
    done = _call(server, "score_file", shifted)
    assert done["success"], done
    scored = pd.read_csv(done["output"]["data"][0]["path"], dtype=str, keep_default_na=False)
    assert scored["text"].tolist() == ["hello", "second row"] and scored["pred_label"][0] == ""
    assert scored["error"][0].startswith("row 1 (line 2): 3 fields, the header has 2") and scored["error"][1] == ""
    assert done["output"]["data"][1].startswith("Scored **1** of 2 rows") and "**1** not scored" in done["output"]["data"][1]
    refused = _call(server, "start", shifted)
    assert not refused["success"] and "shifted.csv: row 1 (line 2): 3 fields" in json.dumps(refused)


def test_first_row_column_bomb_through_the_ui(server):
    """'text\\na' + a million commas (1 MB) parsed for 18+ minutes at 5 GB in the server: one flagged row now."""
    bomb = _upload(server, "bomb.csv", b"text\na" + b"," * 1_000_000)
    start = time.monotonic()
    done = _call(server, "score_file", bomb)
    assert done["success"] and time.monotonic() - start < 60
    scored = pd.read_csv(done["output"]["data"][0]["path"], dtype=str, keep_default_na=False)
    assert scored.shape[0] == 1 and scored["error"][0].startswith("row 1 (line 2): 1000001 fields")
    refused = _call(server, "start", bomb)
    assert not refused["success"] and "1000001 fields" in json.dumps(refused)
    assert httpx.get(server.url + "/healthz", timeout=5).status_code == 200


def test_an_upload_being_read_stops_when_the_server_shuts_down(tmp_path, monkeypatch):
    """After SIGTERM the server lived on at 6.3 GB while pandas parsed: a UI read now asks every 512 rows."""
    from functools import partial

    from app.http.api import ServerState
    from app.ui.handouts import stop_reason as _stop_reason

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))
    path = tmp_path / "rows.csv"
    path.write_text("text\n" + "row\n" * 2000, encoding="utf-8")
    state = ServerState()
    assert len(_read_upload(Config(model="m"), str(path), "text", partial(_stop_reason, state))[0]) == 2000
    state.draining = True
    with pytest.raises(gr.Error, match="rows.csv: reading stopped: the server is shutting down"):
        _read_upload(Config(model="m"), str(path), "text", partial(_stop_reason, state))
    # and a scoring job already past reading stops at its next chunk
    from app.ui.handouts import score_chunks as _score_chunks

    with pytest.raises(gr.Error, match="Cancelled: the server is shutting down"):
        _score_chunks(2000, lambda a, b: [], lambda *a, **k: None, "Scoring", "rows", threading.Lock(), state)


def test_one_upload_request_may_not_hold_more_than_the_limit_in_all(server):
    """Ten 19 MB files in one request were all stored: Gradio checks each file, not the request."""
    files = [("files", (f"part{i}.csv", b"text\n" + b"a" * (3 * 1024 * 1024), "text/csv")) for i in range(8)]
    r = httpx.post(server.url + "/ui/gradio_api/upload", files=files, timeout=60)
    assert r.status_code == 413 and "--max-upload-mb" in r.json()["detail"]
    assert httpx.post(server.url + "/ui/gradio_api/upload", files=files[:2], timeout=60).status_code == 200
