"""finetune.teach against a local OpenAI-compatible server (tests/fake_llm.py) through the real openai client."""

from __future__ import annotations

import json
import sys
import time

import pandas as pd
import pytest
from fake_llm import PROMPT

from finetune import teach

LABELS = "business,sport,tech"


def files(tmp_path, texts, prompt=PROMPT):
    pd.DataFrame({"id": range(len(texts)), "text": texts}).to_csv(tmp_path / "texts.csv", index=False)
    (tmp_path / "prompt.txt").write_text(prompt)


def args(tmp_path, fake, *more):
    return ["--data", str(tmp_path / "texts.csv"), "--labels", LABELS, "--base-url", fake.url, "--model", "m",
            "--prompt", str(tmp_path / "prompt.txt"), "--output", str(tmp_path / "teacher.csv"),
            "--price-per-1k-input", "0.5", "--price-per-1k-output", "2", *more]


def test_thousand_texts_then_all_from_the_cache(tmp_path, fake, capsys):
    texts = [f"note {i} about {['business', 'sport', 'tech'][i % 3]}" for i in range(1000)]
    files(tmp_path, texts)
    started = time.time()
    assert teach.main(args(tmp_path, fake, "--concurrency", "8")) == 0
    print(f"1000 texts at concurrency 8: {time.time() - started:.1f} s", file=sys.stderr)
    assert fake.calls == 1000
    out = pd.read_csv(tmp_path / "teacher.csv", keep_default_na=False)
    assert len(out) == 1000 and list(out["id"]) == list(range(1000))  # every row, in order, with its columns
    assert list(out["teacher"]) == [["business", "sport", "tech"][i % 3] for i in range(1000)]
    assert out["teacher_in_label_set"].all()
    summary = json.loads((tmp_path / "teacher.summary.json").read_text())
    tokens_in = int(out["teacher_input_tokens"].sum())
    assert summary["cost_paid"] == pytest.approx(tokens_in / 1000 * 0.5 + 1000 / 1000 * 2, rel=1e-6)

    fake.calls = 0
    assert teach.main(args(tmp_path, fake, "--concurrency", "8")) == 0
    assert fake.calls == 0  # the rerun pays nothing
    again = pd.read_csv(tmp_path / "teacher.csv", keep_default_na=False)
    assert list(again["teacher"]) == list(out["teacher"]) and again["teacher_cached"].all()
    assert json.loads((tmp_path / "teacher.summary.json").read_text())["cost_paid"] == 0


def test_resumes_after_a_kill_paying_only_for_the_rest(tmp_path, fake):
    texts = [f"story {i} on sport" for i in range(40)]
    files(tmp_path, texts[:25])  # the run that was killed got through 25 texts...
    assert teach.main(args(tmp_path, fake)) == 0
    with open(tmp_path / "teacher.cache.jsonl", "a") as f:
        f.write('{"key": "half a line')  # ...and was killed while appending
    files(tmp_path, texts)
    fake.calls = 0
    assert teach.main(args(tmp_path, fake)) == 0
    assert fake.calls == 15
    assert (pd.read_csv(tmp_path / "teacher.csv")["teacher"] == "sport").all()


def test_rate_limits_are_retried(tmp_path, fake):
    files(tmp_path, [f"tech text {i}" for i in range(10)])
    fake.fail_first(3, 429)
    assert teach.main(args(tmp_path, fake, "--retries", "4")) == 0
    out = pd.read_csv(tmp_path / "teacher.csv", keep_default_na=False)
    assert fake.calls == 13 and (out["teacher"] == "tech").all() and (out["teacher_error"] == "").all()


def test_refusals_and_timeouts_keep_the_row_with_an_error(tmp_path, fake, capsys):
    files(tmp_path, ["sport one", "FAIL500 sport", "SLOW tech", ""])
    assert teach.main(args(tmp_path, fake, "--retries", "1", "--timeout", "0.5")) == 0
    out = pd.read_csv(tmp_path / "teacher.csv", keep_default_na=False)
    assert len(out) == 4 and out.loc[0, "teacher"] == "sport"
    assert "500" in out.loc[1, "teacher_error"] and "Timeout" in out.loc[2, "teacher_error"]
    assert "empty text" in out.loc[3, "teacher_error"]
    assert list(out["teacher"][1:]) == ["", "", ""]
    assert fake.calls == 1 + 2 + 2  # one retry each for the refused and the slow text; none for the empty one
    assert "3 rows have no answer" in capsys.readouterr().err
    fake.calls = 0
    assert teach.main(args(tmp_path, fake, "--retries", "0", "--timeout", "0.5")) == 0
    assert fake.calls == 2  # errors are not cached: a rerun asks them again


def test_answers_outside_the_label_set_are_kept_and_flagged(tmp_path, fake):
    files(tmp_path, ["SAY:Sport.", "SAY:banana", "tech"])
    assert teach.main(args(tmp_path, fake)) == 0
    out = pd.read_csv(tmp_path / "teacher.csv", keep_default_na=False)
    assert list(out["teacher"]) == ["sport", "banana", "tech"]  # case and a full stop are not a new label
    assert list(out["teacher_in_label_set"]) == [True, False, True]
    assert json.loads((tmp_path / "teacher.summary.json").read_text())["outside_label_set"] == 1


def test_multi_label_answers(tmp_path, fake):
    files(tmp_path, ["SAY:tech,business", "SAY:none", "SAY:tech,golf"])
    assert teach.main(args(tmp_path, fake, "--multi-label")) == 0
    out = pd.read_csv(tmp_path / "teacher.csv", keep_default_na=False)
    assert list(out["teacher"]) == ["tech;business", "[]", "tech,golf"]  # none: [], as an empty cell is no answer
    assert list(out["teacher_in_label_set"]) == [True, True, False]


@pytest.mark.parametrize("prompt, missing", [("Labels: {labels}\nText: nothing", "{text}"),
                                             ("Text: {text}", "{labels}")])
def test_a_prompt_without_a_placeholder_is_refused_before_any_call(tmp_path, fake, capsys, prompt, missing):
    files(tmp_path, ["sport"], prompt)
    assert teach.main(args(tmp_path, fake)) == 2
    assert missing in capsys.readouterr().err and fake.calls == 0
    assert not (tmp_path / "teacher.csv").exists()


def test_credentials_in_the_base_url_stay_out_of_the_summary(tmp_path, fake):
    """Issue 63 L2: the summary's config wrote --base-url whole, its password included."""
    files(tmp_path, ["a note on sport"])
    with_creds = fake.url.replace("http://", "http://llmuser:llmpass@")
    assert teach.main(args(tmp_path, fake, "--base-url", with_creds)) == 0
    summary = (tmp_path / "teacher.summary.json").read_text()
    assert fake.calls == 1 and "llmpass" not in summary and "http://***@" in summary


def _completion(content) -> str:
    return json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": content}}]})


@pytest.mark.parametrize("body", ["{not json", "[]", '{"choices":"x"}', _completion(12345)],
                         ids=["not json", "a list", "choices a string", "content a number"])
def test_a_malformed_answer_is_that_rows_error_and_the_run_goes_on(tmp_path, fake, capsys, body):
    """Issue 63 L8: a 200 body `{not json` ended the run with a JSONDecodeError traceback and no output."""
    files(tmp_path, ["a note on sport", "a note on tech"])
    fake.body = body
    assert teach.main(args(tmp_path, fake, "--retries", "0")) == 0
    out = pd.read_csv(tmp_path / "teacher.csv", keep_default_na=False)
    assert len(out) == 2 and (out["teacher"] == "").all() and out["teacher_error"].str.contains("malformed").all()
    assert "2 errors" in capsys.readouterr().err
    fake.body = None  # the endpoint behaves again: the rerun asks the failed rows, nothing else
    assert teach.main(args(tmp_path, fake)) == 0
    assert list(pd.read_csv(tmp_path / "teacher.csv", keep_default_na=False)["teacher"]) == ["sport", "tech"]


def test_a_huge_answer_is_cut_also_one_cached_whole_by_an_older_run(tmp_path, fake):
    """Issue 63 L8: a 10 MB answer was kept whole in teacher_answer (and in the cache): 3 rows, a 30 MB file."""
    from textdata.llm import MAX_ANSWER_CHARS

    files(tmp_path, ["a note on sport", "a note on tech"])
    fake.body = _completion("sport" + " x" * 5_000_000)
    assert teach.main(args(tmp_path, fake)) == 0
    out = pd.read_csv(tmp_path / "teacher.csv", keep_default_na=False)
    assert out["teacher_answer"].str.len().max() <= MAX_ANSWER_CHARS and not out["teacher_in_label_set"].any()
    cache = tmp_path / "teacher.cache.jsonl"
    entries = [json.loads(line) for line in cache.read_text().splitlines()]
    assert all(len(e["answer"]) <= MAX_ANSWER_CHARS for e in entries)
    cache.write_text("".join(json.dumps({**e, "answer": "tech " * 2_000_000}) + "\n" for e in entries))  # an older run's
    fake.calls = 0
    assert teach.main(args(tmp_path, fake)) == 0 and fake.calls == 0
    again = pd.read_csv(tmp_path / "teacher.csv", keep_default_na=False)
    assert again["teacher_answer"].str.len().max() <= MAX_ANSWER_CHARS and again["teacher_cached"].all()
