"""A real fine-tuned MiniLM for the CPU benchmarks (bench/roofline.py, bench/int8_recipes.py): one epoch on 70% of
BBC News, the other 30% held out, cached in a work folder.

    python bench/minilm_bbc.py --work /tmp/minilm-bbc     # -> model/, bbc-train.csv, bbc-eval.csv, train.json

The same recipe as docs/evidence.md's INT8 sections (MiniLM-L6 from the `minilm` alias, 64 tokens), trained once
with the k-fold trainer's `fit` instead of `finetune/kfold.py --folds 2 --final` (three trainings): the benchmarks
need a model whose predictions INT8 can harm, not a cross-validated score.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MAX_LENGTH = 64


def split_bbc(work: Path) -> tuple[Path, Path]:
    import pandas as pd
    from sklearn.model_selection import train_test_split

    from finetune.data import bbcnews_csv

    train_csv, eval_csv = work / "bbc-train.csv", work / "bbc-eval.csv"
    if not eval_csv.exists():
        df = pd.read_csv(bbcnews_csv(work), dtype=str, keep_default_na=False)
        train, held = train_test_split(df, test_size=0.3, stratify=df["label"], random_state=0)
        train.to_csv(train_csv, index=False)
        held.to_csv(eval_csv, index=False)
    return train_csv, eval_csv


def build(work: Path, epochs: int = 1) -> tuple[Path, Path]:
    """(model folder, held-out csv); trains only when the folder has no model yet."""
    import numpy as np
    import pandas as pd
    import torch

    from finetune.models import load_classifier, load_tokenizer, resolve_model
    from finetune.train import TrainConfig, encode, fit
    from textdata.cpu_limits import omp_threads, plan_threads

    work.mkdir(parents=True, exist_ok=True)
    train_csv, eval_csv = split_bbc(work)
    model_dir = work / "model"
    if (model_dir / "model.safetensors").exists():
        return model_dir, eval_csv
    df = pd.read_csv(train_csv, dtype=str, keep_default_na=False)
    labels = sorted(df["label"].unique())
    y = df["label"].map(labels.index).to_numpy()
    resolved = resolve_model("minilm")
    tok = load_tokenizer("minilm", resolved, MAX_LENGTH)
    model = load_classifier("minilm", resolved, labels)
    ids = encode(tok, df["text"].tolist(), MAX_LENGTH)
    rng = np.random.default_rng(0)
    val = rng.random(len(ids)) < 0.1  # fit's inner validation: picks the epoch, here the only one
    tr = np.flatnonzero(~val)
    va = np.flatnonzero(val)
    torch.set_num_threads(omp_threads() or plan_threads().threads)  # as k-fold does: threads for the free cores
    t0 = time.time()
    fit(model, tok, [ids[i] for i in tr], y[tr], [ids[i] for i in va], y[va],
        TrainConfig(epochs=epochs, batch_size=16, lr=1e-4, patience=0), seed=0)
    model.eval().save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    (work / "train.json").write_text(json.dumps({"seconds": round(time.time() - t0), "epochs": epochs,
                                                 "rows": len(tr), "max_length": MAX_LENGTH}) + "\n")
    return model_dir, eval_csv


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--epochs", type=int, default=1)
    a = ap.parse_args()
    print(build(a.work, a.epochs))
