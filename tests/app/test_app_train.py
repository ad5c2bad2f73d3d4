"""Retraining in the running server (app/versions/jobs.py, app/versions/train_child.py): a training child killed with SIGKILL
leaves no version and the server serving, the job failed with its log; a finished job makes v2, scored on
the evaluation slice beside v1, promoted, answering; rollback; `serving.score` names the version."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time

import httpx
import pandas as pd
import pytest
from app_testkit import training_server


@pytest.fixture(scope="module")
def train_server(spread_model_dir, tiny_electra_dir, tmp_path_factory, toy_rows):
    root = tmp_path_factory.mktemp("train")
    rows = toy_rows(n_per_class=12, seed=3)
    # v1 as `finetune/kfold.py --final` leaves it, trained on every other row of the base table: some of the
    # evaluation slice's rows, which it must not be judged on (issue 31)
    v1 = root / "v1-model"
    shutil.copytree(spread_model_dir, v1)
    rows.iloc[::2][["text", "label"]].to_csv(root / "v1-data.csv", index=False)
    (v1 / "training_config.json").write_text(json.dumps({"config": {"data": str(root / "v1-data.csv")}}))
    with training_server(v1, tiny_electra_dir, rows, root, "--no-ui") as server:
        yield server


def wait_job(url: str, job_id: str, done, timeout: float = 600) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = httpx.get(f"{url}/v1/jobs/{job_id}").json()
        if done(job):
            return job
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} not there after {timeout} s: {job}")


def test_killed_training_child_leaves_no_version(train_server):
    url, models = train_server.url, train_server.cwd / "app-data" / "models"
    r = httpx.post(url + "/v1/train", json={"folds": 2, "epochs": 5})
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["data"]["base_rows"] == 36 and job["data"]["train_rows"] + job["data"]["eval_rows"] == 36
    again = httpx.post(url + "/v1/train", json={"folds": 2})
    assert again.status_code == 409 and job["id"] in again.json()["detail"]
    # mid-run: the child reports a fold of k-fold training
    wait_job(url, job["id"], lambda j: str((j.get("progress") or {}).get("stage", "")).startswith("fold")
             or j["status"] != "running")
    stat = open(f"/proc/{job['pid']}/stat").read()  # noqa: SIM115
    assert int(stat.rsplit(")", 1)[1].split()[16]) >= 10  # the child runs niced (--train-nice 10) on CPU
    os.kill(job["pid"], signal.SIGKILL)
    failed = wait_job(url, job["id"], lambda j: j["status"] != "running", timeout=60)
    assert failed["status"] == "failed" and "killed by SIGKILL" in failed["error"] and "no version" in failed["error"]
    assert failed["log_tail"]
    assert "rows" in httpx.get(f"{url}/v1/jobs/{job['id']}/log").text  # kfold's first line is in the log
    assert sorted(p.name for p in models.iterdir() if p.name.startswith("v")) == ["v1"]
    assert not list(models.glob(".staging-*"))
    r = httpx.post(url + "/v1/classify", json={"text": "꿈에서 봤다"})
    assert r.status_code == 200 and r.json()["model_version"] == "v1"


def test_training_makes_a_scored_version_that_is_promoted_and_rolled_back(train_server, tmp_path):
    url, models = train_server.url, train_server.cwd / "app-data" / "models"
    r = httpx.post(url + "/v1/train", json={"folds": 2, "epochs": 1, "lr": 0.001})
    assert r.status_code == 202, r.text
    job = wait_job(url, r.json()["id"], lambda j: j["status"] != "running" or j.get("decision"))
    job = wait_job(url, job["id"], lambda j: j["status"] != "running" and j.get("decision") or j["status"] == "failed")
    assert job["status"] == "succeeded", job.get("error")
    assert job["version"] == "v2" and job["decision"]["promoted"] is True, job["decision"]
    assert job["progress"]["stage"] == "done"
    meta = json.loads((models / "v2" / "version.json").read_text())
    assert meta["parent"] == "v1" and meta["source"] == "trained" and meta["rows"] == job["data"]["train_rows"]
    assert len(meta["table_sha256"]) == 64 and meta["training"]["folds"] == 2
    # both scored on the slice rows neither trained on: v1's own training rows are left out
    eval_texts = set(pd.read_csv(models / ".jobs" / job["id"] / "eval.csv")["text"])
    v1_trained = eval_texts & set(pd.read_csv(train_server.cwd / "v1-data.csv")["text"])
    assert 0 < len(v1_trained) < len(eval_texts)
    assert meta["eval"]["compared_on"] == {"rows": len(eval_texts) - len(v1_trained), "slice_rows": len(eval_texts),
                                           "left_out": {"v1": len(v1_trained)}, "unknown": {}}
    assert meta["eval"]["rows"] == meta["eval"]["champion"]["rows"] == len(eval_texts) - len(v1_trained)
    assert meta["eval"]["champion"]["version"] == "v1"
    assert f"on {len(eval_texts) - len(v1_trained)} of {len(eval_texts)} evaluation-slice rows (left out, " \
           f"trained on: v1 {len(v1_trained)})" in job["decision"]["why"]
    assert 0 <= meta["eval"]["macro_f1"] <= 1 and 0 <= meta["eval"]["champion"]["macro_f1"] <= 1
    assert (models / "v2" / "report.json").is_file() and (models / "v2" / "model.onnx").is_file()
    assert not eval_texts & set(pd.read_csv(models / "v2" / "training" / "train.csv")["text"])
    r = httpx.post(url + "/v1/classify", json={"text": "꿈에서 봤다"})
    assert r.status_code == 200 and r.json()["model_version"] == "v2"
    listed = httpx.get(url + "/v1/models").json()
    assert listed["active"] == "v2" and [v["version"] for v in listed["versions"]] == ["v2", "v1"]
    v2 = listed["versions"][0]
    assert v2["last_decision"]["event"] == "decision" and v2["last_decision"]["why"] == job["decision"]["why"]
    assert v2["last_activated"]["event"] == "activated"  # beside the decision, not over it
    # rollback
    assert httpx.post(url + "/v1/models/v1/activate", timeout=120).status_code == 200
    assert httpx.post(url + "/v1/classify", json={"text": "꿈에서 봤다"}).json()["model_version"] == "v1"
    # batch scoring names the version that scored each row
    from serving.score import ScoreConfig, run

    inp = tmp_path / "in.csv"
    pd.DataFrame({"text": ["꿈에서 봤다", "오류 발생"]}).to_csv(inp, index=False)
    run(ScoreConfig(model=models / "v2", input=inp, output=tmp_path / "out.csv", progress=False))
    assert pd.read_csv(tmp_path / "out.csv")["model_version"].tolist() == ["v2", "v2"]


def test_cancelled_job_leaves_no_version(train_server):
    url, models = train_server.url, train_server.cwd / "app-data" / "models"
    before = sorted(p.name for p in models.iterdir() if p.name.startswith("v"))
    job = httpx.post(url + "/v1/train", json={"folds": 2, "epochs": 5}).json()
    r = httpx.delete(f"{url}/v1/jobs/{job['id']}", timeout=60)
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    assert httpx.delete(f"{url}/v1/jobs/{job['id']}").status_code == 409  # not running any more
    assert sorted(p.name for p in models.iterdir() if p.name.startswith("v")) == before
    assert not list(models.glob(".staging-*"))
    assert httpx.post(url + "/v1/classify", json={"text": "꿈에서 봤다"}).status_code == 200
