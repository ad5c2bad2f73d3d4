"""Pretraining fixtures: a small Korean corpus file and configs/models a few thousand parameters big."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

# Hangul syllables the shared tiny tokenizer (tests/conftest.py) knows, so the text tokenizes to real ids.
SYLLABLES = "가나다라마바사아자차카타파하오늘내일어제꿈에서봤다회의시간약속메모기록오류에러발생했다일기쓰기좋은날씨"
TINY = {"embedding_size": 16, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 64, "seq_len": 32, "batch_size": 4, "lr": 1e-3,
        "warmup_steps": 2, "max_steps": 8, "log_every": 4, "save_every": 4, "dropout": 0.0}


def korean_lines(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join("".join(rng.choices(SYLLABLES, k=rng.randint(1, 4))) for _ in range(rng.randint(3, 12)))
            for _ in range(n)]


@pytest.fixture(scope="session")
def make_korean_lines():
    return korean_lines


@pytest.fixture(scope="session")
def ko_corpus(tmp_path_factory) -> Path:
    """300 lines of Korean-looking text, with a document break every 50 lines."""
    path = tmp_path_factory.mktemp("corpus") / "ko.txt"
    lines = korean_lines(300)
    path.write_text("".join(line + ("\n\n" if i % 50 == 49 else "\n") for i, line in enumerate(lines)),
                    encoding="utf-8")
    return path


@pytest.fixture
def make_config(ko_corpus, tiny_tokenizer_dir, tmp_path):
    from pretraining.config import TrainConfig

    def make(**overrides):
        values = {**TINY, "corpus": (str(ko_corpus),), "tokenizer": str(tiny_tokenizer_dir),
                  "output": str(tmp_path / "run"), **overrides}
        return TrainConfig.from_dict(values)

    return make


@pytest.fixture
def make_model(make_config, tiny_tokenizer_dir):
    import torch

    from pretraining.tokenizer import load_tokenizer
    from pretraining.train import build_model

    tokenizer = load_tokenizer(tiny_tokenizer_dir)

    def make(seed: int = 0, **overrides):
        torch.manual_seed(seed)
        return build_model(make_config(**overrides), tokenizer), tokenizer

    return make
