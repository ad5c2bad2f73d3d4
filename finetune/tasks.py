"""k-fold's task: what a kind of labels does with the folds' out-of-fold probabilities, decided once from the
label space (textdata/labels.py) and carried as a value, so finetune/kfold.py has no kind branches.

A task answers, for its kind: a fold's scores and its printed line, the report (folds, baseline, blend, what the
model learned), the nested calibration, the out-of-domain detector, the held-out rows, what the final model folder
carries besides the model, the outputs and pictures, the drift reference and the printed table.
Single-label: finetune/report.py's SingleLabelTask; multi-label: finetune/multilabel_run.py's MultiLabelTask.
A third kind (hierarchical labels, abstain as a class) is a third class here, not a branch in k-fold.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from finetune.multilabel_run import MultiLabelTask
from finetune.report import SingleLabelTask


class Task(Protocol):
    """What finetune/kfold.py asks of a kind of labels (see the module's docstring)."""

    pictures: str  # the kind's picture files, as the end of a run names them
    issues: object  # its label-issue finder (finetune/label_issues.py)
    cools_final: bool  # whether --calibration-share cools its calibration (finetune/sharpness.py)

    def fold_scores(self, data, targets, train_idx, val_idx, proba, seed) -> tuple[np.ndarray, dict, dict]: ...
    def fold_line(self, k: int, saved: dict) -> str: ...
    def rows_kind(self, data) -> str: ...
    def cv_report(self, cfg, got, data, recorded: dict, prep, device) -> tuple[dict, np.ndarray | None]: ...
    def calibration(self, got, report: dict, blend_oof, data, target, delta) -> tuple[dict, np.ndarray, np.ndarray]: ...
    def out_of_domain(self, report: dict, data, fold_of: np.ndarray, calibrated: np.ndarray): ...
    def holdout_entry(self, out: Path, data, held, cfg, report: dict) -> dict: ...
    def score_final_holdout(self, report: dict, held, proba: np.ndarray, data) -> None: ...
    def final_extras(self, folder: Path, out: Path, data, held, proba, cfg, report: dict) -> dict | None: ...
    def write_outputs(self, out, cfg, data, oof, base_oof, blend_oof, fold_of, report, histories,
                      held=None) -> None: ...
    def pictures_of(self, out: Path, section: dict, before: np.ndarray, after: np.ndarray, data) -> None: ...
    def reference(self, folder: Path, served_oof: np.ndarray, calibrated_oof: np.ndarray): ...
    def summary_table(self, report: dict) -> str: ...
    def extra_files(self, final: bool, held) -> str: ...


def task_for(space) -> Task:
    """The task of a label space, picked once (k-fold's prepare)."""
    return space.pick(SingleLabelTask, MultiLabelTask)(space)
