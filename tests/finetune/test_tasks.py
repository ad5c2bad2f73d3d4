"""One task per kind of labels (finetune/tasks.py), picked once from the label space, and the modules that used
to branch on the kind (issue 41): k-fold, label issues and the engine hold none now."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from finetune import label_issues as li
from finetune.multilabel_run import MultiLabelTask
from finetune.report import SingleLabelTask
from finetune.tasks import Task, task_for
from textdata.calibration import confident
from textdata.labels import LabelSpace

ROOT = Path(__file__).resolve().parents[2]
# A test of the kind: a condition on multi_label / ml / multi, `label_sep is None`, getattr of the kind, or the
# problem_type strings. Picking a value by the label space (`space.pick`) is not one.
KIND_TEST = re.compile(r"(\bif\b|\belse\b|\band\b|\bor\b|\bnot\b)[^#\n]*(multi_label|\bml\b|\bmulti\b|label_sep is (not )?None"
                       r"|is_multi_label)|getattr\([^)]*multi_label|\bMULTI_LABEL\b|\"multi_label_classification\"")


# Reading the kind a JSON file of ours records, or comparing with the problem_type string, outside the label space.
KIND_READ = re.compile(r"""(\.get\(|\[)\s*["']multi_label["']|["']multi_label_classification["']|\bMULTI_LABEL\b""")
PACKAGES = ("textdata", "serving", "finetune", "baseline")
LABEL_SPACE = "textdata/labels.py"  # the one module that may test the kind
# Flag parsing: --multi-label's own checks (its separator, the flags it excludes), before a label space is built.
FLAG_CHECKS = {"finetune/config.py": 2}


def code_lines(path: Path) -> list[tuple[int, str, str]]:
    """(line number, the line with every string literal emptied, the line with its strings) for the lines of
    `path` outside docstrings, comments cut: a message that says "multi-label" tests nothing."""
    import ast
    import io
    import tokenize

    text = path.read_text(encoding="utf-8")
    docs = set()
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            docs.update(range(body[0].lineno, body[0].end_lineno + 1))
    full = [list(line) for line in text.splitlines()]
    blank = [list(line) for line in text.splitlines()]
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        (r0, c0), (r1, c1) = tok.start, tok.end
        if tok.type == tokenize.COMMENT:
            del full[r0 - 1][c0:], blank[r0 - 1][c0:]
        elif tok.type == tokenize.STRING:  # emptied in `blank`, the quotes kept: "..." -> ""
            for r in range(r0, r1 + 1):
                a, b = (c0 if r == r0 else 0), (c1 if r == r1 else len(blank[r - 1]))
                blank[r - 1][a:b] = [" "] * (b - a)
            blank[r0 - 1][c0], blank[r1 - 1][c1 - 1] = '"', '"'
    return [(n, "".join(blank[n - 1]), "".join(full[n - 1])) for n in range(1, len(full) + 1)
            if n not in docs and "".join(full[n - 1]).strip()]


def kind_tests(module: str) -> list[str]:
    return [f"{module}:{n}: {code.strip()}" for n, code, full in code_lines(ROOT / module)
            if KIND_TEST.search(code) or KIND_READ.search(full)]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_outside_the_label_space_tests_the_kind(package):
    """Issue 41: the kind is decided once, in the label space (textdata/labels.py), and carried as a value (a
    task, a decision, a head, a calibrator class, `space.pick`); no other module of these packages tests it by a
    bool, a string or getattr."""
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        module = path.relative_to(ROOT).as_posix()
        if module == LABEL_SPACE:
            continue
        hits = kind_tests(module)
        if len(hits) > FLAG_CHECKS.get(module, 0):
            found += hits
    assert not found, "tests of the kind outside the label space:\n" + "\n".join(found)


@pytest.mark.parametrize("module", ["finetune/kfold.py", "finetune/label_issues.py", "serving/engine.py",
                                    "serving/decision.py", "finetune/tasks.py"])
def test_no_kind_branches_in_the_modules_the_kind_is_picked_for(module):
    assert not kind_tests(module)


def test_the_pattern_sees_a_kind_branch(tmp_path):
    assert KIND_TEST.search("    if data.multi_label:") and KIND_TEST.search("x = a if ml else b")
    assert not KIND_TEST.search("    task = space.pick(SingleLabelTask, MultiLabelTask)")
    assert KIND_READ.search('multi = spec.get("multi_label")') and KIND_READ.search('if x == "multi_label_classification"')
    assert not KIND_READ.search('return {"multi_label": True}')  # writing the key is not testing it
    probe = tmp_path / "probe.py"
    probe.write_text('"""A docstring: if multi-label, or not."""\n\nx = f"not multi-label" if y else z  # or multi\n'
                     'if cfg.multi_label:\n    pass\n', encoding="utf-8")
    found = [code for _, code, _ in code_lines(probe) if KIND_TEST.search(code)]
    assert found == ["if cfg.multi_label:"]


def test_the_task_is_picked_once_from_the_label_space():
    single, multi = LabelSpace.of(["a", "b"]), LabelSpace.of(["a", "b"], multi_label=True, sep="|")
    assert isinstance(task_for(single), SingleLabelTask) and isinstance(task_for(multi), MultiLabelTask)
    assert task_for(multi).issues == li.MultiLabelIssues("|")  # the data's separator reaches label_issues.csv
    assert isinstance(task_for(single).issues, li.SingleLabelIssues)
    for task in (task_for(single), task_for(multi)):  # each answers the whole protocol
        missing = [name for name in Task.__dict__ if not name.startswith("_") and not hasattr(task, name)]
        assert not missing, f"{type(task).__name__} lacks {missing}"


def test_one_confident_rule_for_both_kinds():
    """The single-label rule (the top probability clears its label's threshold) is the multi-label one (every
    asserted label clears its own) with the top label asserted; a NaN row is never confident."""
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(4), 200)
    probs[7] = np.nan
    t = np.array([0.3, 0.5, 0.4, 0.6])
    best = np.nan_to_num(probs, nan=-1).argmax(1)
    old = probs[np.arange(len(probs)), best] >= t[best]
    assert (confident(probs, t) == old).all() and not confident(probs, t)[7]
    asserted = probs > 0.25
    assert (confident(probs, t, asserted) == ~(asserted & (probs < t)).any(1)).all()
    assert confident(probs, None).all()


def test_each_kind_carries_its_head_calibrator_and_answer_columns():
    """What used to be a branch on the kind is a value picked once from the label space: training's head
    (finetune/heads.py), the calibrator class, the scored file's answer columns (serving/decision.py)."""
    from types import SimpleNamespace

    import torch

    from finetune.heads import Sigmoid, Softmax, head_of
    from serving.decision import LabelSet, TopLabel
    from textdata.calibration import Calibrator, LabelCalibrator, calibrator_for
    from textdata.labels import MULTI_LABEL

    single = SimpleNamespace(config=SimpleNamespace(id2label={0: "a", 1: "b"}, problem_type=None))
    multi = SimpleNamespace(config=SimpleNamespace(id2label={0: "a", 1: "b"}, problem_type=MULTI_LABEL))
    assert head_of(single) is Softmax and head_of(multi) is Sigmoid
    z = torch.tensor([[2.0, -1.0]])
    assert torch.allclose(Softmax.squash(z).sum(1), torch.ones(1)) and torch.allclose(Sigmoid.squash(z), torch.sigmoid(z))
    assert Softmax.pad(torch.tensor([1]), 2).tolist() == [1, -100, -100]
    assert Sigmoid.pad(torch.tensor([[1.0, 0.0]]), 1).tolist() == [[1.0, 0.0], [-1.0, -1.0]]
    assert calibrator_for(LabelSpace.of(["a"])) is Calibrator and calibrator_for(LabelSpace.of(["a"], True)) is LabelCalibrator
    p = np.array([[0.7, 0.2]])
    assert np.allclose(LabelCalibrator("temperature", temperature=(1.0, 1.0))(p), p)  # a sigmoid per label, not a softmax
    assert np.allclose(Calibrator("temperature", temperature=1.0)(p), p / p.sum())
    assert TopLabel.columns == ("pred_label", "pred_score", "confident") and LabelSet.columns == ("pred_labels", "confident")
