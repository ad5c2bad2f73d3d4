"""UI safety without a browser: upload size limit, no server files through Gradio, upload checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gradio as gr
import httpx
import pandas as pd
import pytest

from app.config import Config
from app.ui import _read_upload


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


def test_upload_checks(tmp_path):
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
    code = ("from app.ui import Exports\n"
            "e = Exports()\n"
            "e.path('labeled.csv').write_text('text,label\\n')\n"
            "print(e.root)\n")
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True)
    root = Path(out.stdout.strip().splitlines()[-1])
    assert root.parent == tmp_path and root.name.startswith("electra-app-")
    assert not root.exists() and not list(tmp_path.glob("electra-app-*"))
