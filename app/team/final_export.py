"""A dataset's final labels as a file: one row a text, with the label the next retrain trains on (the
adjudicated one, else the majority of its answers: labelstore/review.py final_label), how it was decided and
how many of its answers agree. Read from the same replay of the event log as the training table
(app/versions/trainset.py, labelstore/snapshot.py labels_as_of), as of the newest event, so the file and the
next retrain's rows of this dataset are the same texts with the same labels. A text without a final label (a
tie nobody adjudicated, or no answer yet) is not in either; `final_rows` counts them.

CSV (a person opens it: UTF-8 with a BOM, so a spreadsheet on Windows reads Korean, and no cell runs as a
formula) or JSONL (a pipeline reads it: texts and labels as stored, a label set as a list).
"""

from __future__ import annotations

import csv
import io
import json

from app.label_kinds import dataset_space, kind_of
from labelstore import queue, review
from labelstore.snapshot import labels_as_of, latest_event
from textdata.labels import is_formula

FIELDS = ["record_id", "text", "label", "decided", "answers", "agreement"]
BOM = "\ufeff"


def final_rows(engine, ds: queue.Dataset) -> tuple[list[dict], int]:
    """(one row a text with a final label, in record order; how many texts have none: ties, unanswered)."""
    found = sorted(labels_as_of(engine, latest_event(engine), ds.id), key=lambda r: r["record_id"])
    rows = [{"record_id": r["record_id"], "text": r["text"], "label": r["label"], "decided": r["decided"],
             "answers": r["answers"], "agreement": round(r["agreeing"] / r["answers"], 4) if r["answers"] else None}
            for r in found]
    return rows, review.progress(engine, ds)["records"] - len(rows)


def final_text(engine, ds: queue.Dataset, format: str) -> tuple[str, int]:
    """(the file's text, csv or jsonl; how many texts it leaves out for want of a final label)."""
    rows, missing = final_rows(engine, ds)
    if format == "jsonl":
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), missing
    out = io.StringIO()
    out.write(BOM)
    writer = csv.DictWriter(out, FIELDS, lineterminator="\r\n")
    writer.writeheader()
    kind = kind_of(dataset_space(ds))
    for r in rows:  # a person opens this file: no cell may run as a spreadsheet formula
        cells = {**r, "label": kind.store_cell(r["label"]), "agreement": "" if r["agreement"] is None
                 else r["agreement"]}
        writer.writerow({k: "'" + v if isinstance(v, str) and is_formula(v) else v for k, v in cells.items()})
    return out.getvalue(), missing
