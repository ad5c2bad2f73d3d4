"""Task-adaptive pretraining inside k-fold (`kfold.py --adapt-steps N`): before each fold is fine-tuned,
replaced-token detection continues from the model on the texts of that fold's training rows (plus any
--adapt-corpus files), and the fold fine-tunes the adapted discriminator.

Per fold, never once on the whole file: every row is held out by one fold, so adapting once on all labeled
texts would let each fold's encoder read the texts it is scored on (Gururangan et al. 2020 adapt on the task's
unlabeled text; in cross-validation that text must stop at the fold boundary, as the TF-IDF baseline's
vocabulary does). The inner early-stopping rows are training rows and are read. Costs N steps per fold.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from textdata.errors import DataError


@dataclass(frozen=True)
class AdaptConfig:
    steps: int = 0  # 0 = no adaptation
    lr: float = 5e-4
    batch_size: int = 32
    warmup: float = 0.1  # share of the steps
    seq_len: int = 128  # capped at the model's max_position_embeddings
    corpus: tuple[str, ...] = ()  # extra unlabeled text files (or tables), read in every fold


def write_texts(texts: list[str], path: Path) -> None:
    """One text a line (internal line breaks folded), written atomically."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(" ".join(t.split()) + "\n" for t in texts if t.strip()), encoding="utf-8")
    os.replace(tmp, path)


def adapt(model_dir: str, texts: list[str], folder: Path, cfg: AdaptConfig, seed: int) -> Path:
    """Continue RTD from `model_dir` on `texts` (+ cfg.corpus) in `folder`; returns the adapted discriminator.
    A finished adaptation is reused and a killed one resumed (pretraining's own checkpoints)."""
    from pretraining.config import TrainConfig as PretrainConfig
    from pretraining.config import UsageError
    from pretraining.init_from import init_source
    from pretraining.train import train

    done = folder / "discriminator"
    try:
        max_positions = init_source(model_dir)[2]["max_position_embeddings"]
    except UsageError as exc:
        raise DataError(f"--adapt-steps: {exc}") from None
    if (done / "tokenizer_config.json").is_file():  # export writes it after the weights
        return done
    folder.mkdir(parents=True, exist_ok=True)
    corpus = folder / "train_texts.txt"
    if not corpus.exists():
        write_texts(texts, corpus)
    try:
        train(PretrainConfig(
            corpus=(str(corpus), *cfg.corpus), output=str(folder), init_from=str(model_dir), max_steps=cfg.steps,
            warmup_steps=max(1, round(cfg.warmup * cfg.steps)), lr=cfg.lr, batch_size=cfg.batch_size,
            seq_len=min(cfg.seq_len, max_positions), seed=seed, log_every=max(1, min(50, cfg.steps)),
            save_every=max(1, min(200, cfg.steps)), resume=(folder / "checkpoint.pt").exists()))
    except UsageError as exc:
        raise DataError(f"--adapt-steps: {exc}") from None
    return done
