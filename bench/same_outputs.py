"""Same outputs before and after a refactor: the k-fold run's files and figures, the export, a scored file and
the API's answers, made by the code at a git ref and by this tree, compared byte for byte.

    python bench/same_outputs.py                    # main against this tree
    python bench/same_outputs.py --before 3e1a92e --work /tmp/same-outputs
    python bench/same_outputs.py --multi-label --work /tmp/same-outputs-ml --output bench/results/same_outputs_ml.json

Both trees run the same commands in folders of the same shape, on a tiny random ELECTRA and 60 toy rows
(tests/conftest.py builds both), one thread (OMP_NUM_THREADS=1), so paths and numbers can only differ by the
code: `finetune/kfold.py --folds 2 --epochs 2 --final --blend on`, `python -m serving.export --quantize`,
`python -m serving.score`, then `python -m app` answering /v1/classify, /, /predict (a text per request, see
REQUESTS), /v1/labels and /v1/model.
The export serves INT8 whatever its measured speed (`--min-int8-speedup 0`), so the load cannot change which
recipe is kept. Timings are the one thing allowed to differ: the JSON keys in TIMED are blanked in both before comparing
(listed in the output), and a file in RETIRED that only the code before wrote is reported as retired, with why.
Prints one line per file, writes bench/results/same_outputs.json and exits 1 on a difference.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMED = {"wall_seconds", "train_seconds", "samples_per_second", "seconds", "elapsed_s", "created", "updated",
         "rows_per_second", "speed", "speedup", "ms", "fp32_ms", "int8_ms", "timing", "speed_check",
         "quantize_seconds", "export_seconds",
         "call_overhead_tokens",  # the server's pass cost, measured at start-up
         "predict_cpu_seconds",  # a fold's prediction CPU time (process_time), as load-dependent as its wall time
         "why", "model_file_why"}  # the export's reason for its CPU default quotes the speed it measured
# Files a change stopped writing on purpose, each with why: printed as "retired", not counted as a difference.
RETIRED = {"onnx/labels.json": "issue 30: export wrote it and nothing read it; the labels are config.json's id2label"}
# One text per request: a server groups the texts of a request by the pass cost it measures at start-up, and
# dynamic INT8 quantises activations per pass, so a multi-text request's numbers would follow the load.
TEXTS = ["꿈에서 봤다 오늘", "오류 발생했다 error", "메모 약속 내일 회의", "일기 좋은 날씨"]
REQUESTS = [*(("POST", "/v1/classify", {"texts": [t]}) for t in TEXTS),
            ("POST", "/v1/classify", {"text": TEXTS[0], "top_k": 2}), ("POST", "/", {"inputs": TEXTS[2]}),
            ("POST", "/predict", {"inputs": TEXTS[1]}), ("GET", "/v1/labels", None), ("GET", "/v1/model", None)]


def tree_at(ref: str, dest: Path) -> Path:
    """The files of `ref` (git archive), without touching this repository's worktrees."""
    data = subprocess.run(["git", "archive", ref], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def build_inputs(work: Path, multi_label: bool = False) -> tuple[Path, Path]:
    sys.path.insert(0, str(ROOT / "tests"))
    import torch
    from conftest import build_tokenizer, make_toy_rows, tiny_config
    from multilabel_fixture import make_multilabel_rows
    from transformers import ElectraForPreTraining

    model, data = work / "tiny-electra", work / "notes.csv"
    if not (model / "config.json").exists():
        tok = build_tokenizer(model)
        torch.manual_seed(0)
        ElectraForPreTraining(tiny_config(len(tok))).save_pretrained(model)
    rows = make_multilabel_rows(90, seed=0) if multi_label else make_toy_rows(n_per_class=20, seed=0)
    rows.to_csv(data, index=False)
    return model, data


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ask_app(code: Path, cwd: Path, env: dict) -> dict:
    import httpx

    port = free_port()
    url, answers = f"http://127.0.0.1:{port}", {}
    with open(cwd / "app.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "app", "--model", "runs/onnx", "--port", str(port), "--no-ui",
                                 "--data-dir", "app-data"], cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 900  # a shared, loaded machine: the app once took over 300 s to start
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        for method, path, body in REQUESTS:
            r = httpx.request(method, url + path, json=body, timeout=60)
            answers[f"{method} {path} {json.dumps(body, ensure_ascii=False)}"] = [r.status_code, r.json()]
    finally:
        proc.terminate()
        proc.wait(timeout=300)  # a loaded machine once took over 30 s to drain
    return answers


def run_tree(code: Path, cwd: Path, model: Path, data: Path, keep: Path, multi_label: bool = False) -> None:
    """The pipeline with `code` on PYTHONPATH in `cwd` (the same folder for both trees, so the paths recorded in
    the outputs match), its runs/ then moved to `keep`."""
    for folder in (cwd, keep):
        shutil.rmtree(folder, ignore_errors=True)
    cwd.mkdir(parents=True)
    shutil.copy(data, cwd / "notes.csv")
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "GRADIO_ANALYTICS_ENABLED": "False", "MPLBACKEND": "Agg"}
    env.pop("ELECTRA_API_KEY", None)
    steps = [[str(code / "finetune" / "kfold.py"), "--model", str(model), "--data", "notes.csv", "--folds", "2",
              "--epochs", "2", "--batch-size", "8", "--final", "--blend", "on", "--output", "runs/kfold",
              *(["--multi-label"] if multi_label else [])],
             # INT8 served whatever its measured speed: the recipe is then chosen by the code, not the load
             ["-m", "serving.export", "--model", "runs/kfold/model", "--output", "runs/onnx", "--quantize",
              "--eval-csv", "notes.csv", "--min-int8-speedup", "0"],
             ["-m", "serving.score", "--model", "runs/onnx", "--input", "notes.csv", "--output", "runs/scored.csv"]]
    for step in steps:
        proc = subprocess.run([sys.executable, *step], cwd=cwd, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(step[:3])} failed in {code}:\n{proc.stderr[-3000:]}")
    answers = ask_app(code, cwd, env)
    (cwd / "runs" / "api.json").write_text(json.dumps(answers, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    shutil.move(cwd / "runs", keep)


def blank_timings(value, masked: set):
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in TIMED:
                masked.add(k)
                out[k] = None
            else:
                out[k] = blank_timings(v, masked)
        return out
    if isinstance(value, list):
        return [blank_timings(v, masked) for v in value]
    return value


def comparable(path: Path, masked: set) -> bytes:
    data = path.read_bytes()
    if path.suffix == ".json":
        return json.dumps(blank_timings(json.loads(data), masked), sort_keys=False).encode()
    return data


def compare(before: Path, after: Path) -> dict:
    masked: set = set()
    files = sorted({p.relative_to(before).as_posix() for p in before.rglob("*") if p.is_file()}
                   | {p.relative_to(after).as_posix() for p in after.rglob("*") if p.is_file()})
    result = {}
    for name in files:
        a, b = before / name, after / name
        if name in RETIRED and a.exists() and not b.exists():
            result[name] = "retired"
        elif not a.exists() or not b.exists():
            result[name] = "only after" if b.exists() else "only before"
        else:
            same = comparable(a, masked) == comparable(b, masked)
            result[name] = "same" if same else "DIFFERENT"
        print(f"{result[name]:12s} {name}")
    retired = {k: RETIRED[k] for k, v in result.items() if v == "retired"}
    return {"files": result, "timing_keys_blanked": sorted(masked), "retired": retired}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", default="main", help="git ref of the code before")
    ap.add_argument("--work", type=Path, default=Path("/tmp/same-outputs"))
    ap.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "same_outputs.json")
    ap.add_argument("--compare-only", action="store_true", help="compare the outputs already in --work")
    ap.add_argument("--multi-label", action="store_true",
                    help="the multi-label pipeline (k-fold --multi-label on 90 rows of 0-2 labels each)")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    if not args.compare_only:
        model, data = build_inputs(args.work, args.multi_label)
        code_before = args.work / "code-before"
        if not code_before.exists():
            tree_at(args.before, code_before)
        run_tree(code_before, args.work / "run", model, data, args.work / "before", args.multi_label)
        run_tree(ROOT, args.work / "run", model, data, args.work / "after", args.multi_label)
    got = compare(args.work / "before", args.work / "after")
    git = {"cwd": ROOT, "capture_output": True, "text": True}
    head = subprocess.run(["git", "rev-parse", "HEAD"], check=True, **git).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain"], check=True, **git).stdout)
    got.update(before=args.before, after=head + (" + uncommitted changes" if dirty else ""),
               date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), load_average=os.getloadavg(),
               sha256_scored=hashlib.sha256((args.work / "after" / "scored.csv").read_bytes()).hexdigest())
    args.output.write_text(json.dumps(got, indent=2) + "\n", encoding="utf-8")
    different = [k for k, v in got["files"].items() if v not in ("same", "retired")]
    retired = f", {len(got['retired'])} retired" if got["retired"] else ""
    print(f"{len(got['files']) - len(different) - len(got['retired'])} of {len(got['files'])} files the same{retired}; "
          f"wrote {args.output}")
    return 1 if different else 0


if __name__ == "__main__":
    sys.exit(main())
