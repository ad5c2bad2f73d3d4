"""The UI's Team tab: a dataset's progress (who labeled how much), its agreement, and the texts the
annotators disagree on, which a reviewer settles here (the adjudicated label is what training takes)."""

from __future__ import annotations

import html
from pathlib import Path

import gradio as gr
from pydantic import ValidationError

from app.config import open_to_anyone
from app.label_kinds import dataset_space, kind_of
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


def team_tab(cfg, state) -> None:
    engine = state.store

    def staff(request) -> tuple[int, str, str] | None:
        user = state.identities.ui_request_user(cfg, state.sessions, request)
        return user if user is not None and user[2] in ("reviewer", "admin") else None

    def choices(request: gr.Request):
        if staff(request) is None:
            return []
        return [(f"{d['id']}: {d['name']} ({d['complete']}/{d['records']})", d["id"])
                for d in queue.list_datasets(engine)]

    def show(dataset_id, request: gr.Request):
        if staff(request) is None:
            return STAFF_ONLY, [], gr.update(choices=[])
        if dataset_id is None:
            return "No dataset chosen (create one from a file below).", [], gr.update(choices=[])
        ds = queue.get_dataset(engine, int(dataset_id))
        split = review.disagreements(engine, ds)
        rows = [[r["record_id"], r["text"][:200], "; ".join(f"{k}: {v}" for k, v in r["answers"].items())]
                for r in split]
        return summary(engine, ds), rows, gr.update(choices=[str(x) for x in ds.labels])

    def settle(dataset_id, record_id, label, request: gr.Request):
        reviewer = staff(request)
        if reviewer is None:
            raise gr.Error(STAFF_ONLY)
        if dataset_id is None or record_id is None or not label:
            raise gr.Error("Choose a dataset, a record id from the table and a label.")
        if not 1 <= record_id <= MAX_ID:  # the database's integer (app/team/inputs.py): a larger one fails in it
            raise gr.Error(f"record_id must be 1 to {MAX_ID} (a record id from the table).")
        ds = queue.get_dataset(engine, int(dataset_id))
        value = kind_of(dataset_space(ds)).store_choice(label)
        try:
            review.adjudicate(engine, ds, reviewer[0], int(record_id), value)  # recorded as the signed-in reviewer
        except queue.NotFound as e:
            raise gr.Error(str(e)) from None
        return show(dataset_id, request)

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
        t_split = gr.Dataframe(headers=["record_id", "text", "answers"], label="Disagreements to settle",
                               interactive=False, elem_id="team-disagreements")
        with gr.Row():
            t_record = gr.Number(label="record_id", precision=0, elem_id="team-record")
            t_label = gr.Dropdown(label="Final label", choices=[], elem_id="team-label")
            t_settle = gr.Button("Adjudicate", variant="primary", elem_id="team-settle")
        with gr.Accordion("New dataset from a file (reviewers and admins)", open=False):
            with gr.Row():
                n_file = uploaded_only(gr.File(label="CSV, TSV, JSONL or Parquet", elem_id="team-new-file"))
                n_column = gr.Textbox(label="Text column", value="text", elem_id="team-new-column")
                n_name = gr.Textbox(label="Name (default: the file's)", elem_id="team-new-name")
                n_overlap = gr.Number(label="Answers per text (overlap k)", value=1, minimum=1, precision=0,
                                      elem_id="team-new-overlap")
            n_create = gr.Button("Create dataset", elem_id="team-new-create")
            n_said = gr.Markdown(elem_id="team-new-said")
    outputs = [t_summary, t_split, t_label]
    def listing(request: gr.Request):
        return gr.update(choices=choices(request))

    tab.select(listing, None, t_dataset)
    t_refresh.click(listing, None, t_dataset)
    t_dataset.change(show, t_dataset, outputs)
    t_settle.click(settle, [t_dataset, t_record, t_label], outputs)
    n_create.click(create, [n_file, n_column, n_name, n_overlap], [n_said, t_dataset])


def reviewer_of(cfg, state, cookie: str | None) -> tuple[int, str, str] | None:
    """The signed-in reviewer or admin (the key holder, or `local` in one-person mode), or None: an annotator
    labels blind and sees nobody's answers here."""
    user = state.identities.ui_user(cfg, state.sessions, cookie)
    return user if user is not None and user[2] in ("reviewer", "admin") else None
