"""A tiny multi-label ELECTRA (problem_type multi_label_classification), briefly trained on toy rows that carry
0, 1 or 2 labels, saved with a thresholds.json whose thresholds differ per label (so code that assumes 0.5
shows). Imported by tests/conftest.py, so every test package can ask for it.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd
import pytest

ML_LABELS = ["dream", "error", "memo"]
ML_THRESHOLDS = [0.45, 0.5, 0.6]
_WORDS = {"dream": ["꿈", "꿈에서", "dream", "봤다"], "error": ["오류", "에러", "error", "발생했다"],
          "memo": ["메모", "기록", "memo", "약속"]}
_FILLER = ["오늘", "내일", "어제", "회의", "시간", "좋은 날씨", "일기"]


def make_multilabel_rows(n: int = 90, seed: int = 0, sep: str = ";") -> pd.DataFrame:
    """`text`, `label` (names joined by `sep`, "" for none): a fifth of the rows have no label, a third two."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        k = (0, 1, 1, 1, 2, 2, 1, 0, 1, 2)[i % 10]
        chosen = sorted(rng.sample(ML_LABELS, k))
        parts = [w for lab in chosen for w in rng.sample(_WORDS[lab], 2)] + rng.sample(_FILLER, rng.randint(1, 3))
        rng.shuffle(parts)
        rows.append({"text": " ".join(parts), "label": sep.join(chosen)})
    return pd.DataFrame(rows)


@pytest.fixture(scope="session")
def multilabel_rows():
    return make_multilabel_rows


@pytest.fixture(scope="session")
def multilabel_classifier_dir(tiny_classifier_dir, tmp_path_factory) -> Path:
    """The tiny classifier's tokenizer and sizes (tests/conftest.py) with a fresh multi-label head."""
    import shutil

    import torch
    from transformers import AutoConfig, AutoTokenizer, ElectraForSequenceClassification

    folder = tmp_path_factory.mktemp("multilabel-classifier")
    for p in tiny_classifier_dir.iterdir():
        if p.name not in ("model.safetensors", "config.json"):
            shutil.copy2(p, folder / p.name)
    tok = AutoTokenizer.from_pretrained(folder)
    cfg = AutoConfig.from_pretrained(tiny_classifier_dir, num_labels=len(ML_LABELS), id2label=dict(enumerate(ML_LABELS)),
                                     label2id={k: i for i, k in enumerate(ML_LABELS)},
                                     problem_type="multi_label_classification")
    torch.manual_seed(0)
    model = ElectraForSequenceClassification(cfg)
    rows = make_multilabel_rows(120, seed=1)
    enc = tok(rows["text"].tolist(), padding=True, return_tensors="pt")
    y = torch.tensor([[float(lab in cell.split(";")) for lab in ML_LABELS] for cell in rows["label"]])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(40):  # BCE-with-logits: what problem_type selects in transformers
        loss = model(**enc, labels=y).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval().save_pretrained(folder)
    (folder / "thresholds.json").write_text(json.dumps({
        "labels": ML_LABELS, "thresholds": ML_THRESHOLDS, "default": 0.5, "tuned": True, "label_sep": ";"}))
    return folder
