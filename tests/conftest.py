"""Shared fixtures: a tiny random ELECTRA and tokenizer built locally (no hub, no network).

The vocabulary holds whole Hangul syllables and a few words, so Korean text tokenizes to real ids
instead of [UNK]; `strip_accents=False` because BERT's default accent stripping decomposes Hangul
into jamo.
"""

from __future__ import annotations

import random
from pathlib import Path

import pandas as pd
import pytest

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["꿈", "일기", "일정", "메모", "오류", "회의", "내일", "오늘", "어제", "에러", "dream", "diary", "error", "memo"]
SYLLABLES = list("가나다라마바사아자차카타파하오늘내일어제꿈에서봤다회의시간약속메모기록오류에러발생했다일기쓰기좋은날씨")
ASCII = list("abcdefghijklmnopqrstuvwxyz0123456789.,!?'\"-:;()")

# Toy labeled data: each class has its own keywords, so a tiny model can learn something.
CLASS_WORDS = {
    "dream": ["꿈", "꿈에서", "dream", "봤다"],
    "error": ["오류", "에러", "error", "발생했다"],
    "memo": ["메모", "기록", "memo", "약속"],
}


def build_tokenizer(folder: Path):
    from transformers import ElectraTokenizerFast

    vocab = list(dict.fromkeys(SPECIAL + WORDS + SYLLABLES + ASCII + ["##" + s for s in SYLLABLES + ASCII]))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tok = ElectraTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True, strip_accents=False,
                               model_max_length=128)
    tok.save_pretrained(folder)
    return tok


def tiny_config(vocab_size: int, **overrides):
    from transformers import ElectraConfig

    kw = {"vocab_size": vocab_size, "embedding_size": 16, "hidden_size": 32, "num_hidden_layers": 2,
          "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 128}
    kw.update(overrides)
    return ElectraConfig(**kw)


# Test files that share one unit of work under pytest-xdist: each Ray file starts a local Ray cluster sized to
# the cores, and two at once would oversubscribe them under tests that time out waiting on killed workers.
XDIST_GROUPS = {"test_serving_score_ray.py": "ray", "test_kfold_ray.py": "ray"}
# The files that use tests/app/conftest.py's three session servers (`servers`: main, strict, drain, started
# together): split over both workers, each worker started all three (issue 45 item 17).
SERVER_FILES = ("test_app_api.py", "test_app_auth_queue.py", "test_app_hf_compat.py", "test_app_lifecycle.py",
                "test_app_ui_browser.py", "test_app_ui_http.py")
XDIST_GROUPS.update(dict.fromkeys(SERVER_FILES, "app-servers"))
# Units started first, in this order: the longest (worker-seconds in the 2-core runs of docs/notes/log.md, "The test suite"). xdist
# queues units by their number of tests, so the slow end-to-end files, which have few, came last and one ran
# alone at the end while the other worker had nothing left (issue 45 item 17).
FIRST_UNITS = ("ray", "app-servers", "tests/app/test_app_fleet.py", "tests/finetune/test_kfold_cli.py",
               "tests/app/test_app_multilabel.py", "tests/app/test_app_review_multilabel.py",
               "tests/app/test_app_train.py", "tests/app/test_app_ui_team_label.py",
               "tests/app/test_app_teacher_labels.py", "tests/app/test_app_train_browser.py")


def xdist_unit(nodeid: str) -> str:
    """The unit of work a test belongs to under the README's `-n 2 --dist loadgroup`: its file (so a module's
    fixtures, its server or its k-fold run, are built once, on one worker), both Ray files together, the files
    of the session servers together."""
    path = nodeid.split("::", 1)[0]
    return XDIST_GROUPS.get(path.rsplit("/", 1)[-1], path)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist (the dev extra); without it this is never called
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup` by file, decided from the node ids. pytest-xdist 3.8 groups by renaming each test's
    `_nodeid` from its xdist_group mark, which pytest 9 no longer reads (a node id is `_id` there): every test
    was its own unit and each worker built the module fixtures of a file again (issue 45)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileUnits(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_unit(nodeid)

        def _assign_work_unit(self, node) -> None:
            # The longest units first (the Ray one ~1/4 of the suite): none runs alone at the end.
            for unit in reversed(FIRST_UNITS):
                if unit in self.workqueue:
                    self.workqueue.move_to_end(unit, last=False)
            super()._assign_work_unit(node)

    return FileUnits(config, log)


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-tokenizer")
    build_tokenizer(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_electra_dir(tmp_path_factory) -> Path:
    """A tiny random ELECTRA discriminator (ElectraForPreTraining) with its tokenizer, like pretraining/ writes."""
    import torch
    from transformers import ElectraForPreTraining

    folder = tmp_path_factory.mktemp("tiny-electra")
    tok = build_tokenizer(folder)
    torch.manual_seed(0)
    ElectraForPreTraining(tiny_config(len(tok))).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_classifier_dir(tmp_path_factory) -> Path:
    """A tiny random ELECTRA sequence classifier with labels, like `finetune/kfold.py --final` writes."""
    return build_tiny_classifier(tmp_path_factory.mktemp("tiny-classifier"))


def build_tiny_classifier(folder: Path) -> Path:
    """The tiny classifier itself, in `folder` (bench/hostile_bodies.py builds its server's model with it)."""
    import torch
    from transformers import ElectraForSequenceClassification

    tok = build_tokenizer(folder)
    labels = sorted(CLASS_WORDS)
    cfg = tiny_config(len(tok), num_labels=len(labels), id2label=dict(enumerate(labels)),
                      label2id={k: i for i, k in enumerate(labels)})
    torch.manual_seed(0)
    ElectraForSequenceClassification(cfg).save_pretrained(folder)
    return folder


def make_toy_rows(n_per_class: int = 20, seed: int = 0) -> pd.DataFrame:
    rng = random.Random(seed)
    filler = ["오늘", "내일", "어제", "회의", "시간", "좋은 날씨", "일기"]
    rows = []
    for label, words in CLASS_WORDS.items():
        for i in range(n_per_class):
            parts = [rng.choice(words), rng.choice(filler), rng.choice(words)] + rng.sample(filler, rng.randint(0, 4))
            rng.shuffle(parts)
            rows.append({"text": " ".join(parts), "label": label, "page": f"{label}-{i % 5}"})
    rng.shuffle(rows)
    return pd.DataFrame(rows)


@pytest.fixture(scope="session")
def toy_rows():
    """make_toy_rows itself: tests import it through this fixture, because `from conftest import` resolves to
    whichever of the packages' conftest.py files pytest imported last."""
    return make_toy_rows


@pytest.fixture
def toy_csv(tmp_path) -> Path:
    """60 labeled rows, 3 balanced classes, a `page` group column (5 groups per class)."""
    path = tmp_path / "notes.csv"
    make_toy_rows().to_csv(path, index=False)
    return path


@pytest.fixture
def put_back(tmp_path):
    """`put_back(folder)`: the folder is put back as it was after the test. For a test that resumes a module's
    shared run in place (a resume keeps its --output), so the file's other tests read the run as its fixture
    wrote it, whichever order they run in."""
    import shutil

    kept = []

    def keep(folder: Path) -> Path:
        copy = tmp_path / f"put-back-{len(kept)}"
        shutil.copytree(folder, copy, symlinks=True)
        kept.append((folder, copy))
        return folder

    yield keep
    for folder, copy in kept:
        shutil.rmtree(folder)
        shutil.copytree(copy, folder, symlinks=True)


@pytest.fixture(scope="session", autouse=True)
def _project_root_left_clean():
    """No test leaves the app's default data dir (app-data/, relative) in the project root (issue 45: a
    module-scoped app fixture runs before tests/app's per-test chdir and wrote app-data/monitor/state.json)."""
    root_data = Path(__file__).resolve().parents[1] / "app-data"
    before = root_data.exists()
    yield
    assert before or not root_data.exists(), f"a test left {root_data} behind (an app with the default --data-dir)"


@pytest.fixture(autouse=True)
def _root_logger_restored():
    """A test that runs an entry point in-process (`app.__main__.main`, `app.fleet.train.main`, kfold's main)
    installs that program's stderr handler on the root logger, and it stayed for the rest of the session: a
    background thread's later record ("engine pass overhead ..." from an in-process server's warm-up) then
    printed JSON among the dots (issue 45). What a test added is taken off again; pytest's own handlers stay."""
    import logging

    root = logging.getLogger()
    before, level = set(map(id, root.handlers)), root.level
    yield
    for handler in root.handlers[:]:
        if id(handler) not in before and not type(handler).__module__.startswith("_pytest"):
            root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture(scope="session")
def raylet_errors_logged():
    """Ray's driver prints the raylet's error messages (a killed worker: "A worker died or was killed while
    executing a task...") from a background thread to stdout whenever they arrive, so between tests the line
    landed among the dots (issue 45). The tests that kill workers on purpose get them as log records instead,
    shown with a failing test's captured log."""
    import logging

    worker = pytest.importorskip("ray._private.worker")
    log = logging.getLogger("tests.raylet")
    # A line that comes between tests, when no capture handler is on the root logger, is dropped: without a
    # handler of its own the logger fell back to logging.lastResort, which wrote it among the dots.
    if not any(isinstance(h, logging.NullHandler) for h in log.handlers):
        log.addHandler(logging.NullHandler())

    def to_log(data, ignore_prefix):  # the signature of ray._private.worker.print_to_stdstream
        for line in data.get("lines", []):
            log.warning("(%s) %s", data.get("pid"), line)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(worker, "print_to_stdstream", to_log)
        yield


# Fixtures in their own modules, imported here so every test package sees them: the local OpenAI-compatible
# server (finetune.teach, the app's cascade: issue 47) and the multi-label model (issue 32).
from fake_llm import fake, llm  # noqa: F401
from multilabel_fixture import multilabel_classifier_dir, multilabel_rows  # noqa: F401

# A real PostgreSQL and the store URL parametrized over SQLite and PostgreSQL (issue 46).
from postgres_fixture import postgres_server, store_url  # noqa: F401
