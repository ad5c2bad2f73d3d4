"""The model registry (app/versions/registry.py, app/versions/models.py), the training table (app/versions/trainset.py) and the admin
rule, in-process: versions, the active pointer, deletes, conflicting labels, tables refused before training,
and admin actions refused without a key on a non-loopback address."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest
from starlette.testclient import TestClient

from app.config import Config
from app.labeling.sessions import LabelSession
from app.server import create_app, load_classifier
from app.versions.jobs import Jobs
from app.versions.models import main as models_cli
from app.versions.registry import Registry, RegistryError
from app.versions.trainset import TrainingDataError, build, check, in_eval_slice
from serving.engine import Prediction


@pytest.fixture
def registry(spread_model_dir, tmp_path):
    reg = Registry(tmp_path / "models")
    name, _ = reg.register_folder(spread_model_dir)
    reg.set_active(name)
    return reg


def test_folder_becomes_v1_once_and_numbers_are_never_reused(registry, spread_model_dir, tmp_path):
    assert registry.names() == ["v1"] and registry.active() == "v1"
    meta = registry.meta("v1")
    assert meta["source"] == "imported" and meta["imported_from"] == str(spread_model_dir.resolve())
    assert (registry.path("v1") / "config.json").is_file()  # a copy: the registry does not depend on the folder
    assert registry.register_folder(spread_model_dir) == ("v1", False)  # a restart with the same --model
    other = tmp_path / "other"
    shutil.copytree(spread_model_dir, other)
    (other / "note.txt").write_text("changed")
    assert registry.register_folder(other) == ("v2", True)
    with pytest.raises(RegistryError, match="v1 is the active version"):
        registry.delete("v1")
    registry.delete("v2")
    assert registry.names() == ["v1"]
    (other / "note.txt").write_text("changed again")
    assert registry.register_folder(other) == ("v3", True)  # v2 was deleted: its name is not given again
    with pytest.raises(RegistryError, match="no version v9"):
        registry.path("v9")
    assert not list(registry.root.glob(".staging-*"))


def test_cli_lists_activates_and_refuses_to_delete_the_active(registry, spread_model_dir, tmp_path, capsys):
    other = tmp_path / "other"
    shutil.copytree(spread_model_dir, other)
    (other / "note.txt").write_text("x")
    registry.register_folder(other)
    root = ["--models-dir", str(registry.root)]
    assert models_cli(["activate", "v2", *root]) == 0
    assert (registry.root / "active").read_text().strip() == "v2"
    assert models_cli(["delete", "v2", *root]) == 2
    assert "v2 is the active version" in capsys.readouterr().err
    assert models_cli(["list", *root]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].startswith("* v2") and listed[1].startswith("  v1")
    assert models_cli(["delete", "v1", *root]) == 0 and registry.names() == ["v2"]


def _session(root, texts, labels, model_labels=("dream", "error", "memo")):
    preds = [Prediction(model_labels[0], 0.5, {lab: 1 / len(model_labels) for lab in model_labels}) for _ in texts]
    s = LabelSession.create(root, "up.csv", texts, preds, list(model_labels))
    for row, label in enumerate(labels):
        s.decide(row, label)
    return s


def test_latest_decision_wins_and_conflicts_are_listed(tmp_path):
    root = tmp_path / "label"
    base = tmp_path / "base.csv"
    base.write_text("text,label\n꿈에서 바다를 봤다,dream\n서버 오류 발생,memo\n", encoding="utf-8")
    _session(root, ["서버 오류 발생", "회의 메모"], ["error", "memo"])
    later = _session(root, ["회의  메모", "새 텍스트"], ["dream", "memo"])  # same text, whitespace differs
    later.undo()  # the undone decision is not in force
    ts = build(root, base, share=1e-9)  # nothing in the evaluation slice
    got = dict(zip(ts.train["text"], ts.train["label"]))
    # one row per text (whitespace collapsed), as the latest decision wrote it
    assert got == {"꿈에서 바다를 봤다": "dream", "서버 오류 발생": "error", "회의  메모": "dream"}
    assert ts.n_conflicts == 2
    by_text = {c["text"]: c for c in ts.conflicts}
    assert by_text["서버 오류 발생"]["kept"] == "error"
    assert [x["label"] for x in by_text["서버 오류 발생"]["labels"]] == ["memo", "error"]
    assert by_text["회의 메모"]["kept"] == "dream"
    assert ts.sources["base_rows"] == 2 and ts.sources["sessions"] == 2


def test_evaluation_slice_is_fixed_by_the_text_and_never_trained_on(tmp_path):
    texts = [f"메모 {i}" for i in range(200)]
    base = tmp_path / "base.csv"
    base.write_text("text,label\n" + "".join(f"{t},memo\n" for t in texts), encoding="utf-8")
    ts = build(tmp_path / "none", base, share=0.2)
    held = set(ts.eval["text"])
    assert held and not held & set(ts.train["text"]) and 20 < len(held) < 60
    assert held == {t for t in texts if in_eval_slice(t, 0.2)}
    assert in_eval_slice("메모 7", 0.2) == in_eval_slice(" 메모  7 ", 0.2)


def test_tables_that_cannot_train_are_refused_with_what_to_do(tmp_path):
    base = tmp_path / "base.csv"
    with pytest.raises(TrainingDataError, match="no labeled rows to train on"):
        check(build(tmp_path / "none", None, 0.2), folds=2)
    base.write_text("text,label\na,memo\nb,memo\nc,memo\n", encoding="utf-8")
    with pytest.raises(TrainingDataError, match="one class only"):
        check(build(tmp_path / "none", base, 1e-9), folds=2)
    base.write_text("text,label\na,memo\nb,memo\nc,memo\nd,dream\n", encoding="utf-8")
    with pytest.raises(TrainingDataError, match=r"'dream' has 1 row in the training table; 2-fold"):
        check(build(tmp_path / "none", base, 1e-9), folds=2)


@pytest.fixture
def admin_app(registry, tmp_path):
    def make(**kw):
        cfg = Config(ui=False, data_dir=tmp_path, models_dir=registry.root, train_model="m", **kw)
        app = create_app(cfg, load_classifier(cfg, registry.path("v1")), registry=registry, version="v1")
        return TestClient(app, base_url="http://127.0.0.1")
    return make


def test_admin_refused_without_a_key_off_loopback(admin_app, tmp_path):
    (tmp_path / "label").mkdir()
    with admin_app(host="0.0.0.0") as c:
        for method, path in (("post", "/v1/models/v1/activate"), ("post", "/v1/train"), ("delete", "/v1/models/v1")):
            r = getattr(c, method)(path)
            assert r.status_code == 403, path
            assert "--api-key" in r.json()["detail"] and "--allow-admin" in r.json()["detail"]
        for path in ("/v1/models", "/v1/jobs", "/v1/jobs/20250101-000000-abcdef", "/v1/jobs/20250101-000000-abcdef/log"):
            assert c.get(path).status_code == 403, path  # reading the registry and jobs: the same rule (issue 29)
        body = c.post("/v1/classify", json={"text": "꿈에서 봤다"}).json()
        assert body["model_version"] == "v1"
    with admin_app(host="0.0.0.0", allow_admin=True) as c:
        r = c.post("/v1/train", json={"folds": 2})
        assert r.status_code == 422 and "no labeled rows to train on" in r.json()["detail"]  # past the admin rule
    with admin_app(host="0.0.0.0", api_key="k") as c:
        assert c.post("/v1/models/v1/activate").status_code == 401
        r = c.post("/v1/models/v1/activate", headers={"Authorization": "Bearer k"})
        assert r.status_code == 200 and r.json()["active"] == "v1"


def test_one_example_class_is_refused_before_training(admin_app, tmp_path):
    dream = next(t for t in (f"꿈에서 봤다 {i}" for i in range(50)) if not in_eval_slice(t, 0.2))  # a training row
    _session(tmp_path / "label", [f"메모 {i}" for i in range(12)] + [dream], ["memo"] * 12 + ["dream"])
    with admin_app() as c:  # 127.0.0.1: admin allowed without a key
        r = c.post("/v1/train", json={"folds": 2, "epochs": 1})
        assert r.status_code == 422
        assert "'dream' has 1 row in the training table; 2-fold cross-validation needs" in r.json()["detail"]
        assert c.get("/v1/jobs").json()["jobs"] == []  # nothing started
        assert json.loads(c.get("/v1/models").text)["versions"][0]["version"] == "v1"


def test_activating_a_version_keeps_its_evaluation_decision_in_the_listing(registry, tmp_path):
    """Issue 59: the listing's last_decision was the last of decision or activation, so a rollback or a manual
    promotion hid why the version was kept or promoted."""
    stage = registry.staging("v2")
    (stage / "config.json").write_text("{}")
    made = registry.commit(stage, {"source": "trained", "parent": "v1"})
    registry.log("decision", version=made, promoted=False, why="kept as a candidate: 0.50 < 0.60")
    registry.set_active(made, why="manual promotion")
    registry.set_active("v1", why="rollback")
    registry.set_active(made, why="again")
    listed = {m["version"]: m for m in registry.listing()}
    assert listed[made]["last_decision"]["why"] == "kept as a candidate: 0.50 < 0.60"
    assert listed[made]["last_activated"]["why"] == "again" and listed["v1"]["last_activated"]["why"] == "rollback"
    assert listed["v1"]["last_decision"] is None


def test_candidate_worse_on_the_slice_stays_listed_with_both_scores(registry, tmp_path):
    activated = []

    class Switcher:
        async def activate(self, version, why):
            activated.append(version)

    def decide(promote, cand, champ, version):
        stage = registry.staging(version)
        (stage / "config.json").write_text("{}")
        made = registry.commit(stage, {"source": "trained", "parent": "v1",
                                       "eval": {"macro_f1": cand, "champion": {"version": "v1", "macro_f1": champ}}})
        jobs = Jobs(Config(promote=promote, promote_tolerance=0.01, data_dir=tmp_path), registry, Switcher())
        result = {"eval": {"macro_f1": cand}, "champion_eval": {"macro_f1": champ}}
        return made, asyncio.run(jobs._decide(made, result, "v1"))

    made, d = decide("auto", 0.50, 0.60, "a")
    assert made == "v2" and d["promoted"] is False and "kept as a candidate" in d["why"] and activated == []
    listed = {m["version"]: m for m in registry.listing()}
    assert listed["v2"]["eval"]["macro_f1"] == 0.50 and listed["v2"]["eval"]["champion"]["macro_f1"] == 0.60
    assert listed["v2"]["last_decision"]["why"] == d["why"] and not listed["v2"]["active"]
    made, d = decide("auto", 0.595, 0.60, "b")  # within the tolerance
    assert d["promoted"] is True and activated == [made]
    made, d = decide("manual", 0.90, 0.60, "c")
    assert d["promoted"] is False and "--promote manual" in d["why"] and activated == ["v3"]


def test_read_routes_show_names_not_server_paths(admin_app, registry, spread_model_dir, tmp_path):
    """/v1/models showed imported_from and base_model paths, jobs and their logs staging paths, a 404 the
    registry's path (issue 29)."""
    root = str(registry.root.resolve())
    job = registry.root / ".jobs" / "20250101-000000-abcdef"
    job.mkdir(parents=True)
    (job / "job.json").write_text(json.dumps({
        "id": job.name, "status": "failed", "base_model": "/srv/encoders/kc-electra", "params": {},
        "data": {"train_rows": 3}, "error": f"the training process exited with status 1. Last lines: saved {root}/.staging-x/m"}))
    (job / "train.log").write_text(f"writing {root}/.staging-x/model.onnx\nloading /home/me/runs/pretrain/discriminator\n")
    with admin_app() as c:
        listing = c.get("/v1/models").text
        record, log = c.get(f"/v1/jobs/{job.name}").text, c.get(f"/v1/jobs/{job.name}/log").text
        jobs = c.get("/v1/jobs").text
        missing = c.post("/v1/models/v9/activate").json()["detail"]
    assert str(spread_model_dir.resolve()) not in listing and spread_model_dir.name in listing
    for shown in (listing, record, log, jobs, missing):
        assert root not in shown and "/srv/" not in shown and "/home/" not in shown, shown
    assert "kc-electra" in record and "model.onnx" in log and "discriminator" in log
    assert missing.startswith("no version v9 in models")


def test_every_registry_event_an_admin_causes_names_them(admin_app, registry, spread_model_dir, tmp_path):
    """The registry's events said "POST /v1/models/v1/activate" but not who (issue 59): an activation and a
    delete name their caller: a user by their token's name, the key holder `api-key`."""
    from labelstore import open_store, users

    other = tmp_path / "other"
    shutil.copytree(spread_model_dir, other)
    (other / "note.txt").write_text("changed")
    assert registry.register_folder(other) == ("v2", True)
    engine = open_store(f"sqlite:///{tmp_path / 'app.db'}")
    boss = users.add_user(engine, "boss", "admin")
    engine.dispose()
    with admin_app(api_key="k") as c:
        assert c.post("/v1/models/v2/activate", headers={"Authorization": f"Bearer {boss}"}).status_code == 200
        last = registry.events()[-1]
        assert (last["event"], last["version"], last["by"]) == ("activated", "v2", "boss")
        assert c.post("/v1/models/v1/activate", headers={"Authorization": "Bearer k"}).status_code == 200
        assert registry.events()[-1]["by"] == users.API_KEY
        assert c.delete("/v1/models/v2", headers={"Authorization": f"Bearer {boss}"}).status_code == 200
        last = registry.events()[-1]
        assert (last["event"], last["by"]) == ("deleted", "boss")
    registry.log("started")  # the server on its own: no one
    assert "by" not in registry.events()[-1]
