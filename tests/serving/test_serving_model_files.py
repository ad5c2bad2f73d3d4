"""A model folder's own JSON files checked at load, each refused in one line naming the file and the field
(issue 40, L1): thresholds.json's separator against the label names, calibration.json's kind, shape and
values (JSON numbers only, positive weights), and export_report.json bounded, since /v1/model shows it."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from multilabel_fixture import ML_LABELS

from serving.calibration import ServedCalibration
from serving.engine import Classifier
from serving.model_folder import ModelFolder
from serving.multilabel import load_thresholds
from textdata.calibration import read_calibration
from textdata.errors import ModelError
from textdata.labels import LabelSpace

LABELS = ["dream", "error", "memo"]


def _thresholds(folder, **fields) -> None:
    spec = {"labels": LABELS, "thresholds": [0.4, 0.5, 0.6], "label_sep": ";", **fields}
    (folder / "thresholds.json").write_text(json.dumps(spec))


@pytest.mark.parametrize("fields, says", [
    # the label space's one separator rule (textdata/labels.py sep_problem), with the model's label names
    ({"label_sep": "e"}, r"field 'label_sep': label separator 'e' holds 'e': use punctuation"),
    ({"label_sep": "x" * 1_000_000}, r"label separator 'xxxxxxxxxxxxxxxxxxxx'… is 1,000,000 characters long"),
    ({"label_sep": "\n"}, r"label separator '\\n' holds '\\n'"),
    ({"label_sep": ";\x00"}, r"label separator ';\\x00' holds '\\x00'"),
    ({"label_sep": " | "}, r"label separator ' \| ' holds ' '"),
    ({"label_sep": 5}, "label separator 5 is not a text"),
    ({"thresholds": [0.4, "0.5", 0.6]}, "threshold '0.5' for label 'error' is not a probability"),
    ({"thresholds": [0.4, True, 0.6]}, "threshold True for label 'error'"),
])
def test_thresholds_json_separator_and_values_are_checked(tmp_path, fields, says):
    _thresholds(tmp_path, **fields)
    with pytest.raises(ModelError, match=says) as e:
        load_thresholds(tmp_path, LABELS)
    assert "thresholds.json" in str(e.value) and len(str(e.value)) < 400


@pytest.mark.parametrize("text", ["[1, 2]", "null", '"labels"'])
def test_thresholds_json_not_an_object_names_the_file(tmp_path, text):
    (tmp_path / "thresholds.json").write_text(text)
    with pytest.raises(ModelError, match="thresholds.json: expected"):
        load_thresholds(tmp_path, LABELS)


def test_a_label_holding_the_default_separator_is_refused_without_thresholds_json(tmp_path):
    with pytest.raises(ModelError, match=r"config.json .*label separator ';' occurs in the label name 'a;b'"):
        load_thresholds(tmp_path, ["a;b", "c"])
    _thresholds(tmp_path)
    assert load_thresholds(tmp_path, LABELS).label_sep == ";"  # what k-fold writes still loads
    names = ["x/1", "x/2", "y"]
    (tmp_path / "thresholds.json").write_text(json.dumps({"labels": names, "thresholds": [0.5] * 3, "label_sep": "/"}))
    with pytest.raises(ModelError, match=r"thresholds.json, field 'label_sep': label separator '/' occurs in the "
                                         r"label name 'x/1' \(and 1 more\)"):
        load_thresholds(tmp_path, names)


def _calibration(folder, spec) -> None:
    (folder / "calibration.json").write_text(spec if isinstance(spec, str) else json.dumps(spec))


SINGLE = {"method": "temperature", "temperature": 1.5, "problem_type": "single_label_classification",
          "labels": LABELS, "threshold": 0.6, "fitted_on": "model"}


@pytest.mark.parametrize("spec, says", [
    ("[1, 2]", "expected a JSON object, got list"),
    ("null", "expected a JSON object, got NoneType"),
    ({**SINGLE, "temperature": "2"}, "temperature '2' is not a finite number > 0"),
    ({**SINGLE, "temperature": True}, "temperature True is not a finite number"),
    ({**SINGLE, "method": "vector", "params": {"weights": [1.0, -2.0, 1.0], "bias": [0, 0, 0]}},
     r"params.weights\[1\] -2.0 is not a finite number > 0"),
    ({**SINGLE, "method": "vector", "params": {"weights": [1.0, 1.0], "bias": [0, 0, 0]}},
     "params.weights: need a list of 3 numbers"),
    ({**SINGLE, "threshold": "0.5"}, "threshold '0.5' is not a finite number in"),
    ({**SINGLE, "threshold": {"dream": 0.5}}, "threshold: no value for label 'error'"),
    ({**SINGLE, "labels": "dream"}, "labels: fitted for labels 'dream'"),
    ({**SINGLE, "fitted_on": "m" * 20_000_000}, "20,000,[0-9]+ bytes, over the 4 MB it may take"),
    ({**SINGLE, "fitted_on": "m" * 100}, "fitted_on 'mmmm"),
    ({**SINGLE, "threshold_scope": "s" * 1000}, "threshold_scope 'sss"),
    ({**SINGLE, "nested": {"method_why": "w" * 20_000}}, "nested.method_why: 20,000 characters"),
    ({**SINGLE, "estimated_coverage": 7}, "estimated_coverage 7 is not a finite number in"),
    ({**SINGLE, "problem_type": "regression"}, "problem_type 'regression'"),
])
def test_calibration_json_is_refused_naming_the_file_and_the_field(tmp_path, spec, says):
    """Before: [1,2] and null were AttributeErrors naming no file; "2", a negative weight and any long text
    were taken, and the text shown by every GET /v1/model."""
    _calibration(tmp_path, spec)
    with pytest.raises(ModelError, match=says) as e:
        ServedCalibration.load(tmp_path, LABELS, blend_served=False, space=LabelSpace.of(LABELS))
    assert "calibration.json: unreadable calibration" in str(e.value) and len(str(e.value)) < 400


def test_calibration_of_the_other_kind_is_refused_and_only_checked_fields_are_shown(tmp_path):
    _calibration(tmp_path, {k: v for k, v in SINGLE.items() if k != "problem_type"})  # older files have none
    with pytest.raises(ValueError, match="problem_type 'single_label_classification': fitted for a single-label "
                                         "model, this folder's is multi-label"):
        read_calibration(tmp_path, LABELS, LabelSpace.of(LABELS, multi_label=True))
    multi = {**SINGLE, "problem_type": "multi_label_classification", "temperature": [1.0, 2.0, 0.5]}
    _calibration(tmp_path, multi)
    with pytest.raises(ValueError, match="fitted for a multi-label model, this folder's is single-label"):
        read_calibration(tmp_path, LABELS, LabelSpace.of(LABELS))
    _calibration(tmp_path, {**SINGLE, "junk": "j" * 100_000, "nested": {"ece_after": 0.02, "folds": 5}})
    info = ServedCalibration.load(tmp_path, LABELS, blend_served=False, space=LabelSpace.of(LABELS)).info()
    assert "junk" not in json.dumps(info) and info["temperature"] == 1.5 and info["threshold"] == 0.6
    assert info["nested"] == {"ece_after": 0.02, "folds": 5} and len(json.dumps(info)) < 1000


@pytest.fixture(scope="module")
def ml_copy(multilabel_classifier_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("ml-files") / "m"
    shutil.copytree(multilabel_classifier_dir, folder)
    return folder


def test_a_single_label_calibration_on_a_multi_label_folder_is_refused_at_load(ml_copy):
    saved = (ml_copy / "calibration.json").read_bytes() if (ml_copy / "calibration.json").exists() else None
    try:
        _calibration(ml_copy, {**SINGLE, "labels": ML_LABELS})
        with pytest.raises(ModelError, match="calibration.json: .*problem_type .* this folder's is multi-label"):
            Classifier.load(ml_copy, provider="torch")
    finally:
        (ml_copy / "calibration.json").unlink()
        if saved is not None:
            (ml_copy / "calibration.json").write_bytes(saved)


@pytest.mark.parametrize("report, says", [
    ({"passed": True, "warnings": ["w" * 20_000_000]}, r"export_report.json: 20,000,[0-9]+ bytes, over the 4 MB"),
    ({"passed": True, "warnings": ["w" * 10_000]}, r"export_report.json: warnings.0: 10,000 characters"),
    ({"passed": True, "files": {"model.onnx": {"why": list(range(5000))}}}, r"files.model.onnx.why: over 1,000"),
    ([1, 2], "export_report.json: expected a JSON object"),
    ({"cpu_default": "model.onnx"}, "export_report.json: cpu_default: expected an object"),
])
def test_an_export_report_over_its_bounds_is_refused_naming_the_field(ml_copy, report, says):
    """Before: every GET /v1/model echoed a 20 MB string from the folder."""
    try:
        (ml_copy / "export_report.json").write_text(json.dumps(report))
        with pytest.raises(ModelError, match=says):
            ModelFolder.read(ml_copy)  # what Classifier.load reads first
    finally:
        (ml_copy / "export_report.json").unlink()


def test_a_checked_folder_serves_and_shows_little(ml_copy):
    (ml_copy / "export_report.json").write_text(json.dumps({"passed": True, "source": "/srv/x/model",
                                                            "warnings": ["w" * 3000]}))
    try:
        clf = Classifier.load(ml_copy, provider="torch")
    finally:
        (ml_copy / "export_report.json").unlink()
    assert len(json.dumps(clf.info(), default=str)) < 8000 and np.isfinite(clf.thresholds).all()
    assert clf.label_sep == ";"


def _relabel(src, dst, names) -> None:
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    config["id2label"] = {str(i): n for i, n in enumerate(names)} if isinstance(names, list) else names
    config["label2id"] = {}
    (dst / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("names, says", [
    (["dream", "x" * 20_000_000, "memo"], r"config.json: [0-9,]+ bytes, over the 4 MB a config.json may take"),
    (["dream", "e" * 5000, "memo"], r"config.json: id2label\[1\] 'eeee.*\.\.\. is 5000 characters long"),
    (["dream", "bell\x07", "memo"], r"id2label\[1\] 'bell\\x07' holds the control character U\+0007"),
    (["dream", "nul\x00", "memo"], r"id2label\[1\] 'nul\\x00' holds the control character U\+0000"),
    (["dream", "\u202ememo", "memo"], r"id2label\[1\] '\\u202ememo' holds the control character U\+202E"),
    (["dream", "=HYPERLINK(1)", "memo"], r"id2label\[1\] '=HYPERLINK\(1\)' starts like a spreadsheet formula"),
    (["dream", "memo", "memo"], r"id2label\[1\] and id2label\[2\] are both 'memo'"),
    (["dream", 5, "memo"], r"id2label\[1\] is a int, not a text"),
    ({"0": "dream", "1": "error", "7": "memo"}, r"id2label's ids must be 0 to 2"),
])
def test_label_names_in_config_json_follow_the_label_rule(tiny_classifier_dir, tmp_path, names, says):
    """Issue 40: a model folder's own label names were taken as they came (20 MB names, NUL, U+202E, duplicates),
    then shown in the UI, written to CSV files and echoed by /v1/model."""
    _relabel(tiny_classifier_dir, tmp_path / "m", names)
    with pytest.raises(ModelError, match=says) as e:
        ModelFolder.read(tmp_path / "m")
    assert str(tmp_path / "m" / "config.json") in str(e.value) and len(str(e.value)) < 400


@pytest.mark.parametrize("name, target", [("config.json", "real.json"), ("export_report.json", "/etc/passwd"),
                                          ("tokenizer.json", "tokenizer.real.json")])
def test_a_linked_file_in_a_folder_loaded_directly_is_refused(tiny_classifier_dir, tmp_path, name, target):
    """Issue 40: the registry refused links, but loading --model directly (serving.score, export, the engine)
    still followed a config.json that is a link."""
    folder = tmp_path / "m"
    shutil.copytree(tiny_classifier_dir, folder)
    if not target.startswith("/"):
        (folder / name).rename(folder / target)
    else:
        (folder / name).unlink(missing_ok=True)
    (folder / name).symlink_to(target if target.startswith("/") else folder / target)
    with pytest.raises(ModelError, match=rf"m/{name}: a symbolic link; .*`cp -rL FOLDER COPY`"):
        ModelFolder.read(folder)
    ModelFolder.read(tiny_classifier_dir)  # the plain folder loads
