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
                       r"|is_multi_label)|getattr\([^)]*multi_label|MULTI_LABEL|\"multi_label_classification\"")


@pytest.mark.parametrize("module", ["finetune/kfold.py", "finetune/label_issues.py", "serving/engine.py",
                                    "serving/decision.py", "finetune/tasks.py"])
def test_no_kind_branches_in_the_modules_the_kind_is_picked_for(module):
    code = [line for line in (ROOT / module).read_text(encoding="utf-8").splitlines()
            if not line.lstrip().startswith("#")]
    found = [line.strip() for line in code if KIND_TEST.search(line.split("#")[0])]
    assert not found, f"{module} tests the kind: {found}"


def test_the_pattern_sees_a_kind_branch():
    assert KIND_TEST.search("    if data.multi_label:") and KIND_TEST.search("x = a if ml else b")
    assert not KIND_TEST.search("    task = space.pick(SingleLabelTask, MultiLabelTask)")


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
