import logging

from transformers import AutoModelForSequenceClassification, AutoTokenizer


def test_tiny_tokenizer_keeps_hangul_syllables(tiny_tokenizer_dir):
    tok = AutoTokenizer.from_pretrained(tiny_tokenizer_dir)
    tokens = tok.tokenize("꿈에서 봤다")
    assert "[UNK]" not in tokens
    assert all(len(t.lstrip("#")) >= 1 and not ("\u1100" <= t[-1] <= "\u11ff") for t in tokens)  # no jamo


def test_tiny_classifier_has_label_names(tiny_classifier_dir):
    model = AutoModelForSequenceClassification.from_pretrained(tiny_classifier_dir)
    assert model.config.id2label[0] == "dream"


def test_a_program_run_in_process_installs_its_json_log_handler():
    from app.http import logs

    logs.setup()  # what app.__main__.main and app.fleet.train.main do first
    assert any(type(h).__name__ == "StderrHandler" for h in logging.getLogger().handlers)


def test_the_next_test_starts_without_that_handler():
    """Issue 45: left on the root logger, it printed an in-process server's late records ("engine pass
    overhead ...", from its warm-up thread) among the dots. Runs after the test above (file order)."""
    root = logging.getLogger()
    assert [h for h in root.handlers if not type(h).__module__.startswith("_pytest")] == []
    assert root.level == logging.WARNING


def test_a_raylet_line_between_tests_prints_nothing(raylet_errors_logged, capsys):
    """Issue 45: a killed worker's "A worker died..." line from Ray's error thread, arriving when no test's
    capture handler is on the root logger, went through logging.lastResort to stderr, among the dots."""
    from ray._private import worker

    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers[:] = []  # as between two tests
    try:
        worker.print_to_stdstream({"lines": ["A worker died or was killed while executing a task"], "pid": "raylet",
                                   "is_err": False}, ignore_prefix=False)
    finally:
        root.handlers[:] = saved
    assert capsys.readouterr() == ("", "")


def test_each_file_is_one_xdist_unit_and_the_ray_files_share_one(request):
    """Under `-n 2 --dist loadgroup` (the README's test command) a unit runs on one worker: one file, so its
    module fixtures are built once; both Ray files together, so two local Ray clusters never run at once."""
    groups: dict[str, set] = {}
    for item in request.session.items:
        (mark,) = item.iter_markers("xdist_group")
        groups.setdefault(item.nodeid.split("::")[0], set()).add(mark.args[0])
    assert groups["tests/test_fixtures.py"] == {"tests/test_fixtures.py"}
    assert all(len(names) == 1 for names in groups.values())
    for path in ("tests/serving/test_serving_score_ray.py", "tests/finetune/test_kfold_ray.py"):  # when collected
        assert groups.get(path, {"ray"}) == {"ray"}
