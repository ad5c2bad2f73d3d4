"""A version that cannot serve never becomes what a start serves (issue 29, app/versions/version_check.py): `python -m
app.versions.models activate` on a truncated v2 with no server running made every later start exit 2."""

from __future__ import annotations

import shutil

import pytest

import app.__main__ as app_main
from app.versions.models import main as models_cli
from app.versions.registry import Registry


@pytest.fixture
def broken_v2(spread_model_dir, tmp_path):
    reg = Registry(tmp_path / "models")
    reg.set_active(reg.register_folder(spread_model_dir)[0])
    src = tmp_path / "src-v2"
    shutil.copytree(spread_model_dir, src)
    weights = src / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # cut short, as a crashed copy leaves it
    assert reg.register_folder(src) == ("v2", True)
    return reg


def test_cli_activate_checks_the_version_first(broken_v2, capsys):
    root = ["--models-dir", str(broken_v2.root)]
    assert models_cli(["activate", "v2", *root]) == 2
    err = capsys.readouterr().err
    assert "v2 was not activated: it cannot serve" in err and "v1 stays active" in err
    assert broken_v2.active() == "v1"
    assert models_cli(["activate", "v1", *root]) == 0 and broken_v2.active() == "v1"


def test_a_start_on_a_broken_active_version_falls_back_with_a_warning(broken_v2, monkeypatch, capsys):
    assert models_cli(["activate", "v2", "--no-check", "--models-dir", str(broken_v2.root)]) == 0
    served = {}

    def run(server):  # instead of serving: note what would be served
        served["version"] = server.config.app.state.server.served.version

    monkeypatch.setattr("app.http.draining.DrainingServer.run", run)  # app/__main__.py imports it when it serves
    assert app_main.main(["--models-dir", str(broken_v2.root), "--no-ui"]) == 0
    assert served["version"] == "v1" and broken_v2.active() == "v1"
    assert "the active version v2 cannot serve" in capsys.readouterr().err  # the server's JSON log
    last = broken_v2.events()[-1]
    assert last["event"] == "activated" and last["version"] == "v1" and "v2 could not serve" in last["why"]
