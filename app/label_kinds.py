"""What the app does per kind of labels, picked once from the label space (textdata/labels.py) and carried as a
value, so the app's modules hold no kind branches (issue 41), as finetune/tasks.py does for k-fold.

- `OneLabel` (single-label): a cell is one name; a decision is one label; a table needs two classes.
- `LabelSets` (multi-label): a cell is a set of names joined by the space's separator, empty for "none of these"
  (a real answer, kept); a decision is a set; a table needs one labeled row.

The label space's fields in the app's JSON (a labeling session's meta.json, an audit's items, a retrain's k-fold
config and spec.json) are written by `space_fields` and read by `space_from` alone.
"""

from __future__ import annotations

import math
from types import MappingProxyType

import pandas as pd

from textdata.errors import ModelError
from textdata.labels import NONE_LABEL, LabelSpace, parse_set
from textdata.tables import missing_text

SINGLE = LabelSpace()  # a single-label space with its labels unknown: what an old file or a missing model means


def space_fields(space: LabelSpace) -> dict:
    """The label space's kind as the app's JSON holds it: nothing for single-label (the default of every file
    written before multi-label existed), `multi_label` and `label_sep` for label sets."""
    return space.pick({}, {"multi_label": True, "label_sep": space.sep})


def space_from(fields: dict, labels=()) -> LabelSpace:
    """The label space `space_fields` wrote (or a spec.json that holds only `label_sep`)."""
    sep = fields.get("label_sep")
    return LabelSpace.of(labels, bool(fields.get("multi_label")) or bool(sep), sep)


def active_space(registry) -> LabelSpace:
    """The active version's label space (from its folder, textdata/labels.py), SINGLE with no active version
    or an unreadable one: a retrain and a review follow the model the server serves."""
    active = registry.active() if registry is not None else None
    return folder_space(registry.path(active)) if active else SINGLE


def dataset_space(ds) -> LabelSpace:
    """A team dataset's label space (labelstore/queue.py records its kind as a column; a set's CSV cell joins
    its names by the default separator)."""
    return LabelSpace.of(ds.labels, ds.multi_label)


def asked_space(asked: bool | None, served: LabelSpace) -> LabelSpace:
    """The kind a request asks for (`POST /v1/datasets`' field), the served model's where it asks none."""
    return served if asked is None else LabelSpace.of((), asked)


def folder_space(folder) -> LabelSpace:
    """A model folder's label space; SINGLE when its config.json cannot be read."""
    try:
        return LabelSpace.from_folder(folder)
    except ModelError:
        return SINGLE


class OneLabel:
    """Single-label (see the module's docstring)."""

    flag = MappingProxyType({})  # what an audit item or a retrain's result adds to say its kind
    review_keys = "**K** keeps the given label, **Enter** takes the suggestion, **1–9** picks another label"
    ticked = ""  # a review's given label is a button, not ticked
    audit_how = ""  # what an audit session asks of the person, besides choosing
    blind_hint = "Audit: choose the label you read in the text (the model's answer is hidden)."
    answer_field = "label"  # the API's field of a team dataset's answer (labelstore/queue.py check_value)
    holds_sets = False  # what a record says of its kind (a label store's final label, a review queue's answer)

    def __init__(self, space: LabelSpace):
        self.space = space

    def names(self, cell: str) -> list[str]:
        """The names a cell of the app's tables holds (written by the app: already canonical)."""
        return [cell]

    def choice(self, names: list[str]):
        """What LabelSession.decide takes for these names."""
        return names[0]

    def own(self, records: list, holds_set) -> list:
        """The records of this kind, `holds_set(record)` saying a record's (a label store's final labels, a review
        queue's answers): a session or a retrain holds answers of one kind."""
        return [r for r in records if holds_set(r) == self.holds_sets]

    def answer(self, chosen) -> dict:
        """A team dataset's answer as labelstore/queue.check_value takes it (the Label tab's button or ticks)."""
        return {"label": chosen}

    def store_choice(self, chosen):
        """The Team tab's adjudication (a dropdown's value) as the label store holds an answer."""
        return chosen

    def accepted(self, session, row):
        """What the Label tab's Accept decides: the suggestion."""
        return session.suggestion[row]

    def decision(self, label, labels: list[str]) -> tuple[str, list[str] | None, list[str]]:
        """(the cell a decision writes, its names for the journal (None: one label), the unknown names)."""
        return label, None, [] if label in labels else [label]

    def canonical(self, cell: str) -> str:
        """A decision's cell as a review compares it (a single label as written)."""
        return cell

    def store_cell(self, value) -> str:
        """A label store's final label (labelstore/snapshot.py) as a table cell."""
        return value

    def store_value(self, cell):
        """A session's decision as the label store holds an answer (app/team/sessions_import.py): a label, a sorted list."""
        return cell

    def store_names(self, value) -> list[str]:
        """The names of a label store's answer."""
        return [value]

    def labeled(self, cells: pd.Series) -> pd.Series:
        """The rows of a --train-data table that carry a label (an empty cell is no label)."""
        return ~missing_text(cells)

    def gated(self, cells: pd.Series, labels: list[str]) -> pd.Series:
        """The evaluation rows a new model's export gate scores: those of labels it knows (a label set's
        unknown names are left out by the gate itself, warned)."""
        return cells.isin(labels)

    def counts(self, cells: pd.Series) -> pd.Series:
        """Rows per label."""
        return cells.value_counts()

    def check_counts(self, counts: pd.Series, n: int) -> str | None:
        """Why a training table with these counts cannot train a classifier, or None."""
        if len(counts) < 2:
            return (f"the training table has one class only ({counts.index[0]!r}, {n} rows): a classifier needs at "
                    "least 2; label texts of another class")
        return None

    def as_cells(self, issues: pd.DataFrame, name: str, file_space: LabelSpace) -> pd.DataFrame:
        """A label_issues.csv's given and suggested labels as the server's cells (single-label: as written)."""
        return issues

    def run_words(self) -> str:
        return f"{self.space.kind} run (one label per text)"

    # the Hugging Face clients' options (app/http/hf_compat.py): the functions a score may be read through, raw scores
    hf_functions = ("softmax",)
    hf_allowed = "only 'softmax'"
    hf_words = "a single-label model"
    raw_scores = False

    def probability_problem(self, probabilities: dict) -> str | None:
        """Why an answer's probabilities are nonsense (the check before a version serves, app/versions/swap.py)."""
        values = probabilities.values()
        if not all(math.isfinite(p) for p in values) or abs(sum(values) - 1) > 1e-3:
            return f"its probabilities are not a distribution ({probabilities})"
        return None

    answer_column = "pred_label"  # a scored file's answer (serving/scoring.py), with pred_score

    def row_prediction(self, row, labels: list[str], confident: bool = False):
        """A scored file's row as the engine's answer (not confident by default: the cascade's LLM is asked)."""
        from serving.decision import Prediction

        probs = {x: float(row[f"prob_{x}"]) for x in labels}
        return Prediction(str(row["pred_label"]), float(row["pred_score"]), probs, confident=confident)

    def write_answer(self, out: pd.DataFrame, index, pred) -> None:
        """An answer into a scored file's row."""
        out.at[index, "pred_label"], out.at[index, "pred_score"] = pred.label, pred.score

    def answer_counts(self, answers: pd.Series) -> pd.Series:
        """Rows per answer of a scored file."""
        return answers.value_counts()

    def keyed_labels(self, labels: list[str]) -> list[str]:
        """The labels a reviewer's keys 1-9 settle a disagreement with (a set is settled by ticks, not one key)."""
        return list(labels)

    def ticked_labels(self, labels: list[str]) -> list[str]:
        """The labels a reviewer ticks (keys 1-9) before settling a disagreement with Enter: none for one label,
        whose key settles at once."""
        return []

    def unsure_rows(self, predictions: list) -> list[int]:
        """The rows whose answer is under the served threshold: their Accept is not the obvious click (a set's
        suggestion is ticked boxes, not one button)."""
        return [i for i, p in enumerate(predictions) if not p.confident]


class LabelSets(OneLabel):
    """Multi-label (see the module's docstring)."""

    flag = MappingProxyType({"multi_label": True})
    review_keys = ("**Enter** saves the ticked labels (the given ones are ticked), **K** keeps the given labels, "
                   "**T** takes the suggestion, **1–9** tick or untick a label")
    ticked = " (ticked below)"
    audit_how = " Tick every label that applies (or none of these)."
    blind_hint = "Audit: tick every label the text has, or none of these (the model's answer is hidden)."
    answer_field = "labels"
    holds_sets = True

    def names(self, cell: str) -> list[str]:
        return [n for n in cell.split(self.space.sep) if n] if cell else []

    def choice(self, names: list[str]):
        return names

    def answer(self, chosen) -> dict:
        return {"labels": [chosen] if isinstance(chosen, str) else list(chosen)}  # one name: that one alone

    def store_choice(self, chosen):
        return sorted([chosen] if isinstance(chosen, str) else chosen)  # the dropdown's one name: that one alone

    def accepted(self, session, row):
        """The suggested set, pre-ticked: accepting it records the whole set."""
        return session.suggested_set(row)

    def decision(self, label, labels: list[str]) -> tuple[str, list[str] | None, list[str]]:
        """One name means that one alone; the names are put in the session's label order, each once."""
        chosen = [label] if isinstance(label, str) else list(label)
        unknown = [x for x in chosen if x not in labels]
        chosen = [x for x in labels if x in chosen]
        return self.space.sep.join(chosen), chosen, unknown

    def canonical(self, cell: str) -> str:
        return self.space.canonical(cell)

    def store_cell(self, value) -> str:
        return self.space.sep.join(value)  # a sorted list (labelstore/snapshot.labels_as_of)

    def store_value(self, cell):
        return sorted(x for x in str(cell).split(self.space.sep) if x)

    def store_names(self, value) -> list[str]:
        return value

    def labeled(self, cells: pd.Series) -> pd.Series:
        return pd.Series(True, index=cells.index)  # an empty cell is "none of these", a row like any other

    def gated(self, cells: pd.Series, labels: list[str]) -> pd.Series:
        return pd.Series(True, index=cells.index)

    def counts(self, cells: pd.Series) -> pd.Series:
        """Rows per name (a row counts once for each of its names)."""
        return pd.Series([n for cell in cells for n in self.names(cell)], dtype=object).value_counts()

    def check_counts(self, counts: pd.Series, n: int) -> str | None:
        if counts.empty:
            return (f"no row of the {n} in the training table has a label (all 'none of these'): a multi-label "
                    "classifier needs texts with labels; label some")
        return None

    def as_cells(self, issues: pd.DataFrame, name: str, file_space: LabelSpace) -> pd.DataFrame:
        """Sets canonical: names sorted, joined by the server's separator."""
        df = issues.copy()
        for col in ("given_label", "suggested_label"):
            df[col] = [self.space.join(parse_set(c, file_space.sep, f"{name} row {i + 2} column {col}"))
                       for i, c in enumerate(df[col].fillna(""))]
        return df

    def run_words(self) -> str:
        return f"{self.space.kind} run (label sets joined by {self.space.sep!r})"

    hf_functions = ("sigmoid", "none")
    hf_allowed = "'sigmoid' or 'none'"
    hf_words = "a multi-label model: independent probabilities per label"
    raw_scores = True

    def probability_problem(self, probabilities: dict) -> str | None:
        """Independent per-label probabilities: each in [0, 1], no sum."""
        if not all(math.isfinite(p) and 0 <= p <= 1 for p in probabilities.values()):
            return f"its per-label probabilities are not probabilities ({probabilities})"
        return None

    answer_column = "pred_labels"

    def row_prediction(self, row, labels: list[str], confident: bool = False):
        from serving.multilabel import MultiLabelPrediction

        probs = {x: float(row[f"prob_{x}"]) for x in labels}
        top = max(probs, key=probs.get)
        names = [n for n in str(row["pred_labels"]).split(self.space.sep) if n]
        return MultiLabelPrediction(names, probs, top, probs[top], probs, confident=confident)

    def write_answer(self, out: pd.DataFrame, index, pred) -> None:
        out.at[index, "pred_labels"] = self.space.sep.join(pred.labels)

    def answer_counts(self, answers: pd.Series) -> pd.Series:
        return answers.replace("", NONE_LABEL).value_counts()  # "" is "none of these"

    def keyed_labels(self, labels: list[str]) -> list[str]:
        return []

    def ticked_labels(self, labels: list[str]) -> list[str]:
        return list(labels)

    def unsure_rows(self, predictions: list) -> list[int]:
        return []


def kind_of(space: LabelSpace) -> OneLabel:
    """The app's per-kind object of a label space, picked once."""
    return space.pick(OneLabel, LabelSets)(space)
