"""The UI's Train tab: retrain on the labels, follow the job, see every version's scores, promote or roll back.

The same calls as the API (app/versions/jobs.py, app/versions/swap.py) under the same rule: without --api-key, on a
non-loopback address and without --allow-admin, training and activating are refused with the reason.
"""

from __future__ import annotations

import html
import time

import gradio as gr
import pandas as pd

from app.http.redact import names_only_text
from app.llm.teacher_labels import described
from app.ui.guard import person
from app.versions.admin import admin_refusal
from app.versions.jobs import JobConflict
from app.versions.models import served_cv
from app.versions.registry import RegistryError, acting_as
from app.versions.swap import ActivationError
from app.versions.train_params import RETRAINABLE
from textdata.errors import DataError

TAB_PARAMS = [p for p in RETRAINABLE if p.tab]

VERSION_COLUMNS = ["version", "active", "source", "rows", "cv macro-F1 (served)", "eval macro-F1",
                   "active then (eval)", "decision", "created"]
# Pixels per column, ~1,215 in all, a 1366 px screen's table: headers on one or two lines, the decision a sentence.
VERSION_WIDTHS = ["90px", "75px", "100px", "70px", "140px", "110px", "140px", "350px", "140px"]


def _f(x) -> str:
    return "" if x is None else f"{x:.4f}"


def versions_frame(registry) -> pd.DataFrame:
    rows = []
    for m in registry.listing() if registry is not None else []:
        ev = m.get("eval") or {}
        champ = ev.get("champion") or {}
        rows.append({"version": m["version"], "active": "●" if m["active"] else "", "source": "unreadable" if m.get("unreadable") else m.get("source", ""),
                     "rows": str(m.get("rows", "")), "cv macro-F1 (served)": served_cv(m),
                     "eval macro-F1": _f(ev.get("macro_f1")),
                     "active then (eval)": f"{champ['version']} {_f(champ.get('macro_f1'))}" if champ else "",
                     "decision": (m.get("last_decision") or {}).get("why", ""),
                     "created": time.strftime("%Y-%m-%d %H:%M", time.localtime(m.get("created", 0)))})
    return pd.DataFrame(rows, columns=VERSION_COLUMNS, dtype=str)  # one type per column, also when empty


def sources_words(data: dict) -> str:
    """Where the training rows came from (app/versions/trainset.py sources), in words: team datasets' final
    labels, Label-tab sessions, --train-data; review corrections only where there were some (issue 59: "0 label
    corrections" was said at every poll, and nothing said how many came from the team's datasets)."""
    where = [f"{data[k]} {name}" for k, name in (("store_labels", "final labels from team datasets"),
                                                 ("session_decisions", "Label-tab decisions"),
                                                 ("base_rows", "--train-data rows")) if data.get(k)]
    fixed, kept = data.get("corrections") or 0, data.get("review_kept") or 0
    if fixed or kept:
        where.append(f"{fixed} label corrections from Review suspects went in ({kept} labels kept)")
    return "read: " + ", ".join(where) if where else ""


def eta_words(p: dict, now: float) -> str:
    """The ETA counted down from when the training child wrote it (`updated`), so it moves between its writes:
    the child writes on training steps only, and a fold's scoring, the baseline and the export write none (the
    ETA stood still for 24 s, issue 59); a snapshot older than 10 s says so instead of passing for news."""
    since = max(0.0, now - p.get("updated", now))
    words = f"ETA {max(0.0, p['eta_s'] - since):.0f} s"
    return words + (f" (last progress {since:.0f} s ago)" if since > 10 else "")


def progress_html(job: dict | None) -> str:
    if job is None:
        return "<div>No training job yet.</div>"
    p = job.get("progress") or {}
    pct = p.get("percent", 100 if job["status"] != "running" else 0)
    if job["status"] == "cancelled":  # no bar left half full: the job ended, with nothing made
        pct = 0
    parts = [f"job {html.escape(job['id'])}: <b>{html.escape(job['status'])}</b>"]
    if job["status"] == "running":
        if p.get("stage"):
            parts.append(html.escape(str(p["stage"])))
        if p.get("epoch"):
            parts.append(f"epoch {p['epoch']}")
        if p.get("steps"):
            parts.append(f"step {p['step']}/{p['steps']}")
        if p.get("eta_s") is not None:
            parts.append(eta_words(p, time.time()))
    if job.get("version"):
        parts.append(f"made {html.escape(job['version'])}")
    decision = (job.get("decision") or {}).get("why")
    if decision:
        parts.append(html.escape(decision))
    if job.get("error") and job["status"] == "cancelled":  # the reason, in words ("cancelled" said it already)
        if job["error"] != "cancelled":
            parts.append(html.escape(names_only_text(job["error"])))
    elif job.get("error"):
        parts.append(f"<pre>{html.escape(names_only_text(job['error']))}</pre>")
    read = sources_words(job.get("data") or {})
    if read:
        parts.append(read)
    if job.get("n_conflicts"):
        parts.append(f"{job['n_conflicts']} texts had conflicting labels (the latest decision was used):"
                     + conflicts_html(job.get("conflicts") or [], job["n_conflicts"]))
    return (f'<progress id="train-bar" value="{pct}" max="100" style="width:100%"></progress>'
            f'<div id="train-status" data-status="{html.escape(job["status"])}">{" · ".join(parts)}</div>')


def conflicts_html(conflicts: list[dict], total: int, shown: int = 5) -> str:
    """The first conflicting texts with the labels given and the one kept, as a short list."""
    items = []
    for c in conflicts[:shown]:
        text = c["text"] if len(c["text"]) <= 80 else c["text"][:79] + "…"
        given = ", ".join(dict.fromkeys(x["label"] for x in c["labels"]))
        items.append(f"<li>“{html.escape(text)}”: {html.escape(given)} → kept <b>{html.escape(c['kept'])}</b></li>")
    more = f"<li>and {total - len(items)} more</li>" if total > len(items) else ""
    return f"<ul>{''.join(items)}{more}</ul>"


def box_value(p, raw):
    """A Train-tab box's text as the setting: None when empty (the default), else the number typed."""
    raw = str(raw if raw is not None else "").strip()
    if not raw:
        return None
    try:
        return int(raw) if p.kind is int and raw.lstrip("+-").isdigit() else float(raw)
    except ValueError:
        raise DataError(f"{p.name.replace('_', ' ')}: {raw[:20]!r} is not a number; leave the box empty for the "
                        "default") from None


def number_placeholders(jobs) -> list[str]:
    """What an empty box means: the active version's setting (folds: app/versions/jobs.py's default), else k-fold's."""
    try:
        settings = jobs.settings({})
    except Exception:  # noqa: BLE001 - a hint only: an unreadable config must not break the tab
        settings = {}
    return [f"empty: {settings[p.name]:g}" if p.name in settings else "empty: k-fold's default" for p in TAB_PARAMS]


def train_tab(cfg, state, jobs):
    """The tab; returns the Promote event, for the page's heading to follow (app/ui.py)."""
    registry = jobs.registry

    def latest():
        jobs_now = jobs.list()
        return jobs.get(jobs_now[0]["id"]) if jobs_now else None

    def refresh():
        why = admin_refusal(cfg)
        if why:  # the registry and the jobs are read under the rule that changes them
            return f"<div>⚠ {html.escape(why)}</div>", versions_frame(None), gr.update(choices=[], value=None)
        names = list(reversed(registry.names()))  # the value stays: the person's pick is kept
        return (progress_html(latest()), versions_frame(registry),
                gr.update(choices=names) if names else gr.update(choices=[], value=None))

    def tick(sent=None, always=False):
        """refresh() for the timer: the version menu only when its names changed since this page was last sent
        them (`sent`), or every second it would redraw under a person picking from it. `always`: the tab's
        opening (Gradio 6 may draw the tab afresh then, with an empty menu)."""
        progress, frame, menu = refresh()
        names = menu.get("choices")
        return (progress, frame, gr.skip(), sent) if names == sent and not always else (progress, frame, menu, names)

    def who() -> str | None:
        person_now = person(cfg, state)
        return person_now[1] if person_now is not None else None

    async def start(*values):
        why = admin_refusal(cfg)
        if why:
            return (f"⚠ {why}", *refresh())
        try:
            # checked there, as the API's are
            with acting_as(who()):  # the registry's events name the person (the job's later ones too)
                job = await jobs.start({p.name: box_value(p, v) for p, v in zip(TAB_PARAMS, values)})
            read = sources_words(job["data"])
            message = (f"Started job {job['id']}: {job['data'].get('train_rows')} training rows, "
                       f"{job['data'].get('eval_rows')} in the evaluation slice" + (f"; {read}" if read else "")
                       + "." + described(job["data"].get("teacher")))
        except JobConflict:  # the API's text names DELETE /v1/jobs/<id>; here there is a button
            running = jobs.running()
            message = (f"⚠ Job {running['id'] if running else ''} is running: one training job at a time. Wait "
                       "for it, or press Cancel job.")
        except DataError as e:
            message = f"⚠ {e}"
        return (message, *refresh())

    async def cancel():
        job = jobs.running()
        if job is None:
            return ("No job is running.", *refresh())
        if admin_refusal(cfg):
            return (f"⚠ {admin_refusal(cfg)}", *refresh())
        with acting_as(who()):
            await jobs.cancel(job["id"])
        return (f"Cancelled job {job['id']}: nothing was made; Train starts again from the start.", *refresh())

    async def activate(version):
        why = admin_refusal(cfg)
        if why:
            return (f"⚠ {why}", *refresh())
        if not version:
            return ("Pick a version first.", *refresh())
        try:
            with acting_as(who()):
                await jobs.switcher.activate(version, why="Train tab: Promote / activate")
            message = f"{version} is serving."
        except (RegistryError, ActivationError) as e:
            message = f"⚠ {e}"
        return (message, *refresh())

    with gr.Tab("Train", id="train", elem_id="tab-train") as tab:
        gr.Markdown("Retrain on every labeling session's decisions"
                    + (" and the base table given at start" if cfg.train_data else "")
                    + f". A fixed evaluation slice of the labeled texts ({cfg.eval_share:.0%}, by a hash of the text) is "
                    f"never trained on and scores every version; a new version is activated "
                    + ("when it is not worse than the active one by more than "
                       f"{cfg.promote_tolerance:g} macro-F1" if cfg.promote == "auto" else "only when you promote it")
                    + ". Training runs in a separate process at lower priority.")
        with gr.Row():
            # Text boxes, not gr.Number: Gradio 6 shows an empty Number as 0 (red, under a minimum) and refuses
            # it before Train runs. Empty means the default (the placeholder says which); check_params words
            # a value out of bounds.
            inputs = [gr.Textbox(label=f"{p.name.replace('_', ' ').capitalize()} ({p.low:g}–{p.high:g})",
                                 placeholder=hint, max_lines=1, elem_id="train-" + p.name.replace("_", "-"))
                      for p, hint in zip(TAB_PARAMS, number_placeholders(jobs))]
            t_start = gr.Button("Train", variant="primary", elem_id="train-start")
            t_cancel = gr.Button("Cancel job", elem_id="train-cancel")
        t_progress = gr.HTML(elem_id="train-progress")
        t_message = gr.Markdown(elem_id="train-message")
        t_versions = gr.Dataframe(versions_frame(None if admin_refusal(cfg) else registry), interactive=False, wrap=True,
                                  max_height=600, column_widths=VERSION_WIDTHS, label="Versions (newest first)",
                                  elem_id="train-versions")
        with gr.Row():
            t_version = gr.Dropdown(label="Version", choices=[], elem_id="train-version")
            t_activate = gr.Button("Promote / activate", elem_id="train-activate")
        outs = [t_message, t_progress, t_versions, t_version]
        quick = {"concurrency_limit": 16, "concurrency_id": "train"}
        t_start.click(start, inputs, outs, **quick)
        t_cancel.click(cancel, None, outs, **quick)
        promoted = t_activate.click(activate, t_version, outs, **quick)
        sent = gr.State(None)  # the version names this page's menu holds (tick)
        timer = gr.Timer(1.0)
        timer.tick(tick, sent, [*outs[1:], sent], show_progress="hidden", **quick)
        def opened():
            return tick(always=True)

        tab.select(opened, None, [*outs[1:], sent], **quick)
        tab.select(lambda: [gr.update(placeholder=h) for h in number_placeholders(jobs)], None, inputs, **quick)
    return promoted
