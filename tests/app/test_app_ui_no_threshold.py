"""A model without a threshold (no calibration.json, or one without --target-precision) counts every in-domain
answer as `confident` on the API (serving/calibration.py; docs/app.md says so). Issue 59 (minor): the UI then
showed a 12.8% guess as the big orange *Accept [Enter]*, and the Batch tab wrote `confident: true` at scores of
0.22-0.34 and called an out-of-domain row "under the model's threshold". The same file through the real Label
and Batch tabs of a model with a threshold and of one without."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from starlette.testclient import TestClient
from test_app_calibration import TEXTS, calibrated  # noqa: F401 - the fixture, shared

from app.config import Config


def _tabs(folder, tmp_path):
    from app.server import create_app
    from serving.engine import Classifier

    cfg = Config(model="m", data_dir=tmp_path / "data")
    return TestClient(create_app(cfg, Classifier.load(folder, provider="torch")), base_url="http://127.0.0.1")


def _upload(tmp_path) -> str:
    from gradio.utils import get_upload_folder

    upload = Path(get_upload_folder()) / f"no-threshold-{tmp_path.name}" / "notes.csv"
    upload.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"text": TEXTS}).to_csv(upload, index=False)
    return str(upload)


@pytest.mark.parametrize("threshold", [False, True], ids=["no-threshold", "threshold"])
def test_without_a_threshold_nothing_in_the_ui_looks_confident(threshold, spread_model_dir, calibrated,  # noqa: F811
                                                               tmp_path):
    folder = calibrated[0] if threshold else spread_model_dir
    upload = _upload(tmp_path)
    with _tabs(folder, tmp_path) as c:
        api = c.post("/v1/classify", json={"texts": TEXTS}).json()["predictions"]
        blocks = next(r.app for r in c.app.routes if getattr(r, "path", None) == "/ui").get_blocks()
        fn = {getattr(f.fn, "__name__", ""): f.fn for f in blocks.fns.values()}
        path, said, _ = fn["score_file"](upload, "text")
        scored = pd.read_csv(path, keep_default_na=False)
        shown = fn["start"](upload, "text")
    accept, hint = shown[6], shown[3]
    if not threshold:  # the API's contract stands: every answer confident, nothing kept from a client
        assert all(p["confident"] for p in api)
        assert scored["confident"].astype(str).eq("").all() and len(scored) == len(TEXTS)
        assert "no threshold (not calibrated)" in said and "under the model's threshold" not in said
        assert accept["variant"] == "secondary" and "(no threshold: not calibrated)" in accept["value"]
        assert not accept["value"].startswith("✓") and "no threshold" in hint
    else:  # a model with one: the file's flags are the API's; the least sure text (first) is under it
        assert [str(p["confident"]) for p in api] == scored["confident"].astype(str).tolist()
        assert {"True", "False"} == set(scored["confident"].astype(str)) and "no threshold" not in said
        assert "under the model's threshold, or out of domain" in said
        assert "(not sure)" in accept["value"] and "no threshold" not in hint


def test_batch_without_a_threshold_keeps_out_of_domain_and_the_llm_s_answers():
    """Without a threshold a false `confident` can only be out of domain (ood/): it stays false and is called so,
    never "under the model's threshold"; the LLM's answers (the cascade) keep their true; the rest is left empty."""
    from app.label_kinds import SINGLE, kind_of
    from app.ui.batch import summary, unjudged

    scored = pd.DataFrame({"pred_label": ["a", "a", "b", None], "pred_score": [0.3, 0.9, 0.2, None],
                           "confident": pd.array([True, False, True, pd.NA], dtype="boolean"),
                           "source": ["model", "model", "llm", None]})
    out = unjudged(scored, "not calibrated")
    assert out["confident"].tolist() == [pd.NA, False, True, pd.NA] and scored["confident"][0]  # a copy
    said = summary(out, kind_of(SINGLE), 0, 5000, "not calibrated")
    assert "**1** not sure (out of domain: unlike the training rows" in said and "threshold (not calibrated)" in said
    assert unjudged(scored, "") is scored and "unlike the training" not in summary(scored, kind_of(SINGLE), 0, 5000)
