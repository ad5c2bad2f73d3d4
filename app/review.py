"""Review suspects: a labeling session opened from a label_issues.csv (finetune/label_issues.py).

The suspects of a k-fold run (uploaded), or of the active version (its folder carries the label_issues.csv of
the k-fold that made it), become a labeling session of kind "review" under <data-dir>/label/: ordered by
cleanlab's quality score (least likely correct first), each showing its given label and the suggestion. A
decision is a label like any other (journal.jsonl, labeled.csv): keep = the given label, take the suggestion,
or another label. The training table (app/trainset.py) applies them as corrections of the base rows, the
latest decision winning.

Refused: a file whose suspects are mostly not in this server's training table (another data file: both are
named). Left out, with a note: suspects whose text is no longer in the table, whose label changed since the
run, or whose given label a review already confirmed for that text (a kept label is never asked again).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .labeling import LabelSession, SessionError, SessionStore, decisions, valid_session_id
from .trainset import REVIEW, key, session_kind

ISSUES_FILE = "label_issues.csv"  # finetune/label_issues.py FILE
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


def reviewed(label_root: Path) -> set[tuple[str, str]]:
    """(text, label) pairs a review decided, in force: such a label is never asked about again for that text."""
    pairs = set()
    if Path(label_root).is_dir():
        for folder in Path(label_root).iterdir():
            if valid_session_id(folder.name) and (folder / "journal.jsonl").exists() and session_kind(folder) == REVIEW:
                pairs.update((key(d["text"]), d["label"]) for d in decisions(folder))
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
                labels: list[str]) -> tuple[LabelSession, str]:
    """A new review session for the suspects of `issues` (a label_issues.csv read as strings) against the
    training table `ts` (app/trainset.build); its message for the person."""
    todo, note = plan(issues, name, table_labels(ts), reviewed(label_root), table_name)
    p_given = pd.to_numeric(todo.get("p_given", pd.Series(np.nan, todo.index)), errors="coerce")
    p_sugg = pd.to_numeric(todo.get("p_suggested", pd.Series(np.nan, todo.index)), errors="coerce")
    suspects = [Suspect(s, float(q), {g: _prob(pg), s: _prob(ps)} if g != s else {g: _prob(pg)})
                for g, s, q, pg, ps in zip(todo["given_label"], todo["suggested_label"], todo["quality"], p_given, p_sugg)]
    every = list(dict.fromkeys([*labels, *table_labels(ts).values(), *todo["given_label"], *todo["suggested_label"]]))
    session = store.create(name, todo["text"].astype(str).tolist(), suspects, every,
                           columns={"given_label": todo["given_label"].astype(str).tolist()}, kind=REVIEW)
    message = (f"Review of {len(todo)} suspects from {name}, least likely correct first: **K** keeps the given "
               f"label, **Enter** takes the suggestion, **1–9** picks another label.")
    return session, message + (f" ({note}.)" if note else "")


def _prob(v) -> float:
    return 0.0 if v is None or not np.isfinite(v) else round(float(v), 4)


def given_label(session: LabelSession, row: int | None) -> str | None:
    """The given label of a review session's row (None for other sessions or no row)."""
    if row is None or session.meta.get("kind") != REVIEW:
        return None
    if not hasattr(session, "given"):
        session.given = pd.read_parquet(session.folder / "items.parquet", columns=["given_label"])["given_label"].tolist()
    return session.given[row]


def active_issues(registry) -> tuple[Path, str]:
    """The active version's label_issues.csv and its display name; ReviewError where there is none."""
    version = registry.active() if registry is not None else None
    if version is None:
        raise ReviewError("no active version: upload a run's label_issues.csv instead")
    path = registry.path(version) / ISSUES_FILE
    if not path.is_file():
        raise ReviewError(f"version {version} has no {ISSUES_FILE} (it was not made by a k-fold with "
                          "--label-issues auto): upload a run's label_issues.csv instead")
    return path, f"{version}/{ISSUES_FILE}"
