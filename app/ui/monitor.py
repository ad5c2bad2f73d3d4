"""The UI's Monitor tab: what the served version sees and says now against its reference (drift), the drift
over time, and live precision from the audit sample (for a multi-label version: precision and recall of its
label sets, the exact-set rate, and both per label); and the button that opens an audit session."""

from __future__ import annotations

import html
from datetime import datetime

import gradio as gr

from app.label_kinds import space_from
from app.labeling.audit import start_session
from app.monitoring.monitor import DRIFT_MIN_ANSWERS, TOO_FEW

COLOURS = {"ok": "#1a7f37", "watch": "#b35900", "alert": "#cf222e"}
MEANS = {"class_mix": "the mix of labels the model answers", "confidence": "how sure the model is",
         "length": "how long the texts are"}
NEXT = {"ok": "is as in the reference (the texts it was trained on).",
        "watch": "has moved from the reference: keep an eye on it.",
        "alert": "has moved far from the reference: start an audit session below to measure precision on "
                 "today's texts, and label recent texts and retrain (Train tab) if it fell.",
        TOO_FEW: f"cannot be judged yet: under {DRIFT_MIN_ANSWERS} answers in the window, too few for a level "
                 "(no alert before)."}


def level_line(kind: str, psi: float, level: str) -> str:
    """One statistic as a coloured word, its PSI, and a sentence saying what it means and what to do."""
    colour = COLOURS.get(level, "inherit")
    return (f'<li><b style="color:{colour}">{html.escape(level.upper())}</b> · {html.escape(MEANS.get(kind, kind))} '
            f'{NEXT.get(level, "")} <small>(PSI {psi:.3f}; watch ≥ 0.1, alert ≥ 0.25)</small></li>')


def _shares(counts) -> list[float]:
    total = sum(counts) or 1
    return [c / total for c in counts]


def figure(version: dict):
    """Three panels: answered-label mix now vs reference, confidence histogram now vs reference, PSI over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4), constrained_layout=True)
    ref = version.get("reference") or {}
    names = list(version["class_mix"])
    x = range(len(names))
    ax = axes[0]
    ax.bar([i - 0.2 for i in x], _shares(version["class_mix"].values()), width=0.4, label="now")
    if ref:
        ax.bar([i + 0.2 for i in x], _shares([ref["class_mix"].get(k, 0) for k in names]), width=0.4, label="reference")
    est = version.get("estimated_mix")
    if est:  # the mix the texts themselves have, by EM: a marker on each label's pair of bars
        ax.scatter(list(x), [est["mix"].get(k, 0.0) for k in names], marker="D", color="black", zorder=3,
                   label="estimated mix now (EM)")
    ax.set_xticks(list(x), names, rotation=45, ha="right")
    ax.set_title("answered labels (share)")
    ax.legend()
    ax = axes[1]
    bins = range(len(version["confidence_counts"]))
    ax.bar([b / 10 + 0.025 for b in bins], _shares(version["confidence_counts"]), width=0.045, label="now")
    if ref:
        ax.bar([b / 10 + 0.075 for b in bins], _shares(ref["confidence"]["counts"]), width=0.045, label="reference")
    ax.set_xlabel("top-label confidence")
    ax.set_title("confidence (share)")
    ax.legend()
    ax = axes[2]
    history = version.get("history") or []
    ax.set_title("drift (PSI) over time")
    if not history:  # an empty date axis would read 1970
        ax.text(0.5, 0.5, "no drift check yet\n(one every 100 answers, with a reference)", ha="center",
                va="center", transform=ax.transAxes)
        ax.set_xticks([])
        return fig
    when = [datetime.fromtimestamp(h["t"]) for h in history]
    for kind in ("class_mix", "confidence", "length"):
        ax.plot(when, [h[kind] for h in history], marker=".", label=kind)
    ax.axhline(0.25, color="red", linestyle="--", linewidth=1, label="alert (0.25)")
    ax.axhline(0.1, color="orange", linestyle=":", linewidth=1, label="watch (0.1)")
    ax.set_xlabel("time of the check (server clock)")
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(ax.xaxis.get_major_locator()))
    ax.legend(fontsize=8)
    return fig


def _rate(value, interval, n: int, of: str) -> str:
    if value is None:
        return f"– (no {of})"
    return f"{value:.1%} ({interval[0]:.0%}–{interval[1]:.0%}, {n} {of})"


def live_labels(live: dict) -> str:
    """A single-label version's audit: how many answers were right."""
    lo, hi = live["interval"]
    return (f"\n**Live precision** {live['precision']:.1%} (95% interval {lo:.1%}–{hi:.1%}) on "
            f"{live['audited']} audited answers.")


def live_sets(live: dict) -> str:
    """A multi-label version's audit: the set figures, then precision and recall per label."""
    head = (f"\n**Live audit** of {live['audited']} label sets: precision of the asserted labels "
            f"{_rate(live['precision'], live['interval'], live['asserted'], 'asserted')} · recall of the ticked "
            f"labels {_rate(live['recall'], live['recall_interval'], live['ticked'], 'ticked')} · exact set "
            f"{_rate(live['exact_match'], live['exact_interval'], live['audited'], 'texts')} (95% intervals)\n")
    lines = [head, "| label | precision | recall |\n|---|---|---|"]
    lines += [f"| {html.escape(k)} | {_rate(c['precision'], c['interval'], c['asserted'], 'asserted')} | "
              f"{_rate(c['recall'], c['recall_interval'], c['ticked'], 'ticked')} |"
              for k, c in live["per_label"].items()]
    return "\n".join(lines)


def mix_line(est: dict | None, confidence_level: str | None = None) -> str:
    """The estimated class mix of the texts in the window against the training mix, in one sentence; with a
    caveat where the confidence has drifted to an alert, since EM reads the served probabilities as calibrated,
    which a moved confidence says they may no longer be (issue 42's ko-help pages: EM moved a steady mix)."""
    if not est:
        return ("\nEstimated class mix: not shown (a multi-label version, no reference, or under 50 single-label "
                "answers in the window).")
    top = sorted(est["mix"], key=lambda k: -abs(est["mix"][k] - est["training_mix"].get(k, 0.0)))[:3]
    moved = "has **moved** from" if est["moved"] else "is consistent with"
    return (f"\nEstimated class mix of the {est['rows']} texts in the window (EM on the served probabilities, Saerens "
            f"et al. 2002) {moved} the training mix (likelihood-ratio p = {est['p_value']:.3g}; total variation "
            f"{est['total_variation']:.3f}): " + ", ".join(
                f"{html.escape(k)} {est['mix'][k]:.1%} (trained {est['training_mix'].get(k, 0.0):.1%})" for k in top)) + (
        " **Read it with care:** how sure the model is has moved far from the reference too, so its probabilities "
        "may not be calibrated on these texts, and the estimate assumes they are." if confidence_level == "alert" else "")


def summary(report: dict, version: str) -> str:
    v = report["versions"].get(version)
    if v is None:
        return f"Version **{html.escape(version)}** has answered nothing since it started serving."
    lines = [(f"Version **{html.escape(version)}**: {v['n']} answers in the window (last {report['window']['size']}), "
              f"{v['total']} counted since monitoring began.")]
    if v["drift"] is None:
        lines.append(f"No drift statistics: {html.escape(v['reference_note'] or 'no answers yet')}.")
    else:
        lines.append("<ul>" + "".join(level_line(k, val, v["levels"][k]) for k, val in v["drift"].items()) + "</ul>")
    lines.append(mix_line(v.get("estimated_mix"), (v.get("levels") or {}).get("confidence")))
    lines.append(f"\nCut at the token limit: {v['overlong_share']:.1%} · not sure: {v['not_sure_share']:.1%} · "
                 f"empty texts refused: {v['empty_rejected']}")
    live = v.get("live_precision")
    if live:  # its kind as app/labeling/audit.py wrote it: label sets, or one label per text
        lines.append(space_from(live).pick(live_labels, live_sets)(live))
    audit = report.get("audit", {})
    lines.append(f"\nAudit sample: rate {audit.get('rate', 0):g}, {audit.get('queued', 0)} texts waiting."
                 + ("" if audit.get("rate") else " Start the server with --audit-rate 0.05 to sample served texts."))
    return "\n".join(lines)


def monitor_tab(cfg, state, store) -> None:
    monitor = state.monitor

    def refresh(chosen=None):
        """The chosen version's figures (the served one by default): a switch keeps the previous one's."""
        report = monitor.report()
        served = state.served.version
        version = chosen if chosen in report["versions"] else served
        v = report["versions"].get(version)
        names = sorted(set(report["versions"]) | {served}, key=lambda x: (x != served, x))
        pick = gr.update(choices=[(f"{x} (serving)" if x == served else x, x) for x in names], value=version)
        text = summary(report, version)
        if getattr(state, "fallback", None) is not None:  # --fallback-url: who answered, the LLM's errors and cost
            from app.llm.cascade_rows import cascade_markdown

            text += "\n" + cascade_markdown(state.fallback.report())
        # a version past its window's span still has its drift over time to show
        return text, (figure(v) if v and (v["n"] or v.get("history")) else None), pick

    def audit(n):
        if monitor.audit is None:
            return "The audit is off: start the server with --audit-rate (e.g. 0.05)."
        clf = state.served.clf
        session = start_session(store, monitor.audit, list(clf.labels), int(n), clf.space)
        if session is None:
            return "No sampled texts are waiting yet."
        how = session.kind.audit_how
        return (f"Audit session of {session.meta['rows']} texts made: open the Label tab and choose it under "
                f"'Earlier sessions' (the model's answers are hidden there).{how}")

    with gr.Tab("Monitor", id="monitor", elem_id="tab-monitor") as tab:
        m_version = gr.Dropdown(label="Version", choices=[], elem_id="monitor-version")
        m_summary = gr.Markdown(elem_id="monitor-summary")
        m_plot = gr.Plot(show_label=False, elem_id="monitor-plot")  # a label would cover the first chart's title
        with gr.Row():
            m_refresh = gr.Button("Refresh", elem_id="monitor-refresh")
            m_n = gr.Number(value=50, precision=0, minimum=1, maximum=500, label="Texts per audit session")
            m_audit = gr.Button("Start an audit session", elem_id="monitor-audit")
        m_message = gr.Markdown(elem_id="monitor-message")
        shown = [m_summary, m_plot, m_version]
        m_refresh.click(refresh, m_version, shown)
        m_version.input(refresh, m_version, shown)
        tab.select(refresh, m_version, shown)
        m_audit.click(audit, m_n, m_message)
