"""Issue 59, D4 and its minor point: at 1366×768, with the health banner over every tab (a model that adds
nothing to its baseline), a multi-label dataset's *Save* / *None of these* were below the fold, and so were
Skip / Undo / the key help of a labeling session. Measured here in a real browser (Debian's chromium,
Playwright): every control a person labels with has its whole box inside the 768-pixel window, with the page
not scrolled, on a file session (single-label, the model's 3 labels) and on a multi-label team dataset of 8
labels of its own."""

from __future__ import annotations

import json
import shutil

import httpx
import pandas as pd
import pytest
from app_testkit import start_server
from test_app_ui_browser import ARGS, CHROMIUM, TEXTS, pytestmark, start_session, visible  # noqa: F401
from test_app_ui_team_label import open_dataset

LAPTOP = {"width": 1366, "height": 768}
EIGHT = ["dream", "error", "memo", "meeting", "weather", "diary", "promise", "record"]


@pytest.fixture(scope="module")
def bannered(spread_model_dir, tmp_path_factory):
    """A loopback server (one person's: datasets allowed) on a copy of the spread model whose training record
    says it learned nothing (textdata/learned.py), so the banner shows; a multi-label dataset of 8 labels; a
    1366×768 page."""
    sync_api = pytest.importorskip("playwright.sync_api")
    root = tmp_path_factory.mktemp("fold-server")
    model = root / "model"
    shutil.copytree(spread_model_dir, model)
    record = model / "training_config.json"
    config = json.loads(record.read_text(encoding="utf-8")) if record.exists() else {}
    config["learned"] = {"at_chance": True, "macro_f1": 0.0337, "chance_macro_f1_p95": 0.05}
    record.write_text(json.dumps(config), encoding="utf-8")
    server = start_server(model, root, "--no-monitor")
    try:
        server.wait_ready()
        made = httpx.post(server.url + "/v1/datasets", json={"name": "sets", "texts": TEXTS, "labels": EIGHT,
                                                             "multi_label": True}, timeout=60)
        assert made.status_code == 201, made.text
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
            yield browser, server, made.json()["id"]
            browser.close()
    finally:
        server.stop()


@pytest.fixture
def page(bannered):
    """A fresh 1366×768 page (the start panel open, as on a first visit)."""
    browser, server, ds = bannered
    context = browser.new_context(viewport=LAPTOP)
    context.set_default_timeout(60_000)
    pg = context.new_page()
    pg.goto(server.url + "/ui/")
    pg.wait_for_selector("#classify-text textarea")
    yield pg, ds
    context.close()


def off_screen(pg, selectors: list[str]) -> dict:
    """The selectors whose box is not whole inside the window, with the box (None: not laid out)."""
    out = {}
    for selector in selectors:
        box = pg.locator(selector).first.bounding_box()
        if box is None or box["y"] < 0 or box["y"] + box["height"] > LAPTOP["height"]:
            out[selector] = box
    return out


def test_the_banner_leaves_a_session_s_buttons_and_key_help_on_screen(page, tmp_path):
    pg, _ = page
    assert "the model learned nothing" in pg.inner_text("#health-banner")
    source = tmp_path / "fold.csv"
    pd.DataFrame({"text": TEXTS}).to_csv(source, index=False)
    start_session(pg, source)
    visible(pg, "#accept-btn")
    pg.wait_for_selector("#label-file", state="hidden")  # the start panel folds once a session opens
    assert pg.evaluate("() => window.scrollY") == 0
    assert pg.locator("#health-banner").bounding_box()["height"] > 15  # the banner is there, taking room
    wanted = ["#label-text textarea", "#accept-btn", "#label-btn-1", "#label-btn-3", "#skip-btn", "#undo-btn",
              "#label-keys"]
    assert off_screen(pg, wanted) == {}
    # the banner is one line; its figures and next step open under it
    assert "macro-F1 0.0337" not in pg.inner_text("#health-banner")
    pg.click("#health-details summary")
    pg.wait_for_selector("text=Next step: label more texts", state="visible")
    assert "macro-F1 0.0337" in pg.inner_text("#health-banner")


def test_a_multi_label_dataset_s_save_and_none_fit_a_laptop_under_the_banner(page, tmp_path):
    """After a file session (the panels folded once), the person opens the start panel again and picks the
    dataset: it folds again (an update to `open=False` on a panel the server last folded changed nothing)."""
    pg, ds = page
    source = tmp_path / "first.csv"
    pd.DataFrame({"text": TEXTS[:2]}).to_csv(source, index=False)
    start_session(pg, source)
    pg.wait_for_selector("#label-file", state="hidden")
    open_dataset(pg, ds, "sets")
    visible(pg, "#save-btn")
    pg.wait_for_selector("#label-file", state="hidden")
    assert pg.evaluate("() => window.scrollY") == 0
    assert pg.locator("#label-checks input[type=checkbox]").count() == len(EIGHT)
    wanted = ["#label-text textarea", "#label-checks", "#save-btn", "#none-btn", "#skip-btn", "#undo-btn",
              "#label-keys"]
    assert off_screen(pg, wanted) == {}
