"""What the Label tab shows for a session in any state: the text, the model's hint, the label buttons, the
multi-label panel, progress and the earlier-sessions menu (app/ui/page.py wires the events)."""

from __future__ import annotations

import csv
import html
import time
from pathlib import Path

import gradio as gr

from app.labeling.review import given_label, given_set
from app.labeling.sessions import ORDERS, SessionStore
from app.ui import multilabel as ui_multilabel
from app.ui.review import hint as review_hint
from app.ui.review import take_view

MAX_LABEL_BUTTONS = 20
SAVED = " Every decision is saved on the server as you go."
# "least confident first" is a review's "lowest quality first": the session's order names, as each kind reads
REVIEW_ORDERS = {ORDERS[0]: "lowest quality first (likely wrong)", ORDERS[1]: "highest quality first"}


STALE = ui_multilabel.STALE


def shown_row(value) -> int | None:
    """The record id the browser sent with an event (the page's label-row): an int, or None for anything else."""
    try:
        return None if value is None or isinstance(value, bool) else int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def stale_answer(session, row) -> str | None:
    """Why an answer for `row` (the record on screen when the key was pressed) saves nothing: it is not the
    record the session shows now (a second key pressed before the next text was drawn); None when it is."""
    return STALE if row is not None and row != session.current() else None


def saved(done: bool) -> str | None:
    """The message of a decide() that found its record no longer on screen (False: a race with another key)."""
    return None if done else STALE


def keys_help(session, row) -> str:
    """The keys that work on what is shown now: a review has K and T, an audit no Enter, multi-label ticks."""
    if session is None or row is None:
        return "Keys: **Enter** accept · **1–9** choose a label · **S** skip · **U** undo." + SAVED
    review = given_label(session, row) is not None
    return session.space.pick(_label_keys, _set_keys)(session, review)


def _set_keys(session, review: bool) -> str:
    extra = " · **T** take the suggestion · **K** keep the given labels" if review else ""
    return ui_multilabel.HELP + extra + "." + SAVED


def _label_keys(session, review: bool) -> str:
    if session.meta.get("blind"):
        return "Keys: **1–9** choose the label you read · **S** skip · **U** undo (the model's answer is hidden: nothing to accept)." + SAVED
    if review:
        return ("Keys: **Enter** take the suggestion · **K** keep the given label · **1–9** another label · **S** skip · "
                "**U** undo." + SAVED)
    return "Keys: **Enter** accept the suggestion · **1–9** choose a label · **S** skip · **U** undo." + SAVED


def folds(session, fold: bool) -> list:
    """The start and suspects panels: folded once a session is open, so its text and buttons fit a laptop
    screen; left as the person set them on any other update (a label click must not fold what they opened)."""
    return [gr.update(open=False)] * 2 if fold and session is not None else [gr.skip()] * 2


def review_button(queue) -> dict:
    """The "Review 'not sure' answers" button with how many wait."""
    n = len(queue) if queue is not None else 0
    return gr.update(value=f"Review 'not sure' answers ({n} waiting)")


def _order_update(session) -> dict:
    kind = REVIEW_ORDERS if session.meta.get("kind") == "review" else {}
    return gr.update(choices=[(kind.get(o, o), o) for o in ORDERS], value=session.order)


def _render_label(store: SessionStore, labels: list[str], session, message: str = "") -> list:
    """Every output of the Label tab, for whatever state the session is in."""
    # "hidden", not False: Gradio 6 drops components with visible=False from the page, and when one
    # is shown again it replays stale updates from the page-load event and hides itself.
    if session is None:
        hidden = [gr.update(visible="hidden")] * MAX_LABEL_BUTTONS
        return ["", None, gr.update(value="", label="Text"), "Upload a CSV with a `text` column to start.",
                gr.update(value=None, visible="hidden"), "", gr.update(visible="hidden"), *hidden,
                gr.update(choices=labels, value=None), gr.update(choices=list(ORDERS), value=ORDERS[0]), message,
                _sessions_update(store, None), *ui_multilabel.hidden(), keys_help(None, None)]
    row = session.current()
    prog = session.progress()
    done = prog["labeled"]
    bar = (f'<progress value="{done}" max="{prog["total"]}" style="width:100%"></progress>'
           f'<div><b>{done}</b> labeled · <b>{prog["skipped"]}</b> skipped · <b>{prog["todo"]}</b> to go · '
           f'{prog["total"]} in {html.escape(session.meta["source"])}</div>')
    session_labels = session.labels
    if row is None:
        text = gr.update(value="", label="All done")
        hint = f"All {prog['total']} texts are labeled. Download them below (Download labels)."
        probs, accept, suggestion = None, gr.update(visible="hidden"), None
    else:
        suggestion = session.suggestion[row]
        again = " (skipped earlier)" if session.status[row] == 1 else ""
        text = gr.update(value=session.texts[row], label=f"Row {row + 1}{again}")
        hint = f"Model suggests **{html.escape(suggestion)}** at {session.confidence[row]:.1%}"
        hint = review_hint(session, row) or hint
        probs = session.probs[row]
        accept = gr.update(value=f"✓ Accept: {suggestion}  [Enter]", visible=True, variant="primary")
        if row in unsure_rows(session):  # a guess under the threshold: Accept is not the obvious click
            accept = gr.update(value=f"Accept: {suggestion} (not sure)  [Enter]", visible=True, variant="secondary")
            hint += " · ⚠ **not sure** (under the model's threshold)"
        elif session.meta.get("no_threshold"):  # nothing says how sure: neither big nor orange (issue 59)
            accept = gr.update(value=f"Accept: {suggestion} (no threshold: {session.meta['no_threshold']})  [Enter]",
                               visible=True, variant="secondary")
            hint += f" · no threshold ({html.escape(session.meta['no_threshold'])}): a guess"
        if session.meta.get("blind"):  # the live audit: the person's label must not lean on the model's
            suggestion, probs, accept = None, None, gr.update(visible="hidden")
            hint = session.kind.blind_hint
    hint, probs, accept, panel, row_shown = session.space.pick(_buttons, _ticks)(session, row, hint, probs, accept)
    buttons = []
    for i in range(MAX_LABEL_BUTTONS):
        if i < len(session_labels) and row_shown is not None:
            key = f"[{i + 1}] " if i < 9 else ""
            buttons.append(gr.update(value=f"{key}{session_labels[i]}", visible=True,
                                     variant="primary" if session_labels[i] == suggestion else "secondary"))
        else:
            buttons.append(gr.update(visible="hidden"))
    probs = gr.update(value=probs, visible=True) if probs else gr.update(value=None, visible="hidden")
    return [session.id, row, text, hint, probs, bar, accept, *buttons,
            gr.update(choices=session_labels, value=None), _order_update(session), message,
            _sessions_update(store, session.id), *panel, keys_help(session, row)]


def session_view(review) -> tuple:
    """The Label tab's session: progress, the text with the model's probabilities (a label set's checkboxes)
    beside it, Accept, then every button in one row (the labels, Save / None, Skip, Undo), the message and the
    key line; all of it on a 1366x768 screen under the health banner (issue 59, D4)."""
    l_progress = gr.HTML(elem_id="label-progress")
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            l_text = gr.Textbox(label="Text", lines=5, interactive=False, elem_id="label-text")
            l_hint = gr.Markdown(elem_id="label-hint")
        with gr.Column(scale=2, min_width=240):
            l_probs = gr.Label(label="Model probabilities", num_top_classes=5, elem_id="label-probs")
            l_checks = ui_multilabel.build_checks()
    l_accept = gr.Button("Accept", variant="primary", visible="hidden", elem_id="accept-btn")
    review.keep_button()
    with gr.Row(elem_id="label-actions"):
        l_buttons = [gr.Button(visible="hidden", size="sm", elem_id=f"label-btn-{i + 1}", min_width=80)
                     for i in range(MAX_LABEL_BUTTONS)]
        l_panel = [l_checks, *ui_multilabel.build_buttons()]
        l_skip = gr.Button("Skip  [S]", size="sm", elem_id="skip-btn", min_width=80)
        l_undo = gr.Button("↶ Undo  [U]", size="sm", elem_id="undo-btn", min_width=80)
    l_message = gr.Markdown(elem_id="label-message")
    l_keys = gr.Markdown(keys_help(None, None), elem_classes="shortcut-help", elem_id="label-keys")
    return (l_progress, l_text, l_hint, l_probs, l_accept, l_buttons, l_panel, l_skip, l_undo, l_message,
            l_keys)


def _buttons(session, row, hint, probs, accept) -> tuple:
    """A label's buttons: (hint, probs, accept, the hidden multi-label panel, the row the buttons are for)."""
    return hint, probs, accept, ui_multilabel.hidden(), row


def _ticks(session, row, hint, probs, accept) -> tuple:
    """Checkboxes instead of the label buttons; Accept only in a review (take the suggestion)."""
    panel = ui_multilabel.hidden()
    if row is not None and session.meta.get("blind"):  # nothing ticked: the set is the person's alone
        panel = ui_multilabel.render(session, row, [], hint)[2]
    elif row is not None:  # a review ticks the given set first: the suggestion is its hint
        hint, probs, panel = ui_multilabel.render(session, row, given_set(session, row), review_hint(session, row))
    return hint, probs, take_view(session, row) or gr.update(visible="hidden"), panel, None


def unsure_rows(session) -> frozenset:
    """Rows whose suggestion was under the model's threshold when the session was made (meta "unsure_rows")."""
    if not hasattr(session, "unsure"):
        session.unsure = frozenset(session.meta.get("unsure_rows") or ())
    return session.unsure

_LABELED: dict[str, tuple] = {}  # labeled.csv path -> ((mtime, size), decisions): the menu is drawn on every click


def labeled_count(folder: Path) -> int:
    """Decisions in a session's labeled.csv (its rows), read again only when the file changed."""
    path = folder / "labeled.csv"
    try:
        st = path.stat()
    except OSError:
        return 0
    stamp = (st.st_mtime_ns, st.st_size)
    cached = _LABELED.get(str(path))
    if cached is None or cached[0] != stamp:
        with path.open(encoding="utf-8", newline="") as f:
            cached = (stamp, max(0, sum(1 for _ in csv.reader(f)) - 1))
        _LABELED[str(path)] = cached
    return cached[1]


def _sessions_update(store: SessionStore, current_id):
    # Progress and the second it started tell apart two sessions of the same file.
    choices = [((f"{m['source']} · {labeled_count(store.root / m['id'])}/{m['rows']} labeled · "
                 f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(m['created']))}"), m["id"])
               for m in store.list()[:50]]
    return gr.update(choices=choices, value=current_id)


