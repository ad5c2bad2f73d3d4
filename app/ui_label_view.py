"""What the Label tab shows for a session in any state: the text, the model's hint, the label buttons, the
multi-label panel, progress and the earlier-sessions menu (app/ui.py wires the events)."""

from __future__ import annotations

import html
import time

import gradio as gr

from . import ui_multilabel
from .labeling import ORDERS, SessionStore
from .review import given_set
from .ui_review import hint as review_hint
from .ui_review import take_view

MAX_LABEL_BUTTONS = 20


def _render_label(store: SessionStore, labels: list[str], session, message: str = "") -> list:
    """Every output of the Label tab, for whatever state the session is in."""
    # "hidden", not False: Gradio 6 drops components with visible=False from the page, and when one
    # is shown again it replays stale updates from the page-load event and hides itself.
    if session is None:
        hidden = [gr.update(visible="hidden")] * MAX_LABEL_BUTTONS
        return ["", None, gr.update(value="", label="Text"), "Upload a CSV with a `text` column to start.",
                None, "", gr.update(visible="hidden"), *hidden, gr.update(choices=labels, value=None),
                gr.update(value=ORDERS[0]), message, _sessions_update(store, None), *ui_multilabel.hidden()]
    row = session.current()
    prog = session.progress()
    done = prog["labeled"]
    bar = (f'<progress value="{done}" max="{prog["total"]}" style="width:100%"></progress>'
           f'<div><b>{done}</b> labeled · <b>{prog["skipped"]}</b> skipped · <b>{prog["todo"]}</b> to go · '
           f'{prog["total"]} in {html.escape(session.meta["source"])}</div>')
    session_labels = session.labels
    if row is None:
        text = gr.update(value="", label="All done")
        hint = f"All {prog['total']} texts are labeled. Download the labeled CSV below."
        probs, accept, suggestion = None, gr.update(visible="hidden"), None
    else:
        suggestion = session.suggestion[row]
        again = " (skipped earlier)" if session.status[row] == 1 else ""
        text = gr.update(value=session.texts[row], label=f"Row {row + 1}{again}")
        hint = f"Model suggests **{html.escape(suggestion)}** at {session.confidence[row]:.1%}"
        hint = review_hint(session, row) or hint
        probs = session.probs[row]
        accept = gr.update(value=f"✓ Accept: {suggestion}  [Enter]", visible=True)
        if session.meta.get("blind"):  # the live audit: the person's label must not lean on the model's
            suggestion, probs, accept = None, None, gr.update(visible="hidden")
            hint = ("Audit: tick every label the text has, or none of these (the model's answer is hidden)."
                    if session.multi_label else
                    "Audit: choose the label you read in the text (the model's answer is hidden).")
    panel = ui_multilabel.hidden()
    if session.multi_label:  # checkboxes instead of the label buttons; Accept only in a review (take the suggestion)
        if row is not None and session.meta.get("blind"):  # nothing ticked: the set is the person's alone
            panel = ui_multilabel.render(session, row, [], hint)[2]
        elif row is not None:  # a review ticks the given set first: the suggestion is its hint
            hint, probs, panel = ui_multilabel.render(session, row, given_set(session, row), review_hint(session, row))
        accept, row_shown = take_view(session, row) or gr.update(visible="hidden"), None
    else:
        row_shown = row
    buttons = []
    for i in range(MAX_LABEL_BUTTONS):
        if i < len(session_labels) and row_shown is not None:
            key = f"[{i + 1}] " if i < 9 else ""
            buttons.append(gr.update(value=f"{key}{session_labels[i]}", visible=True,
                                     variant="primary" if session_labels[i] == suggestion else "secondary"))
        else:
            buttons.append(gr.update(visible="hidden"))
    return [session.id, row, text, hint, probs, bar, accept, *buttons,
            gr.update(choices=session_labels, value=None), gr.update(value=session.order), message,
            _sessions_update(store, session.id), *panel]

def _sessions_update(store: SessionStore, current_id):
    choices = [(f"{m['source']} · {m['rows']} rows · {time.strftime('%Y-%m-%d %H:%M', time.localtime(m['created']))}",
                m["id"]) for m in store.list()[:50]]
    return gr.update(choices=choices, value=current_id)


