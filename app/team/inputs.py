"""What the team routes take (app/team/routes.py, the Team tab): the rules a string or an id must pass before
anything is kept, each refusal a 422 naming the field, as `/v1/classify` answers bad texts.

- Every string: valid Unicode. A lone surrogate passes JSON and pydantic's StrictStr, is stored (escaped in the
  JSON column), and then fails every response that holds it in Starlette's UTF-8 encoding: one bad label made
  `GET /v1/datasets` answer 500 to every user.
- A dataset's texts: the text rules of `/v1/classify` (app/http/api.py text_refusal: --max-chars, not empty
  nor only NUL / zero-width characters, something left after the model's normalisation).
- An id (a dataset's in the path, a record's in the body): 1 to 2^63 - 1, the database's integer. A larger one
  passed `int` and failed in SQLite's integer conversion, a 500 with a traceback.
- A dataset's label names: the one label-name rule (textdata/labels.py name_problem), with the separator a
  dataset's label set is joined by, so the training table and the export read them back as given.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import HTTPException, Path
from pydantic import AfterValidator, Field, StrictInt, StrictStr

from app.http.api import text_refusal, unicode_problem
from app.label_kinds import dataset_space
from labelstore.queue import Dataset
from textdata.labels import MAX_NAME_CHARS, name_problem


def _valid_unicode(text: str) -> str:
    problem = unicode_problem(text)
    if problem:
        raise ValueError(problem)
    return text


Text = Annotated[StrictStr, AfterValidator(_valid_unicode)]
MAX_ID = 2**63 - 1  # SQLite's INTEGER and PostgreSQL's bigint
DatasetId = Annotated[int, Path(ge=1, le=MAX_ID, description="the dataset's id")]
RecordId = Annotated[StrictInt, Field(ge=1, le=MAX_ID, description="the record's id (from `next`)")]


def invalid(loc: list, msg: str) -> HTTPException:
    return HTTPException(422, [{"type": "value_error", "loc": ["body", *loc], "msg": msg}])


def normalizer(state):
    """The served model's text normalisation, as /v1/classify checks texts with it (test doubles: a strip)."""
    return getattr(state.served.clf, "normalizer", str.strip)


def check_texts(texts, max_chars: int, normalize=str.strip) -> None:
    """A new dataset's texts, or 422 naming the first bad one (field `texts` and its index), as /v1/classify."""
    for i, text in enumerate(texts):
        refused = text_refusal(text, max_chars, normalize)
        if refused:
            raise HTTPException(422, [{"type": refused[1], "loc": ["body", "texts", i], "msg": refused[0]}])


def check_labels(names, space) -> None:
    """A new dataset's label names, or 422 naming the first bad one (field `labels`, its index, the name);
    `space`: the kind asked for (a set's cell joins by the dataset's separator, not the served model's)."""
    sep = dataset_space(Dataset(0, "", [], space.multi_label, 1)).sep
    for i, name in enumerate(names):
        problem = unicode_problem(name) or name_problem(name, sep)
        if problem:
            raise invalid(["labels", i], f"label {name[:MAX_NAME_CHARS]!r} {problem}")


def shown(row: dict) -> dict:
    """A stored dataset row as a response can hold it: a string that is not valid Unicode (a lone surrogate
    kept before the door refused it, or written by another tool) is shown escaped (`\\ud800`) and the row
    names it in `invalid`, so one bad row never makes the list answer 500 to every user."""
    bad = []

    def fix(key, value):
        if isinstance(value, str) and unicode_problem(value):
            bad.append(key)
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        if isinstance(value, list):
            return [fix(key, v) for v in value]
        return value

    out = {k: fix(k, v) for k, v in row.items()}
    return {**out, "invalid": sorted(set(bad))} if bad else out
