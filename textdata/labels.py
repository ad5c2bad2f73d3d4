"""The label space: the labels a model knows, their kind (one label per text, or a set of them), how a table's
cell names them, and which names are allowed. Decided once (k-fold's flags when training, the model folder's
config.json and thresholds.json when serving) and carried as a value, so training, scoring, the retraining
check and the app read a cell the same way.

A cell of a multi-label table (`parse_set`) is one of:
  - names joined by the separator (`a;b`), blanks around names dropped, empty pieces ignored;
  - a list (JSONL, Parquet), or the JSON text of one (`["a", "b"]` in a CSV cell): its items are the names.
    A text cell that starts with `[` and ends with `]` is always read as JSON, in training as in scoring: a
    cell that is not valid JSON is an error naming the row, the column and the value, never a label named
    `["a", "b"]` (which training once made while serving read the same cell as {a, b});
  - empty: no label ("none of these", a real answer).
A single-label cell is its text, stripped: `[x]` there is the label `[x]`.

One rule for label names (`name_problem`), whoever brings them: Add label in the UI, a review file's
suggestions, `--train-data`, k-fold's data. See `name_problem` for what it refuses and why.
"""

from __future__ import annotations

import functools
import json
import math
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from textdata import model_files
from textdata.blank import is_blank
from textdata.errors import DataError, ModelError

SINGLE_LABEL = "single_label_classification"
MULTI_LABEL = "multi_label_classification"  # transformers' problem_type for a sigmoid per label
PROBLEM_TYPES = (SINGLE_LABEL, MULTI_LABEL)
DEFAULT_SEP = ";"
KIND_KEY = "multi_label"  # how our own JSON files record the kind (tfidf.json, blend.json): true, or absent
# Separators people use: a multi-label name holding one would read as two labels in a file written with it,
# and a cell holding one besides the separator mixes two conventions.
COMMON_SEPS = (";", ",", "|")
NONE_LABEL = "(none)"  # how a label set with no label is shown (UI, monitor, scored files): no label's name
MAX_NAME_CHARS = 60  # a name a person reads on a button; longer is a pasted text, not a label
MAX_LABELS_PER_ROW = 100  # a set this large is not an annotation; it bounds what one cell can add
MAX_SEP_CHARS = 3
# A cell starting with one of these runs as a formula when a spreadsheet opens the CSV (OWASP CSV injection);
# a number (-1, +2.5) does not, and is a common class name.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
NUMBER = re.compile(r"^[+-]?(\d+([.,]\d*)*|\.\d+)([eE][+-]?\d+)?$")
# Characters that reorder or hide text (Trojan Source, CVE-2021-42574): a label shown with one reads as another.
BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def label_order(labels: Iterable) -> list[str]:
    """Unique labels as strings, numerically sorted when all are integers ("2" < "10"), else lexically: the
    label <-> id map, so the same labels always get the same ids across folds and runs."""
    unique = {str(x) for x in labels}
    try:
        return sorted(unique, key=int)
    except ValueError:
        return sorted(unique)


def labels_from_config(config) -> list[str]:
    """Label names in id order from a transformers config (what `--final` and exports write)."""
    id2label = {int(k): v for k, v in config.id2label.items()}
    return [id2label[i] for i in range(len(id2label))]


def is_multi_label(config) -> bool:
    """A transformers config (or a dict of config.json) for a multi-label head."""
    value = config.get("problem_type") if isinstance(config, dict) else getattr(config, "problem_type", None)
    return value == MULTI_LABEL


def is_formula(value) -> bool:
    """A text a spreadsheet would run (a number it would not)."""
    return isinstance(value, str) and value.startswith(FORMULA_START) and not NUMBER.match(value)


# ------------------------------------------------------------------------------------------------ the rule
def sep_problem(sep, labels: Iterable[str] = ()) -> str | None:
    """Why `sep` cannot separate label names, or None: 1 to 3 punctuation or symbol characters, none of them
    a bracket or quote (a cell starting with `[` reads as JSON) nor a letter, digit, space or control; and
    found in none of `labels` (a model's names: a set joined with it would read back as other labels). The one
    rule for a separator, whoever brings it: k-fold's --label-sep, a model folder's thresholds.json, a review
    file's column."""
    if not isinstance(sep, str):
        return "is not a text"
    if not sep:
        return "is empty"
    if len(sep) > MAX_SEP_CHARS:
        return f"is {len(sep):,} characters long (at most {MAX_SEP_CHARS})"
    bad = next((c for c in sep if not unicodedata.category(c).startswith(("P", "S")) or c in '[]"'), None)
    if bad is not None:
        return f"holds {bad!r}: use punctuation such as ';' or '|'"
    inside = [name for name in labels if sep in name]
    if inside:
        more = f" (and {len(inside) - 1:,} more)" if len(inside) > 1 else ""
        return (f"occurs in the label name {inside[0][:MAX_NAME_CHARS]!r}{more}, so a label set joined with it "
                "would read back as other labels")
    return None


def check_sep(sep, where: str, labels: Iterable[str] = (), error: type[Exception] = DataError) -> str:
    """`sep`, or `error` (DataError for a table's flag, ModelError for a model folder's file) naming `where`."""
    problem = sep_problem(sep, labels)
    if problem:
        shown = repr(sep[:20]) + ("…" if len(sep) > 20 else "") if isinstance(sep, str) else repr(sep)
        raise error(f"{where}: label separator {shown} {problem}")
    return sep


@functools.lru_cache(maxsize=65536)  # a table repeats its few names on every row
def name_problem(name: str, sep: str | None = None) -> str | None:
    """Why `name` cannot be a label, or None. For every kind: not empty, at most MAX_NAME_CHARS, no control
    character (NUL, newline, tab: a CSV row or a log line would split), no bidirectional control (it makes a
    label read as another), not a spreadsheet formula (labeled.csv and label_issues.csv are opened in
    spreadsheets), not NONE_LABEL (the name of the empty set). A multi-label name (`sep` given) also holds no
    separator, neither `sep` nor a common one (it would read back as two labels, or as a file that mixes
    separators), and neither starts with `[` nor ends with `]` (a set holding it would read as JSON)."""
    if not name:
        return "is empty"
    if len(name) > MAX_NAME_CHARS:
        return f"is {len(name)} characters long (at most {MAX_NAME_CHARS})"
    bad = next((c for c in name if c in BIDI or unicodedata.category(c) in ("Cc", "Zl", "Zp")), None)
    if bad is not None:
        return f"holds the control character U+{ord(bad):04X}"
    if is_formula(name):
        return "starts like a spreadsheet formula (= + - @)"
    if name == NONE_LABEL:
        return f"is {NONE_LABEL!r}, the name shown for no label"
    if sep is None:
        return None
    if sep in name:
        return f"contains the separator {sep!r}, so it would read back as two labels: rename it"
    inner = next((s for s in COMMON_SEPS if s in name), None)
    if inner is not None:
        return (f"contains {inner!r}, which separates labels in other files (mixing it with {sep!r} in one table "
                f"reads two conventions): rename it, or if {inner!r} is this file's separator, say so (--label-sep)")
    if name.startswith("[") or name.endswith("]"):
        return "starts with '[' or ends with ']': a label set holding it would read as a JSON list"
    return None


def check_name(name: str, where: str, sep: str | None = None) -> str:
    """`name`, or DataError naming `where` (file or session, row, column) and the name."""
    problem = name_problem(name, sep)
    if problem:
        shown = repr(name[:MAX_NAME_CHARS]) + ("…" if len(name) > MAX_NAME_CHARS else "")
        raise DataError(f"{where}: label {shown} {problem}")
    return name


# ------------------------------------------------------------------------------------------------ cells
def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _listed(value, where: str) -> list:
    """The items of a list cell (a Python list or array, or the JSON text of one)."""
    if isinstance(value, (list, tuple, np.ndarray)):
        return list(value)
    try:
        items = json.loads(value)
    except (ValueError, RecursionError):  # "[" * 5000: a traceback from k-fold before (issue 40)
        items = None
    if not isinstance(items, list):
        raise DataError(f"{where}: {value[:60]!r} starts like a JSON list but is not one; write label names "
                        'joined by the separator, or a JSON list of strings (["a", "b"])')
    return items


def parse_set(value, sep: str, where: str = "") -> list[str]:
    """A multi-label cell's label names, each once, in the order written; DataError naming `where` and the
    value for a cell no name rule allows (see the module's docstring for the cell's forms)."""
    if _missing(value):
        return []
    text = None if isinstance(value, (list, tuple, np.ndarray)) else str(value).strip()
    if text is None or (text.startswith("[") and text.endswith("]")):
        items = _listed(value if text is None else text, where)
        odd = next((v for v in items if v is not None and not isinstance(v, (str, int, float))), None)
        if odd is not None:
            raise DataError(f"{where}: the list {str(value)[:60]!r} holds {odd!r}, not a label name")
        names = [str(v).strip() for v in items if v is not None]
    else:
        names = [n.strip() for n in text.split(sep)]
    names = list(dict.fromkeys(n for n in names if n))
    if len(names) > MAX_LABELS_PER_ROW:
        raise DataError(f"{where}: {len(names)} labels in one cell (at most {MAX_LABELS_PER_ROW}): "
                        f"{str(value)[:60]!r}…")
    for name in names:
        problem = name_problem(name, sep)
        if problem:
            cell = "" if text == name else f" (cell {str(value)[:80]!r})"
            raise DataError(f"{where}: label {name[:MAX_NAME_CHARS]!r}{cell} {problem}")
    return names


def parse_one(value, where: str = "") -> list[str]:
    """A single-label cell as a list of its one name ([] when empty); DataError for a name the rule refuses."""
    if _missing(value):
        return []
    name = str(value).strip()
    return [check_name(name, where)] if name else []


# ------------------------------------------------------------------------------------------------ the space
@dataclass(frozen=True)
class LabelSpace:
    """The labels (id order; empty while a table is still being read), the kind, and the separator that joins
    a multi-label set in a cell (None for single-label)."""

    labels: tuple[str, ...] = ()
    sep: str | None = None

    @classmethod
    def of(cls, labels: Iterable[str] = (), multi_label: bool = False, sep: str | None = None) -> LabelSpace:
        return cls(tuple(labels), (sep or DEFAULT_SEP) if multi_label else None)

    @classmethod
    def from_config(cls, config, sep: str | None = None) -> LabelSpace:
        """From a transformers config (or config.json as a dict) and, for multi-label, the separator."""
        if isinstance(config, dict):
            id2label = {int(k): v for k, v in config.get("id2label", {}).items()}
            labels = [id2label[i] for i in range(len(id2label))]
        else:
            labels = labels_from_config(config)
        return cls.of(labels, is_multi_label(config), sep)

    @classmethod
    def recorded(cls, record: dict) -> LabelSpace:
        """The kind (no labels) a JSON file records: transformers' problem_type (config.json, calibration.json) or
        our `"multi_label": true` (KIND_KEY: tfidf.json, blend.json); else single-label."""
        return cls.of(multi_label=is_multi_label(record) or bool(record.get(KIND_KEY, False)))

    @classmethod
    def from_folder(cls, folder) -> LabelSpace:
        """A model folder's: config.json's labels and kind, thresholds.json's separator (else DEFAULT_SEP);
        ModelError naming the file when config.json cannot be read."""
        path = Path(folder) / model_files.CONFIG
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
            space = cls.from_config(config)
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
            raise ModelError(f"{path}: unreadable ({type(e).__name__}: {e})") from None
        if not space.multi_label:
            return space
        try:
            sep = json.loads((Path(folder) / model_files.THRESHOLDS).read_text(encoding="utf-8")).get("label_sep")
        except (OSError, ValueError, AttributeError):
            sep = None
        return cls.of(space.labels, True, sep)

    @property
    def multi_label(self) -> bool:
        return self.sep is not None

    @property
    def problem_type(self) -> str:
        return MULTI_LABEL if self.multi_label else SINGLE_LABEL

    def with_labels(self, labels: Iterable[str]) -> LabelSpace:
        return LabelSpace(tuple(labels), self.sep)

    def with_sep(self, sep: str | None) -> LabelSpace:
        """This space with a file's own separator (a --label-sep flag) where one is given; a single-label space
        has none and stays as it is."""
        return LabelSpace.of(self.labels, self.multi_label, sep or self.sep)

    def config_fields(self) -> dict:
        """What a transformers config is given for this kind: multi-label's problem_type (a single-label
        config leaves it unset, as transformers does until a loss is asked of it)."""
        return self.pick({}, {"problem_type": MULTI_LABEL})

    @property
    def kind(self) -> str:
        """The kind in words: "single-label" or "multi-label"."""
        return self.pick("single-label", "multi-label")

    def pick(self, single, multi):
        """`multi` for a multi-label space, else `single`: where a kind's code is chosen, once (k-fold's task,
        the engine's decision, the label-issue finder), so no caller tests the kind itself."""
        return multi if self.multi_label else single

    def parse(self, cell, where: str = "") -> list[str]:
        """The names a cell holds: a set's names, or a single label as a list of one ([] for an empty cell)."""
        return parse_set(cell, self.sep, where) if self.multi_label else parse_one(cell, where)

    def join(self, names: Iterable[str], sort: bool = True) -> str:
        """Names as a cell holds them (a set's names sorted, so equal sets are equal cells; in the order given
        with `sort` False)."""
        names = list(names)
        return self.sep.join(sorted(names) if sort else names) if self.multi_label else (names[0] if names else "")

    def marked(self, names: Iterable[str], sort: bool = True) -> str:
        """`join` for a table where an empty cell means "no answer" (the label and teacher columns of a teacher
        table, finetune/teacher_data.py): there the empty set is written `[]`, the JSON list every reader of a set
        cell reads as no label."""
        return self.join(names, sort) or self.pick("", "[]")

    @staticmethod
    def given(cell) -> bool:
        """Whether a cell holds an answer, where an empty cell means "no answer" (see `marked`): any cell but an
        empty one, so `[]` (a set with no label) is given."""
        if isinstance(cell, (list, tuple, np.ndarray)):
            return True
        return not _missing(cell) and not is_blank(str(cell))  # zero-width characters alone are no answer

    def canonical(self, cell, where: str = "") -> str:
        return self.join(self.parse(cell, where))

    def check_name(self, name: str, where: str) -> str:
        return check_name(name, where, self.sep)

    def shown(self, cell: str) -> str:
        """A cell as a person reads it: a set's names joined by ", ", NONE_LABEL for the empty set."""
        if not self.multi_label:
            return cell
        return ", ".join(cell.split(self.sep)) if cell else NONE_LABEL

    def matrix(self, sets: Iterable[list[str]], dtype=np.int8) -> tuple[np.ndarray, dict[str, int]]:
        """(n, L) 0/1 per label for parsed label sets, and the names not among the labels with their row
        counts (left out: a label the model does not know cannot be judged)."""
        sets = list(sets)
        index = {lab: j for j, lab in enumerate(self.labels)}
        y = np.zeros((len(sets), len(self.labels)), dtype)
        unknown: dict[str, int] = {}
        for i, names in enumerate(sets):
            for name in names:
                if name in index:
                    y[i, index[name]] = 1
                else:
                    unknown[name] = unknown.get(name, 0) + 1
        return y, unknown

    def targets(self, cells: Iterable, where) -> tuple[np.ndarray, dict[str, int]]:
        """What a loss or a score reads from label cells: ids (n,) for single-label, 0/1 (n, L) for multi-label,
        and the unknown names with their counts. `where(i)` names row i for errors (a str: "<where> row i+1")."""
        name = where if callable(where) else (lambda i: f"{where} row {i + 1}")
        sets = [self.parse(c, name(i)) for i, c in enumerate(cells)]
        if self.multi_label:
            return self.matrix(sets)
        index = {lab: j for j, lab in enumerate(self.labels)}
        unknown: dict[str, int] = {}
        for s in sets:
            if s and s[0] not in index:
                unknown[s[0]] = unknown.get(s[0], 0) + 1
        return np.array([index.get(s[0], -1) if s else -1 for s in sets], np.int64), unknown
