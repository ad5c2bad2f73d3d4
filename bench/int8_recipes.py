"""Which INT8 recipe keeps a real fine-tuned model's predictions: per-node sensitivity and whole recipes.

    python bench/int8_recipes.py --model runs/minilm-bbc/model --eval-csv bbc-eval.csv --work /tmp/int8-bbc \\
        [--sensitivity] [--rounds 3] [--rows 600] [--isas avx512_vnni,avx2] [--lengths 32,64,128]

1. Exports the fp32 graph once with `serving.export` (Optimum O2 fusions), into --work/onnx.
2. Per-node sensitivity (--sensitivity): quantizes ONE MatMul/Attention node at a time (dynamic INT8,
   as the default recipe does) and measures mean |Δlogit| and argmax flips against PyTorch.
3. Every recipe in `serving.quantize.RECIPES` (plus experimental ones listed here): argmax agreement
   and macro-F1 on the eval rows against PyTorch, and rows/s of the engine on the same rows, interleaved
   over --rounds with fp32 ONNX as the speed baseline; medians. --isas quantizes each recipe for each
   listed instruction set's weight format (`serving.quantize.ISA_WEIGHTS`; default: this CPU's), all
   timed on THIS CPU: a file made for AVX2 timed on a VNNI CPU says what its format costs here, not
   how fast an AVX2 CPU runs it. --lengths serves every file (and PyTorch, the reference) at each max_length:
   INT8's gain depends on the sequence length (activation quantization is per batch, attention stays fp32).
Writes bench/results/int8_recipes-<name>.json. The cores are shared: load average is recorded.
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


def metrics(ref: np.ndarray, got: np.ndarray, labels: list[str], y: list[str]) -> dict:
    from sklearn.metrics import f1_score

    pred = [labels[i] for i in got.argmax(1)]
    ref_pred = [labels[i] for i in ref.argmax(1)]
    f1 = f1_score(y, pred, average="macro", zero_division=0)
    f1_ref = f1_score(y, ref_pred, average="macro", zero_division=0)
    return {"argmax_agreement": float((ref.argmax(1) == got.argmax(1)).mean()),
            "flips": int((ref.argmax(1) != got.argmax(1)).sum()),
            "mean_abs_logit_diff": float(np.abs(ref - got).mean()),
            "max_abs_logit_diff": float(np.abs(ref - got).max()),
            "macro_f1": float(f1), "macro_f1_change_points": float(100 * (f1 - f1_ref))}


def quantizable_nodes(model_file: Path) -> list[tuple[str, str]]:
    import onnx

    return [(n.name, n.op_type) for n in onnx.load(str(model_file), load_external_data=False).graph.node
            if n.op_type in ("MatMul", "Attention") and any(i for i in n.input[1:2])]


def build_recipes(args, onnx_dir: Path, fp32, calib: list[str]) -> dict:
    """{key: (file, quantization info, seconds)} for each chosen recipe and weight format; built once for all lengths."""
    from serving.quantize import RECIPES, cpu_isa, quantize

    chosen = [r for r in RECIPES if not args.recipes or r.name in args.recipes.split(",")]
    isas = [i for i in args.isas.split(",") if i] or [cpu_isa()]
    built = {}
    for r, fmt in ((r, f) for r in chosen for f in isas):
        key = r.name if len(isas) == 1 else f"{r.name}@{fmt}"
        dst = onnx_dir / f"cand-{key}.onnx"
        t = time.time()
        try:
            info = quantize(onnx_dir / "model.onnx", dst, r, fmt, calibration_texts=calib, encoder=fp32)
        except Exception as e:  # noqa: BLE001 - a recipe this graph cannot take is a row of the table, not the end
            print(f"{key:40s} quantization failed: {e!r}"[:300], flush=True)
            continue
        built[key] = (dst, info, round(time.time() - t, 1))
    return built


def measure_length(args, length: int | None, onnx_dir: Path, built: dict, texts, y) -> dict:
    """Accuracy against PyTorch and interleaved engine rows/s of fp32 and every built recipe at one max_length."""
    from serving.engine import Classifier

    ref_file = args.work / f"ref-{len(texts)}-{length or 'model'}.npy"
    torch_clf = Classifier.load(args.model, provider="torch", max_length=length)
    labels = torch_clf.labels
    if not ref_file.exists():
        np.save(ref_file, torch_clf.predict_logits(texts))
    ref = np.load(ref_file)
    fp32 = Classifier.load(onnx_dir, quantized=False, max_length=length, blend=False)
    seqs = fp32.encode(texts)
    out = {"max_length": fp32.max_length, "mean_tokens": float(np.mean([len(q) for q in seqs])),
           "fp32": metrics(ref, fp32.predict_logits(texts), labels, y), "recipes": {}}
    clfs = {"fp32": fp32}
    for key, (dst, info, seconds) in built.items():
        clf = Classifier.load(dst, max_length=length, blend=False)
        m = metrics(ref, clf.predict_logits(texts), labels, y)
        out["recipes"][key] = {**m, "quantize_seconds": seconds, "info": info,
                               "size_mb": round(dst.stat().st_size / 2**20, 1)}
        clfs[key] = clf
    speed, per_cpu = {k: [] for k in clfs}, {k: [] for k in clfs}
    for _ in range(args.rounds):
        for k, clf in clfs.items():  # tokenized once: the model alone, as the export's speed check times it
            t, c = time.perf_counter(), time.process_time()
            clf._logits(seqs)
            speed[k].append(len(texts) / (time.perf_counter() - t))
            per_cpu[k].append(len(texts) / max(time.process_time() - c, 1e-9))
    rows_s = {k: statistics.median(v) for k, v in speed.items()}
    rows_cpu = {k: statistics.median(v) for k, v in per_cpu.items()}
    for k in clfs:
        target = out["recipes"].get(k, out["fp32"])
        target["rows_per_second"] = rows_s[k]
        target["speed_over_fp32"] = rows_s[k] / rows_s["fp32"]
        # rows per CPU-second of this process: holds up when other work takes the cores for part of a pass
        target["rows_per_cpu_second"] = rows_cpu[k]
        target["cpu_speed_over_fp32"] = rows_cpu[k] / rows_cpu["fp32"]
    return out


def print_length(res: dict) -> None:
    print(f"\nmax_length {res['max_length']} (mean {res['mean_tokens']:.1f} tokens)")
    print("| recipe | agreement | macro-F1 change (pts) | mean abs Δlogit | rows/s | × fp32 ONNX | rows per CPU-s | "
          "× fp32 ONNX |\n|---|---|---|---|---|---|---|---|")
    for k, m in {"fp32": res["fp32"], **res["recipes"]}.items():
        print(f"| {k} | {m['argmax_agreement']:.4f} | {m['macro_f1_change_points']:+.2f} | "
              f"{m['mean_abs_logit_diff']:.4f} | {m['rows_per_second']:.0f} | {m['speed_over_fp32']:.2f} | "
              f"{m['rows_per_cpu_second']:.0f} | {m['cpu_speed_over_fp32']:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--eval-csv", type=Path, required=True)
    ap.add_argument("--text-column", default="text")
    ap.add_argument("--label-column", default="label")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--rows", type=int, default=600, help="seeded sample of eval rows")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sensitivity", action="store_true")
    ap.add_argument("--recipes", default="", help="comma-separated subset of recipe names")
    ap.add_argument("--isas", default="", help="comma-separated weight formats to quantize for (default: this CPU's)")
    ap.add_argument("--lengths", default="", help="comma-separated max_length values to serve at (default: the model's)")
    ap.add_argument("--name", default=None, help="results file suffix (default: the --work folder name)")
    args = ap.parse_args()

    from serving.engine import Classifier
    from serving.export import ExportConfig
    from serving.export import run as export
    from serving.quantize import cpu_isa
    from textdata.cpu_limits import plan_threads

    load_before = os.getloadavg()
    onnx_dir = args.work / "onnx"
    if not (onnx_dir / "model.onnx").exists():
        export(ExportConfig(model=args.model, output=onnx_dir))
    df = pd.read_csv(args.eval_csv, dtype=str, keep_default_na=False)
    if len(df) > args.rows:
        df = df.sample(args.rows, random_state=0)
    texts, y = df[args.text_column].tolist(), df[args.label_column].tolist()
    fp32 = Classifier.load(onnx_dir, quantized=False, blend=False)
    out = {"model": str(args.model), "eval_csv": str(args.eval_csv), "rows": len(texts), "isa": cpu_isa(),
           "threads": plan_threads().as_dict(), "loadavg_before": load_before,
           "command": "python bench/int8_recipes.py " + " ".join(sys.argv[1:]), "date": time.strftime("%Y-%m-%d")}
    if args.sensitivity:
        out["sensitivity"] = sensitivity(args, onnx_dir, texts, y)
    calib = df[args.text_column].tolist()  # calibrating on the rows we judge is optimistic for static; said in docs
    built = build_recipes(args, onnx_dir, fp32, calib)
    lengths = [int(n) for n in args.lengths.split(",") if n] or [None]
    out["by_length"] = {}
    dest = ROOT / "bench" / "results" / f"int8_recipes-{args.name or args.work.name}.json"
    for length in lengths:
        res = measure_length(args, length, onnx_dir, built, texts, y)
        out["by_length"][str(res["max_length"])] = res
        print_length(res)
        if len(lengths) == 1:  # the earlier single-length layout, for readers of older results
            out.update(fp32=res["fp32"], recipes=res["recipes"])
        out["loadavg_after"] = os.getloadavg()
        dest.write_text(json.dumps(out, indent=2) + "\n")  # after each length: a kill keeps the rest
    print(f"load average before/after: {load_before} / {out['loadavg_after']}")
    print(f"wrote {dest}")


def sensitivity(args, onnx_dir: Path, texts, y) -> list[dict]:
    """Per-node: quantize ONE MatMul/Attention node (dynamic INT8) and measure its harm against PyTorch."""
    from serving.engine import Classifier
    from serving.quantize import RECIPES, cpu_isa, quantize

    torch_clf = Classifier.load(args.model, provider="torch")
    ref, labels = torch_clf.predict_logits(texts), torch_clf.labels
    sens = []
    for name, op in quantizable_nodes(onnx_dir / "model.onnx"):
        dst = onnx_dir / "cand-node.onnx"
        quantize(onnx_dir / "model.onnx", dst, RECIPES[0], cpu_isa(), nodes_to_quantize=[name])
        m = metrics(ref, Classifier.load(dst).predict_logits(texts), labels, y)
        sens.append({"node": name, "op": op, **m})
        print(f"  {name:60s} mean|Δ| {m['mean_abs_logit_diff']:.4f} flips {m['flips']}", flush=True)
    return sorted(sens, key=lambda s: -s["mean_abs_logit_diff"])


if __name__ == "__main__":
    main()
