"""The training job's own process: k-fold with --final, the gated INT8 export, the evaluation-slice scores.

    python -m app.versions.train_child JOB_DIR [--lifeline FD]   (started by the server, app/versions/jobs.py; never imported by it)

The server never trains: it writes JOB_DIR/spec.json and the tables and starts this module as a child
process. It runs the project's one training path (`finetune.kfold.run` on the k-fold config the server wrote
in spec.json, as `finetune/kfold.py ... --final` would build it)
and its one export path (`serving.export.run`, as `python -m serving.export --quantize`, gated on the
evaluation slice, or on the training rows when the slice is empty), both into the job's staging folder,
then scores the new model and the active one on the evaluation-slice rows neither trained on (app/versions/lineage.py).
A multi-label active model retrains multi-label (app/versions/jobs.py puts multi_label and label_sep in the k-fold
config and in the spec): the slice is then scored as label sets (multi-label macro-F1, micro-F1,
subset accuracy). On CPU it lowers its own priority
first. Progress (stage, fold, epoch, step, ETA) goes to JOB_DIR/progress.json; what it prints, to the
job's log. The server renames the staging folder into a version only after this process exits 0, so a
killed run leaves no version behind.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

from app.label_kinds import SINGLE, kind_of, space_from
from app.monitoring.monitor import answer_names
from app.versions.child_watch import LIFELINE_FLAG, watch_lifeline
from app.versions.lineage import shared_rows, write_hashes
from textdata.errors import exits_2_on_user_error
from textdata.labels import LabelSpace
from textdata.tables import read_table, write_json


class Progress:
    """progress.json: stage i of n (each fold, the final model, the export, the scoring), its step counts,
    the epoch, and an ETA from the time so far."""

    def __init__(self, path: Path, folds: int):
        self.path, self.stages, self.t0 = path, folds + 3, time.time()
        self.state = {"stage": "starting", "stage_index": 0, "stages": self.stages, "fold": None, "folds": folds,
                      "epoch": None, "step": 0, "steps": 0}
        self._last = 0.0
        self.write(force=True)

    def stage(self, name: str, index: int, **fields) -> None:
        self.state.update(stage=name, stage_index=index, step=0, steps=0, epoch=None, **fields)
        self.write(force=True)

    def kfold(self, event: dict) -> None:
        """One of finetune.kfold.run's progress events: a training step of a fold or of the final model."""
        if event["stage"] == "fold":
            name = f"fold {event['fold']}/{event['folds']}"
            if self.state["stage"] != name:
                self.stage(name, event["fold"] - 1, fold=event["fold"])
        elif event["stage"] == "final":
            if self.state["stage"] != "final model":
                self.stage("final model", self.stages - 3)
        else:
            return
        self.state.update(step=event["step"], steps=event["steps"], epoch=event["epoch"])
        self.write()

    def write(self, force: bool = False) -> None:
        now = time.time()
        if not force and now - self._last < 0.5:
            return
        self._last = now
        s = self.state
        within = s["step"] / s["steps"] if s["steps"] else 0.0
        done = min(1.0, (s["stage_index"] + within) / s["stages"])
        elapsed = now - self.t0
        eta = elapsed / done * (1 - done) if done > 0.02 else None
        s.update(percent=round(100 * done, 1), elapsed_s=round(elapsed, 1),
                 eta_s=None if eta is None else round(eta, 1), updated=round(now, 3))
        write_json(self.path, s)


def eval_scores(folder: Path, table: Path, space: LabelSpace = SINGLE) -> dict | None:
    """Scores of the model in `folder` on the evaluation slice read in the retrain's label `space`: macro-F1 and
    accuracy (labels it does not know count as errors); for label sets macro-F1 over labels, micro-F1 and
    subset accuracy."""
    from serving.engine import Classifier

    df = read_table(table)
    if df.empty:
        return None
    return space.pick(label_scores, multi_label_scores)(Classifier.load(folder), df, space)


def label_scores(clf, df, space: LabelSpace) -> dict:
    """The slice scored as one label per text."""
    from sklearn.metrics import accuracy_score, f1_score

    pred = [p.label for p in clf.predict(df["text"].tolist())]
    labels = sorted(set(df["label"]) | set(pred))
    return {"macro_f1": round(float(f1_score(df["label"], pred, labels=labels, average="macro", zero_division=0)), 4),
            "accuracy": round(float(accuracy_score(df["label"], pred)), 4), "rows": len(df)}


def multi_label_scores(clf, df, space: LabelSpace) -> dict:
    """The slice scored as label sets; a single-label model (the champion before a switch) answers sets of one."""
    from sklearn.metrics import f1_score
    from sklearn.preprocessing import MultiLabelBinarizer

    truth = [space.parse(c, f"the evaluation slice row {i + 1}") for i, c in enumerate(df["label"].fillna(""))]
    pred = [answer_names(p) for p in clf.predict(df["text"].tolist())]
    mlb = MultiLabelBinarizer(classes=sorted({n for s in truth + pred for n in s}))
    y, p = mlb.fit_transform(truth), mlb.transform(pred)
    return {"macro_f1": round(float(f1_score(y, p, average="macro", zero_division=0)), 4),
            "micro_f1": round(float(f1_score(y, p, average="micro", zero_division=0)), 4),
            "subset_accuracy": round(float((y == p).all(1).mean()), 4), "rows": len(df)}


def run(job: Path) -> dict:
    spec = json.loads((job / "spec.json").read_text(encoding="utf-8"))
    import torch

    if not torch.cuda.is_available():  # on a GPU the work is there; on CPU the API must keep its share
        os.nice(spec["nice"])
    from finetune import kfold
    from serving import export
    from serving.quiet import understood_messages_dropped
    from textdata.log_stream import StderrHandler

    logging.basicConfig(level=logging.WARNING, format="%(message)s", handlers=[StderrHandler()])
    logging.getLogger("serving").setLevel(logging.INFO)

    from finetune.config import config_from_json

    cfg = config_from_json(spec["kfold"])
    progress = Progress(job / "progress.json", cfg.folds)
    work, staging = Path(cfg.output), Path(spec["staging"])
    report = kfold.run(cfg, on_progress=progress.kfold)

    progress.stage("export", cfg.folds + 1)
    gate = job / "gate.csv"  # the evaluation slice, labels the new model knows; else the training rows
    ev = read_table(job / "eval.csv")
    space = space_from(spec)  # a multi-label retrain (app/versions/jobs.py put multi_label in the k-fold config)
    ev = ev[kind_of(space).gated(ev["label"], report["labels"])]
    train = read_table(job / "train.csv")
    train = train[train["label"].notna()] if cfg.teacher_column else train  # teacher rows: no gold label
    (ev if len(ev) else train[["text", "label"]]).to_csv(gate, index=False)
    with understood_messages_dropped():  # as `python -m serving.export` prints it
        exported = export.run(export.ExportConfig(model=work / "model", output=staging, quantize=True, eval_csv=gate))
    progress.stage("scoring", cfg.folds + 2)
    shutil.copy2(work / "report.json", staging / "report.json")
    (staging / "training").mkdir(exist_ok=True)
    shutil.copy2(job / "train.csv", staging / "training" / "train.csv")
    write_hashes(staging, read_table(job / "train.csv")["text"].astype(str))
    champion = spec.get("champion")
    # both scored on the slice rows neither trained on: an imported champion may have trained on the slice
    compared = {"the new version": staging, **({champion["version"]: Path(champion["folder"])} if champion else {})}
    rows, basis = shared_rows(read_table(job / "eval.csv"), compared)
    rows.to_csv(job / "compared.csv", index=False)
    result = {
        "labels": report["labels"], "rows": report["n_used"], **kind_of(space).flag,
        "cv_macro_f1": round(report["macro_f1_mean"], 4), "cv_macro_f1_std": round(report["macro_f1_std"], 4),
        **served_cv(report),
        "export": {"cpu_default": exported["cpu_default"], "quantization": (exported.get("quantization") or {}).get("recipe")},
        "eval": eval_scores(staging, job / "compared.csv", space),
        "champion_eval": eval_scores(Path(champion["folder"]), job / "compared.csv", space) if champion else None,
        "compared_on": basis,
        **({"teacher": teacher_summary(report["teacher"])} if report.get("teacher") else {}),
    }
    progress.stage("done", cfg.folds + 3)
    write_json(job / "result.json", result)
    return result


def teacher_summary(section: dict) -> dict:
    """k-fold's teacher section as the version keeps it: rows of each kind, the LLM against the model on the gold
    rows (finetune/teacher_report.py), without the confusion lists."""
    return {k: v for k, v in section.items() if k in (
        "rows", "gold_repeats", "relabelled_teacher_rows", "n_judged", "teacher_macro_f1", "student_macro_f1",
        "teacher_accuracy", "student_accuracy", "agreement", "note")}


def served_cv(report: dict) -> dict:
    """The cross-validated macro-F1 of what the version serves: the blend's nested score where the blend is
    kept (the encoder alone can score far lower: a team reading that would think the version useless)."""
    blend = report.get("blend") or {}
    if blend.get("kept") and blend.get("macro_f1_mean") is not None:
        return {"cv_served_macro_f1": round(blend["macro_f1_mean"], 4), "cv_served": "blend"}
    return {"cv_served_macro_f1": round(report["macro_f1_mean"], 4), "cv_served": "encoder"}


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 3 and argv[1] == LIFELINE_FLAG and argv[2].isdigit():
        watch_lifeline(int(argv[2]))  # the server's pipe: when it closes, this process group ends
        argv = argv[:1]
    if len(argv) != 1:
        print(f"usage: python -m app.versions.train_child JOB_DIR [{LIFELINE_FLAG} FD]", file=sys.stderr)
        return 2
    run(Path(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
