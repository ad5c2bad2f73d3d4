"""Serving fixtures: a tiny classifier trained for a few seconds (so logits are far from ties and
INT8 agreement means something) and its ONNX export, built once per session."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def trained_classifier_dir(tiny_classifier_dir, tmp_path_factory, toy_rows) -> Path:
    import torch
    from transformers import AutoTokenizer, ElectraForSequenceClassification

    folder = tmp_path_factory.mktemp("trained-classifier")
    for p in tiny_classifier_dir.iterdir():
        shutil.copy2(p, folder / p.name)
    tok = AutoTokenizer.from_pretrained(folder)
    model = ElectraForSequenceClassification.from_pretrained(folder)
    rows = toy_rows(n_per_class=30, seed=1)
    label2id = model.config.label2id
    enc = tok(rows["text"].tolist(), padding=True, return_tensors="pt")
    y = torch.tensor([label2id[v] for v in rows["label"]])
    torch.manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)  # 3e-3 left 29 of 45 eval rows at near-ties (macro-F1 0.54)
    model.train()
    for _ in range(40):
        loss = model(**enc, labels=y).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval().save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def exported_dir(trained_classifier_dir, tmp_path_factory, toy_rows) -> Path:
    from serving.export import ExportConfig, run

    out = tmp_path_factory.mktemp("exported")
    eval_csv = out.parent / "toy-eval.csv"
    toy_rows(n_per_class=15, seed=2).to_csv(eval_csv, index=False)
    # min_int8_speedup=0: INT8 is the CPU default whatever its speed on this CPU (tests must not depend
    # on the CPU); the speed decision has its own tests with injected timings.
    run(ExportConfig(model=trained_classifier_dir, output=out, quantize=True, eval_csv=eval_csv, min_agreement=0.95,
                     min_int8_speedup=0))
    return out
