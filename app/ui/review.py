"""The Label tab's "Review suspects": open a label_issues.csv as a review session, and its Keep key.

Built into app/ui/page.py's Label tab with a few hook lines: `ReviewPanel(...)` inside the session accordion,
`.keep_button()` beside Accept, `.wire(...)` once the tab's outputs exist, and `hint(...)` in its render.
The logic (what is reviewed, what is refused) is app/labeling/review.py's. On a multi-label model (the served one
decides, as for any labeling session) the review is multi-label: app/ui/label_view.py shows the checkbox
panel with the given set ticked, and Accept becomes "Take the suggestion" (key T).
"""

from __future__ import annotations

import asyncio
import html
from pathlib import Path

import gradio as gr

from app.config import open_to_anyone
from app.label_kinds import SINGLE
from app.labeling.review import ReviewError, active_issues, given_label, given_set, open_review
from app.ui.multilabel import STALE
from app.ui.uploads import read_upload
from app.versions.trainset import build
from textdata.errors import DataError


def hint(session, row) -> str | None:
    """The Label tab's line for a review row: the given label, the suggestion, their probabilities, the score."""
    given = given_label(session, row)
    if given is None:
        return None
    given, sugg, probs = session.space.shown(given), session.space.shown(session.suggestion[row]), session.probs[row]
    ticked = session.kind.ticked
    return (f"Given **{html.escape(given)}**{ticked} ({probs.get(given, 0):.0%}) · suggestion **{html.escape(sugg)}** "
            f"({probs.get(sugg, 0):.0%}) · quality {session.confidence[row]:.3f} (low: likely wrong)")


def take_view(session, row):
    """The Accept button of a multi-label review row: it takes the suggested set (None for other sessions)."""
    if row is None or given_label(session, row) is None:
        return None
    sugg = session.space.shown(session.suggestion[row])
    return gr.update(value=f"✓ Take the suggestion: {sugg}  [T]", visible=True)


class ReviewPanel:
    def __init__(self, cfg, store, registry=None, labels=(), served=None):
        """`served`: the served classifier now (a multi-label one makes multi-label reviews)."""
        self.cfg, self.store, self.registry, self.labels, self.served = cfg, store, registry, list(labels), served
        with gr.Accordion("Review suspects (label_issues.csv from finetune/kfold.py)", open=False,
                          elem_id="label-suspects") as self.accordion:
            gr.Markdown("Rows whose label is likely wrong, least likely correct first: keep the given label, take "
                        "the suggestion or pick another; decisions correct the training table at the next Train.")
            with gr.Row():
                self.file = gr.File(label="label_issues.csv of a k-fold run", file_types=[".csv"],
                                    elem_id="review-file")
                with gr.Column():
                    self.start = gr.Button("Review these suspects", elem_id="review-start")
                    # the registry's rows and labels: refused on a server open to anyone, as /v1/models is
                    self.active = gr.Button("Review the active version's suspects", elem_id="review-active",
                                            visible=registry is not None and not open_to_anyone(cfg))

    def keep_button(self) -> gr.Button:
        self.keep = gr.Button("Keep", visible="hidden", elem_id="keep-btn")
        return self.keep

    def _open(self, read, render, current_sid):
        """A new review session, or the current one left as it was with the reason none was opened."""
        cfg = self.cfg
        label_root = Path(cfg.data_dir) / "label"
        base = Path(cfg.train_data) if cfg.train_data else None
        clf = self.served() if self.served is not None else None
        space = clf.space if clf is not None else SINGLE
        try:
            issues, name = read()
            ts = build(label_root, base, 0.0, space)  # share 0: every text counts, the evaluation slice's too
            sessions = ts.sources.get("sessions", 0)
            table = (f"{base.name} + {sessions} labeling sessions" if base else
                     f"{sessions} labeling sessions, no --train-data")
            session, message = open_review(self.store, issues, name, ts, label_root, table, self.labels, space)
        except (ReviewError, DataError) as e:  # a file not read at all (not uploaded here) is gr.Error: refused
            return render(self.store.get(current_sid), f"⚠ {e}", fold=False)  # the panel stays open to retry
        return render(session, message)

    def wire(self, render, act, outputs, sid, row, hint_box) -> None:
        cfg, quick = self.cfg, {"concurrency_limit": 4, "concurrency_id": "review"}

        def uploaded(file):
            df = read_upload(cfg, file, "text")[0]
            return df, Path(str(file)).name

        async def from_file(file, current):
            return await asyncio.to_thread(self._open, lambda: uploaded(file), render, current)

        async def from_active(current):
            if open_to_anyone(cfg):
                return render(self.store.get(current), "⚠ The active version's suspects are training rows: this "
                                                       "server has no --api-key, so they are not shown (upload a "
                                                       "run's label_issues.csv instead).")
            return await asyncio.to_thread(self._open, lambda: active_issues(self.registry), render, current)

        def keep(session, r):
            g = given_set(session, r)
            if g is None:
                return "Keep is for review sessions: label with the buttons."
            if not session.decide(int(r), session.kind.choice(g)):
                return STALE

        def keep_view(s, r):
            session = self.store.get(s)  # the row it shows: the page's record id is only what it sends
            g = given_label(session, session.current()) if session is not None else None
            if g is None:
                return gr.update(visible="hidden")
            return gr.update(value=f"Keep: {session.space.shown(g)}  [K]", visible=True)

        self.start.click(from_file, [self.file, sid], outputs, **quick)
        self.active.click(from_active, sid, outputs, **quick)
        self.keep.click(lambda s, r: act(keep, s, r), [sid, row], outputs, concurrency_limit=16,
                        concurrency_id="label", trigger_mode="once")
        hint_box.change(keep_view, [sid, row], self.keep, concurrency_limit=16, concurrency_id="label")
