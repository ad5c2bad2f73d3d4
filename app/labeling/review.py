"""Review suspects: a labeling session opened from a label_issues.csv (finetune/label_issues.py).

The suspects of a k-fold run (uploaded), or of the active version (its folder carries the label_issues.csv of
the k-fold that made it), become a labeling session of kind "review" under <data-dir>/label/: ordered by
cleanlab's quality score (least likely correct first), each showing its given label and the suggestion. A
decision is a label like any other (journal.jsonl, labeled.csv): keep = the given label, take the suggestion,
or another label. The training table (app/versions/trainset.py) applies them as corrections of the base rows, the
latest decision winning.

A multi-label run's file (its `label_sep` column; an older file without one: a cell that is empty or joins
names with ";") holds label SETS; on a multi-label server it becomes a multi-label review session (meta
`multi_label`, `label_sep`): the checkboxes start at the given set, the suggestion is the run's suggested set,
and a decision is a set like any multi-label session's. Sets are compared canonically (names sorted, the label
space's `canonical`), so the order a set is written or ticked in never matters. A file of the other kind
than the server's model (multi-label file, single-label model, or the reverse) is refused with one message.

Refused: a file whose suspects are mostly not in this server's training table (another data file: both are
named). Left out, with a note: suspects whose text is no longer in the table, whose label changed since the
run, or whose given label a review already confirmed for that text (a kept label is never asked again).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from app.label_kinds import SINGLE, folder_space, kind_of
from app.labeling.sessions import LabelSession, SessionError, SessionStore, decisions, valid_session_id
from app.versions.trainset import REVIEW, key, session_kind
from textdata.labels import DEFAULT_SEP, MAX_NAME_CHARS, LabelSpace, name_problem, sep_problem
from textdata.model_files import LABEL_ISSUES as ISSUES_FILE
from textdata.tables import read_table

REQUIRED = ("text", "given_label", "suggested_label", "quality")
MIN_FOUND_SHARE = 0.5  # below this, the file is taken to come from other data than this server trains on


class ReviewError(SessionError):
    """The file cannot be reviewed here (not a label_issues.csv, other data, nothing left to review)."""


@dataclass
class Suspect:
    """One row of label_issues.csv, as the session shows it."""

    label: str  # the suggestion (what Accept takes)
    score: float  # the quality score: the session's "least confident first" order is the ranking
    probabilities: dict


def check_columns(df: pd.DataFrame, name: str) -> None:
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise ReviewError(f"{name}: not a label_issues.csv (no column {', '.join(map(repr, missing))}); "
                          "finetune/kfold.py writes one beside report.json")


def issues_space(issues: pd.DataFrame, labels, name: str = ISSUES_FILE) -> LabelSpace:
    """The label space of the run whose suspects `issues` lists: multi-label with its separator, or single-label.
    The file says it (column `label_sep`); an older multi-label one shows it: an empty cell (no label: only sets
    can be empty), or names joined by ";" where the whole is none of this server's `labels`."""
    if "label_sep" in issues.columns:
        sep = next((s for s in issues["label_sep"].fillna("").astype(str) if s), None)
        if sep is not None and sep_problem(sep):
            raise ReviewError(f"{name}, column 'label_sep': separator {sep[:20]!r} {sep_problem(sep)}")
        return LabelSpace.of(multi_label=sep is not None, sep=sep)
    cells = pd.concat([issues["given_label"], issues["suggested_label"]]).fillna("").astype(str)
    known = set(labels)
    sets = any(not c.strip() or (DEFAULT_SEP in c and c not in known) for c in cells)
    return LabelSpace.of(multi_label=sets, sep=DEFAULT_SEP)


def check_kind(file_space: LabelSpace, space: LabelSpace, name: str) -> None:
    """One message for a file of the other kind than the server's model, either way."""
    if file_space.kind != space.kind:
        raise ReviewError(f"{name} lists the suspects of a {kind_of(file_space).run_words()}, and this server's model "
                          f"is {space.kind}: review it on a server whose active model is {file_space.kind} (one "
                          "trained on that run's data), where its decisions can correct the training table")


def check_suggestions(todo: pd.DataFrame, name: str, known: list[str], space: LabelSpace) -> None:
    """A suggestion becomes a label of the training table when accepted: each of its names is one the model or
    the table has, or passes the label-name rule that Add label applies (textdata/labels.py); ReviewError naming
    the file, the row and the name otherwise (a formula, a control character, a name over the length)."""
    kind = kind_of(space)
    names = {n for cell in known for n in kind.names(cell)}
    for row, cell in zip(todo.index, todo["suggested_label"].astype(str)):
        for n in kind.names(cell):
            if n and n not in names and name_problem(n, space.sep):
                where = f"{name} row {row + 2}, column 'suggested_label'"
                raise ReviewError(f"{where}: label {n[:MAX_NAME_CHARS]!r} {name_problem(n, space.sep)}")


def reviewed(label_root: Path, space: LabelSpace = SINGLE) -> set[tuple[str, str]]:
    """(text, label) pairs a review decided, in force: such a label is never asked about again for that text.
    On a multi-label server the labels are canonical sets."""
    pairs = set()
    kind = kind_of(space)
    if Path(label_root).is_dir():
        for folder in Path(label_root).iterdir():
            if valid_session_id(folder.name) and (folder / "journal.jsonl").exists() and session_kind(folder) == REVIEW:
                pairs.update((key(d["text"]), kind.canonical(d["label"])) for d in decisions(folder))
    return pairs


def table_labels(ts) -> dict[str, str]:
    """text (whitespace collapsed) -> its label now, over the training table and the evaluation slice."""
    both = pd.concat([ts.train, ts.eval])
    return dict(zip(both["text"].map(key), both["label"].astype(str)))


def plan(issues: pd.DataFrame, name: str, current: dict[str, str], done: set, table_name: str) -> tuple[pd.DataFrame, str]:
    """The suspects to review, by quality score, and a note on those left out; ReviewError for other data."""
    check_columns(issues, name)
    df = issues.copy()
    df["quality"] = pd.to_numeric(df["quality"], errors="coerce").fillna(0.0)
    df = df.sort_values("quality", kind="stable")
    k = df["text"].astype(str).map(key)
    now = k.map(current)
    found = now.notna()
    if len(df) and found.mean() < MIN_FOUND_SHARE:
        source = str(df["data"].iloc[0]) if "data" in df.columns else "its data file"
        raise ReviewError(f"{name} lists suspects from {source!r}: {int(found.sum())} of {len(df)} of its texts are in "
                          f"this server's training table ({table_name}); review it on the server that trains on "
                          f"{source!r}, or start this one with --train-data {source}")
    given = df["given_label"].astype(str)
    changed = found & (now != given)
    seen = found & ~changed & np.array([(t, g) in done for t, g in zip(k, given)], dtype=bool)
    todo = df[found & ~changed & ~seen]
    notes = [f"{n} {what}" for n, what in (
        (int((~found).sum()), "skipped: their text is no longer in the training table"),
        (int(changed.sum()), "skipped: their label changed since the run"),
        (int(seen.sum()), "skipped: a review already confirmed that label"),
    ) if n]
    if todo.empty:
        raise ReviewError(f"{name}: nothing left to review ({'; '.join(notes) or 'no suspects'})")
    return todo, "; ".join(notes)


def open_review(store: SessionStore, issues: pd.DataFrame, name: str, ts, label_root: Path, table_name: str,
                labels: list[str], space: LabelSpace = SINGLE) -> tuple[LabelSession, str]:
    """A new review session for the suspects of `issues` (a label_issues.csv read as strings) against the
    training table `ts` (app/trainset.build, with the same label `space`); its message for the person.
    `space`: the server's model's label space (a multi-label one reviews label sets)."""
    check_columns(issues, name)
    kind = kind_of(space)
    file_space = issues_space(issues, labels, name)
    check_kind(file_space, space, name)
    issues = kind.as_cells(issues, name, file_space)
    current = table_labels(ts)
    todo, note = plan(issues, name, current, reviewed(label_root, space), table_name)
    check_suggestions(todo, name, [*labels, *current.values()], space)
    given, sugg = todo["given_label"].astype(str).tolist(), todo["suggested_label"].astype(str).tolist()
    every = [n for cell in [*labels, *current.values(), *given, *sugg] for n in kind.names(cell)]  # sets: names
    session = store.create(name, todo["text"].astype(str).tolist(), suspects(todo, space),
                           list(dict.fromkeys(every)), columns={"given_label": given}, kind=REVIEW, space=space)
    message = f"Review of {len(todo)} suspects from {name}, least likely correct first: {kind.review_keys}."
    return session, message + (f" ({note}.)" if note else "")


def suspects(todo: pd.DataFrame, space: LabelSpace) -> list[Suspect]:
    """The session's rows: the suggestion, the quality score, the given and suggested labels' probabilities
    (keyed as the person reads them: a set as its names, "(none)" for the empty one)."""
    p_given = pd.to_numeric(todo.get("p_given", pd.Series(np.nan, todo.index)), errors="coerce")
    p_sugg = pd.to_numeric(todo.get("p_suggested", pd.Series(np.nan, todo.index)), errors="coerce")
    out = []
    for g, s, q, pg, ps in zip(todo["given_label"], todo["suggested_label"], todo["quality"], p_given, p_sugg):
        shown_g, shown_s = space.shown(g), space.shown(s)
        out.append(Suspect(s, float(q), {shown_g: _prob(pg), shown_s: _prob(ps)} if g != s else {shown_g: _prob(pg)}))
    return out


def _prob(v) -> float:
    return 0.0 if v is None or not np.isfinite(v) else round(float(v), 4)


def given_label(session: LabelSession, row: int | None) -> str | None:
    """The given label of a review session's row (None for other sessions or no row)."""
    if row is None or session.meta.get("kind") != REVIEW:
        return None
    if not hasattr(session, "given"):
        session.given = pd.read_parquet(session.folder / "items.parquet", columns=["given_label"])["given_label"].tolist()
    return session.given[row]


def given_set(session: LabelSession, row: int | None) -> list[str] | None:
    """The given label set of a multi-label review session's row (a single-label one's: its label alone)."""
    given = given_label(session, row)
    return None if given is None else session.kind.names(given)


def active_issues(registry) -> tuple[pd.DataFrame, str]:
    """The active version's label_issues.csv, read, and its display name; ReviewError where there is none.
    A file older than its `label_sep` column gets one from the version's model (multi-label or not)."""
    version = registry.active() if registry is not None else None
    if version is None:
        raise ReviewError("no active version: upload a run's label_issues.csv instead")
    path = registry.path(version) / ISSUES_FILE
    if not path.is_file():
        raise ReviewError(f"version {version} has no {ISSUES_FILE} (it was not made by a k-fold with "
                          "--label-issues auto): upload a run's label_issues.csv instead")
    issues = read_table(path)
    if "label_sep" not in issues.columns:
        issues["label_sep"] = folder_space(path.parent).sep or ""
    return issues, f"{version}/{ISSUES_FILE}"
