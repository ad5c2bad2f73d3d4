"""The UI on a laptop screen (1366×768) in a real browser (issue 45): Train's first click reaches the server
(empty boxes mean the default), an empty review queue leaves the open session on screen, a session's text and
buttons fit the screen once it opens, the Monitor tab reads in words, and no request of a page load is a 404.
A screenshot of each tab at 1366×768 goes to a temp folder, or with SCREENSHOTS=docs/img to the docs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pandas as pd
import pytest
from app_testkit import start_server
from test_app_ui_browser import ARGS, CHROMIUM, DOCS_IMG, TEXTS, start_session, visible

from textdata.drift import REFERENCE_FILE, build_reference

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")

LAPTOP = {"width": 1366, "height": 768}


def with_reference(model: Path, engine, root: Path) -> Path:
    """A copy of `model` with the reference.json k-fold --final saves (made here from the model's answers on
    phrases of the same words), so the Monitor tab has drift to show in words and over time."""
    folder = root / "model"
    shutil.copytree(model, folder)
    words = ["꿈에서", "봤다", "오류", "에러", "메모", "기록", "회의", "내일", "오늘", "좋은 날씨", "일기", "약속"]
    texts = [" ".join(words[(i * 5 + j * 7) % len(words)] for j in range(1 + i % 5)) for i in range(60)]
    (folder / REFERENCE_FILE).write_text(json.dumps(build_reference(engine.predict_proba(texts), texts,
                                                                    list(engine.labels))), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def laptop(spread_model_dir, engine, tmp_path_factory):
    """A loopback server with the review queue on (the Train tab is allowed there), and a 1366×768 page."""
    sync_api = pytest.importorskip("playwright.sync_api")
    root = tmp_path_factory.mktemp("laptop-server")
    server = start_server(with_reference(spread_model_dir, engine, root), root, "--review-queue")
    try:
        server.wait_ready()
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
            pg = browser.new_page(viewport=LAPTOP)
            pg.set_default_timeout(60_000)
            missing = []
            pg.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
            pg.goto(server.url + "/ui/")
            pg.wait_for_selector("#classify-text textarea")
            pg.wait_for_timeout(500)  # the icon is asked for after the page
            yield server, pg, missing
            browser.close()
    finally:
        server.stop()


def toasts(pg) -> str:
    return pg.evaluate("() => Array.from(document.querySelectorAll('.toast-body')).map(e => e.innerText).join(' | ')")


def test_a_page_load_asks_for_nothing_missing(laptop):
    server, pg, missing = laptop
    assert missing == []
    for path in ("/favicon.ico", "/ui/favicon.ico"):  # a browser asks for one; it was a 404 on every load
        r = httpx.get(server.url + path, follow_redirects=True, timeout=60)
        assert r.status_code == 200 and r.headers["content-type"].startswith("image/"), path
    # The box says how to send it (Enter alone started a new line, unsaid).
    assert "Shift+Enter or Classify sends it; Enter starts a new line" in pg.inner_text("#classify-text")
    pg.fill("#classify-text textarea", TEXTS[0])
    pg.keyboard.press("Shift+Enter")  # what the box's hint says sends it
    pg.wait_for_function("() => /model v1/.test(document.querySelector('#classify-top').innerText)")
    DOCS_IMG.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(DOCS_IMG / "ui-classify.png"))
    # A 6,000-character paste reaches the server whole (no max length in the page) and the answer says it cut it.
    pg.fill("#classify-text textarea", ("꿈에서 봤다 " * 1000)[:6000])
    pg.click("#classify-btn")
    pg.wait_for_function("() => /only the first 5,000 of its 6,000 characters/"
                         ".test(document.querySelector('#classify-top').innerText)")


def test_train_on_the_first_click_runs_with_the_defaults(laptop):
    _, pg, _ = laptop
    pg.get_by_role("tab", name="Train").click()
    folds = pg.locator("#train-folds input")
    folds.wait_for()
    assert folds.input_value() == ""  # not a red 0
    pg.wait_for_function("() => document.querySelector('#train-folds input').placeholder === 'empty: 5'")
    pg.click("#train-start")
    # This server has nothing to train on: the answer is the server's reason, not Gradio refusing the boxes.
    pg.wait_for_function("() => /⚠|Started/.test(document.querySelector('#train-message').innerText)")
    said = pg.inner_text("#train-message")
    assert said.startswith("⚠") and "minimum" not in said + toasts(pg), said
    assert "/v1/" not in said


def test_session_fits_a_laptop_and_an_empty_review_queue_keeps_it(laptop, tmp_path):
    _, pg, _ = laptop
    source = tmp_path / "laptop.csv"
    pd.DataFrame({"text": TEXTS}).to_csv(source, index=False)
    start_session(pg, source)
    shown = pg.input_value("#label-text textarea")
    # Once a session opens the start and suspects panels fold: the text, Accept and the label buttons show
    # without scrolling (the text started at y=649 below the open start panel).
    pg.wait_for_function("() => !document.querySelector('#label-file') || document.querySelector('#label-file')"
                         ".offsetParent === null")
    for selector in ("#label-text textarea", "#accept-btn", "#label-btn-1", "#skip-btn"):
        box = pg.locator(selector).bounding_box()
        assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= LAPTOP["height"], (selector, box)
    keys = pg.inner_text("#label-keys")
    assert "Enter accept the suggestion" in keys and "keep the given" not in keys  # K is a review's key
    pg.screenshot(path=str(DOCS_IMG / "ui-label.png"))

    # The queue is empty: the button says so, and pressing it leaves the session as it was.
    pg.click("text=Start or resume a session")  # unfold the panel the button is in
    review = pg.locator("#label-review")
    review.wait_for()
    assert "(0 waiting)" in review.inner_text()
    review.click()
    pg.wait_for_function("() => /queue is empty/.test(document.querySelector('#label-message').innerText)")
    assert pg.input_value("#label-text textarea") == shown
    assert pg.inner_text("#label-progress").endswith("in laptop.csv")
    visible(pg, "#accept-btn")


def test_a_late_answer_to_the_label_tab_s_opening_undoes_nothing(laptop, tmp_path):
    """Under load the answer to the Label tab's opening (resume this browser's session, fold the panels) came
    after the person had acted: it drew the old session over the one just started, or folded the start panel
    under someone choosing a file. Here that event's request is held in the browser, so it reaches the server
    late, as behind a long queue; when nothing was touched meanwhile, its answer still folds the panels."""
    server, pg, _ = laptop
    config = httpx.get(server.url + "/ui/config", timeout=60).json()
    ids = {c.get("props", {}).get("elem_id"): c["id"] for c in config["components"]}
    (opening,) = [i for i, d in enumerate(config["dependencies"])
                  if [ids["tab-label"], "select"] in d["targets"] and ids["label-text"] in d["outputs"]]
    first, second = tmp_path / "first.csv", tmp_path / "second.csv"
    for source in (first, second):
        pd.DataFrame({"text": TEXTS}).to_csv(source, index=False)
    context = pg.context.browser.new_context(viewport=LAPTOP)
    context.set_default_timeout(60_000)
    page, held, holding = context.new_page(), [], [False]

    def hold(route):
        if holding[0] and (route.request.post_data_json or {}).get("fn_index") == opening:
            held.append(route)
        else:
            route.continue_()

    def reload_and_open_the_tab(hold_it: bool) -> None:
        holding[0] = hold_it
        page.goto(server.url + "/ui/")
        page.wait_for_selector("#classify-text textarea")
        with page.expect_request(lambda r: "queue/join" in r.url and (r.post_data_json or {}).get("fn_index")
                                 == opening):
            page.get_by_role("tab", name="Label").click()
        if hold_it:
            page.wait_for_function("() => window.labelOpenedAt !== undefined")
            assert len(held) == 1  # sent, and held
        else:
            page.wait_for_function("() => window.labelReopened === 1")

    def release() -> None:
        holding[0] = False
        held.pop().continue_()
        page.wait_for_function("() => window.labelReopened === 1")  # its answer is on screen, and FOLD_JS ran

    def start(source: Path) -> None:
        page.set_input_files("#label-file input[type=file]", str(source))
        page.wait_for_selector("#label-file a[href*='file=']")
        page.click("#label-start")
        page.wait_for_function("n => document.querySelector('#label-progress').innerText.endsWith(' in ' + n)",
                               arg=source.name)

    page.route("**/queue/join*", hold)
    reload_and_open_the_tab(False)
    start(first)  # this browser's session, as on an earlier visit
    reload_and_open_the_tab(True)
    start(second)  # a new one, started before the opening's answer came
    release()
    assert page.inner_text("#label-progress").endswith(" in second.csv")  # not first.csv drawn over it
    reload_and_open_the_tab(True)
    page.click("#label-column")  # the person is in the start panel
    release()
    assert page.inner_text("#label-progress").endswith(" in second.csv")
    assert page.is_visible("#label-file")  # the panel they are in stays open
    reload_and_open_the_tab(False)  # nothing touched: the opening folds the panels
    page.wait_for_selector("#label-file", state="hidden")
    context.close()


def test_monitor_tab_says_levels_in_words(laptop):
    server, pg, _ = laptop
    for _ in range(2):  # 112 answers, past 100: one drift check, a point on the chart over time
        r = httpx.post(server.url + "/v1/classify", json={"texts": TEXTS * 7}, timeout=60)
        assert r.status_code == 200, r.text
    pg.get_by_role("tab", name="Monitor").click()
    pg.wait_for_function("() => /answers in the window/.test((document.querySelector('#monitor-summary')?.innerText || ''))")
    said = pg.inner_text("#monitor-summary")
    # each statistic a coloured word with what it means (PSI, class_mix, watch, alert were bare words)
    levels = pg.locator("#monitor-summary li b")
    assert levels.count() == 3 and {levels.nth(i).inner_text() for i in range(3)} <= {"OK", "WATCH", "ALERT"}, said
    assert "the mix of labels the model answers" in said and "class_mix" not in said
    assert all("color" in (levels.nth(i).get_attribute("style") or "") for i in range(3))
    assert "(serving)" in pg.input_value("#monitor-version input")
    # The charts show, and no block label sits over the first chart's title.
    pg.wait_for_selector("#monitor-plot img", state="visible")
    labels = pg.locator("#monitor-plot [data-testid=block-label], #monitor-plot label")  # Gradio keeps a hidden one
    assert not any(labels.nth(i).is_visible() for i in range(labels.count()))
    pg.screenshot(path=str(DOCS_IMG / "ui-monitor.png"))


def test_batch_summary_and_preview_fit_the_screen(laptop, tmp_path):
    _, pg, _ = laptop
    source = tmp_path / "messy.csv"
    long = "회의 메모 " * 200
    pd.DataFrame({"id": range(5), "text": [TEXTS[0], "", long, TEXTS[1], TEXTS[2]]}).to_csv(source, index=False)
    pg.get_by_role("tab", name="Batch").click()
    pg.set_input_files("#batch-file input[type=file]", str(source))
    pg.wait_for_selector("#batch-file a[href*='file=']")
    pg.click("#batch-go")
    pg.wait_for_function("() => /Scored/.test(document.querySelector('#batch-summary').innerText)")
    said = pg.inner_text("#batch-summary")
    assert said.startswith("Scored 4 of 5 rows") and "1 not scored" in said, said
    preview = pg.inner_text("#batch-preview")
    assert long.strip() not in preview and "…" in preview  # the long text is cut on screen, not in the CSV
    pg.screenshot(path=str(DOCS_IMG / "ui-batch.png"))
