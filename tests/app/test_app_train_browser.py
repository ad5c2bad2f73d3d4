"""The learning loop in a real browser: label rows in the Label tab, Train in the Train tab, follow the
progress, the new version is promoted, and the Classify tab answers with it. A screenshot of the Train tab
goes to a temp folder, or with SCREENSHOTS=docs/img to the docs' pictures."""

from __future__ import annotations

import httpx
import pytest
from app_testkit import training_server
from test_app_ui_browser import ARGS, CHROMIUM, DOCS_IMG, start_session, visible, wait_labeled

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")


@pytest.fixture(scope="module")
def loop_server(spread_model_dir, tiny_electra_dir, tmp_path_factory, toy_rows):
    with training_server(spread_model_dir, tiny_electra_dir, toy_rows(n_per_class=10, seed=5),
                         tmp_path_factory.mktemp("loop-ui")) as server:
        yield server


def test_label_train_promote_classify(loop_server, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    source = tmp_path / "to-label.csv"
    source.write_text("text\n꿈에서 봤다 바다\n서버 에러 발생했다\n회의 메모 기록\n", encoding="utf-8")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        pg = browser.new_page(viewport={"width": 1366, "height": 768})  # a laptop, as the docs' pictures
        pg.set_default_timeout(60_000)
        pg.goto(loop_server.url + "/ui/")
        start_session(pg, source)
        for n in (1, 2, 3):
            pg.click("#accept-btn")
            wait_labeled(pg, n)
        pg.get_by_role("tab", name="Train").click()
        pg.fill("#train-folds input", "2")
        pg.fill("#train-epochs input", "1")
        pg.click("#train-start")
        pg.wait_for_function("() => /Started job/.test(document.querySelector('#train-message').innerText)")
        visible(pg, "#train-bar")
        pg.wait_for_selector("#train-status[data-status=succeeded]", timeout=600_000)
        pg.wait_for_function("() => /made v2/.test(document.querySelector('#train-status').innerText)")
        pg.wait_for_function("() => /v2\\s+●/.test(document.querySelector('#train-versions').innerText)")
        pg.wait_for_function("() => /v1\\s+imported/.test(document.querySelector('#train-versions').innerText)")
        # the heading follows the promotion (within its 5 s refresh) before the docs' picture is taken
        pg.wait_for_function("() => /model v2\\b/.test(document.querySelector('#page-header').innerText)")
        pg.screenshot(path=str(DOCS_IMG / "ui-train.png"))
        pg.get_by_role("tab", name="Classify").click()
        pg.fill("#classify-text textarea", "꿈에서 봤다")
        pg.click("#classify-btn")
        pg.wait_for_function("() => /model v2/.test(document.querySelector('#classify-top').innerText)")
        browser.close()
    (job,) = httpx.get(loop_server.url + "/v1/jobs").json()["jobs"]
    assert job["data"]["session_decisions"] == 3 and job["data"]["base_rows"] == 30
    assert job["decision"]["promoted"] is True
