"""CPU threads follow the machine's limits: affinity, cgroup quota (v1 and v2) and the work already on the cores.
Fake /proc and /sys trees stand in for machines this test does not run on; no timings."""

from __future__ import annotations

from pathlib import Path

import pytest

from textdata import cpu_limits
from textdata.cpu_limits import CpuLimits, cgroup_quota, load_average, plan_threads, read_limits


def fake_root(tmp_path: Path, cgroup: str, files: dict[str, str], loadavg: str = "0.10 0.20 0.30 1/100 42") -> Path:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text(cgroup)
    (tmp_path / "proc/loadavg").write_text(loadavg)
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def test_cgroup_v2_quota_is_the_tightest_on_the_path(tmp_path):
    root = fake_root(tmp_path, "0::/user.slice/job\n", {
        "sys/fs/cgroup/user.slice/job/cpu.max": "max 100000\n",  # the job's own: no limit
        "sys/fs/cgroup/user.slice/cpu.max": "150000 100000\n",  # its parent: 1.5 cores, binding the job
        "sys/fs/cgroup/cpu.max": "max 100000\n"})
    assert cgroup_quota(root) == 1.5
    limits = read_limits(root, affinity=4)
    assert limits.quota == 1.5 and limits.usable == 1 and limits.quota_bound


def test_cgroup_v1_quota_read_at_the_container_s_mount_root(tmp_path):
    # Inside a container, /proc/self/cgroup names the host's path, which does not exist under the mount.
    root = fake_root(tmp_path, "4:cpu,cpuacct:/docker/abc123\n2:memory:/docker/abc123\n", {
        "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "300000\n",
        "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n"})
    assert cgroup_quota(root) == 3.0
    assert read_limits(root, affinity=8).usable == 3


def test_no_quota_and_unreadable_files_leave_affinity(tmp_path):
    root = fake_root(tmp_path, "1:cpu:/\n", {"sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n",
                                              "sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n"})
    assert cgroup_quota(root) is None
    assert cgroup_quota(tmp_path / "nowhere") is None and load_average(tmp_path / "nowhere") == 0.0
    limits = read_limits(root, affinity=6)
    assert limits.usable == 6 and not limits.quota_bound


@pytest.mark.parametrize(("machine", "affinity", "quota", "load", "threads", "spinning"), [
    (2, 2, None, 0.2, 2, True),  # idle: a thread per core, spinning on
    (2, 2, None, 1.1, 1, False),  # one CPU-bound process beside us: one thread, no spinning
    (2, 2, None, 9.0, 1, False),  # far more work than cores: still one thread
    (8, 2, None, 4.0, 1, False),  # pinned to 2 of 8 CPUs: our share of the load is 1
    (8, 8, 4.0, 0.0, 4, False),  # quota below affinity: spinning would burn the quota
    (16, 16, None, 5.6, 10, False),
])
def test_plan_follows_cores_quota_and_load(machine, affinity, quota, load, threads, spinning):
    plan = plan_threads(CpuLimits(machine=machine, affinity=affinity, quota=quota, load=load))
    assert (plan.threads, plan.spinning) == (threads, spinning)
    assert f"{threads} of" in plan.why


def test_a_requested_count_wins_and_keeps_the_spinning_rule():
    busy = CpuLimits(machine=2, affinity=2, quota=None, load=3.0)
    plan = plan_threads(busy, requested=2)
    assert (plan.threads, plan.spinning) == (2, False) and plan.why == "requested 2"


def test_a_lagging_load_average_is_checked_against_the_cpus_busy_now(tmp_path, monkeypatch):
    """Right after a job of one's own the 1-minute load average still reads ~2 on an idle 2-core machine: the
    plan follows /proc/stat's last moment there, and a CPU-bound neighbour (busy in both) still costs a thread."""
    root = fake_root(tmp_path, "0::/\n", {}, loadavg="2.05 1.60 0.90 1/100 42")
    stat = root / "proc/stat"
    # all, of which idle + iowait: fields user nice system idle iowait irq softirq steal
    stat.write_text("cpu  1000 0 200 8000 100 0 0 0\ncpu0 ...\n")

    def tick(busy_jiffies: int, idle_jiffies: int):
        def sleep(_seconds):
            stat.write_text(f"cpu  {1000 + busy_jiffies} 0 200 {8000 + idle_jiffies} 100 0 0 0\n")
        return sleep

    monkeypatch.setattr(cpu_limits.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(cpu_limits.time, "sleep", tick(1, 19))  # 5% busy of 2 CPUs: idle
    idle = read_limits(root, affinity=2)
    assert idle.busy_now == pytest.approx(0.1) and idle.load == 2.05
    assert (plan_threads(idle).threads, plan_threads(idle).spinning) == (2, True)
    assert "0.10 busy now" in plan_threads(idle).why
    stat.write_text("cpu  1000 0 200 8000 100 0 0 0\n")
    monkeypatch.setattr(cpu_limits.time, "sleep", tick(11, 9))  # 55%: one core kept busy by someone else
    shared = read_limits(root, affinity=2)
    assert shared.busy_now == pytest.approx(1.1)
    assert (plan_threads(shared).threads, plan_threads(shared).spinning) == (1, False)
    stat.unlink()  # no /proc/stat (or one that does not move): the load average alone, as before
    assert read_limits(root, affinity=2).busy_now is None and plan_threads(read_limits(root, affinity=2)).threads == 1


@pytest.mark.parametrize("load", [0.0, 1.1, 9.0])
def test_batch_scoring_plans_the_same_threads_with_spinning_off(load):
    """Spin-waiting buys latency, which batch scoring does not need: off even on idle cores, threads unchanged."""
    limits = CpuLimits(machine=4, affinity=4, quota=None, load=load)
    interactive, batch = plan_threads(limits), plan_threads(limits, batch=True)
    assert batch.threads == interactive.threads and not batch.spinning
    assert interactive.spinning == (load < 0.5)  # the idle case is where the two differ
    assert not plan_threads(limits, requested=3, batch=True).spinning


def test_serving_score_hands_the_batch_plan_to_the_onnx_session(tmp_path, monkeypatch):
    from serving import scoring
    from serving.onnx_runner import OrtRunner

    root = fake_root(tmp_path / "idle", "0::/\n", {}, loadavg="0.00 0 0 1/1 1")
    monkeypatch.setattr(cpu_limits, "ROOT", root)
    monkeypatch.setattr(cpu_limits, "_affinity", lambda: 2)
    monkeypatch.setattr(cpu_limits.os, "cpu_count", lambda: 2)
    assert plan_threads().spinning  # idle: the API and the UI keep spinning
    seen = {}
    monkeypatch.setattr(scoring.Classifier, "load", classmethod(lambda cls, *a, **kw: seen.update(kw)))
    scoring.load_model(scoring.ScoreConfig(model=tmp_path, input=tmp_path / "in.csv", output=tmp_path / "o.csv"), None)
    plan = seen["threads"]
    assert (plan.threads, plan.spinning) == (2, False) and "batch" in plan.why
    runner = OrtRunner(identity_model(tmp_path), "cpu", plan, 16)  # the engine passes it through to the session
    opts = runner.session.get_session_options()
    assert opts.intra_op_num_threads == 2
    assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def identity_model(tmp_path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["input_ids"], ["logits"])], "g",
                              [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [None, None])],
                              [helper.make_tensor_value_info("logits", TensorProto.INT64, [None, None])])
    model_file = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(model_file))
    return model_file


def test_onnx_runtime_session_gets_the_plan(tmp_path, monkeypatch):
    from serving.onnx_runner import OrtRunner, usable_cores

    model_file = identity_model(tmp_path)
    for load, threads, spin in (("0.00", 3, "1"), ("2.40", 1, "0")):
        root = fake_root(tmp_path / load, "0::/\n", {"sys/fs/cgroup/cpu.max": "300000 100000\n"},
                         loadavg=f"{load} 0 0 1/1 1")
        monkeypatch.setattr(cpu_limits, "ROOT", root)
        monkeypatch.setattr(cpu_limits, "_affinity", lambda: 3)
        monkeypatch.setattr(cpu_limits.os, "cpu_count", lambda: 3)
        assert usable_cores() == 3
        runner = OrtRunner(model_file, "cpu", None, 16)
        opts = runner.session.get_session_options()
        assert opts.intra_op_num_threads == threads
        assert opts.get_session_config_entry("session.intra_op.allow_spinning") == spin
        assert runner.describe()["cpu_threads"]["threads"] == threads
    assert OrtRunner(model_file, "cpu", 2, 16).session.get_session_options().intra_op_num_threads == 2


@pytest.fixture
def restore_torch_threads():
    import torch

    before = torch.get_num_threads()
    yield torch
    torch.set_num_threads(before)


def test_kfold_and_pretraining_set_torch_threads_from_the_plan(monkeypatch, restore_torch_threads):
    from types import SimpleNamespace

    import pretraining.cpu_limits
    from finetune import kfold
    from pretraining import train

    torch = restore_torch_threads
    cpu = SimpleNamespace(device=torch.device("cpu"))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    for module in (cpu_limits, pretraining.cpu_limits):
        monkeypatch.setattr(module, "read_limits", lambda: CpuLimits(machine=4, affinity=3, quota=None, load=0.0))
    kfold.cpu_threads(cpu)
    assert torch.get_num_threads() == 3
    torch.set_num_threads(1)
    train.cpu_threads(torch.device("cpu"))
    assert torch.get_num_threads() == 3
    train.cpu_threads(torch.device("cpu"), processes=2)  # a CPU launch of two processes shares the cores
    assert torch.get_num_threads() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's count wins: left alone
    torch.set_num_threads(1)
    kfold.cpu_threads(cpu)
    train.cpu_threads(torch.device("cpu"))
    assert torch.get_num_threads() == 1
