"""The cascade's LLM answers as teacher labels for the next retrain (issue 47).

The cascade (app/llm/fallback.py) appends every LLM answer to DATA_DIR/teacher/llm_labels.csv. A retrain reads it
beside the gold labels (app/versions/trainset.py: base table, labeling sessions, team store) as `finetune/kfold.py
--teacher-column teacher` reads a table: the training table gets a `teacher` column,
- a text with a gold label stays a gold row, and keeps the LLM's answer beside it (the rows the teacher is
  judged on, finetune/teacher_data.py);
- a text with only the LLM's answer becomes a teacher row (its `label` cell empty): trained on, corrected where
  the gold rows show the LLM unreliable, never scored;
- a text in the evaluation slice is never trained on, so its LLM answer is left out: the slice stays gold only.
One text answered several times: the latest answer wins (texts compared with their whitespace collapsed).
A multi-label retrain reads the cascade's label sets (DATA_DIR/teacher/llm_label_sets.csv, names joined by the
model's separator, an empty cell the LLM's "none") the same way; in the training table an empty set is written `[]`
in both columns (a gold "none of these" too), because there an empty cell means "no answer" (k-fold's rule,
textdata/labels.py `marked`). What was read goes into the job's `data.teacher` and so into the version's lineage
(version.json): the file, its sha256 and the row counts.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd

from app.label_kinds import SINGLE, kind_of
from app.versions.lineage import key
from app.versions.trainset import in_eval_slice
from textdata.labels import LabelSpace

TEACHER_FILE = Path("teacher") / "llm_labels.csv"  # under DATA_DIR; app/llm/fallback.py writes it
SETS_FILE = Path("teacher") / "llm_label_sets.csv"  # the multi-label answers, beside it
TEACHER_COLUMN = "teacher"
TOP_CLIENTS = 20  # clients named in a version's lineage, most answers first


def read_answers(path: Path, space: LabelSpace = SINGLE) -> tuple[dict[str, tuple[str, str]], dict]:
    """({text key: (text, latest answer as a teacher cell)}, the counts); an empty dict when the file is not there.
    A label set's cell: an empty one is the LLM's "none", written `[]` (`LabelSpace.marked`)."""
    if not path.is_file():
        return {}, {}
    from textdata.tables import read_table

    table = read_table(path, columns={"text": f"{path} (column text)", "teacher": f"{path} (column teacher)"})
    kind = kind_of(space)
    latest: dict[str, tuple[str, str]] = {}
    for text, answer in zip(table["text"], table["teacher"].fillna("")):
        cell = space.marked(kind.names(str(answer).strip()), sort=False)  # a set's "" -> "[]"; a label's "" stays
        if isinstance(text, str) and key(text) and space.given(cell):
            latest[key(text)] = (text, cell)
    llms = sorted({str(x) for x in table["llm"].dropna()}) if "llm" in table else []
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    record = {"file": str(path), "sha256": digest, "answers": len(table), "texts": len(latest), "llm": llms}
    if "client" in table:  # who sent the texts the LLM answered (a client can steer them: issue 63, M5)
        clients = table["client"].fillna("").astype(str).replace("", "(before clients were named)")
        record["by_client"] = clients.value_counts().head(TOP_CLIENTS).to_dict()
    return latest, record


def attach(train: pd.DataFrame, share: float, data_dir: Path, space: LabelSpace) -> tuple[pd.DataFrame, dict]:
    """(the training table with a `teacher` column and the teacher rows appended, the lineage record); the table
    unchanged and {} when there are no LLM answers (`space`'s kind: labels, or label sets)."""
    path = Path(data_dir) / space.pick(TEACHER_FILE, SETS_FILE)
    answers, record = read_answers(path, space)
    if not answers:
        return train, {}
    gold = {key(t) for t in train["text"]}
    held = {k for k, (t, _) in answers.items() if in_eval_slice(t, share)}
    out = train.copy()
    kind = kind_of(space)  # a gold "none of these" (an empty set cell) as `[]`: here an empty cell is no answer
    out["label"] = [space.marked(kind.names(c), sort=False) for c in out["label"].fillna("").astype(str)]
    out[TEACHER_COLUMN] = [answers.get(key(t), ("", ""))[1] for t in out["text"]]
    only = [(t, a) for k, (t, a) in answers.items() if k not in gold and k not in held]
    extra = pd.DataFrame({"text": [t for t, _ in only], "label": "", TEACHER_COLUMN: [a for _, a in only]})
    out = pd.concat([out, extra], ignore_index=True)[["text", "label", TEACHER_COLUMN]]
    record.update(used=True, teacher_rows=len(only), gold_rows_with_answer=int((out[TEACHER_COLUMN][:len(train)] != "").sum()),
                  in_eval_slice=len(held))
    return out, record


def described(record: dict | None) -> str:
    """The Train tab's words for what a job read from the LLM's answers ("" when nothing)."""
    if not record:
        return ""
    if not record.get("used"):  # a job from before multi-label retrains read the label sets
        return f" The LLM's answers were not read: {record.get('why', '')}."
    return (f" Also {record['teacher_rows']} texts answered only by the LLM (teacher rows: corrected on the gold "
            f"rows, never scored), and its answers beside {record['gold_rows_with_answer']} gold rows.")
