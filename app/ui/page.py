"""The Gradio UI at /ui: Classify (one text), Label (active-learning labeling), Batch (score a file).

Deliberate limits: uploads are capped by --max-upload-mb (Gradio answers 413) and --max-upload-rows;
scoring jobs (a Label upload, a Batch file) share --ui-concurrency slots, quick actions run up to 16 at
once, and at most 64 events wait. Files the UI hands out are copies in a private temp folder; nothing
else on the server is reachable through it. The Classify tab goes through the API's micro-batcher and
queue, so the UI and API share one set of limits.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
from functools import partial
from pathlib import Path

import gradio as gr
import pandas as pd

from app.config import open_to_anyone
from app.label_kinds import kind_of
from app.labeling.kept_texts import AdminsKept, VisitorStore
from app.labeling.review_queue import start_session
from app.labeling.sessions import ORDERS, SessionStore
from app.team.roles import ADMIN
from app.ui import multilabel as ui_multilabel
from app.ui.batch import batch_tab
from app.ui.classify import QUICK, classify_tab, header, health_banner, no_threshold
from app.ui.guard import person
from app.ui.handouts import Exports
from app.ui.handouts import score_chunks as _score_chunks
from app.ui.handouts import stop_reason as _stop_reason
from app.ui.label_view import (
    MAX_LABEL_BUTTONS,
    _render_label,
    folds,
    review_button,
    saved,
    session_view,
    shown_row,
    stale_answer,
)
from app.ui.review import ReviewPanel
from app.ui.team import TEAM_KEYS_JS
from app.ui.team_label import TeamSessions
from app.ui.uploads import read_texts, spreadsheet_safe, uploaded_only
from textdata.tables import write_table

log = logging.getLogger("app")

HEADING_EVERY_S = 5.0  # how soon every open page names a version promoted elsewhere (the API, another replica)

SHORTCUTS_JS = """
<script>
document.addEventListener('keydown', (e) => {
  const t = e.target;
  if (e.ctrlKey || e.metaKey || e.altKey || e.repeat) return;
  if (t && (t.tagName === 'INPUT' || t.tagName === 'TEXTAREA' || t.tagName === 'SELECT' || t.isContentEditable)) return;
  const panel = document.getElementById('label-panel');
  if (!panel || panel.offsetParent === null) return;  // only while the Label tab is shown
""" + ui_multilabel.MULTI_KEYS_JS + """
  let id = null;
  if (e.key === 'Enter' || e.key === 'a') id = 'accept-btn';
  else if (e.key === 's') id = 'skip-btn';
  else if (e.key === 'k') id = 'keep-btn';
  else if (e.key === 't') id = 'accept-btn';  // a review's "take the suggestion"
  else if (e.key === 'u' || e.key === 'z') id = 'undo-btn';
  else if (/^[1-9]$/.test(e.key)) id = 'label-btn-' + e.key;
  const b = id && document.getElementById(id);
  if (b && b.offsetParent !== null && !b.disabled) { e.preventDefault(); b.click(); }
});
</script>
"""

# The Label tab's opening (reopen) folds the start and suspects panels in the browser, once its answer is
# on screen, unless the person touched them after the tab was opened: under load that answer comes late, and
# a fold from the server would close the panel under someone choosing a file in it.
TOUCH_JS = """
<script>
['pointerdown', 'keydown', 'focusin'].forEach((t) => document.addEventListener(t, (e) => {
  if (e.target && e.target.closest && e.target.closest('#label-start-panel, #label-suspects'))
    window.labelTouchedAt = performance.now();
}, true));
</script>
"""
# Gradio opens every Markdown link in a new tab (target=_blank, whatever the HTML says): Sign out must leave
# this one, so the app goes off screen with the session.
SIGN_OUT_JS = """
<script>
document.addEventListener('click', (e) => {
  const a = e.target && e.target.closest && e.target.closest('a[href="/logout"]');
  if (a) { e.preventDefault(); e.stopPropagation(); window.location.assign('/logout'); }
}, true);
</script>
"""
OPENED_JS = "(sid, shown) => { window.labelOpenedAt = performance.now(); return [sid, shown]; }"
FOLD_JS = """() => {
  const touched = (window.labelTouchedAt || 0) > (window.labelOpenedAt || 0);
  const session = document.querySelector('#label-progress progress') !== null;
  window.labelReopened = (window.labelReopened || 0) + 1;
  const u = touched || !session ? {__type__: 'update'} : {__type__: 'update', open: false};
  return [u, u];
}"""

# After a session is opened from a panel: fold the panels still open. The server's fold (`open=False`) changes
# nothing on a panel whose last update from the server was already a fold (Gradio compares it with that, not
# with the panel the person reopened), so a dataset picked after reopening the start panel left it open over the
# session's buttons (issue 59, D4). A click on its header folds it as the person's own would.
REFOLD_JS = """() => {
  if (document.querySelector('#label-progress progress') === null) return;
  for (const id of ['label-start-panel', 'label-suspects']) {
    const header = document.querySelector('#' + id + ' .label-wrap.open');
    if (header) header.click();
  }
}"""

CSS = """
#label-text textarea { font-size: 1.15rem; line-height: 1.5; }
.shortcut-help { opacity: .7; font-size: .9rem; }
#skip-btn { margin-left: 1.5rem; }  /* in the labels' row (issue 59, D4): set apart from them */
"""


def _said(error: gr.Error, fn) -> gr.Error:
    """A message for the person at the page, logged as one JSON line (app/http/logs.py), not a traceback."""
    error.print_exception = False
    name = getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", "ui")
    log.info("UI refused: %s", error.message, extra={"fields": {"event": "ui_refused", "action": name}})
    return error


def _quiet_user_errors(fn):
    """`fn` raising gr.Error (a person's mistake: no file, a bad column) logs one line instead of Gradio's
    18-line traceback on stderr; any other exception keeps its traceback (a defect)."""
    if fn is None or inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        return fn
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def run_async(*args, **kwargs):
            try:
                return await fn(*args, **kwargs)
            except gr.Error as e:
                raise _said(e, fn) from None
        return run_async

    @functools.wraps(fn)
    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except gr.Error as e:
            raise _said(e, fn) from None
    return run


def sign_out(cfg, state) -> str:
    """The heading's Sign out, where people sign in (a key, or users: their tokens). It opens in this tab
    (SIGN_OUT_JS: Gradio's links open a new one), so the app leaves the screen with the session."""
    identities = getattr(state, "identities", None)
    if not cfg.api_key and not (identities is not None and identities.active()):
        return ""
    return " · [Sign out](/logout)"


def build_ui(cfg, state, jobs=None, metrics=None) -> gr.Blocks:
    """The tabs, each built by its own function: Classify, Label, Batch, and Train with a model registry.
    Each action uses the version serving when it starts (`state.served`), so a model switch needs no reload.
    `metrics`: the server's (app/http/metrics.py): Classify and Batch count their answers there as the API does."""
    store = SessionStore(Path(cfg.data_dir) / "label")
    if open_to_anyone(cfg):  # sessions of texts other clients sent are not a visitor's (app/labeling/kept_texts.py)
        store = VisitorStore(store)
    store = AdminsKept(store, lambda: (person(cfg, state) or ("", "", ""))[2] == ADMIN)
    exports = Exports()
    labels = list(state.served.clf.labels)
    engine_turn = threading.Lock()  # one UI scoring chunk at a time, whichever tab asks
    theme = gr.themes.Default(font=["system-ui", "sans-serif"], font_mono=["ui-monospace", "monospace"])
    with gr.Blocks(title="ELECTRA text classifier", analytics_enabled=False,
                   delete_cache=(3600, 24 * 3600)) as demo:
        # The served version (and whether its model adds anything) changes with a promotion made anywhere (the
        # Train tab, the API, another replica): read at page load, at a promotion here, and every few seconds.
        top = gr.Markdown(header(state, sign_out(cfg, state)), elem_id="page-header")
        banner = gr.Markdown(health_banner(state), elem_id="health-banner")
        heading = {"fn": lambda: (header(state, sign_out(cfg, state)), health_banner(state)), "inputs": None,
                   "outputs": [top, banner], "show_progress": "hidden"}
        sections: dict = {}  # event index -> the section (app/team/roles.py UI_SECTIONS) that registered it

        def section(name: str) -> None:
            for index in demo.fns:
                sections.setdefault(index, name)

        demo.load(**heading)
        gr.Timer(HEADING_EVERY_S).tick(**heading, concurrency_limit=QUICK, concurrency_id="heading")
        section("page")
        with gr.Tabs():
            classify_tab(cfg, state, metrics)
            section("classify")
            _label_tab(cfg, state, labels, store, exports, engine_turn, jobs)
            section("label")
            batch_tab(cfg, state, exports, engine_turn, _score_chunks, _stop_reason, cfg.ui_concurrency, metrics)
            section("batch")
            if jobs is not None:
                from app.ui.train import train_tab

                train_tab(cfg, state, jobs).then(**heading)  # a promotion there: the heading at once
                section("train")
            if state.monitor is not None:
                from app.ui.monitor import monitor_tab

                monitor_tab(cfg, state, store)
                section("monitor")
            if state.store is not None:
                from app.ui.team import team_tab

                team_tab(cfg, state, exports)
                section("team")
    # Gradio copies any file reference it finds in any input (a Dropdown's value too) into its cache, whose
    # files it serves: every input of every event takes uploaded files only.
    for block in {id(b): b for fn in demo.fns.values() for b in fn.inputs}.values():
        uploaded_only(block)
    from app.team.routes import open_refusal
    from app.ui.guard import guard
    from app.versions.admin import admin_refusal

    demo.rules = guard(demo, sections, cfg, state, {"admin": admin_refusal(cfg) or "", "team": open_refusal(cfg)})
    for block_fn in demo.fns.values():
        block_fn.fn = _quiet_user_errors(block_fn.fn)
    demo.queue(max_size=64, default_concurrency_limit=cfg.ui_concurrency)
    demo.ui_theme = theme
    return demo


def _export_labeled(store: SessionStore, exports: Exports, sid) -> str:
    """A session's labeled.csv for download; a person opens this one, so formulas are neutralised."""
    session = store.get(sid)
    if session is None:
        raise gr.Error("No labeling session yet.")
    out = exports.path(f"{Path(session.meta['source']).stem}-labeled.csv")
    with session.lock:
        labeled = pd.read_csv(session.labeled_path, dtype=str, keep_default_na=False)
    write_table(spreadsheet_safe(labeled), out)
    return str(out)


def _label_extras(labels: list[str]) -> tuple:
    """The Label tab's order, other-label, new-label and download controls."""
    with gr.Accordion("Order, other labels, download", open=True):
        with gr.Row():
            l_order = gr.Dropdown(ORDERS, value=ORDERS[0], label="Queue order", elem_id="label-order")
            l_other = gr.Dropdown(choices=labels, label="Other label", elem_id="label-other")
            l_other_btn = gr.Button("Label as selected", size="sm", elem_id="label-other-btn")
        with gr.Row():
            l_new = gr.Textbox(label="New label", max_length=60, elem_id="label-new")
            l_add = gr.Button("Add label", size="sm", elem_id="label-add")
        with gr.Row():
            # a file session's labeled.csv (text,label); a team dataset's answers, one row per answer: the
            # final labels (one a text) are the Team tab's
            l_export = gr.Button("Download labels (CSV)", elem_id="label-export")
            l_file_out = gr.File(label="Labels: a file's text,label; a team dataset's answers, one row each",
                                 elem_id="label-download")
    return l_order, l_other, l_other_btn, l_new, l_add, l_export, l_file_out


def _start_panel(state) -> tuple:
    """The Label tab's first panel: a file to start from, an earlier session, a team dataset, the review queue."""
    with gr.Accordion("Start or resume a session", elem_id="label-start-panel") as panel, gr.Row():
        file = gr.File(label="CSV of unlabeled texts", file_types=[".csv", ".tsv", ".jsonl"], elem_id="label-file")
        with gr.Column():
            column = gr.Textbox(label="Text column", value="text", elem_id="label-column")
            start = gr.Button("Start labeling", variant="primary", elem_id="label-start")
            sessions = gr.Dropdown(label="Earlier sessions", choices=[], elem_id="label-sessions")
            dataset = gr.Dropdown(label="Or a team dataset (shared queue)", choices=[], elem_id="label-dataset")
            review = gr.Button(review_button(state.review)["value"], visible=state.review is not None,
                               elem_id="label-review")
    return panel, file, column, start, sessions, dataset, review


def _label_tab(cfg, state, labels: list[str], store: SessionStore, exports: Exports, engine_turn, jobs=None) -> None:
    """Label an uploaded file with the model's suggestions, least confident first; every decision saved as made."""

    view, team = partial(_render_label, store, labels), TeamSessions(cfg, state)  # team: app/ui/team_label.py

    def get(sid):  # a team dataset's session ("ds-N"), else a file session
        return team.get(sid) if str(sid).startswith("ds-") else store.get(sid)

    def render(session, message: str = "", fold: bool = True) -> list:
        """The tab for `session`; `fold`: fold the start and suspects panels (a session was just opened). The
        last output is the session this page now shows (`shown`, kept on the server: reopen() reads it)."""
        return [*team.view(view(session, message), session), *folds(session, fold),
                session.id if session is not None else ""]

    def start(file, text_column, progress=gr.Progress()):  # noqa: B008 - how Gradio injects progress
        texts, skipped = read_texts(cfg, file, text_column, partial(_stop_reason, state))
        clf = state.served.clf  # one version for the whole file, whatever is activated meanwhile
        preds = [p for part in _score_chunks(len(texts), lambda a, b: clf.predict(texts[a:b]), progress,
                                             "Model suggestions", "texts", engine_turn, state) for p in part]
        # rows under the served threshold: their Accept is not the obvious click (app/ui/label_view.py)
        unsure = kind_of(clf.space).unsure_rows(preds)
        # no threshold at all: every suggestion counts as confident, so none may look it (label_view.py)
        bare = no_threshold(clf)
        session = store.create(Path(file).name, texts, preds, list(clf.labels), clf.thresholds, clf.space,
                               **({"unsure_rows": unsure} if unsure else {}), **({"no_threshold": bare} if bare else {}))
        note = f" ({skipped} empty rows left out)" if skipped else ""
        return render(session, f"Loaded {len(texts)} texts{note}. Least confident first; change the order below.")

    def resume(sid):
        return render(get(sid))

    def reopen(sid, shown):
        """The session this browser had open (`sid`); stale (nothing changed) when another was drawn on this page
        since (`shown`), as under load; the panels' folding is the browser's (FOLD_JS)."""
        if shown and shown != sid:
            return [gr.skip()] * len(outputs)
        return render(get(sid), fold=False)

    def review_unsure(current):  # the API's "not sure" answers (--review-queue) as a session, with the model's suggestions
        clf = state.served.clf  # a multi-label model's answers are label sets: a set session (issue 40, M6)
        session = start_session(state.review, store, list(clf.labels), clf.thresholds, clf.space)
        if session is None:  # the open session stays on screen: a labeler must not think the work is gone
            return (*render(get(current), "The review queue is empty: no 'not sure' answers are waiting.",
                            fold=False), review_button(state.review))
        return (*render(session, f"Loaded {len(session.texts)} 'not sure' answers from the review queue."),
                review_button(state.review))

    def act(action, sid, row, *args, answers: bool = True):
        """`action` as the person at the page; `row`: the record on screen at the key or click (label-row): an
        answer for another (a second key before the next text was drawn) saves nothing."""
        session = get(sid)
        if session is None:
            return render(None, "No labeling session: upload a file to start.", fold=False)
        row = shown_row(row)
        message = (stale_answer(session, row) if answers else None) or team.acted(action, session, row, *args)
        return render(session, message, fold=False)

    anywhere = partial(act, answers=False)  # undo, a new label, the order: not an answer to the text shown

    def accept(session, row):
        if session.meta.get("blind"):  # an audit has no suggestion to accept (a stray Enter key must not label)
            return
        if row is not None and session.current() == row:
            return saved(session.decide(row, session.kind.accepted(session, row)))

    def choose(i, session, row):
        if row is not None and i < len(session.labels):
            return saved(session.decide(int(row), session.labels[i]))

    def choose_other(session, row, label):
        if row is not None and label:
            return saved(session.decide(int(row), label))

    def skip(session, row):
        if row is not None and not session.skip(int(row)) and session.status[int(row)] == 1:
            return "Only skipped texts are left: label them, or stop here."

    def undo(session, row):
        if session.undo() is None:
            return "Nothing to undo."

    def add_label(session, row, name):
        added = session.add_label(name)
        if len(session.labels) > MAX_LABEL_BUTTONS:
            return f"Added {added!r}: pick it from 'Other label' (buttons stop at {MAX_LABEL_BUTTONS})."
        return f"Added label {added!r}."

    def set_order(session, row, order):
        session.set_order(order)

    def export(sid):  # a team dataset's answers (app/ui/team_label.py), else the session's labeled.csv
        return team.export(sid, exports) if str(sid).startswith("ds-") else _export_labeled(store, exports, sid)

    with gr.Tab("Label", id="label", elem_id="tab-label") as label_tab:
        sid = gr.BrowserState("", storage_key="electra-label-session")
        # the record on screen, in the page (not server state): each key or click sends the one it was
        # pressed on, so a key pressed before the next text is drawn cannot answer that text unseen
        row = gr.Number(None, precision=0, visible="hidden", elem_id="label-row")
        shown = gr.State("")  # the session this page shows (render's last output)
        with gr.Row(equal_height=False):  # folded side by side: one line of the screen, not two (issue 59, D4)
            l_start_panel, l_file, l_column, l_start, l_sessions, l_dataset, l_review = _start_panel(state)
            review = ReviewPanel(cfg, store, getattr(jobs, "registry", None), labels, lambda: state.served.clf)
        with gr.Column(elem_id="label-panel"):
            (l_progress, l_text, l_hint, l_probs, l_accept, l_buttons, l_panel, l_skip, l_undo, l_message,
             l_keys) = session_view(review)
            l_order, l_other, l_other_btn, l_new, l_add, l_export, l_file_out = _label_extras(labels)
        outputs = [sid, row, l_text, l_hint, l_probs, l_progress, l_accept, *l_buttons, l_other, l_order,
                   l_message, l_sessions, *l_panel, l_keys, *(folded := [l_start_panel, review.accordion]), shown]
        quick = {"concurrency_limit": QUICK, "concurrency_id": "label", "trigger_mode": "once"}
        l_start.click(start, [l_file, l_column], outputs, concurrency_id="scoring",
                      concurrency_limit=cfg.ui_concurrency).then(None, js=REFOLD_JS)
        l_sessions.input(resume, l_sessions, outputs, **quick).then(None, js=REFOLD_JS)
        team.wire(label_tab, l_dataset, render, outputs, quick, l_text, l_hint, l_accept, l_sessions, l_keys,
                  then_js=REFOLD_JS)
        l_review.click(review_unsure, sid, [*outputs, l_review], **quick).then(None, js=REFOLD_JS)
        l_accept.click(partial(act, accept), [sid, row], outputs, **quick)
        for i, b in enumerate(l_buttons):
            b.click(partial(act, partial(choose, i)), [sid, row], outputs, **quick)
        l_other_btn.click(partial(act, choose_other), [sid, row, l_other], outputs, **quick)
        l_panel[1].click(partial(act, ui_multilabel.save), [sid, row, l_panel[0]], outputs, **quick)
        l_panel[2].click(partial(act, ui_multilabel.none_of_these), [sid, row], outputs, **quick)
        l_skip.click(partial(act, skip), [sid, row], outputs, **quick)
        l_undo.click(partial(anywhere, undo), [sid, row], outputs, **quick)
        l_order.input(partial(anywhere, set_order), [sid, row, l_order], outputs, **quick)
        for trigger in (l_add.click, l_new.submit):  # the button, or Enter in the box
            trigger(partial(anywhere, add_label), [sid, row, l_new], outputs, **quick).then(lambda: "", None, l_new)
        l_export.click(export, sid, l_file_out, **quick)
        review.wire(render, act, outputs, sid, row, l_hint)
        # On opening the tab rather than on page load: Gradio 6 applies page-load updates to a tab
        # not yet shown and then re-mounts it with its initial props, losing them.
        label_tab.select(reopen, [sid, shown], outputs, js=OPENED_JS, **quick).then(None, None, folded, js=FOLD_JS)
        if state.review is not None:  # how many wait, each time the tab opens
            label_tab.select(lambda: review_button(state.review), None, l_review, **quick)



def mount_ui(app, cfg, state, jobs=None) -> None:
    demo = build_ui(cfg, state, jobs, getattr(app.state, "metrics", None))
    gr.mount_gradio_app(app, demo, path="/ui", ssr_mode=False, footer_links=["settings"],
                        max_file_size=int(cfg.max_upload_mb * 1024 * 1024), theme=demo.ui_theme, css=CSS,
                        head=SHORTCUTS_JS + TOUCH_JS + SIGN_OUT_JS + TEAM_KEYS_JS, show_error=True)
    # Browsers ask the site's root for its icon on every page, the sign-in page too: Gradio's icon served here
    # to anyone (app/team/roles.py ICON), not a redirect into /ui, which answered 401 before the sign-in (no
    # cookie yet) and after it (the cookie counts on /ui only): two console errors at each sign-in (issue 59).
    from gradio.route_utils import favicon

    app.add_api_route("/favicon.ico", lambda: favicon(demo.favicon_path), include_in_schema=False)
    # Every open tab holds a heartbeat stream that only ends on Gradio's stop event, which Gradio sets
    # after uvicorn has waited for open connections: without this, SIGTERM with a tab open would always
    # wait the full --shutdown-timeout.
    gradio_app = next(r.app for r in app.routes if getattr(r, "path", None) == "/ui")
    state.on_drain.append(gradio_app.stop_event.set)
