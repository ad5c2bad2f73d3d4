"""The event loop while a retrain starts on a large table (issue 40, L): does a request wait for it?

    python -m bench retrain_loop [--rows 1000000]

Writes a `--train-data` CSV of --rows rows, then starts a retrain as `POST /v1/train` does (`Jobs.start`: the
table built, checked, written and hashed; the child's spawn raises, nothing trains) beside a probe on the same
loop waking every 5 ms: its longest delay is how long a request would have waited. Against the baseline of the
same steps called on the loop (the code before the change), in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]
from bench import harness as h

WORDS = {"dream": "꿈에서 봤다", "error": "에러 발생했다", "memo": "메모 기록"}


def table(path: Path, rows: int) -> Path:
    if path.exists() and sum(1 for _ in path.open(encoding="utf-8")) == rows + 1:
        return path
    labels = list(WORDS)
    with path.open("w", encoding="utf-8") as f:
        f.write("text,label\n")
        for i in range(rows):
            label = labels[i % 3]
            f.write(f"{WORDS[label]} {i},{label}\n")  # every text distinct: none is dropped as a duplicate
    return path


async def probed(work) -> dict:
    """Run `work()` (a coroutine) beside a probe waking every 5 ms: the longest delay and the total seconds."""
    delays, done = [], asyncio.Event()

    async def probe():
        while not done.is_set():
            t0 = time.perf_counter()
            await asyncio.sleep(0.005)
            delays.append(time.perf_counter() - t0 - 0.005)

    task = asyncio.create_task(probe())
    await asyncio.sleep(0.05)
    t0 = time.perf_counter()
    try:
        await work()
    except RuntimeError as e:
        if "no child" not in str(e):
            raise
    seconds = time.perf_counter() - t0
    done.set()
    await task
    return {"seconds": round(seconds, 2), "loop_max_delay_s": round(max(delays), 3),
            "probe_wakes": len(delays)}


def jobs_for(work: Path, data: Path):
    import app.versions.jobs as jobs_module
    from app.config import Config

    def no_child(*a, **k):
        raise RuntimeError("no child in this benchmark")

    jobs_module.child_watch.spawn = no_child
    models = work / "models"
    models.mkdir(parents=True, exist_ok=True)
    registry = SimpleNamespace(root=models, active=lambda: None, staging=lambda job_id: models / f".staging-{job_id}")
    cfg = Config(model="m", data_dir=work / "data", train_model="encoder-alias", train_data=data)
    return jobs_module, jobs_module.Jobs(cfg, registry, None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-retrain-loop"))
    ap.add_argument("--output", type=Path, default=h.RESULTS / "retrain_loop.json")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    data = table(args.work / "train.csv", args.rows)
    jobs_module, jobs = jobs_for(args.work, data)

    async def on_loop():  # the steps Jobs.start runs in threads, called on the loop (the code before)
        from app.label_kinds import SINGLE
        from app.versions.trainset import eval_share

        share = eval_share(jobs.registry.root, jobs.cfg.eval_share)
        ts = jobs_module.build(Path(jobs.cfg.data_dir) / "label", data, share, SINGLE)
        jobs_module.check(ts, 5, SINGLE)
        jobs._write_job(f"onloop-{time.time_ns()}", jobs.settings({"folds": 5}), "encoder-alias", ts,
                        SINGLE)

    before = asyncio.run(probed(on_loop))
    after = asyncio.run(probed(lambda: jobs.start({"folds": 5})))
    print(f"loop's longest delay: on the loop {before['loop_max_delay_s']} s, Jobs.start {after['loop_max_delay_s']} s "
          f"({h.ratio(after['loop_max_delay_s'], before['loop_max_delay_s'])}x; start {after['seconds']} s)")
    h.write_record(args.output, {"rows": args.rows, "on_the_loop": before, "off_the_loop": after,
                                 "target": "the loop's longest delay well under a second while a retrain starts"})


if __name__ == "__main__":
    main()
