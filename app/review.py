"""Review suspects: a labeling session opened from a label_issues.csv (finetune/label_issues.py).

The suspects of a k-fold run (uploaded), or of the active version (its folder carries the label_issues.csv of
the k-fold that made it), become a labeling session of kind "review" under <data-dir>/label/: ordered by
cleanlab's quality score (least likely correct first), each showing its given label and the suggestion. A
decision is a label like any other (journal.jsonl, labeled.csv): keep = the given label, take the suggestion,
or another label. The training table (app/trainset.py) applies them as corrections of the base rows, the
latest decision winning.

A multi-label run's file (its `label_sep` column; an older file without one: a cell that is empty or joins
names with ";") holds label SETS; on a multi-label server it becomes a multi-label review session (meta
`multi_label`, `label_sep`): the checkboxes start at the given set, the suggestion is the run's suggested set,
and a decision is a set like any multi-label session's. Sets are compared canonically (names sorted,
trainset.canonical_set), so the order a set is written or ticked in never matters. A file of the other kind
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

from textdata.labels import DEFAULT_SEP, MAX_NAME_CHARS, NONE_LABEL, name_problem, parse_set, sep_problem
from textdata.model_files import LABEL_ISSUES as ISSUES_FILE
from textdata.tables import read_table

from .labeling import LabelSession, SessionError, SessionStore, decisions, valid_session_id
from .trainset import REVIEW, active_label_sep, canonical_set, key, session_kind

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


def issues_label_sep(issues: pd.DataFrame, labels, name: str = ISSUES_FILE) -> str | None:
    """The separator of a multi-label run's label sets, None for a single-label run's file. The file says it
    (column `label_sep`); an older multi-label one shows it: an empty cell (no label: only sets can be
    empty), or names joined by ";" where the whole is none of this server's `labels`."""
    if "label_sep" in issues.columns:
        sep = next((s for s in issues["label_sep"].fillna("").astype(str) if s), None)
        if sep is not None and sep_problem(sep):
            raise ReviewError(f"{name}, column 'label_sep': separator {sep[:20]!r} {sep_problem(sep)}")
        return sep
    cells = pd.concat([issues["given_label"], issues["suggested_label"]]).fillna("").astype(str)
    known = set(labels)
    return DEFAULT_SEP if any(not c.strip() or (DEFAULT_SEP in c and c not in known) for c in cells) else None


def check_kind(file_sep: str | None, server_sep: str | None, name: str) -> None:
    """One message for a file of the other kind than the server's model, either way."""
    if bool(file_sep) != bool(server_sep):
        kind = {True: "multi-label", False: "single-label"}
        ran = f"{kind[True]} run (label sets joined by {file_sep!r})" if file_sep else f"{kind[False]} run (one label per text)"
        raise ReviewError(f"{name} lists the suspects of a {ran}, and this server's model is {kind[bool(server_sep)]}: "
                          f"review it on a server whose active model is {kind[bool(file_sep)]} (one trained on that run's "
                          "data), where its decisions can correct the training table")


def as_sets(issues: pd.DataFrame, name: str, file_sep: str, label_sep: str) -> pd.DataFrame:
    """The file with its given and suggested sets canonical (names sorted, joined by the server's `label_sep`)."""
    df = issues.copy()
    for col in ("given_label", "suggested_label"):
        df[col] = [label_sep.join(sorted(parse_set(c, file_sep, f"{name} row {i + 2} column {col}")))
                   for i, c in enumerate(df[col].fillna(""))]
    return df


def check_suggestions(todo: pd.DataFrame, name: str, known: list[str], label_sep: str | None) -> None:
    """A suggestion becomes a label of the training table when accepted: each of its names is one the model or
    the table has, or passes the label-name rule that Add label applies (textdata/labels.py); ReviewError naming
    the file, the row and the name otherwise (a formula, a control character, a name over the length)."""
    names = {n for cell in known for n in (cell.split(label_sep) if label_sep else [cell])}
    for row, cell in zip(todo.index, todo["suggested_label"].astype(str)):
        for n in (cell.split(label_sep) if label_sep else [cell]):
            if n and n not in names and name_problem(n, label_sep):
                where = f"{name} row {row + 2}, column 'suggested_label'"
                raise ReviewError(f"{where}: label {n[:MAX_NAME_CHARS]!r} {name_problem(n, label_sep)}")


def reviewed(label_root: Path, label_sep: str | None = None) -> set[tuple[str, str]]:
    """(text, label) pairs a review decided, in force: such a label is never asked about again for that text.
    With `label_sep` (a multi-label server) the labels are canonical sets."""
    pairs = set()
    if Path(label_root).is_dir():
        for folder in Path(label_root).iterdir():
            if valid_session_id(folder.name) and (folder / "journal.jsonl").exists() and session_kind(folder) == REVIEW:
                pairs.update((key(d["text"]), canonical_set(d["label"], label_sep) if label_sep else d["label"])
                             for d in decisions(folder))
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
                labels: list[str], label_sep: str | None = None) -> tuple[LabelSession, str]:
    """A new review session for the suspects of `issues` (a label_issues.csv read as strings) against the
    training table `ts` (app/trainset.build, with the same `label_sep`); its message for the person.
    `label_sep`: the server's model is multi-label and joins label sets with it."""
    check_columns(issues, name)
    file_sep = issues_label_sep(issues, labels, name)
    check_kind(file_sep, label_sep, name)
    if label_sep:
        issues = as_sets(issues, name, file_sep, label_sep)
    current = table_labels(ts)
    todo, note = plan(issues, name, current, reviewed(label_root, label_sep), table_name)
    check_suggestions(todo, name, [*labels, *current.values()], label_sep)
    given, sugg = todo["given_label"].astype(str).tolist(), todo["suggested_label"].astype(str).tolist()
    every = [*labels, *current.values(), *given, *sugg]
    if label_sep:  # the names in the sets, not the sets
        every = [n for cell in every for n in cell.split(label_sep) if n]
    session = store.create(name, todo["text"].astype(str).tolist(), suspects(todo, label_sep),
                           list(dict.fromkeys(every)), columns={"given_label": given}, kind=REVIEW,
                           label_sep=label_sep)
    keys = ("**Enter** saves the ticked labels (the given ones are ticked), **K** keeps the given labels, **T** "
            "takes the suggestion, **1–9** tick or untick a label" if label_sep else
            "**K** keeps the given label, **Enter** takes the suggestion, **1–9** picks another label")
    message = f"Review of {len(todo)} suspects from {name}, least likely correct first: {keys}."
    return session, message + (f" ({note}.)" if note else "")


def suspects(todo: pd.DataFrame, label_sep: str | None) -> list[Suspect]:
    """The session's rows: the suggestion, the quality score, the given and suggested labels' probabilities
    (keyed as the person reads them: a set as its names, "(none)" for the empty one)."""
    p_given = pd.to_numeric(todo.get("p_given", pd.Series(np.nan, todo.index)), errors="coerce")
    p_sugg = pd.to_numeric(todo.get("p_suggested", pd.Series(np.nan, todo.index)), errors="coerce")
    out = []
    for g, s, q, pg, ps in zip(todo["given_label"], todo["suggested_label"], todo["quality"], p_given, p_sugg):
        shown_g, shown_s = shown(g, label_sep), shown(s, label_sep)
        out.append(Suspect(s, float(q), {shown_g: _prob(pg), shown_s: _prob(ps)} if g != s else {shown_g: _prob(pg)}))
    return out


def shown(cell: str, label_sep: str | None) -> str:
    """A label as the person reads it: a multi-label set as its names, "(none)" for the empty set."""
    if not label_sep:
        return cell
    return ", ".join(cell.split(label_sep)) if cell else NONE_LABEL


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
    if given is None or not session.multi_label:
        return None if given is None else [given]
    return given.split(session.meta["label_sep"]) if given else []


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
        issues["label_sep"] = active_label_sep(path.parent) or ""
    return issues, f"{version}/{ISSUES_FILE}"
