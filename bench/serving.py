"""Serving benchmark: latency, batch-scoring throughput and the accuracy cost of INT8, on ELECTRA-Small's shape.

    python -m bench serving [--repeats 3] [--epochs 4] [--retrain] [--rows N]
    python -m bench serving --shape tiny --epochs 0 --blend --work /tmp/bench-tiny       # the blend's cost
    python -m bench serving --finetuned runs/minilm-bbc/model --eval-csv bbc-eval.csv     # a real model

Builds (cached in --work) a WordPiece tokenizer on the Korean corpus and an ELECTRA-Small-shaped classifier,
random init, fine-tuned a few epochs on 80% of ko-help's pages (a real model to measure what INT8 changes, not a
quality result), exported with `--quantize` and the held-out pages as --eval-csv. Measured --repeats times,
interleaved, medians: one short text (PyTorch eager vs the engine on ONNX fp32 and on the default file); rows/s
of `serving.score` (default file, fp32, INT8 forced) against transformers' `pipeline(batch_size=32)`, the
baseline of the ratios; held-out macro-F1 per file (export_report.json). With a TF-IDF blend in the folder,
rows/s also with the blend off and with the baseline run after the model instead of beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import harness as h

DATA = h.DATA
SHORT_TEXT = "파일을 저장할 때 오류가 발생합니다"
MAX_LENGTH = 128


def build_tokenizer(work: Path):
    from tokenizers import BertWordPieceTokenizer
    from transformers import ElectraTokenizerFast

    folder = work / "tokenizer"
    if not (folder / "tokenizer.json").exists():
        wp = BertWordPieceTokenizer(clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=False)
        wp.train([str(DATA / "corpus" / "ko-text.txt")], vocab_size=32000, min_frequency=2, limit_alphabet=4000)
        folder.mkdir(parents=True, exist_ok=True)
        wp.save_model(str(folder))
        tok = ElectraTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=False, strip_accents=False,
                                   model_max_length=MAX_LENGTH)
        tok.save_pretrained(folder)
    return ElectraTokenizerFast.from_pretrained(folder)


def split_pages(df: pd.DataFrame):
    from sklearn.model_selection import GroupShuffleSplit

    train_idx, test_idx = next(GroupShuffleSplit(n_splits=1, test_size=0.2, random_state=0)
                               .split(df, groups=df["page"]))
    return df.iloc[train_idx], df.iloc[test_idx]


SHAPES = {"small": h.SHAPES["small"],
          # pretraining/config.py's tiny preset: the encoder the ko-help recipe trains on 2 CPU cores
          "tiny": {"embedding_size": 64, "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
                       "intermediate_size": 256}}


def finetune(work: Path, tok, train: pd.DataFrame, epochs: int, shape: str = "small") -> Path:
    """Random-init ELECTRA-Small (or tiny) shape, AdamW + linear decay, length-bucketed batches of 32."""
    import torch
    from transformers import ElectraConfig, ElectraForSequenceClassification, get_linear_schedule_with_warmup

    folder = work / "model"
    labels = sorted(train["label"].unique())
    cfg = ElectraConfig(vocab_size=len(tok), **SHAPES[shape], max_position_embeddings=512,
                        num_labels=len(labels), id2label=dict(enumerate(labels)),
                        label2id={k: i for i, k in enumerate(labels)})
    torch.manual_seed(0)
    model = ElectraForSequenceClassification(cfg)
    if epochs == 0:
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
        return folder
    enc = tok(train["text"].tolist(), truncation=True, max_length=MAX_LENGTH)["input_ids"]
    y = np.array([cfg.label2id[v] for v in train["label"]])
    order = np.argsort([len(e) for e in enc], kind="stable")
    batches = [order[i : i + 32] for i in range(0, len(order), 32)]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    sched = get_linear_schedule_with_warmup(opt, len(batches) // 2, len(batches) * epochs)
    rng = np.random.default_rng(0)
    model.train()
    t0 = time.time()
    for epoch in range(epochs):
        total = 0.0
        for step, b in enumerate(rng.permutation(len(batches))):
            idx = batches[b]
            padded = tok.pad({"input_ids": [enc[i] for i in idx]}, return_tensors="pt")
            loss = model(**padded, labels=torch.tensor(y[idx])).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            total += loss.item()
            if step % 50 == 49:
                print(f"    step {step + 1}/{len(batches)} ({time.time() - t0:.0f} s)", flush=True)
        print(f"  epoch {epoch + 1}/{epochs}: loss {total / len(batches):.3f} ({time.time() - t0:.0f} s)", flush=True)
    model.eval().save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def prepare_built(args, df: pd.DataFrame, onnx_dir: Path):
    """The random-init ELECTRA-Small-shaped model fine-tuned on 80% of ko-help pages, and its export."""
    from serving.export import ExportConfig
    from serving.export import run as export

    train, heldout = split_pages(df)
    heldout_csv = args.work / "heldout.csv"
    heldout.to_csv(heldout_csv, index=False)
    tok = build_tokenizer(args.work)
    model_dir = args.work / "model"
    t0 = time.time()
    if args.retrain or not (model_dir / "model.safetensors").exists() or not (args.work / "finetune.json").exists():
        print(f"fine-tuning on {len(train)} rows ({train['page'].nunique()} pages), {args.epochs} epochs", flush=True)
        finetune(args.work, tok, train, args.epochs, args.shape)
        (args.work / "finetune.json").write_text(json.dumps({"seconds": time.time() - t0, "epochs": args.epochs}))
    trained = json.loads((args.work / "finetune.json").read_text())  # also for a model cached by a previous run
    if args.retrain or not (onnx_dir / "export_report.json").exists():
        export(ExportConfig(model=model_dir, output=onnx_dir, quantize=True, eval_csv=heldout_csv,
                            max_eval_rows=len(heldout), min_agreement=0.01, max_f1_drop=100))
    if args.blend:
        from baseline.blend import Blend, fit_baseline, save_baseline

        labels = sorted(train["label"].unique())
        baseline = fit_baseline(train["text"].tolist(), train["label"].map(labels.index).to_numpy(), 0)
        save_baseline(baseline, onnx_dir, len(labels), Blend(1.0, 1.0), {"method": "bench: cost only, weights not fitted"})
    info = {"shape": f"ELECTRA {args.shape} ({SHAPES[args.shape]})", "vocab": len(tok),
            "max_length": MAX_LENGTH, "weights": f"random init, fine-tuned {trained['epochs']} epochs on 80% of "
            "ko-help pages (no pretraining)", "finetune_seconds": round(trained["seconds"])}
    return model_dir, tok, info, len(heldout)


def prepare_finetuned(args, onnx_dir: Path):
    """A real fine-tuned folder, exported with the default INT8 gate judged on --eval-csv."""
    from transformers import AutoConfig, AutoTokenizer

    from serving.engine import ModelError
    from serving.export import ExportConfig
    from serving.export import run as export

    if args.retrain or not (onnx_dir / "export_report.json").exists():
        try:
            export(ExportConfig(model=args.finetuned, output=onnx_dir, quantize=True, eval_csv=args.eval_csv))
        except ModelError as e:  # INT8 failed the gate: fp32 is still measured, the JSON says INT8 is missing
            print(f"export: {e}", flush=True)
    tok = AutoTokenizer.from_pretrained(args.finetuned)
    cfg = AutoConfig.from_pretrained(args.finetuned)
    info = {"shape": f"{cfg.model_type} (hidden {cfg.hidden_size}, {cfg.num_hidden_layers} layers)",
            "vocab": len(tok), "max_length": tok.model_max_length, "weights": str(args.finetuned)}
    return args.finetuned, tok, info


def latency_round(model, tok, fp32, default, n: int) -> dict:
    import torch

    def eager():
        with torch.inference_mode():
            logits = model(**tok([SHORT_TEXT], return_tensors="pt", truncation=True)).logits
            return torch.softmax(logits, -1)

    return {name: tuple(h.percentiles((h.timed(fn, 20), h.timed(fn, n))[1], (50, 95), 4).values()) for name, fn in (
        ("pytorch_eager", eager),
        ("onnx_fp32", lambda: fp32.predict([SHORT_TEXT])),
        ("onnx_default", lambda: default.predict([SHORT_TEXT])),
    )}


def throughput_round(model_dir: Path, onnx_dir: Path, texts: list[str], csv: Path, work: Path, variants: dict) -> dict:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    from baseline.blend import BASELINE_DIR
    from serving import score, side_work

    out = {}
    side_rows = side_work.FIXED
    pipe = pipeline("text-classification", model=AutoModelForSequenceClassification.from_pretrained(model_dir),
                    tokenizer=AutoTokenizer.from_pretrained(model_dir), device=-1)
    with torch.inference_mode():
        t = time.perf_counter()
        preds = pipe(texts, batch_size=32, truncation=True)
        out["pipeline_bs32"] = len(preds) / (time.perf_counter() - t)
    # With a blend in the folder: interleaved with it off, and with the baseline run after the model instead of
    # beside it (the engine's sequential path), its cost measured in the same run.
    blends = ("on", "off", "sequential") if (onnx_dir / BASELINE_DIR).is_dir() else ("on",)
    for name, quantized in variants.items():
        for blend in blends:
            key = name if blend == "on" else f"{name}_{'no_blend' if blend == 'off' else 'blend_sequential'}"
            cfg = score.ScoreConfig(model=onnx_dir, input=csv, output=work / f"scored-{key}.csv", progress=False,
                                    quantized=quantized, blend=blend != "off")
            side_work.FIXED = side_work.NEVER if blend == "sequential" else side_rows
            try:
                s = score.run(cfg)
            finally:
                side_work.FIXED = side_rows
            assert s["rows"] == len(texts)
            out[key] = s["rows_per_second"]
            out[key + "_incl_load"] = s["rows"] / s["seconds"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-serving"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--latency-calls", type=int, default=200)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--retrain", action="store_true")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="small",
                    help="the built model's shape (a --work folder holds one shape: use one per shape)")
    ap.add_argument("--blend", action="store_true",
                    help="built model: add a TF-IDF blend fitted on the training pages, to time rows/s with and without it")
    ap.add_argument("--rows", type=int, default=None, help="score a seeded sample of this many rows (default: all)")
    ap.add_argument("--output", type=Path, default=h.RESULTS / "serving.json")
    ap.add_argument("--finetuned", type=Path, help="a fine-tuned transformers folder to measure instead")
    ap.add_argument("--eval-csv", type=Path, help="with --finetuned: held-out labeled rows (text, label)")
    args = ap.parse_args()
    if args.finetuned and not args.eval_csv:
        ap.error("--finetuned needs --eval-csv (held-out labeled rows for the gate and macro-F1)")

    import torch
    from transformers import AutoModelForSequenceClassification

    from serving.engine import Classifier

    args.work.mkdir(parents=True, exist_ok=True)
    onnx_dir = args.work / "onnx"
    if args.finetuned:
        model_dir, tok, info = prepare_finetuned(args, onnx_dir)
        csv = args.eval_csv
        df = pd.read_csv(csv, dtype=str, keep_default_na=False)
        heldout_rows = None  # the rows the gate judged, read from the report below
    else:
        csv = DATA / "ko-help" / "train.csv"
        df = pd.read_csv(csv, dtype=str, keep_default_na=False)
        model_dir, tok, info, heldout_rows = prepare_built(args, df, onnx_dir)
    report = json.loads((onnx_dir / "export_report.json").read_text())
    heldout_rows = heldout_rows or report["gate"]["rows"]

    torch.set_num_threads(2)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    fp32 = Classifier.load(onnx_dir, quantized=False)
    default = Classifier.load(onnx_dir)  # what a user gets: the file export_report.json's cpu_default names
    info["served_by_default"] = {"file": default.info()["model_file"], "why": default.info()["model_file_why"]}
    info["cpu_threads"] = default.info().get("cpu_threads")  # the engine's plan at load (textdata/cpu_limits.py)
    print(f"served by default: {info['served_by_default']['file']} ({info['served_by_default']['why']})", flush=True)
    variants = {"score_default": None, "score_fp32": False}
    if (onnx_dir / "model_quantized.onnx").exists() and not default.info()["quantized"]:
        variants["score_int8"] = True  # the slower INT8 that the gate kept off the default, for the record
    scored_csv = csv
    if args.rows and args.rows < len(df):
        # The same rows for both contenders; a sample keeps a round short when the cores are shared.
        scored_csv = args.work / f"sample-{args.rows}.csv"
        df = df.sample(args.rows, random_state=0)
        df.to_csv(scored_csv, index=False)
    texts = df["text"].tolist()
    lat, thr = [], []
    for r in range(args.repeats):
        lat.append(latency_round(model, tok, fp32, default, args.latency_calls))
        thr.append(throughput_round(model_dir, onnx_dir, texts, scored_csv, args.work, variants))
        print(f"round {r + 1}: latency p50 ms " + ", ".join(f"{k} {v[0]:.2f}" for k, v in lat[-1].items())
              + " | rows/s " + ", ".join(f"{k} {v:.0f}" for k, v in thr[-1].items()), flush=True)
        result = summarize(lat, thr, report, info, heldout_rows, csv, len(texts))
        h.write_record(args.output, result, quiet=True)  # after every round: a kill keeps the rest
    print_table(result)
    print(f"wrote {args.output}")


def summarize(lat, thr, report, model_info, heldout_rows, csv, rows) -> dict:
    med = lambda xs: float(statistics.median(xs))
    latency = {k: {"p50_ms": med([x[k][0] for x in lat]), "p95_ms": med([x[k][1] for x in lat])} for k in lat[0]}
    rows_s = {k: med([x[k] for x in thr]) for k in thr[0]}
    files = report["files"]
    int8 = files.get("model_quantized.onnx", {})
    f1 = {"pytorch": report["pytorch"]["macro_f1"], "onnx_fp32": files["model.onnx"]["macro_f1"],
          "onnx_int8": int8.get("macro_f1")}
    return {
        "model": model_info,
        "data": {"csv": os.path.relpath(csv.resolve(), ROOT.parent), "rows_scored": rows,
                 "heldout_rows": heldout_rows},
        "repeats": len(lat),
        "latency_one_text": latency,
        "latency_ratio_eager_over": {k: latency["pytorch_eager"]["p50_ms"] / latency[k]["p50_ms"]
                                     for k in ("onnx_fp32", "onnx_default")},
        "rows_per_second": rows_s,
        "throughput_ratio_over_pipeline": {k: v / rows_s["pipeline_bs32"] for k, v in rows_s.items()
                                           if k != "pipeline_bs32"},
        "default_over_fp32_onnx": rows_s["score_default"] / rows_s["score_fp32"],
        "cpu_default": report.get("cpu_default"),
        "isa": report.get("isa"),
        "blend_rows_per_second_ratio": {k: v / rows_s[f"{k}_no_blend"] for k, v in rows_s.items()
                                        if f"{k}_no_blend" in rows_s},
        "blend_sequential_rows_per_second_ratio": {k: rows_s[f"{k}_blend_sequential"] / rows_s[f"{k}_no_blend"]
                                                   for k in rows_s if f"{k}_blend_sequential" in rows_s},
        "heldout_macro_f1": f1,
        "int8_passed_gate": "model_quantized.onnx" in files,
        "int8_recipe": (report.get("quantization") or {}).get("recipe"),
        "int8_attempts": report.get("int8_attempts"),
        "int8_macro_f1_change_points": 100 * (f1["onnx_int8"] - f1["pytorch"]) if int8 else None,
        "int8_argmax_agreement": int8.get("argmax_agreement"),
        "rounds": {"latency": lat, "throughput": thr},
    }


def print_table(result: dict) -> None:
    latency, rows_s, f1 = result["latency_one_text"], result["rows_per_second"], result["heldout_macro_f1"]
    served = result["model"]["served_by_default"]
    print(f"\nserved by default: {served['file']} ({served['why']})")
    print("one text p50 / p95 ms: " + ", ".join(f"{k} {v['p50_ms']:.2f} / {v['p95_ms']:.2f}" for k, v in latency.items())
          + "; eager p50 over: " + ", ".join(f"{k} {v:.1f}x" for k, v in result["latency_ratio_eager_over"].items()))
    print(f"rows/s: pipeline bs32 {rows_s['pipeline_bs32']:.0f} (the baseline); " + ", ".join(
        f"{k} {rows_s[k]:.0f} ({v:.1f}x)" for k, v in result["throughput_ratio_over_pipeline"].items()))
    int8 = (f"INT8 file {f1['onnx_int8']:.4f} ({result['int8_macro_f1_change_points']:+.2f} points, agreement "
            f"{result['int8_argmax_agreement']:.4f}, recipe {result['int8_recipe']})" if result["int8_passed_gate"]
            else "INT8 failed the gate (the default is fp32)")
    print(f"held-out macro-F1 ({result['data']['heldout_rows']} rows): PyTorch {f1['pytorch']:.4f}, ONNX fp32 "
          f"{f1['onnx_fp32']:.4f}, {int8}")
    for name in ("blend_rows_per_second_ratio", "blend_sequential_rows_per_second_ratio"):
        for k, ratio in result[name].items():
            print(f"{k}: {name.removesuffix('_rows_per_second_ratio')} / no blend = {ratio:.2f}x rows/s")


if __name__ == "__main__":
    main()
