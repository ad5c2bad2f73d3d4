"""Real server processes for the app tests: `python -m app` on free loopback ports.

The main server is started with the Dockerfile's own ENTRYPOINT and CMD (only the model path and the port
swapped), so the container's command line is the one these tests exercise.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from app_testkit import API_KEY, Server, docker_argv, free_port, start_server


@pytest.fixture(autouse=True)
def _away_from_the_project(tmp_path, monkeypatch):
    """Each test runs in its own folder: an app built with the default --data-dir (app-data, relative) must
    not leave app-data/monitor/state.json in the project root."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="session")
def spread_model_dir(tiny_classifier_dir, tmp_path_factory) -> Path:
    """The tiny classifier with its output layer re-centred and scaled: a random ELECTRA's [CLS] vectors
    are nearly identical, so every text would get the same label at ~0.34. Re-centred, labels and
    confidences differ from text to text, which is what routing, ordering and UI tests need to see."""
    import torch
    from transformers import AutoTokenizer, ElectraForSequenceClassification

    folder = tmp_path_factory.mktemp("spread-classifier")
    shutil.copytree(tiny_classifier_dir, folder, dirs_exist_ok=True)
    tok = AutoTokenizer.from_pretrained(folder)
    model = ElectraForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        words = ["꿈에서", "봤다", "오류", "에러", "메모", "기록", "회의", "내일", "오늘", "좋은 날씨", "일기", "약속"]
        calibration = [" ".join(words[(i * 7 + j * 5) % len(words)] for j in range(1 + i % 4)) for i in range(30)]
        batch = tok(calibration, padding=True, return_tensors="pt")
        logits = model(**batch).logits
        head = model.classifier.out_proj
        head.bias.sub_(logits.mean(0))
        scale = 2.0 / float((logits - logits.mean(0)).std())
        head.weight.mul_(scale)
        head.bias.mul_(scale)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def servers(spread_model_dir, tmp_path_factory):
    """Both long-lived servers start at once (startup is mostly imports; overlapping them saves time)."""
    main_dir = tmp_path_factory.mktemp("main-server")
    main = Server(docker_argv(spread_model_dir, free_port()), main_dir, 0)
    main.port = int(main.proc.args[main.proc.args.index("--port") + 1])
    main.url = f"http://127.0.0.1:{main.port}"
    # "strict": auth on, and a forming batch held for the whole 1 s timeout (the most --max-wait-ms may be), so
    # the queue limit and the timeout can be hit: the timeout fires as the batch starts, before its answer.
    strict = start_server(spread_model_dir, tmp_path_factory.mktemp("strict-server"), "--api-key", API_KEY,
                          "--max-wait-ms", "1000", "--max-batch-tokens", "100000", "--max-queue", "4",
                          "--request-timeout", "1")
    # "drain": for the SIGTERM test; a 2 s batching wait keeps a request in flight while the signal arrives.
    drain = start_server(spread_model_dir, tmp_path_factory.mktemp("drain-server"), "--no-ui", "--max-wait-ms", "2000")
    try:
        yield {"main": main, "strict": strict, "drain": drain}  # each fixture below waits for its own
    finally:
        for s in (main, strict, drain):
            s.stop()


@pytest.fixture(scope="session")
def server(servers) -> Server:
    servers["main"].wait_ready()
    return servers["main"]


@pytest.fixture(scope="session")
def strict_server(servers) -> Server:
    servers["strict"].wait_ready(headers={"Authorization": f"Bearer {API_KEY}"})
    return servers["strict"]


@pytest.fixture(scope="session")
def drain_server(servers) -> Server:
    servers["drain"].wait_ready()
    return servers["drain"]


@pytest.fixture(scope="session")
def engine(spread_model_dir):
    """The same model in-process: what a single, unbatched call returns."""
    from serving.engine import Classifier

    return Classifier.load(spread_model_dir)
