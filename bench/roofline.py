"""Batch scoring against what this CPU can do: attainable GEMM throughput at the encoder's shapes, model FLOPs per
row at the served lengths, and the engine's rows/s as a share of that limit, beside the transformers pipeline.

    python bench/roofline.py --work /tmp/roofline [--models small,minilm] [--rows 2000] [--rounds 3] [--seconds 4]

1. The roof: ONNX Runtime MatMul (fp32) and MatMulInteger (u8 activations x the weight type this CPU's INT8 files
   use, `serving.quantize.ISA_WEIGHTS`) on [tokens per pass x K] @ [K x N] for each of the encoder's weight shapes
   (fused QKV, attention output, FFN in and out, ELECTRA's embedding projection), with the engine's threads and
   spinning (textdata/cpu_limits.py). "Attainable" is the FLOP-weighted mix: the GFLOP/s the encoder would reach if
   it were nothing but its GEMMs, each at its measured speed. numpy's fp32 matmul is printed as a cross-check.
2. FLOPs per row: 2 x multiply-adds of every linear layer plus attention's QK^T and AV at each row's own token count
   (after the engine's normalisation and truncation), and the padded FLOPs the engine's passes really compute.
3. Rows/s, interleaved over --rounds, medians: the engine alone (tokenized once: `Classifier._logits`) for the file
   served by default and fp32, `serving.score` end to end (file in, file out) for the served default, and
   `pipeline("text-classification", batch_size=32)` on the same rows.
Share of the roof = rows/s x useful FLOPs per row / attainable GFLOP/s (fp32 roof for model.onnx, int8 roof for INT8),
each round against the roof measured in the same round; and the same per CPU-second of this process (rows per
CPU-second x FLOPs / GEMM FLOPs per CPU-second), which holds up when other work shares the cores.

Models: `small`, ELECTRA-Small's shape with random weights (speed does not depend on them), exported with
bench/serving.py on short Korean rows (ko-help); `minilm`, a real MiniLM fine-tune on BBC News (bench/minilm_bbc.py),
exported with the INT8 gate on its held-out rows. Writes bench/results/roofline[-NAME].json and prints the table.
The cores may be shared: load average and the thread plan are recorded.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = Path(os.environ.get("BENCH_DATA", ROOT.parent / "shared" / "data"))


def bench_module(name: str):
    """A sibling bench script as a module (bench/serving.py's name collides with the serving package)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------------- the roof
def gemm_shapes(cfg) -> list[tuple[str, int, int, int]]:
    """(name, K, N, uses per token): the encoder's weight matrices, each used once per token per layer."""
    h, f, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    shapes = [("qkv", h, 3 * h, layers), ("attn_out", h, h, layers), ("ffn_in", h, f, layers), ("ffn_out", f, h, layers)]
    e = getattr(cfg, "embedding_size", h)
    if e != h:
        shapes.append(("emb_proj", e, h, 1))
    return shapes


def _gemm_session(k: int, n: int, kind: str, threads, weight_type: str):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    if kind == "fp32":
        b = numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "B")
        node, a_type, y_type = helper.make_node("MatMul", ["A", "B"], ["Y"]), TensorProto.FLOAT, TensorProto.FLOAT
    else:
        w = rng.integers(0, 255, (k, n)).astype(np.uint8) if weight_type == "QUInt8" else \
            rng.integers(-127, 127, (k, n)).astype(np.int8)
        b = numpy_helper.from_array(w, "B")
        node, a_type, y_type = helper.make_node("MatMulInteger", ["A", "B"], ["Y"]), TensorProto.UINT8, TensorProto.INT32
    graph = helper.make_graph([node], "gemm", [helper.make_tensor_value_info("A", a_type, [None, k])],
                              [helper.make_tensor_value_info("Y", y_type, [None, n])], initializer=[b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads.threads
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if threads.spinning else "0")
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _rate(fn, flops: float, seconds: float) -> tuple[float, float]:
    """(GFLOP/s of wall time, GFLOP per CPU-second of this process): the second counts only the time the threads
    had a core, so it holds up when other work shares the cores (it also counts spin-waiting)."""
    fn()  # warm-up: arenas, packed weights
    n, t, c = 0, time.perf_counter(), time.process_time()
    while n < 3 or time.perf_counter() - t < seconds:
        fn()
        n += 1
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    return flops * n / wall / 1e9, flops * n / max(cpu, 1e-9) / 1e9


class Roof:
    """Sessions for the encoder's GEMM shapes, built once and timed in every round, beside the rows/s they are
    compared with, so that a burst of load elsewhere hits both."""

    def __init__(self, cfg, tokens: int, threads, weight_type: str):
        rng = np.random.default_rng(1)
        self.tokens, self.weight_type, self.shapes = tokens, weight_type, []
        for name, k, n, uses in gemm_shapes(cfg):
            a32 = rng.standard_normal((tokens, k)).astype(np.float32)
            a8 = rng.integers(0, 255, (tokens, k)).astype(np.uint8)
            s32, s8 = _gemm_session(k, n, "fp32", threads, weight_type), _gemm_session(k, n, "int8", threads, weight_type)
            b = rng.standard_normal((k, n)).astype(np.float32)
            self.shapes.append((name, k, n, uses, {"fp32": partial(s32.run, None, {"A": a32}),
                                                   "int8": partial(s8.run, None, {"A": a8}),
                                                   "numpy_fp32": partial(np.matmul, a32, b)}))

    def measure(self, seconds: float) -> dict:
        """Per shape and kind: GFLOP/s (wall) and GFLOP per CPU-second; `attainable_<kind>_<clock>` is the
        FLOP-weighted mix, the rate the encoder would reach if it were nothing but its GEMMs at their measured speed."""
        per = seconds / (3 * len(self.shapes))
        out = {"tokens_per_gemm": self.tokens, "int8_weight_type": self.weight_type, "shapes": {}}
        for name, k, n, uses, fns in self.shapes:
            flops = 2.0 * self.tokens * k * n
            row = {"k": k, "n": n, "uses_per_token": uses}
            for kind, fn in fns.items():
                row[f"{kind}_wall"], row[f"{kind}_cpu"] = _rate(fn, flops, per)
            out["shapes"][name] = row
        work = sum(2.0 * r["k"] * r["n"] * r["uses_per_token"] for r in out["shapes"].values())
        for kind in ("fp32", "int8", "numpy_fp32"):
            for clock in ("wall", "cpu"):
                t = sum(2.0 * r["k"] * r["n"] * r["uses_per_token"] / r[f"{kind}_{clock}"] for r in out["shapes"].values())
                out[f"attainable_{kind}_{clock}"] = work / t
        return out


# ------------------------------------------------------------------------------------------ the work
def flops_per_row(cfg, length: int) -> float:
    """2 x multiply-adds of the encoder's linear layers and attention at `length` tokens, plus the head (one token)."""
    s, h = float(length), cfg.hidden_size
    linear = sum(2.0 * s * k * n * uses for _, k, n, uses in gemm_shapes(cfg))
    attention = cfg.num_hidden_layers * 2 * (2.0 * s * s * h)  # QK^T and AV
    head = 2.0 * h * h + 2.0 * h * cfg.num_labels  # ELECTRA's dense + out_proj; BERT's pooler + classifier
    return linear + attention + head


def padded_passes(lengths: list[int], batch_tokens: int) -> list[tuple[int, int]]:
    """(rows, width) of each pass the engine runs: longest first, each pass padded to its longest row."""
    order = sorted(lengths, reverse=True)
    passes, start = [], 0
    while start < len(order):
        width = max(1, order[start])
        size = max(1, batch_tokens // width)
        passes.append((len(order[start : start + size]), width))
        start += size
    return passes


def work_of(cfg, seqs, batch_tokens: int) -> dict:
    lengths = [len(s) for s in seqs]
    useful = sum(flops_per_row(cfg, n) for n in lengths)
    computed = sum(rows * flops_per_row(cfg, width) for rows, width in padded_passes(lengths, batch_tokens))
    attention = sum(cfg.num_hidden_layers * 4.0 * n * n * cfg.hidden_size for n in lengths)
    return {"rows": len(lengths), "mean_tokens": float(np.mean(lengths)), "max_tokens": int(max(lengths)),
            "useful_mflops_per_row": useful / len(lengths) / 1e6, "padded_over_useful": computed / useful,
            "attention_share_of_flops": attention / useful}


# ------------------------------------------------------------------------------------------ the runs
def prepare(model: str, work: Path, rows: int):
    """(transformers folder, exported folder, texts, csv of those texts, description)."""
    if model == "small":
        bs = bench_module("serving")
        df = pd.read_csv(DATA / "ko-help" / "train.csv", dtype=str, keep_default_na=False)
        args = SimpleNamespace(work=work, epochs=0, shape="small", retrain=False, blend=False)
        model_dir, _, info, _ = bs.prepare_built(args, df, work / "onnx")
        df = df.sample(min(rows, len(df)), random_state=0)
        what = f"ELECTRA-Small shape, random weights ({info['shape']}), ko-help rows"
    else:
        from serving.export import ExportConfig
        from serving.export import run as export
        from textdata.errors import ModelError

        model_dir, eval_csv = bench_module("minilm_bbc").build(work)
        if not (work / "onnx" / "export_report.json").exists():
            try:
                export(ExportConfig(model=model_dir, output=work / "onnx", quantize=True, eval_csv=eval_csv))
            except ModelError as e:  # INT8 failed the gate: fp32 serves, still measured
                print(f"export: {e}", flush=True)
        df = pd.read_csv(eval_csv, dtype=str, keep_default_na=False)
        df = df.sample(min(rows, len(df)), random_state=0)
        what = "MiniLM-L6 fine-tuned 1 epoch on 70% of BBC News (bench/minilm_bbc.py), held-out rows"
    csv = work / f"rows-{len(df)}.csv"
    df[["text"]].to_csv(csv, index=False)
    return model_dir, work / "onnx", df["text"].tolist(), csv, what


def rows_per_second_round(engines: dict, seqs, texts, csv: Path, onnx_dir: Path, pipe, work: Path, roof: Roof,
                          seconds: float) -> dict:
    """One round: the roof, then each engine alone (wall rows/s and rows per CPU-second), `serving.score` end to end,
    and the pipeline."""
    import torch

    from serving import score

    out = {"roof": roof.measure(seconds)}
    for name, clf in engines.items():
        t, c = time.perf_counter(), time.process_time()
        clf._logits(seqs)
        out[f"engine_{name}"] = len(seqs) / (time.perf_counter() - t)
        out[f"engine_{name}_per_cpu_second"] = len(seqs) / max(time.process_time() - c, 1e-9)
    threads = engines["default"].info()["cpu_threads"]["threads"]
    s = score.run(score.ScoreConfig(model=onnx_dir, input=csv, output=work / "scored.csv", progress=False,
                                    threads=threads))
    out["score_default"] = s["rows_per_second"]
    with torch.inference_mode():
        t, c = time.perf_counter(), time.process_time()
        pipe(texts, batch_size=32, truncation=True)
        out["pipeline_bs32"] = len(texts) / (time.perf_counter() - t)
        out["pipeline_bs32_per_cpu_second"] = len(texts) / max(time.process_time() - c, 1e-9)
    return out


def shares_of_round(r: dict, useful_flops: float, served_int8: bool) -> dict:
    """Achieved GFLOP/s over the same round's roof: wall over wall, per CPU-second over per CPU-second."""
    out = {}
    for key in ("engine_default", "engine_fp32", "score_default"):
        if key not in r:
            continue
        kind = "int8" if served_int8 and key != "engine_fp32" else "fp32"
        out[key] = r[key] * useful_flops / 1e9 / r["roof"][f"attainable_{kind}_wall"]
        if f"{key}_per_cpu_second" in r:
            out[f"{key}_per_cpu_second"] = (r[f"{key}_per_cpu_second"] * useful_flops / 1e9
                                            / r["roof"][f"attainable_{kind}_cpu"])
    return out


def measure_model(model: str, args, isa: str) -> dict:
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer, pipeline

    from serving.engine import Classifier
    from serving.quantize import ISA_WEIGHTS

    work = args.work / model
    work.mkdir(parents=True, exist_ok=True)
    model_dir, onnx_dir, texts, csv, what = prepare(model, work, args.rows)
    cfg = AutoConfig.from_pretrained(model_dir)
    default = Classifier.load(onnx_dir, blend=False, threads=args.threads)
    plan = SimpleNamespace(**default.info()["cpu_threads"])  # the roof is measured with the engine's own threads
    engines = {"default": default}
    served_int8 = default.info()["quantized"]
    if served_int8:
        engines["fp32"] = Classifier.load(onnx_dir, quantized=False, blend=False, threads=plan.threads)
    seqs = default.encode(texts)
    work_info = work_of(cfg, seqs, default.batch_tokens)
    weight_type = (json.loads((onnx_dir / "export_report.json").read_text()).get("quantization") or {}).get(
        "weight_type", ISA_WEIGHTS[isa].dynamic)  # the served INT8 file's weights (u8 or s8)
    roof = Roof(cfg, default.batch_tokens, plan, weight_type)
    torch.set_num_threads(plan.threads)  # the pipeline gets the same cores, chosen the same way
    pipe = pipeline("text-classification", model=AutoModelForSequenceClassification.from_pretrained(model_dir),
                    tokenizer=AutoTokenizer.from_pretrained(model_dir), device=-1)
    rounds = []
    for i in range(args.rounds):
        rounds.append(rows_per_second_round(engines, seqs, texts, csv, onnx_dir, pipe, work, roof,
                                            args.seconds / args.rounds))
        rounds[-1]["share_of_roof"] = shares_of_round(rounds[-1], work_info["useful_mflops_per_row"] * 1e6, served_int8)
        print(f"  round {i + 1}: " + ", ".join(f"{k} {v:.0f}" for k, v in rounds[-1].items() if isinstance(v, float))
              + " | shares " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in rounds[-1]["share_of_roof"].items()),
              flush=True)
    med = lambda get: float(statistics.median(get(r) for r in rounds))
    rows_s = {k: med(lambda r, k=k: r[k]) for k, v in rounds[0].items() if isinstance(v, float)}
    roof_med = {k: med(lambda r, k=k: r["roof"][k]) for k in rounds[0]["roof"] if k.startswith("attainable_")}
    return {"model": what, "config": {k: getattr(cfg, k, None) for k in ("model_type", "hidden_size", "num_hidden_layers",
            "num_attention_heads", "intermediate_size", "embedding_size", "num_labels")},
            "served_file": default.info()["model_file"], "served_why": default.info()["model_file_why"],
            "served_int8": served_int8, "int8_weight_type": weight_type, "max_length": default.max_length,
            "batch_tokens": default.batch_tokens, "threads": vars(plan), "work": work_info, "roof": roof_med,
            "rows_per_second": rows_s,
            "share_of_roof": {k: med(lambda r, k=k: r["share_of_roof"][k]) for k in rounds[0]["share_of_roof"]},
            "over_pipeline": {k: v / rows_s["pipeline_bs32"] for k, v in rows_s.items()
                              if k != "pipeline_bs32" and not k.endswith("per_cpu_second")},
            "over_pipeline_per_cpu_second": {k: v / rows_s["pipeline_bs32_per_cpu_second"] for k, v in rows_s.items()
                                             if k.startswith("engine_") and k.endswith("per_cpu_second")},
            "rounds": rounds}


def print_table(result: dict) -> None:
    m = result["machine"]
    print(f"\n{m['cpu']}: {m['isa']}, {m['limits']['usable']} usable cores (affinity {m['limits']['affinity']}, "
          f"quota {m['limits']['quota']}); load average {m['loadavg_before'][0]:.1f} -> {m['loadavg_after'][0]:.1f}; "
          "threads per model: " + ", ".join(f"{k} {r['threads']['threads']} (spinning {r['threads']['spinning']})"
                                            for k, r in result["models"].items()))
    print("\n| model, file | mean tokens | MFLOP/row (padded x) | roof GFLOP/s wall / per CPU-s | engine rows/s | "
          "share of roof: wall / per CPU-s | score rows/s (share) | pipeline rows/s | engine / pipeline: wall / "
          "per CPU-s | score / pipeline |\n|---|---|---|---|---|---|---|---|---|---|")
    for name, r in result["models"].items():
        w, roof, rs, sh, op = r["work"], r["roof"], r["rows_per_second"], r["share_of_roof"], r["over_pipeline"]
        for key, file, kind in (("default", r["served_file"], "int8" if r["served_int8"] else "fp32"),
                                ("fp32", "model.onnx (forced)", "fp32")):
            e = f"engine_{key}"
            if e not in rs:
                continue
            first = key == "default"
            print(f"| {name}, {file} | {w['mean_tokens']:.1f} | {w['useful_mflops_per_row']:.0f} "
                  f"({w['padded_over_useful']:.2f}x) | {kind} {roof[f'attainable_{kind}_wall']:.0f} / "
                  f"{roof[f'attainable_{kind}_cpu']:.0f} | {rs[e]:.0f} | {100 * sh[e]:.0f}% / "
                  f"{100 * sh[e + '_per_cpu_second']:.0f}% | "
                  + (f"{rs['score_default']:.0f} ({100 * sh['score_default']:.0f}%) | {rs['pipeline_bs32']:.0f} | "
                     if first else "| | ")
                  + f"{op[e]:.1f}x / {r['over_pipeline_per_cpu_second'][e + '_per_cpu_second']:.1f}x | "
                  + (f"{op['score_default']:.1f}x |" if first else "|"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/roofline"))
    ap.add_argument("--models", default="small,minilm")
    ap.add_argument("--rows", type=int, default=2000, help="seeded sample of rows scored per model")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0, help="GEMM microbenchmark time per model")
    ap.add_argument("--name", default="", help="results file suffix")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for everything measured (default: the engine's plan, textdata/cpu_limits.py)")
    args = ap.parse_args()

    from serving.quantize import cpu_isa
    from textdata.cpu_limits import plan_threads, read_limits

    limits, plan, isa = read_limits(), plan_threads(), cpu_isa()
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else platform.processor()
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "command": "python bench/roofline.py " + " ".join(sys.argv[1:]),
              "machine": {"cpu": cpu, "isa": isa, "machine_cpus": os.cpu_count(), "limits": {
                  "affinity": limits.affinity, "quota": limits.quota, "usable": limits.usable},
                  "plan_at_start": plan.as_dict(), "loadavg_before": os.getloadavg()}, "models": {}}
    dest = ROOT / "bench" / "results" / f"roofline{'-' + args.name if args.name else ''}.json"
    for model in [m for m in args.models.split(",") if m]:
        print(f"== {model}", flush=True)
        result["models"][model] = measure_model(model, args, isa)
        result["machine"]["loadavg_after"] = os.getloadavg()
        dest.write_text(json.dumps(result, indent=2) + "\n")  # after each model: a kill keeps the rest
    print_table(result)
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()
