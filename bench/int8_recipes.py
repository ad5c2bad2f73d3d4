"""Which INT8 recipe keeps a real fine-tuned model's predictions: per-node sensitivity and whole recipes.

    python bench/int8_recipes.py --model runs/minilm-bbc/model --eval-csv bbc-eval.csv --work /tmp/int8-bbc \\
        [--sensitivity] [--rounds 3] [--rows 600] [--isas avx512_vnni,avx2]

1. Exports the fp32 graph once with `serving.export` (Optimum O2 fusions), into --work/onnx.
2. Per-node sensitivity (--sensitivity): quantizes ONE MatMul/Attention node at a time (dynamic INT8,
   as the default recipe does) and measures mean |Δlogit| and argmax flips against PyTorch.
3. Every recipe in `serving.quantize.RECIPES` (plus experimental ones listed here): argmax agreement
   and macro-F1 on the eval rows against PyTorch, and rows/s of the engine on the same rows, interleaved
   over --rounds with fp32 ONNX as the speed baseline; medians. --isas quantizes each recipe for each
   listed instruction set's weight format (`serving.quantize.ISA_WEIGHTS`; default: this CPU's), all
   timed on THIS CPU: a file made for AVX2 timed on a VNNI CPU says what its format costs here, not
   how fast an AVX2 CPU runs it.
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


def sensitivity(onnx_dir: Path, isa: str, ref, texts, labels, y) -> list[dict]:
    """Each quantizable node quantized alone (the first recipe), the rest fp32: its cost, worst first."""
    from serving.engine import Classifier
    from serving.quantize import RECIPES, quantize

    sens = []
    for name, op in quantizable_nodes(onnx_dir / "model.onnx"):
        dst = onnx_dir / "cand-node.onnx"
        quantize(onnx_dir / "model.onnx", dst, RECIPES[0], isa, nodes_to_quantize=[name])
        m = metrics(ref, Classifier.load(dst).predict_logits(texts), labels, y)
        sens.append({"node": name, "op": op, **m})
        print(f"  {name:60s} mean|Δ| {m['mean_abs_logit_diff']:.4f} flips {m['flips']}", flush=True)
    return sorted(sens, key=lambda s: -s["mean_abs_logit_diff"])


def median_rows_per_second(clfs: dict, texts: list[str], rounds: int) -> dict:
    """Rows/s of each classifier on `texts`, rounds interleaved, medians."""
    speed = {k: [] for k in clfs}
    for _ in range(rounds):
        for k, clf in clfs.items():
            t = time.perf_counter()
            clf.predict_logits(texts)
            speed[k].append(len(texts) / (time.perf_counter() - t))
    return {k: statistics.median(v) for k, v in speed.items()}


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
    ap.add_argument("--name", default=None, help="results file suffix (default: the --work folder name)")
    args = ap.parse_args()

    from serving.engine import Classifier
    from serving.export import ExportConfig
    from serving.export import run as export
    from serving.quantize import RECIPES, cpu_isa, quantize

    load_before = os.getloadavg()
    onnx_dir = args.work / "onnx"
    if not (onnx_dir / "model.onnx").exists():
        export(ExportConfig(model=args.model, output=onnx_dir))
    df = pd.read_csv(args.eval_csv, dtype=str, keep_default_na=False)
    if len(df) > args.rows:
        df = df.sample(args.rows, random_state=0)
    texts, y = df[args.text_column].tolist(), df[args.label_column].tolist()
    ref_file = args.work / f"ref-{len(texts)}.npy"
    torch_clf = Classifier.load(args.model, provider="torch")
    labels = torch_clf.labels
    if not ref_file.exists():
        np.save(ref_file, torch_clf.predict_logits(texts))
    ref = np.load(ref_file)
    fp32 = Classifier.load(onnx_dir, quantized=False)
    out = {"model": str(args.model), "eval_csv": str(args.eval_csv), "rows": len(texts), "isa": cpu_isa(),
           "loadavg_before": load_before, "fp32": metrics(ref, fp32.predict_logits(texts), labels, y)}
    isa = cpu_isa()

    if args.sensitivity:
        out["sensitivity"] = sensitivity(onnx_dir, isa, ref, texts, labels, y)

    chosen = [r for r in RECIPES if not args.recipes or r.name in args.recipes.split(",")]
    isas = [i for i in args.isas.split(",") if i] or [isa]
    calib = df[args.text_column].tolist()  # calibrating on the rows we judge is optimistic for static; said in docs
    clfs, out["recipes"] = {"fp32": fp32}, {}
    for r, fmt in ((r, f) for r in chosen for f in isas):
        key = r.name if len(isas) == 1 else f"{r.name}@{fmt}"
        dst = onnx_dir / f"cand-{key}.onnx"
        t = time.time()
        info = quantize(onnx_dir / "model.onnx", dst, r, fmt, calibration_texts=calib, encoder=fp32)
        clf = Classifier.load(dst)
        m = metrics(ref, clf.predict_logits(texts), labels, y)
        out["recipes"][key] = {**m, "quantize_seconds": round(time.time() - t, 1), "info": info,
                               "size_mb": round(dst.stat().st_size / 2**20, 1)}
        clfs[key] = clf
        print(f"{key:40s} agreement {m['argmax_agreement']:.4f} flips {m['flips']} "
              f"F1 {m['macro_f1']:.4f} ({m['macro_f1_change_points']:+.2f} pts) mean|Δ| {m['mean_abs_logit_diff']:.4f}",
              flush=True)

    rows_s = median_rows_per_second(clfs, texts, args.rounds)
    for k in clfs:
        target = out["recipes"].get(k, out["fp32"])
        target["rows_per_second"] = rows_s[k]
        target["speed_over_fp32"] = rows_s[k] / rows_s["fp32"]
    out["loadavg_after"] = os.getloadavg()
    print("\n| recipe | agreement | macro-F1 change (pts) | mean abs Δlogit | rows/s | × fp32 ONNX |\n|---|---|---|---|---|---|")
    for k in clfs:
        m = out["recipes"].get(k, out["fp32"])
        print(f"| {k} | {m['argmax_agreement']:.4f} | {m['macro_f1_change_points']:+.2f} | "
              f"{m['mean_abs_logit_diff']:.4f} | {m['rows_per_second']:.0f} | {m['speed_over_fp32']:.2f} |")
    print(f"load average before/after: {load_before} / {out['loadavg_after']}")
    dest = ROOT / "bench" / "results" / f"int8_recipes-{args.name or args.work.name}.json"
    dest.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()
