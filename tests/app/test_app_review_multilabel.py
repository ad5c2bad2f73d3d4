"""Review suspects of a multi-label run (app/labeling/review.py, app/ui/review.py): the label_issues.csv's given and
suggested label SETS become a multi-label review session whose decisions (sets) correct the training table
(app/versions/trainset.py); a file of the other kind than the server's model is refused with one message."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import httpx
import numpy as np
import pandas as pd
import pytest
from app_testkit import session_outputs, start_server
from multilabel_fixture import ML_LABELS, make_multilabel_rows
from test_app_multilabel import _upload
from test_app_review import issues_csv as single_label_issues

from app.label_kinds import SINGLE
from app.labeling.review import ReviewError, active_issues, given_set, issues_space, open_review
from app.labeling.sessions import SessionStore, decisions
from app.versions.trainset import build
from finetune import label_issues as li
from textdata.labels import LabelSpace

SEP = ";"
SETS = LabelSpace.of(ML_LABELS, multi_label=True, sep=SEP)  # the server's multi-label model's
WRONG = ((0, 1), (5, 2), (11, 0), (17, 1), (23, 2))  # (row, label) the out-of-fold probabilities flip


def sets(cell: str) -> set[str]:
    return set(filter(None, cell.split(SEP)))


@pytest.fixture
def ml_base(tmp_path) -> Path:
    path = tmp_path / "notes.csv"
    make_multilabel_rows(60, seed=3).to_csv(path, index=False)
    return path


def ml_issues(folder: Path, base: Path) -> pd.DataFrame:
    """A label_issues.csv written by finetune/label_issues.py itself for the multi-label `base`, whose
    (row, label) cells in WRONG the out-of-fold probabilities confidently flip."""
    df = pd.read_csv(base, dtype=str, keep_default_na=False)
    Y = np.array([[int(lab in sets(c)) for lab in ML_LABELS] for c in df["label"]])
    probs = np.where(Y == 1, 0.92, 0.06) + np.random.default_rng(0).uniform(-0.03, 0.03, Y.shape)
    for row, j in WRONG:
        probs[row, j] = 0.03 if Y[row, j] else 0.97
    data = SimpleNamespace(labels=ML_LABELS, texts=df["text"].tolist(), Y=Y, multi_label=True, label_sep=SEP,
                           keep=np.arange(len(df)), groups=None)
    section = li.run("auto", folder, data, probs, None, None, np.arange(len(df)) % 3, base, [],
                       li.MultiLabelIssues(SEP))
    assert section["n_flagged"] == len(WRONG)
    return pd.read_csv(folder / li.FILE, dtype=str, keep_default_na=False)


def open_ml(store, issues, base, root, space=SETS):
    ts = build(root, base, 0.0, space)
    return open_review(store, issues, "label_issues.csv", ts, root, "notes.csv", ML_LABELS, space)


def test_a_multi_label_review_shows_sets_and_its_decisions_correct_the_training_table(tmp_path, ml_base):
    root = tmp_path / "label"
    issues = ml_issues(tmp_path, ml_base)
    assert (issues["label_sep"] == SEP).all() and "" in set(issues["given_label"])  # an empty given set too
    session, message = open_ml(SessionStore(root), issues, ml_base, root)
    assert session.multi_label and session.meta["kind"] == "review" and session.meta["label_sep"] == SEP
    assert f"Review of {len(issues)} suspects" in message and "skipped" not in message
    assert session.texts == issues.sort_values("quality")["text"].tolist()  # least likely correct first
    by_text = issues.set_index("text")
    for row, text in enumerate(session.texts):
        assert set(given_set(session, row)) == sets(by_text.loc[text, "given_label"])
        assert set(session.suggested_set(row)) == sets(by_text.loc[text, "suggested_label"])
    decided = {}
    for how in ("keep", "suggestion", "another", "none"):
        row = session.current()
        given, sugg = given_set(session, row), session.suggested_set(row)
        chosen = {"keep": given, "suggestion": sugg, "none": [],
                  "another": next([a] for a in ML_LABELS if {a} not in (set(given), set(sugg)))}[how]
        if how == "none" and not given:
            chosen = ML_LABELS[:2]  # a correction either way
        session.decide(row, list(reversed(chosen)))  # the order ticked does not matter
        decided[session.texts[row]] = SEP.join(sorted(chosen))
    ts = build(root, ml_base, 0.0, SETS)
    table = dict(zip(ts.train["text"], ts.train["label"]))
    assert len(table) == pd.read_csv(ml_base)["text"].nunique()  # corrections of base rows, not new rows
    assert {t: table[t] for t in decided} == decided
    assert ts.sources["review_kept"] == 1 and ts.sources["corrections"] == 3


def test_a_kept_set_is_never_asked_again_whatever_its_order(tmp_path, ml_base):
    root = tmp_path / "label"
    store = SessionStore(root)
    issues = ml_issues(tmp_path, ml_base)
    # the file's sets in another order than the table's (sorted) and the session's (label order)
    issues["given_label"] = [SEP.join(sorted(sets(c), reverse=True)) for c in issues["given_label"]]
    assert any(SEP in c for c in issues["given_label"])
    first, message = open_ml(store, issues, ml_base, root)
    assert "label changed" not in message  # the reversed sets are the table's sets
    two = next(r for r in range(len(first.texts)) if len(given_set(first, r)) == 2)
    while first.current() != two:
        first.skip(first.current())
    first.decide(two, given_set(first, two))  # keep
    changed = first.current()
    first.decide(changed, first.suggested_set(changed))
    again, message = open_ml(store, issues, ml_base, root)
    assert first.texts[two] not in again.texts and first.texts[changed] not in again.texts
    assert len(again.texts) == len(issues) - 2
    assert "1 skipped: a review already confirmed that label" in message
    assert "1 skipped: their label changed since the run" in message


def test_a_file_of_the_other_kind_or_other_data_is_refused_with_one_message(tmp_path, ml_base):
    root = tmp_path / "label"
    store = SessionStore(root)
    (tmp_path / "ml").mkdir()
    ml = ml_issues(tmp_path / "ml", ml_base)
    with pytest.raises(ReviewError) as e:  # a multi-label file on a single-label server
        open_ml(store, ml, ml_base, root, space=SINGLE)
    assert "multi-label run" in str(e.value) and "single-label" in str(e.value)
    legacy = ml.drop(columns="label_sep")  # written before label_issues.csv named its separator
    with pytest.raises(ReviewError, match="multi-label run"):
        open_ml(store, legacy, ml_base, root, space=SINGLE)
    single_base = tmp_path / "single.csv"
    pd.DataFrame({"text": [f"글 {i}" for i in range(30)], "label": ["dream", "error", "memo"] * 10}).to_csv(
        single_base, index=False)
    single = single_label_issues(tmp_path, single_base)
    with pytest.raises(ReviewError) as e:  # a single-label file on a multi-label server
        open_ml(store, single, ml_base, root)
    assert "single-label run" in str(e.value) and "multi-label" in str(e.value)
    other = tmp_path / "other.csv"
    make_multilabel_rows(60, seed=3).assign(text=lambda d: "다른 " + d["text"]).to_csv(other, index=False)
    (tmp_path / "o").mkdir()
    with pytest.raises(ReviewError) as e:  # MIN_FOUND_SHARE: suspects of another data file
        open_ml(store, ml_issues(tmp_path / "o", other), ml_base, root)
    assert "'other.csv'" in str(e.value) and f"0 of {len(WRONG)}" in str(e.value)
    assert not list(root.glob("*/meta.json"))  # no session was made by any refusal


def test_an_older_file_without_label_sep_takes_its_kind_from_the_version_or_its_cells(tmp_path, ml_base,
                                                                                     multilabel_classifier_dir,
                                                                                     tiny_classifier_dir):
    ml = ml_issues(tmp_path, ml_base).drop(columns="label_sep")
    singles = ml.assign(given_label="memo", suggested_label="dream")  # sets of one name each, or one-label rows
    assert issues_space(ml, ML_LABELS).sep == SEP  # an empty or joined cell: sets
    assert issues_space(singles, ML_LABELS).sep is None  # nothing shows it: the file cannot say
    for model, want in ((multilabel_classifier_dir, SEP), (tiny_classifier_dir, None)):
        version = tmp_path / model.name
        shutil.copytree(model, version)
        singles.to_csv(version / li.FILE, index=False)
        registry = SimpleNamespace(active=lambda: "v7", path=lambda v, f=version: f)
        issues, name = active_issues(registry)
        assert name == f"v7/{li.FILE}" and issues_space(issues, ML_LABELS).sep == want  # the version's model says


def test_ui_reviews_a_multi_label_file_and_the_active_versions_suspects(tmp_path, ml_base, multilabel_classifier_dir):
    issues = ml_issues(tmp_path, ml_base)
    model = tmp_path / "model"
    shutil.copytree(multilabel_classifier_dir, model)
    shutil.copy2(tmp_path / li.FILE, model / li.FILE)  # k-fold --final: the version carries its suspects
    server = start_server(model, tmp_path, "--train-data", str(ml_base))
    try:
        server.wait_ready()
        url, tab = server.url, "mlreview0001"
        config = httpx.get(url + "/ui/config").json()
        by_elem = {c.get("props", {}).get("elem_id"): c["id"] for c in config["components"]}
        fn = {}
        for i, d in enumerate(config["dependencies"]):
            for target, event in d["targets"]:
                fn.setdefault((by_elem_name(by_elem, target), event), i)
        out = session_outputs(url, tab, fn[("review-start", "click")],
                              [_upload(url, "label_issues.csv", (tmp_path / li.FILE).read_bytes()), ""])
        sid = out[0]
        by_text = issues.set_index("text")
        text = out[2]["value"]
        checks, accept, hint = out[31], out[6], out[3]
        assert checks["visible"] is True and set(checks["value"]) == sets(by_text.loc[text, "given_label"])
        assert accept["visible"] is True and "suggestion" in accept["value"].lower()
        assert "Given" in hint and "suggestion" in hint and all(b.get("visible") == "hidden" for b in out[7:27])
        folder = tmp_path / "app-data" / "label" / sid
        assert json.loads((folder / "meta.json").read_text())["multi_label"] is True
        shown = session_outputs(url, tab, fn[("label-hint", "change")], [sid, out[1]])
        assert "Keep: " in json.dumps(shown, ensure_ascii=False)
        out = session_outputs(url, tab, fn[("keep-btn", "click")], [sid, out[1]])  # out[1]: the record shown
        out = session_outputs(url, tab, fn[("accept-btn", "click")], [sid, out[1]])
        out = session_outputs(url, tab, fn[("save-btn", "click")], [sid, out[1], ["memo", "error"]])
        got = decisions(folder)
        items = pd.read_parquet(folder / "items.parquet")
        assert sets(got[0]["label"]) == sets(by_text.loc[got[0]["text"], "given_label"])  # keep
        assert sets(got[1]["label"]) == sets(by_text.loc[got[1]["text"], "suggested_label"])  # the suggestion
        assert got[2]["label"] == "error;memo" and got[0]["text"] == items["text"].iloc[0]  # lowest quality first
        out = session_outputs(url, tab, fn[("review-active", "click")], [sid])
        message = json.dumps(out[29], ensure_ascii=False)
        assert out[0] != sid and f"Review of {len(issues) - 3} suspects from v1/label_issues.csv" in message
        assert "a review already confirmed that label" in message and "label changed since the run" in message
        single = tmp_path / "single"
        single.mkdir()
        single_base = tmp_path / "single.csv"
        pd.DataFrame({"text": [f"글 {i}" for i in range(30)], "label": ML_LABELS * 10}).to_csv(single_base, index=False)
        single_label_issues(single, single_base)
        out = session_outputs(url, tab, fn[("review-start", "click")],
                              [_upload(url, "label_issues.csv", (single / li.FILE).read_bytes()), out[0]])
        assert "single-label run" in json.dumps(out[29], ensure_ascii=False)
    finally:
        server.stop()


def by_elem_name(by_elem: dict, component_id: int) -> str | None:
    return next((name for name, cid in by_elem.items() if cid == component_id), None)


def test_browser_keys_keep_take_and_save_a_ticked_set(tmp_path, ml_base, multilabel_classifier_dir):
    """In a real browser: the given set is ticked, K keeps it, T takes the suggestion, 1 then Enter saves the
    given set with the first label toggled."""
    from test_app_ui_browser import ARGS, CHROMIUM, visible, wait_labeled

    if not CHROMIUM.exists() or shutil.which("chromium") is None:
        pytest.skip("needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    issues = ml_issues(tmp_path, ml_base).set_index("text")
    server = start_server(multilabel_classifier_dir, tmp_path, "--train-data", str(ml_base))
    try:
        server.wait_ready()
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(60_000)
            page.goto(server.url + "/ui/")
            page.get_by_role("tab", name="Label").click()
            page.get_by_text("Review suspects (label_issues.csv").click()
            page.set_input_files("#review-file input[type=file]", str(tmp_path / li.FILE))
            page.wait_for_selector("#review-file a[href*='file=']")
            page.click("#review-start")
            visible(page, "#label-checks")
            visible(page, "#accept-btn")
            wanted = []
            for key in ("k", "t", "1+Enter"):
                text = page.input_value("#label-text textarea")
                ticked = set(page.eval_on_selector_all("#label-checks input[type=checkbox]:checked",
                                                       "els => els.map(e => e.closest('label').innerText)"))
                given = sets(issues.loc[text, "given_label"])
                assert {x.split("] ")[-1] for x in ticked} == given  # the given set is ticked
                page.click("#label-progress")  # focus off the inputs, as a person reading would be
                for k in key.split("+"):
                    page.keyboard.press(k)
                wanted.append({"k": given, "t": sets(issues.loc[text, "suggested_label"]),
                               "1+Enter": given ^ {ML_LABELS[0]}}[key])
                wait_labeled(page, len(wanted))
            browser.close()
        (folder,) = [m.parent for m in (tmp_path / "app-data" / "label").glob("*/meta.json")]
        assert [sets(d["label"]) for d in decisions(folder)] == wanted
    finally:
        server.stop()


@pytest.mark.parametrize("bad", ["e", "x" * 100_000, "", "[x]", "a,b", "=cmd()", "many", "a\u202eb"])
def test_a_hostile_multi_label_review_file_is_refused_naming_file_and_row(tmp_path, ml_base, bad):
    """Issue 40 M4: a label_sep column of 'e' or 100,000 'x', or suggested sets with names the label-name rule
    refuses (or 250 labels), put into the training table through Review suspects, then refused every retrain."""
    root = tmp_path / "label"
    store = SessionStore(root)
    issues = ml_issues(tmp_path, ml_base)
    if bad in ("e", "x" * 100_000):
        issues["label_sep"] = bad
        what = "column 'label_sep'"
    else:
        row = int(issues["quality"].astype(float).idxmin())
        issues.loc[row, "suggested_label"] = ";".join(f"l{i}" for i in range(250)) if bad == "many" else \
            f"dream;{bad}" if bad else ";;"
        what = f"row {row + 2} column suggested_label"
    if bad == "":
        assert open_ml(store, issues, ml_base, root)[0]  # an empty set is a set: ';;' reads as none
        return
    with pytest.raises((ReviewError, ValueError)) as e:
        open_ml(store, issues, ml_base, root)
    assert "label_issues.csv" in str(e.value) and what in str(e.value)
    assert not list(root.glob("*/meta.json"))
