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
# The Team tab's keys while its disagreements are on screen (not while typing): 1-9 click a label's button; on a
# dataset of label sets (its checkboxes shown) 1-9 tick, Enter settles with the ticked labels, 0 with none.
TEAM_KEYS_JS = """
<script>
document.addEventListener('keydown', (e) => {
  const t = e.target;
  if (e.ctrlKey || e.metaKey || e.altKey || e.repeat) return;
  if (t && (t.tagName === 'INPUT' || t.tagName === 'TEXTAREA' || t.tagName === 'SELECT' || t.isContentEditable)) return;
  const table = document.getElementById('team-disagreements');
  if (!table || table.offsetParent === null) return;
  const checks = document.getElementById('team-checks');
  let id = null;
  if (checks && checks.offsetParent !== null) {
    if (/^[1-9]$/.test(e.key)) {
      const box = checks.querySelectorAll('input[type=checkbox]')[Number(e.key) - 1];
      if (box) { e.preventDefault(); box.click(); }
      return;
    }
    if (e.key === 'Enter') id = 'team-save';
    else if (e.key === '0') id = 'team-none';
  } else if (/^[1-9]$/.test(e.key)) id = 'team-btn-' + e.key;
  const b = id && document.getElementById(id);
  if (b && b.offsetParent !== null) { e.preventDefault(); b.click(); }
});
</script>
"""
# A dataset picked: focus leaves the dropdown, so the next key settles (keys typed in a box are the box's).
BLUR_JS = "() => { const a = document.activeElement; if (a && a.closest && a.closest('#team-dataset')) a.blur(); }"
SETTLED_ALREADY = ("⚠ Nothing settled: that key was for record {record}, settled a moment ago (as {label}). This "
                   "is the next one; Adjudicate changes a settled label.")
NOTHING_TICKED = ("Nothing ticked, nothing settled: tick the labels that apply (1–9), then Enter, or press 0 "
                  "(*None of these*) when none does.")


def key_buttons(labels) -> list:
    return [gr.update(value=f"[{i + 1}] {labels[i]}", visible=True) if i < len(labels)
            else gr.update(visible="hidden") for i in range(KEY_BUTTONS)]


def check_boxes(labels) -> list:
    """A dataset of label sets' checkboxes (keys 1-9 tick them), Settle and None; hidden for one label."""
    shown = bool(labels)
    return [gr.update(choices=[(f"[{i + 1}] {lab}" if i < KEY_BUTTONS else lab, lab) for i, lab in enumerate(labels)],
                      value=[], visible=shown or "hidden"),
            gr.update(visible=shown or "hidden"), gr.update(visible=shown or "hidden")]


def _answer(value) -> str:
    return ";".join(value) or "(none)" if isinstance(value, list) else str(value)


CURRENT_CHARS = 300  # of the text on screen above the keys: three lines at 1366 px (the table has 200 a row)


def current(row: dict | None) -> str:
    """The disagreement the keys settle now: its record id, its text's start, and every answer with who gave it,
    each its own element, on a line that wraps inside the screen's width."""
    if row is None:
        return ""
    text = row["text"] if len(row["text"]) <= CURRENT_CHARS else row["text"][:CURRENT_CHARS] + "…"
    answers = " · ".join(f'<span class="team-answer">{html.escape(str(who))}: {html.escape(_answer(v))}</span>'
                         for who, v in row["answers"].items())
    return f"**Record {row['record_id']}**, the one the keys settle: {html.escape(text)}\n\n{answers}"


def settled(engine, ds: queue.Dataset, record_id: int, label) -> str:
    """What an adjudication did, and how much of the dataset is settled now."""
    judged, left = len(review.adjudicated(engine, ds)), len(review.disagreements(engine, ds))
    return (f"Record {record_id} settled as **{html.escape(_answer(label))}**. {judged} texts adjudicated in "
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
        dataset's labels, the first disagreement's record id (the next to settle), `said`, the label buttons,
        that disagreement's answers and the checkboxes (the keys' of the dataset's kind)."""
        if staff(request) is None:
            return STAFF_ONLY, [], gr.update(choices=[]), None, "", *key_buttons([]), "", *check_boxes([])
        if dataset_id is None:
            return ("No dataset chosen (create one from a file below).", [], gr.update(choices=[]), None, "",
                    *key_buttons([]), "", *check_boxes([]))
        ds = queue.get_dataset(engine, int(dataset_id))
        split = review.disagreements(engine, ds)
        rows = [[r["record_id"], " · ".join(f"{k}: {_answer(v)}" for k, v in r["answers"].items()), r["text"][:200]]
                for r in split]
        kind = kind_of(dataset_space(ds))
        return (summary(engine, ds), rows, gr.update(choices=[str(x) for x in ds.labels], value=None),
                split[0]["record_id"] if split else None, said, *key_buttons(kind.keyed_labels(ds.labels)),
                current(split[0] if split else None), *check_boxes(kind.ticked_labels(ds.labels)))

    def described(dataset_id, record_id):
        """The answers of the record a reviewer chose (a row clicked, a number typed): the keys settle it."""
        if dataset_id is None or record_id is None:
            return gr.skip()
        split = review.disagreements(engine, queue.get_dataset(engine, int(dataset_id)))
        row = next((r for r in split if r["record_id"] == int(record_id)), None)
        return current(row) if row else f"Record {int(record_id)} is not among the disagreements to settle."

    def pick(evt: gr.SelectData):
        """A click on a disagreement's row: its record id is the one to settle."""
        row = evt.row_value or []
        try:
            return int(row[0])
        except (IndexError, TypeError, ValueError):
            return gr.skip()

    def settle_record(dataset_id, record_id, label, request: gr.Request, key: bool = False):
        """Adjudicate `record_id` with `label`. `key`: a key's (or its button's), for the record on screen when it
        was pressed (the box's value the page sent with it): a record settled meanwhile (a second key pressed
        before the next was drawn) is not settled again, as the Label tab refuses an annotator's (issue 59, D2)."""
        reviewer = staff(request)
        if reviewer is None:
            raise gr.Error(STAFF_ONLY)
        if dataset_id is None or record_id is None or (not label and not key):
            raise gr.Error("Choose a dataset, a record id from the table (click its row) and a label.")
        if not 1 <= record_id <= MAX_ID:  # the database's integer (app/team/inputs.py): a larger one fails in it
            raise gr.Error(f"record_id must be 1 to {MAX_ID} (a record id from the table).")
        ds = queue.get_dataset(engine, int(dataset_id))
        value = kind_of(dataset_space(ds)).store_choice(label)
        try:  # recorded as the signed-in reviewer
            done = review.adjudicate(engine, ds, reviewer[0], int(record_id), value, first=key)
        except queue.NotFound as e:
            raise gr.Error(str(e)) from None
        if "settled" in done:
            return show(dataset_id, request, SETTLED_ALREADY.format(record=int(record_id),
                                                                    label=html.escape(_answer(done["settled"]))))
        return show(dataset_id, request, settled(engine, ds, int(record_id), value))

    def key_settler(i: int):
        """The i-th label's button (key i+1): settle the record in the box with it, then the next is filled in.
        A function of its own, not a partial: Gradio finds the gr.Request parameter of a plain function only."""
        def settle_key(dataset_id, record_id, request: gr.Request):
            if dataset_id is None:
                raise gr.Error("Choose a dataset first.")
            labels = queue.get_dataset(engine, int(dataset_id)).labels
            if i >= len(labels):
                raise gr.Error("No such label in this dataset.")
            return settle_record(dataset_id, record_id, str(labels[i]), request, key=True)
        return settle_key

    def settle_ticked(dataset_id, record_id, ticked, request: gr.Request):
        """Enter on a dataset of label sets: the ticked labels; nothing ticked is no answer (a stray Enter), "none
        of these" is its own key (0)."""
        if not ticked:
            return show(dataset_id, request, NOTHING_TICKED)
        return settle_record(dataset_id, record_id, list(ticked), request, key=True)

    def settle_none(dataset_id, record_id, request: gr.Request):
        return settle_record(dataset_id, record_id, [], request, key=True)

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
        # the disagreement to settle and the keys' targets first: at 1366x768 they were under the agreement's tables
        t_current = gr.Markdown(elem_id="team-current")
        t_checks, t_keys = _key_panel()
        t_said = gr.Markdown(elem_id="team-said")
        t_summary = gr.Markdown(elem_id="team-summary")
        # answers first and wrapped: at 1366 px the text column took the width and pushed them off screen
        t_split = gr.Dataframe(headers=["record_id", "answers", "text"], label="Disagreements to settle (click a row)",
                               interactive=False, wrap=True, column_widths=["90px", "40%", "60%"], max_height=320,
                               elem_id="team-disagreements")
        with gr.Row():
            t_record = gr.Number(label="record_id", precision=0, elem_id="team-record")
            t_label = gr.Dropdown(label="Final label", choices=[], elem_id="team-label")
            t_settle = gr.Button("Adjudicate", variant="primary", elem_id="team-settle")
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
    outputs = [t_summary, t_split, t_label, t_record, t_said, *t_keys, t_current, *t_checks]

    def listing(request: gr.Request):
        return gr.update(choices=choices(request))

    def settle(dataset_id, record_id, label, request: gr.Request):  # Adjudicate: the dropdown's label
        return settle_record(dataset_id, record_id, label, request)

    tab.select(listing, None, t_dataset)
    t_refresh.click(listing, None, t_dataset)
    t_dataset.change(show, t_dataset, outputs)
    t_dataset.input(None, js=BLUR_JS)
    t_split.select(pick, None, t_record).then(described, [t_dataset, t_record], t_current)
    t_record.input(described, [t_dataset, t_record], t_current)
    t_settle.click(settle, [t_dataset, t_record, t_label], outputs)
    for i, b in enumerate(t_keys):
        b.click(key_settler(i), [t_dataset, t_record], outputs)
    t_checks[1].click(settle_ticked, [t_dataset, t_record, t_checks[0]], outputs)
    t_checks[2].click(settle_none, [t_dataset, t_record], outputs)

    def final_csv(dataset_id, request: gr.Request):
        return final(dataset_id, "csv", request)

    def final_jsonl(dataset_id, request: gr.Request):
        return final(dataset_id, "jsonl", request)

    f_csv.click(final_csv, t_dataset, [f_file, f_said])
    f_jsonl.click(final_jsonl, t_dataset, [f_file, f_said])
    n_create.click(create, [n_file, n_column, n_name, n_overlap], [n_said, t_dataset])


def _key_panel() -> tuple[list, list]:
    """([checkboxes, Settle, None], the label buttons): the keys' (TEAM_KEYS_JS) targets, shown by the dataset's
    kind: one label's buttons (a key settles the record in the box), or a set's checkboxes (keys tick, Enter
    settles the ticked labels, 0 none)."""
    with gr.Row():
        checks = gr.CheckboxGroup(choices=[], label="Final labels (tick every one that applies)", visible="hidden",
                                  elem_id="team-checks")
        save = gr.Button("✓ Settle with the ticked labels  [Enter]", variant="primary", visible="hidden", size="sm",
                         elem_id="team-save")
        none = gr.Button("None of these  [0]", visible="hidden", size="sm", elem_id="team-none")
    with gr.Row():
        keys = [gr.Button(visible="hidden", size="sm", min_width=80, elem_id=f"team-btn-{i + 1}")
                for i in range(KEY_BUTTONS)]
    return [checks, save, none], keys


def reviewer_of(cfg, state, cookie: str | None) -> tuple[int, str, str] | None:
    """The signed-in reviewer or admin (the key holder, or `local` in one-person mode), or None: an annotator
    labels blind and sees nobody's answers here."""
    user = state.identities.ui_user(cfg, state.sessions, cookie)
    return user if user is not None and user[2] in ("reviewer", "admin") else None
