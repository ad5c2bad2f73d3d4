"""Training throughput of finetune/train.py's loop against transformers' Trainer, same model/data/settings.

    python -m bench finetune [--rows 800] [--repeats 2] [--model minilm|path/to/discriminator]

The same pretrained weights, rows, batch size, learning rate, warmup, weight decay, clipping and epochs, fp32 on CPU.
The Trainer (the baseline) gets DataCollatorWithPadding and random batches; ours adds length-grouped batches (LLRD
off, so the optimiser is identical). Interleaved rounds, medians; samples/s and per CPU-second, macro-F1.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

# This file is named like the package it measures: put the repo root ahead of bench/ on the path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness as h
from finetune.data import load_labeled
from finetune.models import load_classifier, load_tokenizer, resolve_model
from finetune.train import TrainConfig, encode, fit, predict_proba

KO_HELP = h.KO_HELP


def split(y: np.ndarray, rows: int, eval_rows: int, seed: int):
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(y))
    tr, ev = train_test_split(idx, train_size=rows, test_size=eval_rows, stratify=y, random_state=seed)
    return tr, ev


def macro_f1(y, pred) -> float:
    from sklearn.metrics import f1_score

    return float(f1_score(y, pred, average="macro"))


def run_ours(args, resolved, tok, ids, y, tr, ev, labels) -> dict:
    torch.manual_seed(args.seed)
    model = load_classifier(args.model, resolved, labels)
    cfg = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, layer_decay=1.0, patience=0)
    cpu0 = time.process_time()
    hist = fit(model, tok, [ids[i] for i in tr], y[tr], [], np.array([], dtype=np.int64), cfg, args.seed,
               desc="ours")
    cpu = time.process_time() - cpu0
    proba = predict_proba(model, [ids[i] for i in ev], tok.pad_token_id, torch.device("cpu"))
    return {"seconds": hist.seconds, "cpu_seconds": cpu, "samples_per_second": len(tr) * args.epochs / hist.seconds,
            "samples_per_cpu_second": len(tr) * args.epochs / cpu, "macro_f1": macro_f1(y[ev], proba.argmax(1))}


def run_trainer(args, resolved, tok, ids, y, tr, ev, labels) -> dict:
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

    class Rows(torch.utils.data.Dataset):
        def __init__(self, rows):
            self.rows = rows

        def __len__(self):
            return len(self.rows)

        def __getitem__(self, i):
            r = self.rows[i]
            return {"input_ids": ids[r], "attention_mask": [1] * len(ids[r]), "labels": int(y[r])}

    torch.manual_seed(args.seed)
    model = load_classifier(args.model, resolved, labels)
    with tempfile.TemporaryDirectory() as tmp:
        targs = TrainingArguments(
            output_dir=tmp, per_device_train_batch_size=args.batch_size, per_device_eval_batch_size=64,
            learning_rate=args.lr, num_train_epochs=args.epochs, warmup_ratio=0.1, weight_decay=0.01,
            max_grad_norm=1.0, lr_scheduler_type="linear", save_strategy="no", report_to=[], logging_steps=50,
            use_cpu=True, seed=args.seed, dataloader_num_workers=0, disable_tqdm=False,
        )
        trainer = Trainer(model=model, args=targs, train_dataset=Rows(tr), data_collator=DataCollatorWithPadding(tok))
        t0, cpu0 = time.perf_counter(), time.process_time()
        trainer.train()
        seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        logits = trainer.predict(Rows(ev)).predictions
    return {"seconds": seconds, "cpu_seconds": cpu, "samples_per_second": len(tr) * args.epochs / seconds,
            "samples_per_cpu_second": len(tr) * args.epochs / cpu, "macro_f1": macro_f1(y[ev], logits.argmax(1))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="minilm")
    p.add_argument("--data", default=str(KO_HELP))
    p.add_argument("--rows", type=int, default=800, help="training rows")
    p.add_argument("--eval-rows", type=int, default=400)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=2, help="interleaved rounds per loop; medians are reported")
    p.add_argument("--output", type=Path, default=h.RESULTS / "finetune.json")
    args = p.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)

    data = load_labeled(args.data, folds=1)
    resolved = resolve_model(args.model)
    tok = load_tokenizer(args.model, resolved, args.max_length)
    ids = encode(tok, data.texts, args.max_length)
    tr, ev = split(data.y, args.rows, args.eval_rows, args.seed)
    lengths = np.array([len(ids[i]) for i in tr])
    # Interleaved rounds (Trainer, ours, Trainer, ours, ...) so a load change on a shared machine hits
    # both; medians over rounds. CPU seconds are reported too: they move less with other processes.
    runs = {"trainer": [], "ours": []}
    for _ in range(args.repeats):
        runs["trainer"].append(run_trainer(args, resolved, tok, ids, data.y, tr, ev, data.labels))
        runs["ours"].append(run_ours(args, resolved, tok, ids, data.y, tr, ev, data.labels))
    results = {name: {key: float(np.median([r[key] for r in rs])) for key in rs[0]} for name, rs in runs.items()}
    ratio = results["ours"]["samples_per_second"] / results["trainer"]["samples_per_second"]
    cpu_ratio = results["ours"]["samples_per_cpu_second"] / results["trainer"]["samples_per_cpu_second"]

    print(f"\nfine-tuning throughput: {args.model} on {Path(args.data).name}, {len(tr)} rows x {args.epochs} epoch, "
          f"batch {args.batch_size}, tokens/row median {int(np.median(lengths))} (p90 {int(np.percentile(lengths, 90))}),"
          f" median of {args.repeats} interleaved rounds")
    print(f"{'loop':<22} {'samples/s':>10} {'samples/CPU-s':>14} {'seconds':>8} {'macro-F1':>9}")
    for name, label in (("trainer", "transformers Trainer"), ("ours", "finetune.train.fit")):
        r = results[name]
        print(f"{label:<22} {r['samples_per_second']:>10.2f} {r['samples_per_cpu_second']:>14.2f} {r['seconds']:>8.1f} "
              f"{r['macro_f1']:>9.4f}")
    print(f"ratio ours/Trainer: {ratio:.2f}x samples/s ({cpu_ratio:.2f}x per CPU-second), macro-F1 "
          f"{results['ours']['macro_f1'] - results['trainer']['macro_f1']:+.4f}")
    h.write_record(args.output, {"args": vars(args), "results": results, "rounds": runs,
                                 "ratio_samples_per_second": ratio, "ratio_samples_per_cpu_second": cpu_ratio,
                                 "median_tokens_per_row": float(np.median(lengths)), "torch": torch.__version__})


if __name__ == "__main__":
    main()
