"""The Label tab on a team dataset, in a real browser (Debian's chromium, Playwright): two annotators signed
in with their tokens label one dataset with overlap 2 through the store's queue by keys: each text ends with
exactly 2 answers from 2 people, nobody is shown another's answer, undo takes back one's own last answer, a
second browser of the same person resumes on the text they hold, and an uploaded file's journal names who
labeled each line. A multi-label dataset by keys: tick, save, undo, skip (back last), none of these, and the
tab's download (the annotator's own answers)."""

from __future__ import annotations

import csv
import json
import re
import statistics
import time
from pathlib import Path

import httpx
import pytest
from app_testkit import chromium, team_server
from test_app_ui_browser import ARGS, CHROMIUM, download, pytestmark, shown_text, start_session  # noqa: F401

TEXTS = ["꿈에서 봤다 오늘", "에러 발생했다 회의", "메모 약속 내일", "좋은 날씨 일기", "오류 기록"]


@pytest.fixture(scope="module")
def team(spread_model_dir, tmp_path_factory):
    people = {"ann": "annotator", "bob": "annotator", "boss": "admin"}
    with team_server(spread_model_dir, tmp_path_factory.mktemp("team-ui"), people, "boss") as (server, tokens):
        made = httpx.post(server.url + "/v1/datasets", headers={"Authorization": f"Bearer {tokens['boss']}"},
                          json={"name": "diary", "texts": TEXTS, "overlap": 2}, timeout=60)
        assert made.status_code == 201, made.text
        yield server, tokens, made.json()["id"]


@pytest.fixture(scope="module")
def browser(team):
    with chromium(CHROMIUM, ARGS) as b:
        yield b


def signed_in(browser, server, token, size=(1280, 900)):
    """A fresh browser context (another person, or the same person's other browser), signed in."""
    context = browser.new_context(viewport={"width": size[0], "height": size[1]}, accept_downloads=True)
    context.set_default_timeout(60_000)
    pg = context.new_page()
    pg.goto(server.url + "/login")
    pg.fill("input[name=key]", token)
    pg.click("button[type=submit]")
    pg.wait_for_selector("#classify-text textarea")
    return pg


def open_team_tab(browser, server, token, dataset_id: int, name: str):
    """A reviewer's Team tab on a laptop screen (1366×768), the dataset picked."""
    pg = signed_in(browser, server, token, (1366, 768))
    pg.get_by_role("tab", name="Team").click()
    pg.click("#team-dataset input")
    pg.get_by_role("option").filter(has_text=f"{dataset_id}: {name}").click()
    return pg


def open_dataset(pg, dataset_id: int, name: str = "diary") -> None:
    pg.get_by_role("tab", name="Label").click()
    pg.wait_for_function("() => document.querySelector('#label-hint') !== null")
    if not pg.is_visible("#label-dataset"):
        pg.click("text=Start or resume a session")
    pg.click("#label-dataset input")
    pg.get_by_role("option").filter(has_text=f"{dataset_id}: {name} (").click()
    pg.wait_for_function("n => document.querySelector('#label-progress').innerText.includes('team dataset ' + n)",
                         arg=name)
    pg.click("#label-progress")  # focus off the dropdown, as a person reading the text would be


def key_to_next(pg, key: str) -> tuple[str, float]:
    """Press `key` and wait for the text on screen to change; (the new text, seconds)."""
    before = shown_text(pg)
    t = time.perf_counter()
    pg.keyboard.press(key)
    pg.wait_for_function("t => document.querySelector('#label-text textarea').value !== t", arg=before)
    return shown_text(pg), time.perf_counter() - t


def labeled(pg) -> int:
    return int(re.search(r"(\d+) labeled", pg.inner_text("#label-progress")).group(1))


def skipped(pg) -> int:
    return int(re.search(r"(\d+) skipped", pg.inner_text("#label-progress")).group(1))


def ticked(pg) -> set[str]:
    return {x.split("] ")[-1] for x in pg.eval_on_selector_all(
        "#label-checks input[type=checkbox]:checked", "els => els.map(e => e.closest('label').innerText)")}


def export(server, tokens, ds) -> list[dict]:
    r = httpx.get(f"{server.url}/v1/datasets/{ds}/export?format=jsonl",
                  headers={"Authorization": f"Bearer {tokens['boss']}"}, timeout=30)
    return [json.loads(line) for line in r.text.splitlines()]


def test_two_annotators_label_a_dataset_by_keys(team, browser):
    server, tokens, ds = team
    ann = signed_in(browser, server, tokens["ann"])
    open_dataset(ann, ds)
    first = shown_text(ann)
    assert first in TEXTS and "Model suggests" in ann.inner_text("#label-hint")
    times = []
    second, dt = key_to_next(ann, "1")  # the first label
    times.append(dt)
    assert second != first and labeled(ann) == 1
    back, dt = key_to_next(ann, "u")  # undo: the same text again, the answer taken back
    times.append(dt)
    assert back == first and labeled(ann) == 0
    again, dt = key_to_next(ann, "2")
    times.append(dt)
    assert again == second
    # ann's other browser resumes on the text ann holds now
    ann2 = signed_in(browser, server, tokens["ann"])
    open_dataset(ann2, ds)
    assert shown_text(ann2) == second
    ann2.context.close()
    while "Nothing left" not in ann.inner_text("#label-hint"):
        _, dt = key_to_next(ann, "Enter" if ann.is_visible("#accept-btn") else "1")
        times.append(dt)
    assert labeled(ann) == len(TEXTS)
    bob = signed_in(browser, server, tokens["bob"])
    open_dataset(bob, ds)
    assert labeled(bob) == 0  # bob's own count, not the dataset's answers
    while "Nothing left" not in bob.inner_text("#label-hint"):
        hint = bob.inner_text("#label-hint") + bob.inner_text("#label-progress")
        assert "ann" not in hint  # blind: nobody else's answers on the page
        _, dt = key_to_next(bob, "2")
        times.append(dt)
    rows = export(server, tokens, ds)
    per_text = {}
    for r in rows:
        per_text.setdefault(r["text"], []).append(r["annotator"])
    assert sorted(per_text) == sorted(TEXTS) and all(sorted(v) == ["ann", "bob"] for v in per_text.values())
    ann_first = next(r for r in rows if r["text"] == first and r["annotator"] == "ann")
    assert ann_first["label"] == next(r["label"] for r in rows if r["annotator"] == "bob")  # "2": the same button
    print(f"\nteam dataset, seconds from a key to the next text: median {statistics.median(times):.3f}, "
          f"max {max(times):.3f} over {len(times)} keys")
    ann.context.close()
    bob.context.close()


def test_a_file_sessions_journal_names_who_labeled(team, browser, tmp_path):
    server, tokens, _ = team
    source = tmp_path / "mine.csv"
    source.write_text("text\n" + "\n".join(TEXTS[:3]) + "\n", encoding="utf-8")
    ann = signed_in(browser, server, tokens["ann"])
    start_session(ann, source)
    ann.click("#label-progress")  # focus off the start button
    times = [key_to_next(ann, key)[1] for key in ("1", "u", "1")]  # label, undo, label again
    print(f"\nfile session, seconds from a key to the next text: median {statistics.median(times):.3f}, "
          f"max {max(times):.3f} over {len(times)} keys")
    ann.wait_for_function("() => /(^|\\s)1 labeled/.test(document.querySelector('#label-progress').innerText)")
    (meta,) = [m for m in Path(server.cwd / "app-data" / "label").glob("*/meta.json")
               if json.loads(m.read_text(encoding="utf-8"))["source"] == "mine.csv"]
    events = [json.loads(line) for line in (meta.parent / "journal.jsonl").read_text("utf-8").splitlines()]
    label = next(e for e in events if e["op"] == "label")
    assert label["by"] == "ann" and abs(label["ts"] - time.time()) < 600
    ann.context.close()


# Every key the page gets, with the text on screen at that moment (captured before the page's own handler).
KEY_LOG_JS = """() => { window.keyLog = [];
  document.addEventListener('keydown', (e) => window.keyLog.push(
    {key: e.key, text: document.querySelector('#label-text textarea').value}), true); }"""


def test_a_second_fast_key_never_answers_the_text_not_yet_on_screen(team, browser):
    """20 fast double keys (1 then 2, 60 ms apart, as a double-tap or a quick typist on a slow laptop): every
    stored answer is on a text that was on screen when its key was pressed, with that key's label. Before,
    the second key answered the next text, which the page had not drawn yet (issue 59, D2)."""
    server, tokens, _ = team
    texts = [f"빠른 키 {i} 메모 기록" for i in range(48)]
    made = httpx.post(server.url + "/v1/datasets", headers={"Authorization": f"Bearer {tokens['boss']}"},
                      json={"name": "fast", "texts": texts, "overlap": 1}, timeout=60)
    assert made.status_code == 201, made.text
    ds = made.json()["id"]
    ann = signed_in(browser, server, tokens["ann"])
    open_dataset(ann, ds, "fast")
    names = {str(k): ann.inner_text(f"#label-btn-{k}").split("] ")[-1] for k in (1, 2)}
    ann.evaluate(KEY_LOG_JS)
    refused = 0
    for _ in range(20):
        before, n = shown_text(ann), labeled(ann)
        ann.keyboard.press("1")
        ann.wait_for_timeout(60)
        ann.keyboard.press("2")
        ann.wait_for_function("t => document.querySelector('#label-text textarea').value !== t", arg=before)
        settled = time.monotonic() + 30
        while time.monotonic() < settled:  # both keys' answers drawn: the count stays put
            count = labeled(ann)
            ann.wait_for_timeout(400)
            if labeled(ann) == count and count > n:
                break
        refused += labeled(ann) == n + 1
    seen: dict[str, set[str]] = {}
    for press in ann.evaluate("() => window.keyLog"):
        seen.setdefault(press["text"], set()).add(names[press["key"]])
    mine = [r for r in export(server, tokens, ds) if r["annotator"] == "ann"]
    unseen = [r["text"] for r in mine if r["label"] not in seen.get(r["text"], ())]
    assert not unseen, f"{len(unseen)} of {len(mine)} answers on a text not on screen at their key: {unseen}"
    assert len(mine) == labeled(ann) >= 20
    print(f"\n20 double keys 60 ms apart: {refused} second keys refused (pressed before the next text was "
          f"drawn), {len(mine) - 20} answered a text drawn in time, 0 answered a text not on screen")
    ann.context.close()


TAGS = ["memo", "error", "dream"]


def test_a_multi_label_dataset_by_keys_tick_save_undo_skip_and_download(team, browser, tmp_path):
    """A multi-label dataset with labels of its own (no suggestion, nothing pre-ticked): 1-9 tick, Enter saves,
    U takes the answer back, S gives the text back to the queue until the rest is done, 0 saves "none of
    these", and the Label tab's download is the annotator's own answers (blind) as the API exports them."""
    server, tokens, _ = team
    made = httpx.post(server.url + "/v1/datasets", headers={"Authorization": f"Bearer {tokens['boss']}"}, timeout=60,
                      json={"name": "tags", "texts": TEXTS[:4], "overlap": 2, "labels": TAGS, "multi_label": True})
    assert made.status_code == 201, made.text
    ds = made.json()["id"]
    ann = {"Authorization": f"Bearer {tokens['ann']}"}  # another person's answer, never in bob's download
    held = httpx.post(f"{server.url}/v1/datasets/{ds}/next", headers=ann, timeout=30).json()["record_id"]
    assert httpx.post(f"{server.url}/v1/datasets/{ds}/labels", headers=ann, timeout=30,
                      json={"record_id": held, "labels": ["dream"]}).status_code == 200
    bob = signed_in(browser, server, tokens["bob"])
    open_dataset(bob, ds, "tags")
    assert bob.is_visible("#label-checks") and not bob.is_visible("#label-btn-1") and not bob.is_visible("#accept-btn")
    keys = bob.inner_text("#label-keys")
    assert "accept the suggestion" not in keys and "S skip" in keys and "Enter save" in keys
    assert ticked(bob) == set() and "no model suggestion" in bob.inner_text("#label-hint")
    times, first = [], shown_text(bob)
    bob.keyboard.press("1")
    bob.keyboard.press("3")
    assert ticked(bob) == {"memo", "dream"}
    second, dt = key_to_next(bob, "Enter")  # save the ticked set
    times.append(dt)
    assert second != first and labeled(bob) == 1 and ticked(bob) == set()
    back, dt = key_to_next(bob, "u")  # undo: the text again, the answer taken back
    times.append(dt)
    assert back == first and labeled(bob) == 0
    bob.keyboard.press("2")
    again, dt = key_to_next(bob, "Enter")
    times.append(dt)
    assert again == second
    third, dt = key_to_next(bob, "s")  # skip: back only once the rest is done
    times.append(dt)
    assert third not in (first, second) and skipped(bob) == 1
    answers = {first: ["error"]}
    while True:
        text = shown_text(bob)
        if text == second:
            break
        answers[text] = []
        _, dt = key_to_next(bob, "0")  # none of these
        times.append(dt)
    assert "skipped earlier" in bob.inner_text("#label-text") and skipped(bob) == 0
    bob.keyboard.press("1")
    bob.keyboard.press("Enter")
    answers[second] = ["memo"]
    bob.wait_for_function("() => /Nothing left/.test(document.querySelector('#label-hint').innerText)")
    assert labeled(bob) == 4
    bob.click("#label-export")
    got = download(bob, "#label-download a", tmp_path)
    assert got.name.endswith("-answers.csv") and got.read_bytes().startswith(b"\xef\xbb\xbf")  # BOM: Excel
    rows = list(csv.DictReader(got.open(encoding="utf-8-sig")))
    assert {r["text"]: r["label"] for r in rows} == {t: ";".join(v) for t, v in answers.items()}
    assert {r["annotator"] for r in rows} == {"bob"} and list(rows[0]) == ["record_id", "text", "annotator", "label",
                                                                            "created_at"]
    exported = export(server, tokens, ds)  # the API's, every answer
    assert {r["text"]: r["label"] for r in exported if r["annotator"] == "bob"} == answers
    assert [r["label"] for r in exported if r["annotator"] == "ann"] == [["dream"]]
    print(f"\nmulti-label team dataset, seconds from a key to the next text: median {statistics.median(times):.3f}, "
          f"max {max(times):.3f} over {len(times)} keys")
    bob.context.close()


def test_team_tab_on_a_laptop(team, browser):
    """A reviewer's Team tab at 1366×768: the dataset's progress and agreement in words; its picture is the
    docs' (SCREENSHOTS=docs/img)."""
    from test_app_ui_browser import DOCS_IMG

    server, tokens, ds = team
    pg = open_team_tab(browser, server, tokens["boss"], ds, "diary")
    pg.wait_for_function("() => /Krippendorff's alpha/.test(document.querySelector('#team-summary').innerText)")
    said = pg.inner_text("#team-summary")
    assert f"of {len(TEXTS)} texts have their 2 answer(s)" in said and "Fleiss' kappa" in said, said
    box = pg.locator("#team-summary").bounding_box()
    assert box is not None and box["y"] < 768, box  # the figures show without scrolling
    DOCS_IMG.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(DOCS_IMG / "ui-team.png"))
    pg.context.close()


def test_a_reviewer_sees_the_answers_on_a_laptop_clicks_a_row_and_settles_it(team, browser):
    """At 1366×768 the disagreements show who answered what without scrolling sideways (the text column took the
    width before); a click on a row fills its record id; Adjudicate says what is settled (issue 59, D3)."""
    server, tokens, _ = team
    boss = {"Authorization": f"Bearer {tokens['boss']}"}
    texts = ["긴 텍스트 " * 40 + str(i) for i in range(2)]  # long texts: they took the answers' room
    ds = httpx.post(server.url + "/v1/datasets", headers=boss, timeout=60,
                    json={"name": "split", "texts": texts, "overlap": 2, "labels": ["memo", "error"]}).json()["id"]
    for name, label in (("ann", "memo"), ("bob", "error")):
        who = {"Authorization": f"Bearer {tokens[name]}"}
        for _ in texts:
            rec = httpx.post(f"{server.url}/v1/datasets/{ds}/next", headers=who, timeout=30).json()
            assert httpx.post(f"{server.url}/v1/datasets/{ds}/labels", headers=who, timeout=30,
                              json={"record_id": rec["record_id"], "label": label}).status_code == 200
    pg = open_team_tab(browser, server, tokens["boss"], ds, "split")
    cell = pg.locator("#team-disagreements [data-testid=cell-0-1]")  # Gradio's cells: row, column
    cell.filter(has_text="ann: memo · bob: error").wait_for()
    box = cell.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 1366, box  # no sideways scroll
    ids = [int(pg.inner_text(f"#team-disagreements [data-testid=cell-{i}-0]")) for i in range(2)]
    pg.wait_for_function("n => Number(document.querySelector('#team-record input').value) === n", arg=ids[0])
    pg.click("#team-disagreements [data-testid=cell-1-2]")  # the second text: its record id fills the box
    pg.wait_for_function("n => Number(document.querySelector('#team-record input').value) === n", arg=ids[1])
    pg.click("#team-label input")
    pg.get_by_role("option", name="error", exact=True).click()
    pg.click("#team-settle")
    pg.wait_for_function("() => /settled as/.test(document.querySelector('#team-said').innerText)")
    said = pg.inner_text("#team-said")
    assert f"Record {ids[1]} settled as error" in said and "1 disagreements left" in said, said
    pg.wait_for_function("n => Number(document.querySelector('#team-record input').value) === n", arg=ids[0])
    pg.click("#team-summary")  # focus off the dropdown: keys 1-9 are the label buttons'
    pg.keyboard.press("1")  # the next one, filled in: settled by its key
    pg.wait_for_function("() => /0 disagreements left/.test(document.querySelector('#team-said').innerText)")
    assert f"Record {ids[0]} settled as memo" in pg.inner_text("#team-said")
    pg.context.close()


def test_the_sign_in_page_asks_for_a_token_and_sign_out_takes_the_app_off_screen(team, browser):
    """People handed a personal token read "API key required" (issue 59), and Sign out (none on a server with
    users and no key) opened in a new tab and left the app on screen: now the form names the token, and Sign
    out signs out this tab, which shows the sign-in form again."""
    server, tokens, _ = team
    pg = signed_in(browser, server, tokens["ann"])
    pg.click("#page-header a:text('Sign out')")
    pg.wait_for_url("**/login")
    assert len(pg.context.pages) == 1 and not pg.is_visible("#classify-text")
    said = pg.inner_text("body")
    assert "personal token" in said and "API key required" not in said
    pg.context.close()
