import logging
from pathlib import Path

import pytest
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
    module fixtures are built once; both Ray files together, so two local Ray clusters never run at once, and
    first. pytest-xdist's own loadgroup split every file across the workers under pytest 9 (issue 45)."""
    pytest.importorskip("xdist")
    from types import SimpleNamespace

    conftest = request.config.pluginmanager.get_plugin(str(Path(__file__).with_name("conftest.py")))
    options = {"dist": "loadgroup", "tx": ["2*popen"]}
    config = SimpleNamespace(getvalue=options.get, option=SimpleNamespace(loadscopereorder=True))
    sched = conftest.pytest_xdist_make_scheduler(config=config, log=None)
    files = ["tests/app/test_a.py", "tests/finetune/test_kfold_ray.py", "tests/app/test_b.py",
             "tests/serving/test_serving_score_ray.py", "tests/test_c.py", "tests/app/test_app_api.py",
             "tests/app/test_app_fleet.py", "tests/app/test_app_ui_http.py"]
    collection = [f"{f}::test_{i}" for f in files for i in range(3)] + ["tests/app/test_a.py::test_p[x::y]"]
    collection += [f"tests/app/test_app_ui_http.py::test_more_{i}" for i in range(9)]  # the most tests: queued first
    sent_in_order = []

    class Worker:
        def __init__(self, name):
            self.gateway, self.shutting_down, self.sent = SimpleNamespace(id=name), False, []

        def send_runtest_some(self, indexes):
            self.sent.extend(indexes)
            sent_in_order.extend(collection[i].split("::")[0] for i in indexes)

        def shutdown(self):
            self.shutting_down = True

    workers = [Worker("gw0"), Worker("gw1")]
    for w in workers:
        sched.add_node(w)
        sched.add_node_collection(w, collection)
    sched.schedule()
    done = {w: 0 for w in workers}
    while any(done[w] < len(w.sent) for w in workers):  # each worker finishes its tests one by one
        for w in workers:
            if done[w] < len(w.sent):
                sched.mark_test_complete(w, w.sent[done[w]])
                done[w] += 1
    ran_on = {}
    for w in workers:
        for i in w.sent:
            ran_on.setdefault(collection[i].split("::")[0], set()).add(w.gateway.id)
    assert sorted(ran_on) == sorted(files) and sum(len(w.sent) for w in workers) == len(collection)
    assert all(len(names) == 1 for names in ran_on.values()), ran_on  # a file on one worker
    ray = ran_on["tests/finetune/test_kfold_ray.py"]
    assert ran_on["tests/serving/test_serving_score_ray.py"] == ray  # both Ray files on the same one
    first = next(w for w in workers if w.gateway.id in ray).sent[0]
    assert "_ray.py" in collection[first]  # the longest unit starts first
    # the files of the session servers on one worker, started beside the Ray unit; then the slow files with few
    # tests (conftest.FIRST_UNITS), before the files xdist would have queued first for their many tests
    assert ran_on["tests/app/test_app_api.py"] == ran_on["tests/app/test_app_ui_http.py"] != ray
    other = next(w for w in workers if w.gateway.id not in ray)
    assert collection[other.sent[0]].split("::")[0] in ("tests/app/test_app_api.py", "tests/app/test_app_ui_http.py")
    order = list(dict.fromkeys(sent_in_order))
    assert order.index("tests/app/test_app_fleet.py") < min(order.index(f) for f in files if "test_app" not in f
                                                            and "_ray" not in f)
    assert conftest.pytest_xdist_make_scheduler(config=SimpleNamespace(getvalue={"dist": "load"}.get), log=None) is None


def test_the_files_of_the_session_servers_are_one_xdist_unit(request):
    """tests/app/conftest.py starts its three servers together, once per worker that asks for one: the files
    that ask are one unit, so one worker starts them (issue 45 item 17). A file that starts asking is listed."""
    import ast

    conftest = request.config.pluginmanager.get_plugin(str(Path(__file__).with_name("conftest.py")))
    asked = {"servers", "server", "strict_server", "drain_server"}
    using = set()
    for path in Path(__file__).parent.glob("app/test_*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            is_test_or_fixture = isinstance(node, ast.FunctionDef) and (node.name.startswith("test_")
                                                                         or bool(node.decorator_list))
            if is_test_or_fixture and asked & {a.arg for a in node.args.args}:
                using.add(path.name)
    assert using == set(conftest.SERVER_FILES)
    units = {conftest.xdist_unit(f"tests/app/{name}::test_x") for name in using}
    assert units == {"app-servers"} and conftest.xdist_unit("tests/app/test_app_fleet.py::t") != "app-servers"
