"""The Label tab's multi-label panel: a checkbox per label, the model's suggestions pre-ticked, "none of these".

Shown instead of the one-click label buttons when the session was started on a multi-label model
(app/labeling/sessions.py). Keys (ui.py's SHORTCUTS_JS): 1-9 toggle the n-th checkbox, Enter saves the ticked set,
0 or N saves "none of these", S skips, U undoes. Saving an unchanged set accepts the suggestion. A review of
a multi-label run's suspects (app/labeling/review.py) ticks the row's given set instead: saving it unchanged keeps it.
"""

from __future__ import annotations

import html

import gradio as gr

# the Label tab's words for an answer whose text is no longer on screen (app/ui/label_view.py imports this module)
STALE = ("⚠ Nothing saved: that key or click was for the text before this one (already answered or skipped). "
         "This is the text on screen now.")

# Keys for the checkbox panel, added to ui.py's keydown handler (`multi` is true while the panel is shown).
MULTI_KEYS_JS = """
  const checks = document.getElementById('label-checks');
  const multi = checks && checks.offsetParent !== null;
  if (multi && /^[1-9]$/.test(e.key)) {
    const box = checks.querySelectorAll('input[type=checkbox]')[Number(e.key) - 1];
    if (box) { e.preventDefault(); box.click(); }
    return;
  }
  if (multi && (e.key === '0' || e.key === 'n')) { const b = document.getElementById('none-btn'); if (b) { e.preventDefault(); b.click(); } return; }
  if (multi && (e.key === 'Enter' || e.key === 'a')) { const b = document.getElementById('save-btn'); if (b) { e.preventDefault(); b.click(); } return; }
"""
HELP = "Keys: 1–9 tick or untick a label · Enter save the ticked labels · 0 none of these · S skip · U undo"


def build_checks() -> gr.CheckboxGroup:
    """The checkbox group (hidden until a multi-label session is shown), beside the text where a label's
    session has its probabilities: below the text it pushed Save / None under a 768-pixel screen (issue 59, D4).
    No `info`: the key line under the buttons says the keys already (HELP, label_view.py keys_help)."""
    return gr.CheckboxGroup(choices=[], label="Labels (tick every one that applies)", visible="hidden",
                            elem_id="label-checks")


def build_buttons() -> list:
    """Save and None of these, in the row of Skip and Undo (app/ui/page.py), small as those are."""
    save = gr.Button("✓ Save ticked labels  [Enter]", variant="primary", visible="hidden", size="sm",
                     elem_id="save-btn")
    none = gr.Button("None of these  [0]", visible="hidden", size="sm", elem_id="none-btn")
    return [save, none]


def hidden() -> list:
    return [gr.update(visible="hidden")] * 3


def render(session, row, ticked: list[str] | None = None, hint: str | None = None) -> tuple[str, dict | None, list]:
    """(hint, probabilities, the panel's updates) for the row a multi-label session shows. `ticked` and
    `hint`: what a review session (app/ui/review.py) shows instead of the suggestion pre-ticked."""
    if row is None:
        return "", None, hidden()
    suggested = session.suggested_set(row)
    shown = ", ".join(f"**{html.escape(x)}**" for x in suggested) or "**none of the labels**"
    hint = hint or f"Model suggests {shown} (pre-ticked); its least certain label is {session.confidence[row]:.0%} of " \
                   "the way from its threshold to certainty"
    choices = [(f"[{i + 1}] {lab}" if i < 9 else lab, lab) for i, lab in enumerate(session.labels)]
    panel = [gr.update(choices=choices, value=suggested if ticked is None else ticked, visible=True),
             gr.update(visible=True), gr.update(visible=True)]
    return hint, session.probs[row], panel


NOTHING_TICKED = ("Nothing ticked, nothing saved: tick the labels that apply (1–9), or press 0 (*None of these*) "
                  "when none does.")


def nothing_suggested(session, row) -> bool:
    """Nothing was ticked for the person: a live audit (blind) or a team dataset with labels of its own."""
    return bool(session.meta.get("blind")) or (hasattr(session, "suggested") and not session.suggested(row))


def save(session, row, ticked) -> str | None:
    """Save the ticked set. Nothing ticked where nothing was suggested is no answer (a stray Enter): "none of
    these" is its own key (0)."""
    if row is None:
        return None
    if not ticked and nothing_suggested(session, int(row)):
        return NOTHING_TICKED
    if not session.decide(int(row), list(ticked)):
        return STALE


def none_of_these(session, row) -> str | None:
    if row is not None and not session.decide(int(row), []):
        return STALE
