"""The cascade (app/llm/fallback.py) where the UI shows answers: a scored Batch file's 'not sure' rows, the Classify
tab's answer line, and the Monitor tab's cascade section (from /v1/monitor's "cascade")."""

from __future__ import annotations

import html

import numpy as np
import pandas as pd

from app.label_kinds import kind_of
from app.llm.fallback import by_llm


def defer_frame(fallback, clf, scored: pd.DataFrame, column: str, version: str, client: str) -> pd.DataFrame:
    """`scored` (serving.scoring.score_frame's table) with its 'not sure' rows answered by the LLM where it gave an
    answer in time, and a `source` column ("model" | "llm"; empty for rows not scored). Every row is kept; a row the
    LLM did not answer keeps the model's answer, `confident` false."""
    kind = kind_of(clf.space)  # its scored file's columns: pred_label, pred_score or pred_labels
    answer = kind.answer_column
    out = scored.copy()
    have = out[answer].notna().to_numpy()
    out["source"] = pd.array(np.where(have, "model", None), dtype="string")
    unsure = np.flatnonzero(have & (out["confident"] == False).fillna(False).to_numpy())
    if not len(unsure) or not all(f"prob_{x}" in out for x in clf.labels):
        return out
    labels = list(clf.labels)
    preds = [kind.row_prediction(out.iloc[i], labels) for i in unsure]
    texts = out[column].iloc[unsure].astype(str).tolist()
    got = fallback.resolve_blocking(texts, preds, version, labels, clf.space, client)
    rows = out.index[unsure]
    for index, p in zip(rows, got):
        if not by_llm(p):
            continue
        kind.write_answer(out, index, p)
        out.at[index, "confident"], out.at[index, "source"] = True, "llm"
    return out


def source_note(pred, llm: str) -> str:
    """The Classify tab's line under an answer the LLM gave."""
    if not by_llm(pred):
        return ""
    return f"\n\nAnswered by the LLM ({html.escape(llm)}): the model was not sure."


def _money(x) -> str:
    return "–" if x is None else f"{x:,.4f}"


def cascade_markdown(c: dict) -> str:
    """/v1/monitor's "cascade" in words: who answered, the LLM's errors, what it cost and what the model saved."""
    if not c["answers"]:
        return f"\n**LLM fallback** ({html.escape(str(c['llm']))}): no answer yet."
    by_llm = c["llm_answered"] + c["from_stored_answers"]
    own = c["answers"] - by_llm
    state = "" if c["reachable"] else " · **unreachable at start: the model answers alone**"
    kinds = ", ".join(f"{k} {v}" for k, v in sorted((c.get("errors_by_kind") or {}).items()))
    head = (f"\n**LLM fallback** ({html.escape(str(c['llm']))}){state}: of {c['answers']:,} answers the model gave "
            f"**{own / c['answers']:.1%}** itself, the LLM **{by_llm / c['answers']:.1%}** "
            f"({c['from_stored_answers']:,} of them from its stored answers, paid once).")
    errors = (f"Sent to the LLM (not sure): {c['deferred']:,} · LLM errors: {c['errors']:,}"
              + (f" ({html.escape(kinds)})" if kinds else "") + " (the model's answer stood, marked not sure).")
    cost = (f"LLM calls {c['llm_calls']:,} · cost paid {_money(c['cost_paid'])} · per call "
            f"{_money(c['cost_per_llm_call'])} · estimated saved {_money(c['estimated_cost_saved'])} (the answers "
            "the model gave itself, at the LLM's cost per call).")
    sets = c.get("teacher_label_sets") or {"rows": 0}
    kept = (f"Teacher labels kept for the next retrain: {c['teacher_labels']['rows']:,} "
            f"(`{html.escape(c['teacher_labels']['file'])}`)"
            + (f", label sets {sets['rows']:,} (`{html.escape(sets['file'])}`)." if sets["rows"] else "."))
    lines = [head, errors, cost, kept]
    return "\n".join(lines)
