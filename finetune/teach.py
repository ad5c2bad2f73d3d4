"""Label texts with an LLM (the teacher) through any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, a gateway).

    python -m finetune.teach --data texts.csv --labels business,sport,tech --base-url https://api.openai.com/v1 \\
        --model gpt-4o-mini --prompt prompt.txt --output teacher.csv \\
        --price-per-1k-input 0.00015 --price-per-1k-output 0.0006
    python -m finetune.teach --data synopses.csv --labels devel,role,x11 --multi-label ... --output teacher.csv

The prompt file holds {text} and {labels} (refused at start otherwise). The key is read from $OPENAI_API_KEY
(--api-key-env names another variable; a local server needs none). Writes OUTPUT with every input row and its
columns plus `teacher` (the label, or the labels joined by --label-sep, `[]` for none; an answer outside the label
set is kept as given), `teacher_in_label_set`, `teacher_answer`, `teacher_error` (the row is kept when the endpoint
refused or timed out after the retries), tokens and cost per row; OUTPUT's stem + .summary.json (calls, tokens,
cost, rows outside the label set). Every answer is appended to OUTPUT's stem + .cache.jsonl as it arrives: a
rerun, or a run after a kill, pays only for texts not asked yet. Then train on it: finetune/kfold.py
--label-column gold --teacher-column teacher (docs/finetune.md#teach-from-an-llm).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from textdata.errors import DataError, exits_2_on_user_error
from textdata.flags import Flag, config_from, parser_for
from textdata.labels import DEFAULT_SEP, LabelSpace
from textdata.llm import (
    MAX_ANSWER_CHARS,
    Answer,
    ask,
    cache_key,
    make_client,
    parse_answer,
    read_prompt,
    render,
)
from textdata.urls import redact

DESCRIPTION = "Label texts with an LLM through an OpenAI-compatible endpoint (the teacher for finetune/kfold.py)."


@dataclass(frozen=True)
class TeachConfig:
    data: str
    labels: str
    base_url: str
    model: str
    prompt: str
    output: str
    text_column: str = "text"
    encoding: str = "utf-8"
    multi_label: bool = False
    label_sep: str = DEFAULT_SEP
    concurrency: int = 8
    retries: int = 4
    timeout: float = 30.0
    max_tokens: int = 20
    price_per_1k_input: float = 0.0
    price_per_1k_output: float = 0.0
    api_key_env: str = "OPENAI_API_KEY"


FLAGS = {
    "data": Flag("CSV/TSV/JSONL/Parquet with the texts"),
    "labels": Flag("the label set, comma-separated (a,b,c)"),
    "base_url": Flag("the OpenAI-compatible endpoint, e.g. https://api.openai.com/v1 or http://localhost:8000/v1"),
    "model": Flag("the LLM's name at that endpoint"),
    "prompt": Flag("a text file holding {text} and {labels}"),
    "output": Flag("the labelled table (CSV/TSV/JSONL/Parquet); the cache and summary go beside it"),
    "text_column": Flag("the column holding the texts"),
    "multi_label": Flag("the LLM may answer several labels (separated by commas, semicolons or lines) or 'none'"),
    "label_sep": Flag("--multi-label: the separator between labels in the teacher column"),
    "concurrency": Flag("requests in flight at once"),
    "retries": Flag("retries per text on 429, 5xx, timeouts and dropped connections (backoff, Retry-After)"),
    "timeout": Flag("seconds per request before it counts as failed (and is retried)"),
    "max_tokens": Flag("tokens the LLM may answer with"),
    "price_per_1k_input": Flag("the endpoint's price per 1,000 prompt tokens, for the cost columns"),
    "price_per_1k_output": Flag("the endpoint's price per 1,000 answer tokens"),
    "api_key_env": Flag("the environment variable holding the API key"),
}


def parse_args(argv=None) -> TeachConfig:
    p = parser_for(TeachConfig, "python -m finetune.teach", __doc__, FLAGS)
    cfg = config_from(TeachConfig, p.parse_args(argv))
    if cfg.concurrency < 1 or cfg.retries < 0 or cfg.timeout <= 0:
        p.error("--concurrency must be at least 1, --retries at least 0 and --timeout above 0")
    if not label_list(cfg):
        p.error("--labels: give the label set, comma-separated (a,b,c)")
    return cfg


def label_list(cfg: TeachConfig) -> list[str]:
    return list(dict.fromkeys(x.strip() for x in cfg.labels.split(",") if x.strip()))


def side_path(cfg: TeachConfig, kind: str) -> Path:
    out = Path(cfg.output)
    return out.with_name(f"{out.stem}.{kind}")


class AnswerCache:
    """Answers by cache key, one JSON line each, appended with one O_APPEND write as they arrive: a kill loses at
    most the line being written, which is skipped on reading. Errors are not cached: a rerun asks again."""

    def __init__(self, path: Path):
        self.path = path
        self.entries: dict[str, dict] = {}
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                    if not isinstance(entry["answer"], str):
                        continue  # not an answer: asked again
                    # cut as a fresh answer is (textdata/llm.py): a cache from before the cut kept them whole
                    self.entries[entry["key"]] = {**entry, "answer": entry["answer"][:MAX_ANSWER_CHARS]}
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut short by a kill
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def put(self, key: str, answer: Answer) -> None:
        entry = {"key": key, "answer": answer.text, "input_tokens": answer.input_tokens,
                 "output_tokens": answer.output_tokens}
        self.entries[key] = entry
        os.write(self._fd, (json.dumps(entry, ensure_ascii=False) + "\n").encode())

    def close(self) -> None:
        os.fsync(self._fd)
        os.close(self._fd)


async def ask_all(cfg: TeachConfig, prompts: dict[str, str], cache: AnswerCache, bar) -> dict[str, Answer]:
    """Every prompt not in the cache, `concurrency` at a time; the answers (errors included) by key."""
    todo: asyncio.Queue = asyncio.Queue()
    for key in prompts:
        if key not in cache.entries:
            todo.put_nowait(key)
    got: dict[str, Answer] = {}
    client = make_client(cfg.base_url, cfg.timeout, cfg.retries, cfg.api_key_env)

    async def worker():
        while not todo.empty():
            key = todo.get_nowait()
            answer = await ask(client, cfg.model, prompts[key], cfg.max_tokens)
            got[key] = answer
            if not answer.error:
                cache.put(key, answer)
            bar.update(1)

    try:
        await asyncio.gather(*(worker() for _ in range(min(cfg.concurrency, max(1, todo.qsize())))))
    finally:
        await client.close()
    return got


def cost(cfg: TeachConfig, input_tokens: int, output_tokens: int) -> float:
    return input_tokens / 1000 * cfg.price_per_1k_input + output_tokens / 1000 * cfg.price_per_1k_output


def row_columns(cfg: TeachConfig, labels: list[str], answer: Answer, cached: bool) -> dict:
    """The teacher's columns for one row: an answer outside the label set stays as given, flagged."""
    parsed = parse_answer(answer.text, labels, cfg.multi_label)
    if answer.error:
        shown = ""
    elif parsed.in_label_set:
        # marked: "none" is `[]`, as k-fold --teacher-column reads an empty cell as no answer
        shown = LabelSpace.of(labels, cfg.multi_label, cfg.label_sep).marked(parsed.labels, sort=False)
    else:
        shown = answer.text.strip()
    return {"teacher": shown, "teacher_in_label_set": parsed.in_label_set and not answer.error,
            "teacher_answer": answer.text, "teacher_error": answer.error,
            "teacher_input_tokens": answer.input_tokens, "teacher_output_tokens": answer.output_tokens,
            "teacher_cost": round(cost(cfg, answer.input_tokens, answer.output_tokens), 8), "teacher_cached": cached}


def load_texts(cfg: TeachConfig):
    from textdata.inputs import check_file
    from textdata.tables import missing_text, read_table, require_columns

    check_file(cfg.data, "--data")
    table = read_table(cfg.data, encoding=cfg.encoding)
    require_columns(table, {cfg.text_column: "--text-column"}, cfg.data)
    return table.reset_index(drop=True), missing_text(table[cfg.text_column]).to_numpy()


def run(cfg: TeachConfig, progress: bool = True) -> dict:
    """Label every row of --data; the summary (also written beside OUTPUT)."""
    import pandas as pd
    from tqdm import tqdm

    from textdata.tables import table_format, write_json, write_table

    template, labels = read_prompt(cfg.prompt), label_list(cfg)
    table_format(cfg.output)  # an unsupported output type fails before anything is paid for
    table, blank = load_texts(cfg)
    texts = table[cfg.text_column].astype(str).tolist()
    keys = [None if b else cache_key(cfg.model, render(template, t, labels)) for t, b in zip(texts, blank)]
    prompts = {k: render(template, t, labels) for k, t in zip(keys, texts) if k is not None}
    cache = AnswerCache(side_path(cfg, "cache.jsonl"))
    started, had = time.time(), set(cache.entries)
    try:
        with tqdm(total=len(prompts), initial=len(set(prompts) & had), desc="teacher", unit="text",
                  disable=not progress) as bar:
            got = asyncio.run(ask_all(cfg, prompts, cache, bar))
    finally:
        cache.close()
    rows = []
    for key in keys:
        if key is None:
            rows.append(row_columns(cfg, labels, Answer("", error="empty text: not asked"), False))
        elif key in got:
            rows.append(row_columns(cfg, labels, got[key], False))
        else:
            e = cache.entries[key]
            rows.append(row_columns(cfg, labels, Answer(e["answer"], e["input_tokens"], e["output_tokens"]), True))
    out = pd.concat([table, pd.DataFrame(rows)], axis=1)
    write_table(out, cfg.output)
    summary = summarize(cfg, out, got, time.time() - started)
    write_json(side_path(cfg, "summary.json"), summary)
    return summary


def summarize(cfg: TeachConfig, out, got: dict[str, Answer], seconds: float) -> dict:
    paid_in = sum(a.input_tokens for a in got.values())
    paid_out = sum(a.output_tokens for a in got.values())
    answered = out["teacher_error"] == ""
    total = cost(cfg, int(out["teacher_input_tokens"].sum()), int(out["teacher_output_tokens"].sum()))
    return {
        "rows": len(out), "calls": len(got), "from_cache": int(out["teacher_cached"].sum()),
        "errors": int((~answered).sum()), "outside_label_set": int((answered & ~out["teacher_in_label_set"]).sum()),
        "input_tokens_paid": paid_in, "output_tokens_paid": paid_out, "cost_paid": round(cost(cfg, paid_in, paid_out), 6),
        "cost_per_1000_texts": round(1000 * total / max(1, int(answered.sum())), 6),
        "wall_seconds": round(seconds, 2), "config": {**asdict(cfg), "base_url": redact(cfg.base_url)},
    }


@exits_2_on_user_error
def main(argv=None) -> int:
    cfg = parse_args(argv)
    try:
        s = run(cfg)
    except KeyboardInterrupt:
        print(f"interrupted: the answers so far are in {side_path(cfg, 'cache.jsonl')}; rerun the same command "
              "to go on without paying for them again", file=sys.stderr)
        return 130
    except OSError as e:
        raise DataError(f"{e.filename}: {e.strerror}") from None
    print(f"{s['rows']} rows: {s['calls']} asked, {s['from_cache']} from the cache, {s['errors']} errors, "
          f"{s['outside_label_set']} outside the label set; paid {s['input_tokens_paid']} + {s['output_tokens_paid']} "
          f"tokens = {s['cost_paid']:.4f}; {s['cost_per_1000_texts']:.4f} per 1,000 texts; wrote {cfg.output}",
          file=sys.stderr)
    if s["errors"]:
        print(f"warning: {s['errors']} rows have no answer (column teacher_error); rerun to ask them again",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

