"""The UI's Team tab: a dataset's progress (who labeled how much), its agreement, and the texts the
annotators disagree on, which a reviewer settles here (the adjudicated label is what training takes)."""

from __future__ import annotations

import html
import re
from pathlib import Path

import gradio as gr
from pydantic import ValidationError

from app.config import open_to_anyone
from app.label_kinds import dataset_space, kind_of
from app.team.final_export import final_text
from app.team.inputs import MAX_ID
from app.team.routes import NewDataset, new_dataset, open_refusal
from app.ui.uploads import read_texts, uploaded_only
from labelstore import queue, review, users
from labelstore.agreement import agreement


def _fmt(x) -> str:
    return "–" if x is None else f"{x:.3f}"


def summary(engine, ds: queue.Dataset) -> str:
    progress = review.progress(engine, ds)
    figures = agreement(review.answer_rows(engine, ds), ds.labels, ds.multi_label, ds.overlap)
    lines = [(f"**{html.escape(ds.name)}**: {progress['complete']} of {progress['records']} texts have their "
             f"{ds.overlap} answer(s). Krippendorff's alpha {_fmt(figures['krippendorff_alpha'])} · Fleiss' kappa "
             f"{_fmt(figures['fleiss_kappa'])} · {figures['n_records']} texts with two or more answers."),
             "\n| annotator | answers | mean Cohen's kappa |\n|---|---|---|"]
    lines += [f"| {html.escape(name)} | {a['answers']} | {_fmt(a['mean_cohen_kappa'])} |"
              for name, a in figures["per_annotator"].items()]
    lines.append("\n| label | alpha | Fleiss' kappa |\n|---|---|---|")
    lines += [f"| {html.escape(str(lab))} | {_fmt(v['krippendorff_alpha'])} | {_fmt(v['fleiss_kappa'])} |"
              for lab, v in figures["per_label"].items()]
    return "\n".join(lines)


STAFF_ONLY = ("The Team tab shows every annotator's answers: it is for reviewers and admins. Annotators label "
              "blind (docs/app.md, Team labeling).")


KEY_BUTTONS = 9
# Keys 1-9 click the Team tab's label buttons while its disagreements are on screen (not while typing).
TEAM_KEYS_JS = """
<script>
document.addEventListener('keydown', (e) => {
  const t = e.target;
  if (e.ctrlKey || e.metaKey || e.altKey || e.repeat || !/^[1-9]$/.test(e.key)) return;
  if (t && (t.tagName === 'INPUT' || t.tagName === 'TEXTAREA' || t.tagName === 'SELECT' || t.isContentEditable)) return;
  const table = document.getElementById('team-disagreements');
  const b = document.getElementById('team-btn-' + e.key);
  if (table && table.offsetParent !== null && b && b.offsetParent !== null) { e.preventDefault(); b.click(); }
});
</script>
"""


def key_buttons(labels) -> list:
    return [gr.update(value=f"[{i + 1}] {labels[i]}", visible=True) if i < len(labels)
            else gr.update(visible="hidden") for i in range(KEY_BUTTONS)]


def _answer(value) -> str:
    return ";".join(value) or "(none)" if isinstance(value, list) else str(value)


def settled(engine, ds: queue.Dataset, record_id: int, label) -> str:
    """What an adjudication did, and how much of the dataset is settled now."""
    judged, left = len(review.adjudicated(engine, ds)), len(review.disagreements(engine, ds))
    return (f"Record {record_id} settled as **{html.escape(str(label))}**. {judged} texts adjudicated in "
            f"{html.escape(ds.name)}; {left} disagreements left to settle.")


def team_tab(cfg, state, exports=None) -> None:
    """`exports`: where downloads go (app/ui/page.py Exports; a fresh one when not given)."""
    if exports is None:
        from app.ui.handouts import Exports

        exports = Exports()
    engine = state.store

    def staff(request) -> tuple[int, str, str] | None:
        user = state.identities.ui_request_user(cfg, state.sessions, request)
        return user if user is not None and user[2] in ("reviewer", "admin") else None

    def choices(request: gr.Request):
        if staff(request) is None:
            return []
        return [(f"{d['id']}: {d['name']} ({d['complete']}/{d['records']})", d["id"])
                for d in queue.list_datasets(engine)]

    def show(dataset_id, request: gr.Request, said: str = ""):
        """The summary, the disagreements (answers before the text: they are what a reviewer reads), the
        dataset's labels, the first disagreement's record id (the next to settle) and `said`."""
        if staff(request) is None:
            return STAFF_ONLY, [], gr.update(choices=[]), None, "", *key_buttons([])
        if dataset_id is None:
            return ("No dataset chosen (create one from a file below).", [], gr.update(choices=[]), None, "",
                    *key_buttons([]))
        ds = queue.get_dataset(engine, int(dataset_id))
        split = review.disagreements(engine, ds)
        rows = [[r["record_id"], " · ".join(f"{k}: {_answer(v)}" for k, v in r["answers"].items()), r["text"][:200]]
                for r in split]
        return (summary(engine, ds), rows, gr.update(choices=[str(x) for x in ds.labels], value=None),
                split[0]["record_id"] if split else None, said, *key_buttons(kind_of(dataset_space(ds)).keyed_labels(ds.labels)))

    def pick(evt: gr.SelectData):
        """A click on a disagreement's row: its record id is the one to settle."""
        row = evt.row_value or []
        try:
            return int(row[0])
        except (IndexError, TypeError, ValueError):
            return gr.skip()

    def settle(dataset_id, record_id, label, request: gr.Request):
        reviewer = staff(request)
        if reviewer is None:
            raise gr.Error(STAFF_ONLY)
        if dataset_id is None or record_id is None or not label:
            raise gr.Error("Choose a dataset, a record id from the table (click its row) and a label.")
        if not 1 <= record_id <= MAX_ID:  # the database's integer (app/team/inputs.py): a larger one fails in it
            raise gr.Error(f"record_id must be 1 to {MAX_ID} (a record id from the table).")
        ds = queue.get_dataset(engine, int(dataset_id))
        value = kind_of(dataset_space(ds)).store_choice(label)
        try:
            review.adjudicate(engine, ds, reviewer[0], int(record_id), value)  # recorded as the signed-in reviewer
        except queue.NotFound as e:
            raise gr.Error(str(e)) from None
        return show(dataset_id, request, settled(engine, ds, int(record_id), label))

    def key_settler(i: int):
        """The i-th label's button (key i+1): settle the record in the box with it, then the next is filled in.
        A function of its own, not a partial: Gradio finds the gr.Request parameter of a plain function only."""
        def settle_key(dataset_id, record_id, request: gr.Request):
            if dataset_id is None:
                raise gr.Error("Choose a dataset first.")
            labels = queue.get_dataset(engine, int(dataset_id)).labels
            if i >= len(labels):
                raise gr.Error("No such label in this dataset.")
            return settle(dataset_id, record_id, str(labels[i]), request)
        return settle_key

    def final(dataset_id, format: str, request: gr.Request):
        """The dataset's final labels, one row a text, as the next retrain takes them (app/team/final_export.py)."""
        if staff(request) is None:
            raise gr.Error(STAFF_ONLY)
        if dataset_id is None:
            raise gr.Error("Choose a dataset first.")
        ds = queue.get_dataset(engine, int(dataset_id))
        text, missing = final_text(engine, ds, format)
        out = exports.path(re.sub(r"[^\w.-]+", "_", f"{ds.name}-final-labels.{format}"))
        out.write_text(text, encoding="utf-8")  # the CSV's BOM is in `text`
        n = text.count("\n") - (format == "csv")
        left = (f"; {missing} texts left out with no final label yet (a tie to adjudicate, or no answer)"
                if missing else "")
        return str(out), f"{n} texts with their final label (adjudicated, else the majority){left}."

    def create(file, text_column, name, overlap, request: gr.Request):
        """A dataset from an uploaded table, as `POST /v1/datasets` makes one (app/team/routes.py new_dataset)."""
        reviewer = staff(request)
        if reviewer is None:
            raise gr.Error(STAFF_ONLY)
        if open_to_anyone(cfg) and reviewer[1] == users.LOCAL:  # as the API's Callers: no datasets on an open server
            raise gr.Error(open_refusal(cfg))
        texts, empty = read_texts(cfg, file, text_column)
        try:
            body = NewDataset(name=(name or "").strip() or Path(file).stem, texts=texts, overlap=int(overlap or 1))
        except (ValidationError, ValueError) as e:
            raise gr.Error(f"Cannot create the dataset: {str(e).splitlines()[0][:200]}") from None
        made = new_dataset(state, engine, body, reviewer[0])
        said = (f"Dataset {made['id']} ({html.escape(body.name)}): {made['records']} texts, each to be answered by "
                f"{made['overlap']} different annotator(s)" + (f"; {made['duplicates']} repeated texts kept once"
                                                               if made["duplicates"] else "")
                + (f"; {empty} empty rows skipped" if empty else "") + ".")
        return said, gr.update(choices=choices(request), value=made["id"])

    with gr.Tab("Team", id="team", elem_id="tab-team") as tab:
        with gr.Row():
            t_dataset = gr.Dropdown(label="Dataset", choices=[], elem_id="team-dataset")
            t_refresh = gr.Button("Refresh", elem_id="team-refresh")
        t_summary = gr.Markdown(elem_id="team-summary")
        # answers first and wrapped: at 1366 px the text column took the width and pushed them off screen
        t_split = gr.Dataframe(headers=["record_id", "answers", "text"], label="Disagreements to settle (click a row)",
                               interactive=False, wrap=True, column_widths=["90px", "40%", "60%"], max_height=320,
                               elem_id="team-disagreements")
        with gr.Row():
            t_record = gr.Number(label="record_id", precision=0, elem_id="team-record")
            t_label = gr.Dropdown(label="Final label", choices=[], elem_id="team-label")
            t_settle = gr.Button("Adjudicate", variant="primary", elem_id="team-settle")
        with gr.Row():  # a single-label dataset's labels, keys 1-9 (TEAM_KEYS_JS): settle the record in the box
            t_keys = [gr.Button(visible="hidden", size="sm", min_width=80, elem_id=f"team-btn-{i + 1}")
                      for i in range(KEY_BUTTONS)]
        t_said = gr.Markdown(elem_id="team-said")
        with gr.Row():
            f_csv = gr.Button("Final labels (CSV)", size="sm", elem_id="team-final-csv")
            f_jsonl = gr.Button("Final labels (JSONL)", size="sm", elem_id="team-final-jsonl")
            f_file = gr.File(label="Final labels: one row a text, what the next retrain trains on",
                             elem_id="team-final-file")
        f_said = gr.Markdown(elem_id="team-final-said")
        if getattr(state, "identities", None) is not None:  # people sign in with tokens kept in the store
            from app.ui.people import people_panel

            people_panel(cfg, state)
        with gr.Accordion("New dataset from a file (reviewers and admins)", open=False):
            with gr.Row():
                n_file = uploaded_only(gr.File(label="CSV, TSV, JSONL or Parquet", elem_id="team-new-file"))
                n_column = gr.Textbox(label="Text column", value="text", elem_id="team-new-column")
                n_name = gr.Textbox(label="Name (default: the file's)", elem_id="team-new-name")
                n_overlap = gr.Number(label="Answers per text (overlap k)", value=1, minimum=1, precision=0,
                                      elem_id="team-new-overlap")
            n_create = gr.Button("Create dataset", elem_id="team-new-create")
            n_said = gr.Markdown(elem_id="team-new-said")
    outputs = [t_summary, t_split, t_label, t_record, t_said, *t_keys]
    def listing(request: gr.Request):
        return gr.update(choices=choices(request))

    tab.select(listing, None, t_dataset)
    t_refresh.click(listing, None, t_dataset)
    t_dataset.change(show, t_dataset, outputs)
    t_split.select(pick, None, t_record)
    t_settle.click(settle, [t_dataset, t_record, t_label], outputs)
    for i, b in enumerate(t_keys):
        b.click(key_settler(i), [t_dataset, t_record], outputs)

    def final_csv(dataset_id, request: gr.Request):
        return final(dataset_id, "csv", request)

    def final_jsonl(dataset_id, request: gr.Request):
        return final(dataset_id, "jsonl", request)

    f_csv.click(final_csv, t_dataset, [f_file, f_said])
    f_jsonl.click(final_jsonl, t_dataset, [f_file, f_said])
    n_create.click(create, [n_file, n_column, n_name, n_overlap], [n_said, t_dataset])


def reviewer_of(cfg, state, cookie: str | None) -> tuple[int, str, str] | None:
    """The signed-in reviewer or admin (the key holder, or `local` in one-person mode), or None: an annotator
    labels blind and sees nobody's answers here."""
    user = state.identities.ui_user(cfg, state.sessions, cookie)
    return user if user is not None and user[2] in ("reviewer", "admin") else None
