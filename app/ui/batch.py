"""The UI's Batch tab: score an uploaded file, every row kept, with predictions, as a CSV to download; a summary
that counts scored, not scored and "not sure" rows, and a preview a screen can show."""

from __future__ import annotations

import html
from functools import partial
from pathlib import Path

import gradio as gr
import pandas as pd

from app.label_kinds import kind_of
from app.ui.classify import no_threshold, observed
from app.ui.uploads import read_upload, spreadsheet_safe
from serving.scoring import score_frame
from textdata.tables import write_table

PREVIEW_ROWS = 20
PREVIEW_CHARS = 80  # a long text would push pred_label and error off the screen
PREVIEW_DIGITS = 3


def rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"


def unjudged(scored: pd.DataFrame, bare: str) -> pd.DataFrame:
    """The scored file of a model without a threshold (`bare`: why, app/ui/classify.py no_threshold): its
    `confident` is true for every in-domain answer (serving/calibration.py), which says nothing of how sure it is,
    so that cell is left empty; false stays (out of domain: a reason of its own), as do the LLM's answers."""
    if not bare or "confident" not in scored:
        return scored
    blank = scored["confident"].fillna(False).astype(bool)
    if "source" in scored:
        blank &= scored["source"] != "llm"
    out = scored.copy()
    out.loc[blank, "confident"] = pd.NA
    return out


def summary(scored: pd.DataFrame, kind, cut: int, max_chars: int, bare: str = "") -> str:
    """What happened to the file's rows: scored (by answer), not scored (the reason is in `error`), not sure.
    `kind`: the model's (app/label_kinds.py), which names the answer's column; `bare`: why the model has no
    threshold ("" where it has one): a false `confident` is then out of domain, never under a threshold."""
    got = scored[kind.answer_column].notna()  # unscored rows have none
    counts = kind.answer_counts(scored.loc[got, kind.answer_column])
    unscored = int((~got).sum())
    unsure = int((scored["confident"] == False).sum()) if "confident" in scored else 0  # NA (unscored) counts as neither
    parts = [f"Scored **{int(got.sum())}** of {rows(len(scored))}: "
             + ", ".join(f"{html.escape(str(k))} {v}" for k, v in counts.items())]
    if unscored:
        parts.append(f"**{unscored}** not scored (the reason is in the `error` column)")
    by_llm = int((scored["source"] == "llm").sum()) if "source" in scored else 0  # --fallback-url
    if by_llm:
        parts.append(f"**{by_llm}** answered by the LLM (the model was not sure: `source` is llm)")
    if unsure:
        why = ("out of domain: unlike the training rows" if bare
               else "under the model's threshold, or out of domain")
        parts.append(f"**{unsure}** not sure ({why}: `confident` is false)")
    if bare:
        parts.append(f"the model has no threshold ({html.escape(bare)}): `confident` is left empty, not true")
    if cut:
        parts.append(f"{rows(cut)} with a text cut to {max_chars:,} characters")
    return " · ".join(parts)


def preview(scored: pd.DataFrame) -> pd.DataFrame:
    """The first rows as a screen shows them: long texts cut, probabilities to a few digits."""
    head = scored.head(PREVIEW_ROWS).copy()
    first = [c for c in ("pred_label", "pred_labels", "pred_score", "confident", "error") if c in head]
    head = head[first + [c for c in head.columns if c not in first]]  # the answer and error before any long text
    for col in head.columns:
        if pd.api.types.is_float_dtype(head[col]):
            head[col] = head[col].round(PREVIEW_DIGITS)
        elif pd.api.types.is_string_dtype(head[col]) or head[col].dtype == object:
            head[col] = head[col].map(lambda v: v[:PREVIEW_CHARS - 1] + "…" if isinstance(v, str) and
                                      len(v) > PREVIEW_CHARS else v)
    return head


def answers(scored: pd.DataFrame, column: str, clf) -> tuple[list, list[str]]:
    """The engine's answers to a scored file's rows that got one, as the API's predictions (the monitor counts
    those), and their texts. The frame is what serving/scoring.py wrote: pred_label(s), prob_*, confident."""
    kind = kind_of(clf.space)
    got = scored[kind.answer_column].notna()
    rows = scored[got]
    labels = list(clf.labels)
    sure = rows["confident"].fillna(False).astype(bool).tolist()
    preds = [kind.row_prediction(row, labels, confident) for (_, row), confident in zip(rows.iterrows(), sure)]
    return preds, rows[column].astype(str).tolist()


def batch_tab(cfg, state, exports, engine_turn, score_chunks, stop_reason, scoring_limit: int, metrics=None) -> None:
    """`score_chunks` and `stop_reason`: app/ui/page.py's chunked, cancellable scoring (shared with the Label tab).
    `metrics`: the server's: its answers are counted as the API's (app/ui/classify.py observed)."""

    def within(by_row: dict[int, str], a: int, b: int) -> dict[int, str]:
        return {i - a: v for i, v in by_row.items() if a <= i < b}

    def score_file(file, text_column, progress=gr.Progress()):  # noqa: B008 - how Gradio injects progress
        df, column, errors, notes = read_upload(cfg, file, text_column, partial(stop_reason, state))
        served = state.served
        clf = served.clf  # one version for the whole file

        def score(a, b):  # rows the reader flagged are kept, with the reason in `error`
            return score_frame(clf, df.iloc[a:b], column, None, within(errors, a, b), within(notes, a, b))

        parts = score_chunks(len(df), score, progress, "Scoring", "rows", engine_turn, state)
        scored = pd.concat(parts)
        preds, texts = answers(scored, column, clf)  # the engine's answers, as the API's are counted
        seqs = clf.encode(texts) if getattr(state, "monitor", None) is not None else []  # its overlong share
        observed(state, metrics, served, preds, texts, seqs)
        if getattr(state, "fallback", None) is not None:  # 'not sure' rows to the LLM, after the engine's turns
            from app.llm.cascade_rows import defer_frame
            from app.llm.fallback import client_name
            from app.ui.guard import person

            scored = defer_frame(state.fallback, clf, scored, column, state.served.version,
                                 client_name(person(cfg, state), None))
        bare = no_threshold(clf)
        scored = unjudged(scored, bare)  # after the monitor and the LLM had the engine's own flags
        out = exports.path(f"{Path(file).stem}-scored.csv")
        write_table(spreadsheet_safe(scored), out)  # a person opens this one: formulas neutralised
        return str(out), summary(scored, kind_of(clf.space), len(notes), cfg.max_chars, bare), preview(scored)

    with gr.Tab("Batch", id="batch", elem_id="tab-batch"):
        with gr.Row():
            b_file = gr.File(label="CSV to score", file_types=[".csv", ".tsv", ".jsonl", ".parquet"],
                             elem_id="batch-file")
            with gr.Column():
                b_column = gr.Textbox(label="Text column", value="text", elem_id="batch-column")
                b_go = gr.Button("Score", variant="primary", elem_id="batch-go")
        b_summary = gr.Markdown(elem_id="batch-summary")
        b_out = gr.File(label="Scored CSV (every input column + pred_label, pred_score or, multi-label, pred_labels; "
                              "prob_*, confident, error, model_version)", elem_id="batch-download")
        b_preview = gr.Dataframe(label=f"First rows (texts cut to {PREVIEW_CHARS} characters here, not in the CSV)",
                                 interactive=False, wrap=False, elem_id="batch-preview")
        b_go.click(score_file, [b_file, b_column], [b_out, b_summary, b_preview], concurrency_id="scoring",
                   concurrency_limit=scoring_limit)
