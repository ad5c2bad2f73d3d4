"""GPU paths against their plain versions and their peers, all measured in the same run.

    python bench/gpu.py                 # CUDA: full shapes; CPU: small shapes, a smoke run (bench/gpu_wheels.sh)
    python bench/gpu.py --device cpu --repeats 1

Each stage: fast (what the code does now on this device), plain (the fast parts off) and the field's peer.
Pretraining tokens/s (compiled step, device-side statistics, fused AdamW, bf16; peer: transformers' MLM + ELECTRA
heads composed, bench/pretraining.py; CUDA ELECTRA-Small at batch 128 and 512). Fine-tuning samples/s and
macro-F1 on ko-help (static shapes; peer: transformers Trainer; CUDA: KcELECTRA-base's shape). Serving one
short text p50 and rows/s (torch provider's bf16 + CUDA graphs; plain fp32 eager; peer: pipeline), with parity.
Rounds interleaved, medians. Without CUDA it says so: the GPU columns are not measured, never filled in.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import harness as h

KO_HELP = h.KO_HELP
SHORT_TEXT = "파일을 저장할 때 오류가 발생합니다"


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def rotated(contenders: dict, r: int) -> list:
    """Round r starts with a different contender, so none always runs right after the same one."""
    items = list(contenders.items())
    return items[r % len(items):] + items[:r % len(items)]


def median(xs):
    return float(statistics.median(xs))


# ---------------------------------------------------------------- pretraining
def pretraining(device, args) -> list[dict]:
    from transformers import ElectraConfig

    from bench import pretraining as bp
    from pretraining.config import PRESETS, TrainConfig
    from pretraining.model import ElectraPretrainer
    from pretraining.train import compile_model

    cuda = device.type == "cuda"
    preset = "small" if cuda else "tiny"
    cfg = TrainConfig.from_dict({**PRESETS[preset], "corpus": ["-"], "output": "-", "compile": args.compile})
    dc = ElectraConfig(vocab_size=30522, embedding_size=cfg.embedding_size, hidden_size=cfg.hidden_size,
                       num_hidden_layers=cfg.num_hidden_layers, num_attention_heads=cfg.num_attention_heads,
                       intermediate_size=cfg.intermediate_size, max_position_embeddings=cfg.max_position_embeddings)
    dtype = torch.bfloat16 if cuda else torch.float32
    rows = []
    for batch in ([128, 512] if cuda else [8]):
        ids, mask = (t.to(device) for t in bp.make_batch(batch, cfg.seq_len, dc.vocab_size))

        def ours(fast: bool, ids=ids, mask=mask):
            torch.manual_seed(0)
            model = ElectraPretrainer(dc, generator_ratio=cfg.generator_ratio, mask_token_id=bp.MASK,
                                      special_token_ids=[bp.PAD, bp.CLS, bp.SEP, bp.MASK]).to(device)
            if fast:
                def probe():
                    with torch.autocast(device.type, dtype=dtype, enabled=cuda):
                        model(ids, mask).loss.backward()
                    model.zero_grad(set_to_none=True)

                compile_model(model, cfg, device, probe)
            return model, torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fast and cuda)

        def step_fn(model, opt, fast, ids=ids, mask=mask):
            return bp.step_fn(model, opt, ids, mask, lambda: torch.autocast(device.type, dtype=dtype, enabled=cuda),
                              {}, fast)

        contenders = {}
        for name, fast in (("fast", True), ("plain", False)):
            model, opt = ours(fast)
            contenders[name] = step_fn(model, opt, fast)
        torch.manual_seed(0)
        comp = bp.Composition(dc, cfg.generator_ratio).to(device)
        contenders["peer"] = step_fn(comp, torch.optim.AdamW(comp.parameters(), lr=1e-4), False)
        steps = args.steps or (20 if cuda else 2)
        for warm in contenders.values():  # compile, allocator, optimizer state
            for _ in range(3 if cuda else 1):
                warm()
        sync(device)
        times = {k: [] for k in contenders}
        for r in range(args.repeats):
            for name, run_step in rotated(contenders, r):
                t = time.perf_counter()
                for _ in range(steps):
                    run_step()
                sync(device)
                times[name].append(batch * cfg.seq_len * steps / (time.perf_counter() - t))
        rows.append({"stage": "pretraining", "measure": f"ELECTRA-{preset} step, batch {batch}x{cfg.seq_len}, tokens/s",
                     **{k: median(v) for k, v in times.items()}, "rounds": times})
        del contenders, comp
    return rows


# ---------------------------------------------------------------- fine-tuning
def finetuning(device, args, work: Path):
    from sklearn.metrics import f1_score
    from sklearn.model_selection import train_test_split
    from transformers import (
        DataCollatorWithPadding,
        ElectraConfig,
        ElectraForSequenceClassification,
        Trainer,
        TrainingArguments,
    )

    from finetune.data import load_labeled
    from finetune.train import TrainConfig, encode, fit, predict_proba

    cuda = device.type == "cuda"
    from bench.serving import build_tokenizer

    tok = build_tokenizer(work)
    data = load_labeled(args.ko_help, folds=1)
    ids = encode(tok, data.texts, 128)
    n_train, n_eval = (4000, 1000) if cuda else (2000, 800)
    tr, ev = train_test_split(np.arange(len(data.y)), train_size=n_train, test_size=n_eval, stratify=data.y,
                              random_state=0)
    base = {"embedding_size": 768, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
            "intermediate_size": 3072}
    shape = base if cuda else h.SHAPES["mini"]
    labels = data.labels
    config = ElectraConfig(vocab_size=len(tok), max_position_embeddings=512, num_labels=len(labels),
                           id2label=dict(enumerate(labels)), label2id={v: i for i, v in enumerate(labels)}, **shape)
    init = work / "ft-init"
    torch.manual_seed(0)
    ElectraForSequenceClassification(config).save_pretrained(init)
    f1 = lambda pred: float(f1_score(data.y[ev], pred, average="macro"))
    lr = 1e-4 if cuda else 1e-3  # the small CPU shape learns nothing in two epochs at 1e-4
    recipe = {"epochs": args.epochs, "batch_size": 32, "lr": lr, "layer_decay": 1.0, "patience": 0}

    def ours(static: str):
        model = ElectraForSequenceClassification.from_pretrained(init)
        acc = _accelerator(device)
        hist = fit(model, tok, [ids[i] for i in tr], data.y[tr], [], np.array([], dtype=np.int64),
                   TrainConfig(**recipe, static_shapes=static, compile=args.ft_compile), 0, acc, desc=static)
        proba = predict_proba(model, [ids[i] for i in ev], tok.pad_token_id, device)
        return {"samples_per_s": len(tr) * args.epochs / hist.seconds, "macro_f1": f1(proba.argmax(1))}, model

    def peer():
        rows = [{"input_ids": ids[i], "labels": int(data.y[i])} for i in tr]
        model = ElectraForSequenceClassification.from_pretrained(init)
        with tempfile.TemporaryDirectory() as tmp:
            targs = TrainingArguments(output_dir=tmp, per_device_train_batch_size=32, learning_rate=lr,
                                      num_train_epochs=args.epochs, warmup_ratio=0.1, weight_decay=0.01,
                                      max_grad_norm=1.0, save_strategy="no", report_to=[], use_cpu=not cuda,
                                      bf16=cuda, seed=0, disable_tqdm=True, logging_strategy="no")
            trainer = Trainer(model=model, args=targs, train_dataset=rows, data_collator=DataCollatorWithPadding(tok))
            sync(device)
            t = time.perf_counter()
            trainer.train()
            sync(device)
            seconds = time.perf_counter() - t
            pred = trainer.predict([{"input_ids": ids[i], "labels": int(data.y[i])} for i in ev]).predictions
        return {"samples_per_s": len(tr) * args.epochs / seconds, "macro_f1": f1(pred.argmax(1))}

    rounds = {"fast": [], "plain": [], "peer": []}
    trained = []
    contenders = {"fast": lambda: ours("auto"), "plain": lambda: ours("off"), "peer": lambda: (peer(), None)}
    ours("off")  # warm-up: the first fit in a process also pays for thread pools and the allocator
    for r in range(args.repeats):
        for name, run in rotated(contenders, r):
            result, model = run()
            rounds[name].append(result)
            trained = [model] if name == "fast" else trained
    trained = trained[0]
    folder = work / "ft-trained"
    trained.save_pretrained(folder)
    tok.save_pretrained(folder)
    shape_name = "KcELECTRA-base shape (hidden 768, 12 layers)" if cuda else "hidden 64, 2 layers"
    row = lambda key, what: {"stage": "fine-tuning", "measure": f"{shape_name}, ko-help {n_train} rows, {what}",
                             **{k: median([r[key] for r in v]) for k, v in rounds.items()}, "rounds": rounds}
    return [row("samples_per_s", "samples/s"), row("macro_f1", f"macro-F1 on {n_eval} held-out rows")], folder


def _accelerator(device):
    from accelerate import Accelerator

    return Accelerator(cpu=device.type == "cpu")


# ---------------------------------------------------------------- serving
def serving(device, args, folder: Path) -> list[dict]:
    from sklearn.metrics import f1_score
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    from serving.engine import Classifier

    df = pd.read_csv(args.ko_help, dtype=str, keep_default_na=False)
    texts = df["text"].tolist()
    fast = Classifier.load(folder, provider="torch", parity_texts=texts[:512])
    plain = Classifier.load(folder, provider="torch", precision="fp32", cuda_graphs=False)
    pipe = pipeline("text-classification", model=AutoModelForSequenceClassification.from_pretrained(folder),
                    tokenizer=AutoTokenizer.from_pretrained(folder), device=0 if device.type == "cuda" else -1)
    contenders = {"fast": lambda xs: fast.predict(xs), "plain": lambda xs: plain.predict(xs),
                  "peer": lambda xs: pipe(xs, batch_size=64, truncation=True)}
    calls = args.latency_calls or (200 if device.type == "cuda" else 30)
    p50, rows_s = {k: [] for k in contenders}, {k: [] for k in contenders}
    for r in range(args.repeats):
        for name, fn in rotated(contenders, r):
            h.timed(lambda fn=fn: fn([SHORT_TEXT]), 10)
            p50[name].append(h.median_ms(h.timed(lambda fn=fn: fn([SHORT_TEXT]), calls)))
            rows_s[name].append(len(texts) / h.timed(lambda fn=fn: fn(texts), 1)[0])
    ref, got = plain.predict_logits(texts).argmax(1), fast.predict_logits(texts).argmax(1)
    y = df["label"].map({v: i for i, v in enumerate(plain.labels)}).to_numpy()
    f1 = lambda pred: 100 * float(f1_score(y, pred, average="macro"))
    info = fast.info()
    parity = {"precision": info["precision"], "cuda_graphs": info["cuda_graphs"], "load_check": info["precision_check"],
              "argmax_agreement_all_rows": float((ref == got).mean()), "macro_f1_change_points": f1(got) - f1(ref)}
    return [
        {"stage": "serving", "measure": "one short text, p50 ms (lower is better)",
         **{k: median(v) for k, v in p50.items()}, "rounds": p50, "lower_is_better": True},
        {"stage": "serving", "measure": f"all {len(texts)} ko-help rows, rows/s", **{k: median(v) for k, v in rows_s.items()},
         "rounds": rows_s},
    ], parity


def print_table(rows: list[dict], device_name: str, cuda: bool) -> None:
    print(f"\nGPU paths on {device_name}: fast (now) vs plain (fast parts off) vs peer, medians, same run")
    if not cuda:
        print("no CUDA device: GPU columns not measured (CPU smoke run at small shapes below)")
    print("| stage | measure | fast | plain | peer | fast/plain | fast/peer |\n|---|---|---|---|---|---|---|")
    for r in rows:
        inv = r.get("lower_is_better")

        def ratio(other, r=r, inv=inv):
            return (r[other] / r["fast"] if inv else r["fast"] / r[other]) if r[other] else float("nan")

        f1_row = "macro-F1" in r["measure"]
        cells = " | ".join(f"{r[k]:.4f}" if f1_row else f"{r[k]:,.2f}" for k in ("fast", "plain", "peer"))
        ratios = "- | -" if f1_row else f"{ratio('plain'):.2f}x | {ratio('peer'):.2f}x"
        print(f"| {r['stage']} | {r['measure']} | {cells} | {ratios} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=None, help="pretraining steps per round (default 20 CUDA, 2 CPU)")
    ap.add_argument("--epochs", type=int, default=3, help="fine-tuning epochs per round")
    ap.add_argument("--latency-calls", type=int, default=None)
    ap.add_argument("--compile", choices=["auto", "on", "off", "graphs"], default="auto",
                    help="pretraining fast path (graphs: compiled and replayed as CUDA graphs)")
    ap.add_argument("--ft-compile", choices=["auto", "on", "off", "graphs"], default="off",
                    help="fine-tuning fast path (graphs: compiled and replayed as CUDA graphs)")
    ap.add_argument("--stages", default="pretraining,finetuning,serving")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench-gpu")
    ap.add_argument("--output", type=Path, default=None)
    ap.add_argument("--ko-help", type=Path, default=KO_HELP,
                    help="ko-help/train.csv (default: ../shared/data beside the checkout; on a lent GPU machine, a carried copy)")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda: no CUDA device", file=sys.stderr)
        return 2
    device = torch.device("cuda" if args.device != "cpu" and torch.cuda.is_available() else "cpu")
    cuda = device.type == "cuda"
    name = torch.cuda.get_device_name() if cuda else (platform.processor() or platform.machine())
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") if cuda else "cpu"
    output = args.output or h.RESULTS / f"gpu-{slug}.json"
    if not cuda:
        print("no CUDA device: GPU columns not measured; running the CPU smoke at small shapes", flush=True)
    args.work.mkdir(parents=True, exist_ok=True)
    stages = set(args.stages.split(","))
    rows, parity = [], None
    if "pretraining" in stages:
        rows += pretraining(device, args)
    if "finetuning" in stages or "serving" in stages:
        ft_rows, folder = finetuning(device, args, args.work)
        rows += ft_rows if "finetuning" in stages else []
        if "serving" in stages:
            serve_rows, parity = serving(device, args, folder)
            rows += serve_rows
    print_table(rows, name, cuda)
    if parity:
        print(f"serving parity, fast vs fp32 on all rows: {json.dumps(parity)}")
    h.write_record(output, {"device": name, "cuda": cuda, "gpu_columns_measured": cuda, "rows": rows,
                            "serving_parity": parity, "args": {k: str(v) for k, v in vars(args).items()},
                            "environment": {"torch": torch.__version__, "platform": platform.platform()}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
