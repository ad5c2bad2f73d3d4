"""The UI's Classify tab (one text in, its label and probabilities out, through the API's micro-batcher), the
page header and the banner that says when the served model adds nothing to the TF-IDF baseline."""

from __future__ import annotations

import asyncio
import html

import gradio as gr

from app.http.api import text_problem
from app.http.batcher import QueueFull
from app.monitoring.monitor import answer_scores, label_set
from serving.calibration import no_threshold_reason
from textdata.learned import ADDS_NOTHING

QUICK = 16  # concurrent quick events (classify, label clicks): milliseconds each


def header(state, sign_out: str = "") -> str:
    """The page's heading: the version serving now (a folder name such as "onnx" tells a team nothing)."""
    served = state.served
    labels = ", ".join(html.escape(x) for x in served.clf.labels)
    return f"## Text classifier · model {html.escape(served.version)}\nLabels: {labels}{sign_out}"


def health_banner(state) -> str:
    """A warning over every tab while the served model adds nothing (textdata/learned.py), else nothing."""
    learned = getattr(state.served.clf, "learned", None)
    if not learned:
        return ""
    served = ""
    if learned.startswith(ADDS_NOTHING):  # the figure is the model's alone, not the answers' (the blend's)
        served = (" The figure in brackets is the fine-tuned model's own score; what the answers served now score "
                  "(the blend with the baseline) is the Train tab's versions table.")
    # one line on screen, the figures and the next step a click away: three lines of it pushed the Label tab's
    # buttons and key line under a 1366x768 screen (issue 59, D4)
    head, _, why = learned.partition(" (")
    why = f"({why}. " if why else ""
    return (f"<details id='health-details'><summary>⚠ <b>{html.escape(head, quote=False)}.</b> Why, and the next "
            f"step</summary>{html.escape(why, quote=False)}Its confidences are the baseline's too.{served} Next step: "
            "label more texts (Label tab) and retrain (Train tab) with more epochs; the Train tab's versions table "
            "shows when a version scores better.</details>")


def no_threshold(clf) -> str:
    """Why the served model has no threshold to be sure by ("" where it has one; serving/calibration.py)."""
    return no_threshold_reason(getattr(clf, "calibration", None))


def needed(clf, label: str) -> str:
    """The probability `label` needs to count as sure, and the precision that threshold was chosen for."""
    cal = getattr(clf, "calibration", None)
    thresholds = getattr(cal, "thresholds", None)
    if thresholds is None or not getattr(cal, "applied", False) or label not in clf.labels:
        return ""
    target = (getattr(cal, "spec", None) or {}).get("target_precision")
    return f"{float(thresholds[list(clf.labels).index(label)]):.0%} needed" + (
        f" for {target:.0%} precision" if target else "")


def promise(clf) -> str:
    """What the served threshold promises, as k-fold stated it (finetune/coverage.py statement), or nothing."""
    cal = getattr(clf, "calibration", None)
    said = (getattr(cal, "spec", None) or {}).get("statement") if getattr(cal, "applied", False) else None
    return f"\n\n*Confident answers: {html.escape(said.replace('>=', '≥'))}.*" if said else ""


def answer_markdown(clf, pred, version: str, cut: str = "") -> str:
    """The answer's heading: the label (or label set), and "not sure" as large as the label when it is, with
    why (under the threshold it needed, or a text unlike the training rows); then what "confident" promises."""
    sure = pred.confident
    away = pred.reason == "out of domain"
    if label_set(pred) is not None:  # the label set over the thresholds, maybe empty
        found = ", ".join(f"**{html.escape(x)}** {pred.scores[x]:.1%}" for x in pred.labels) or "**none of the labels**"
        head = found
    else:
        head = f"**{html.escape(pred.label)}** · {pred.score:.1%}"
        if not sure and not away:
            why = needed(clf, pred.label)
            head += f" < {why}" if why else ""
    unsure = "" if sure else "### ⚠ Not sure\n" + (
        "This text is unlike the texts the model was trained on (out of domain): treat the answer as a guess.\n\n"
        if away else "The model's answer is under its threshold: treat it as a guess.\n\n")
    return f"{unsure}{head} · model {html.escape(version)}{cut}{promise(clf)}"


def observed(state, metrics, served, preds: list, texts: list[str], seqs: list) -> None:
    """Answers the UI gave (Classify, Batch), counted as the API counts its own (app/http/api.py classify_texts):
    in the monitor's window of `served` and in app_not_confident_total. `metrics`: None on a UI built alone."""
    if getattr(state, "monitor", None) is not None:  # one queue put: the monitor's thread does the counting
        state.monitor.observe(served, preds, texts, seqs, getattr(served.clf, "max_length", None))
    unsure = sum(not p.confident for p in preds)
    if unsure and metrics is not None:
        metrics.not_confident.inc(unsure)


def classify_tab(cfg, state, metrics=None) -> None:
    """`metrics`: the server's (app/http/metrics.py), which counts this tab's "not sure" answers."""
    labels = list(state.served.clf.labels)

    async def classify(text: str):
        served = state.served
        clf = served.clf
        text = (text or "").strip()
        if not text:
            raise gr.Error("Type or paste a text first.")
        problem = text_problem(text, clf.normalizer)
        if problem:
            raise gr.Error(f"Cannot classify this text: {problem}.")
        cut = ""
        if len(text) > cfg.max_chars:  # as Batch does: the start is classified, and the answer says so
            cut = f" · only the first {cfg.max_chars:,} of its {len(text):,} characters were classified"
            text = text[:cfg.max_chars]
        if state.batcher is None or state.draining:
            raise gr.Error("The server is starting or shutting down; try again in a moment.")
        seqs = await asyncio.to_thread(clf.encode, [text])
        try:
            (pred,) = await asyncio.wait_for(state.batcher.submit(seqs, [len(seqs[0])], served), cfg.request_timeout_s)
        except (QueueFull, asyncio.TimeoutError):
            raise gr.Error("The server is busy; try again in a moment.") from None
        observed(state, metrics, served, [pred], [text], seqs)
        probs = answer_scores(pred)
        unsure = not pred.confident and state.review is not None
        note = ""
        if getattr(state, "fallback", None) is not None:  # the cascade, as for the API (app/llm/fallback.py)
            from app.llm.cascade_rows import source_note
            from app.llm.fallback import client_name
            from app.ui.guard import person

            (pred,) = await state.fallback.resolve([text], [pred], served.version, list(clf.labels),
                                                   space=clf.space, client=client_name(person(cfg, state), None))
            note = source_note(pred, cfg.fallback_model)
        # a "not sure" answer: no large label heading over the bars, so "⚠ Not sure" is the largest words shown
        shown = gr.update(value=probs, show_heading=bool(pred.confident))
        return (shown, answer_markdown(clf, pred, served.version, cut) + note,
                gr.update(visible=True if unsure else "hidden", value="Send to the review queue", interactive=True),
                (text, pred, served.version) if unsure else None)

    def send(last):
        """A "not sure" answer to the review queue (--review-queue), as the API queues its own."""
        if last is None or state.review is None:
            return gr.update(visible="hidden")
        added = state.review.add([last[0]], [last[1]], last[2])
        said = "✓ Sent: it waits in the Label tab's review queue" if added else "✓ Already in the review queue"
        return gr.update(value=said, interactive=False)

    with gr.Tab("Classify", id="classify", elem_id="tab-classify"):
        # No max_length: the browser would cut a long paste silently; classify() says it cut one.
        c_text = gr.Textbox(label="Text", lines=5, elem_id="classify-text", placeholder="Type or paste a text",
                            info=f"Shift+Enter or Classify sends it; Enter starts a new line. Up to "
                                 f"{cfg.max_chars:,} characters are classified.")
        c_button = gr.Button("Classify  [Shift+Enter]", variant="primary", elem_id="classify-btn")
        c_top = gr.Markdown(elem_id="classify-top")
        last = gr.State(None)  # the last "not sure" answer, for the review-queue button
        c_send = gr.Button("Send to the review queue", visible="hidden", size="sm", elem_id="classify-send")
        c_probs = gr.Label(label="Probabilities", num_top_classes=len(labels), elem_id="classify-probs")
        outputs = [c_probs, c_top, c_send, last]
        c_button.click(classify, c_text, outputs, concurrency_limit=QUICK)
        c_text.submit(classify, c_text, outputs, concurrency_limit=QUICK)
        c_send.click(send, last, c_send, concurrency_limit=QUICK)
