"""The files a model version brings, trusted as they come no more (issue 40): a malformed reference.json
leaves drift off for its own version with a note naming the field, and /metrics and /v1/monitor answering for
all (M2); one unreadable version.json is listed and named, never a 500, a traceback or a failed start (M3);
registering a folder copies plain files only (links to system files, link loops, devices refused); "Review
'not sure' answers" of a multi-label model keeps the answered set (M6)."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from app_testkit import two_version_registry
from multilabel_fixture import ML_LABELS
from starlette.testclient import TestClient
from test_app_audit_multilabel import SETS, ml_pred
from test_app_monitor import LABELS, FakeClf, FakeServed, feed, traffic

from app.config import Config
from app.http.metrics import Metrics
from app.labeling.review_queue import ReviewQueue, start_session
from app.labeling.sessions import SessionStore
from app.monitoring.monitor import Monitor
from app.server import create_app, load_classifier
from app.versions.models import main as models_cli
from app.versions.registry import Registry, RegistryError
from app.versions.trainset import build
from serving.engine import Prediction
from textdata.drift import REFERENCE_FILE
from textdata.errors import ModelError

GOOD = {"source": "out-of-fold", "class_mix": {"dream": 50, "error": 30, "memo": 20},
        "confidence": {"counts": [0, 0, 0, 0, 10, 20, 20, 20, 20, 10]},
        "length": {"counts": [0, 10, 20, 30, 20, 10, 10, 0, 0, 0]}}
BAD_REFERENCES = {  # what the field is, and what the note must name
    "class_mix as a list": ({**GOOD, "class_mix": ["dream", "error", "memo"]}, "class_mix"),
    "class_mix as a string": ({**GOOD, "class_mix": "dream"}, "class_mix"),
    "a count as a string": ({**GOOD, "class_mix": {"dream": "50", "error": 30}}, "class_mix['dream']"),
    "wrong-length counts": ({**GOOD, "confidence": {"counts": [1, 2, 3]}}, "confidence.counts"),
    "counts as a string": ({**GOOD, "length": {"counts": "0123456789"}}, "length.counts"),
    "NaN": (json.dumps(GOOD).replace('"dream": 50', '"dream": NaN'), "class_mix['dream']"),
    "Infinity": (json.dumps(GOOD).replace("[0, 10, 20, 30", "[0, Infinity, 20, 30"), "length.counts[1]"),
    "a negative count": ({**GOOD, "confidence": {"counts": [-5, 0, 0, 0, 10, 20, 20, 20, 20, 10]}},
                         "confidence.counts[0]"),
    "a list, not an object": ([1, 2], "JSON object"),
}


def test_a_malformed_reference_turns_drift_off_for_its_version_only(tmp_path):
    """Before: a list class_mix raised AttributeError in every snapshot, so /metrics and /v1/monitor answered
    500 for every version until a restart, also after rolling back."""
    good = tmp_path / "v1"
    good.mkdir()
    (good / REFERENCE_FILE).write_text(json.dumps(GOOD))
    monitor, rng = Monitor(None, size=200), np.random.default_rng(7)
    feed(monitor, FakeServed(FakeClf(good, LABELS), "v1"), rng, 100)
    for i, (spec, _) in enumerate(BAD_REFERENCES.values()):
        folder = tmp_path / f"v{i + 2}"
        folder.mkdir()
        (folder / REFERENCE_FILE).write_text(spec if isinstance(spec, str) else json.dumps(spec))
        feed(monitor, FakeServed(FakeClf(folder, LABELS), f"v{i + 2}"), rng, 50)
    feed(monitor, FakeServed(FakeClf(good, LABELS), "v1"), rng, 50)  # rolled back: v1 serves again
    snapshot = monitor.snapshot()
    metrics = Metrics()
    metrics.set_drift(snapshot)  # what /metrics does
    assert b'app_drift{kind="class_mix",version="v1"}' in metrics.render()
    assert snapshot["versions"]["v1"]["drift"] is not None and snapshot["versions"]["v1"]["n"] == 150
    for i, (what, (_, field)) in enumerate(BAD_REFERENCES.items()):
        v = snapshot["versions"][f"v{i + 2}"]
        assert v["drift"] is None and v["n"] == 50 and v["reference"] is None, what
        assert REFERENCE_FILE in v["reference_note"] and field in v["reference_note"], (what, v["reference_note"])
    json.dumps(monitor.report())  # /v1/monitor: plain JSON (NaN would not be)
    monitor.close()


def test_a_reference_shows_only_its_checked_fields(tmp_path):
    (tmp_path / REFERENCE_FILE).write_text(json.dumps({**GOOD, "junk": "x" * 100_000, "source": "y" * 5000}))
    monitor = Monitor(None)
    monitor.observe(FakeServed(FakeClf(tmp_path, LABELS), "v1"), *traffic(np.random.default_rng(1), 5), 32)
    monitor.flush()
    ref = monitor.report()["versions"]["v1"]["reference"]
    assert "junk" not in ref and len(ref["source"]) <= 80 and ref["class_mix"]["dream"] == 50
    assert len(json.dumps(ref)) < 2000


# ---------------------------------------------------------------- M3: one unreadable version.json
@pytest.fixture
def two_versions(spread_model_dir, tmp_path):
    return two_version_registry(spread_model_dir, tmp_path)


@pytest.mark.parametrize("broken", ["{not json", "[1, 2]", "null", '"v2"'])
def test_an_unreadable_version_json_is_listed_and_named_and_the_server_starts(two_versions, spread_model_dir,
                                                                               tmp_path, capsys, broken):
    """Before: GET /v1/models 500, `python -m app models list` a traceback, every start exit 2 naming no file."""
    from app.__main__ import model_to_serve

    (two_versions.root / "v2" / "version.json").write_text(broken)
    listing = {m["version"]: m for m in two_versions.listing()}
    assert set(listing) == {"v1", "v2"} and listing["v1"]["source"] == "imported"
    assert "v2/version.json is unreadable" in listing["v2"]["unreadable"]
    assert models_cli(["list", "--models-dir", str(two_versions.root)]) == 0
    assert "v2/version.json is unreadable" in capsys.readouterr().out
    with pytest.raises(RegistryError, match="v2/version.json is unreadable"):
        two_versions.meta("v2")
    cfg = Config(model=str(spread_model_dir), ui=False, data_dir=tmp_path, models_dir=two_versions.root)
    version, clf = model_to_serve(cfg, two_versions)  # a start with the same --model: the registered v1
    assert version == "v1"
    with TestClient(create_app(cfg, clf, registry=two_versions, version=version), base_url="http://127.0.0.1") as c:
        r = c.get("/v1/models")
        assert r.status_code == 200, r.text
        assert {m["version"] for m in r.json()["versions"]} == {"v1", "v2"}
        assert c.get("/v1/model").json()["version"] == "v1"


def test_an_unreadable_active_version_json_still_serves_under_its_version_name(two_versions, tmp_path):
    (two_versions.root / "v1" / "version.json").write_text("{not json")
    cfg = Config(ui=False, data_dir=tmp_path, models_dir=two_versions.root)
    app = create_app(cfg, load_classifier(cfg, two_versions.path("v1")), registry=two_versions, version="v1")
    with TestClient(app, base_url="http://127.0.0.1") as c:
        assert c.get("/v1/model").json()["name"] == "v1"


# ---------------------------------------------------------------- registering a folder: plain files only
def _with(spread_model_dir, tmp_path, name, make):
    folder = tmp_path / f"given-{name}"
    shutil.copytree(spread_model_dir, folder)
    make(folder)
    return folder


@pytest.mark.parametrize("name, make, says", [
    ("system-file", lambda f: (f / REFERENCE_FILE).symlink_to("/etc/passwd"), "reference.json: a symbolic link"),
    ("loop", lambda f: (f / "loop").symlink_to(".."), "loop: a symbolic link"),
    ("zero-device", lambda f: (f / "weights.bin").symlink_to("/dev/zero"), "weights.bin: a symbolic link"),
    ("fifo", lambda f: os.mkfifo(f / "pipe"), "pipe: not a regular file"),
    ("linked-config", lambda f: ((f / "config.json").rename(f / "real.json"),
                                 (f / "config.json").symlink_to(f / "real.json")), "config.json: a symbolic link"),
])
def test_registering_a_folder_refuses_links_and_devices(spread_model_dir, tmp_path, name, make, says):
    """Before: /etc/passwd was copied into the version (and shown back), `loop -> ..` a RecursionError,
    `-> /dev/zero` filled the disk."""
    reg = Registry(tmp_path / "models")
    folder = _with(spread_model_dir, tmp_path, name, make)
    with pytest.raises(RegistryError, match=says):
        reg.register_folder(folder)
    assert reg.names() == [] and not list(reg.root.glob(".staging-*"))


def test_a_file_over_the_cap_is_refused_and_a_plain_folder_registers(spread_model_dir, tmp_path, monkeypatch):
    import textdata.plain_files as plain

    reg = Registry(tmp_path / "models")
    folder = _with(spread_model_dir, tmp_path, "big", lambda f: (f / "sub").mkdir())
    (folder / "sub" / "notes.txt").write_text("kept")
    monkeypatch.setattr(plain, "MAX_FILE_BYTES", 1000)
    with pytest.raises(RegistryError, match=r"[^/]+: [0-9,]+ bytes, over the 1,000 a model file may take"):
        reg.register_folder(folder)
    monkeypatch.undo()
    assert reg.register_folder(folder) == ("v1", True)
    assert (reg.path("v1") / "sub" / "notes.txt").read_text() == "kept"
    assert reg.register_folder(folder) == ("v1", False)  # the same content is found again by its digest


# ---------------------------------------------------------------- M6: "not sure" answers of a multi-label model
def test_not_sure_answers_of_a_multi_label_model_open_a_set_session(tmp_path):
    """Before: a single-label session whose Enter recorded the top label alone (`memo`), so the next retrain
    learned the text was not `dream`."""
    queue = ReviewQueue(tmp_path / "review", 10)
    unsure = [ml_pred({"dream", "memo"}), ml_pred({"error"})]
    for p in unsure:
        p.confident = False
    assert queue.add(["꿈에서 메모 봤다", "에러 났다"], unsure, "v1") == 2
    queue = ReviewQueue(tmp_path / "review", 10)  # the sets survive a restart (the journal)
    store = SessionStore(tmp_path / "label")
    session = start_session(queue, store, ML_LABELS, np.full(len(ML_LABELS), 0.5), SETS)
    assert session.multi_label and len(queue) == 0
    rows = {session.texts[r]: r for r in range(len(session.texts))}
    assert session.suggested_set(rows["꿈에서 메모 봤다"]) == [x for x in ML_LABELS if x in {"dream", "memo"}]
    while (row := session.current()) is not None:  # Enter on each: the suggestion accepted
        assert session.decide(row, session.suggested_set(row))
    table = build(tmp_path / "label", None, 0.0, SETS).train
    got = {t: set(lab.split(";")) for t, lab in zip(table["text"], table["label"])}
    assert got == {"꿈에서 메모 봤다": {"dream", "memo"}, "에러 났다": {"error"}}


def test_a_queue_of_both_kinds_gives_the_served_kind_first(tmp_path):
    queue = ReviewQueue(tmp_path / "review", 10)
    single = Prediction("memo", 0.4, {"memo": 0.4, "dream": 0.35, "error": 0.25}, confident=False)
    multi = ml_pred({"dream"})
    multi.confident = False
    queue.add(["single-label answer"], [single], "v1")
    queue.add(["set answer"], [multi], "v2")
    store = SessionStore(tmp_path / "label")
    first = start_session(queue, store, ML_LABELS, None, SETS)
    assert first.multi_label and first.texts == ["set answer"]
    second = start_session(queue, store, ML_LABELS, None, SETS)
    assert not second.multi_label and second.texts == ["single-label answer"]
    assert second.decide(0, second.suggestion[0])  # accepting works
    assert start_session(queue, store, ML_LABELS, None, SETS) is None


def test_too_few_rows_for_10000_classes_is_a_short_message(tmp_path):
    """Before: the refusal named every one of 10,000 classes (0.5 MB)."""
    import pandas as pd

    from app.versions.trainset import TrainingDataError, TrainingSet, check
    from finetune.data import load_labeled

    labels = [f"class-{i:05d}" for i in range(10_000)]
    table = pd.DataFrame({"text": [f"text {i}" for i in range(10_002)], "label": ["big"] * 2 + labels})
    with pytest.raises(TrainingDataError, match="and 9,990 more in the training table") as e:
        check(TrainingSet(table, table.iloc[:0]), folds=2)
    assert len(str(e.value)) < 1000
    table.to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(ValueError, match="and 9,990 more. Add examples") as e:
        load_labeled(tmp_path / "t.csv", folds=2)
    assert len(str(e.value)) < 1000


def test_registering_a_folder_checks_its_label_names(spread_model_dir, tmp_path):
    """Issue 40: the registry took config.json's label names as they came (a NUL, U+202E, duplicates)."""
    def nul_label(folder):
        config = json.loads((folder / "config.json").read_text())
        config["id2label"]["1"] = "err\x00or"
        (folder / "config.json").write_text(json.dumps(config))

    reg = Registry(tmp_path / "models")
    with pytest.raises(ModelError, match=r"config.json: id2label\[1\] 'err\\x00or' holds the control character"):
        reg.register_folder(_with(spread_model_dir, tmp_path, "nul-label", nul_label))
    assert reg.names() == []
