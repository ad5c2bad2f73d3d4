"""One text through the API, before vs after "no wait when idle" (issue 44), and where its milliseconds go.

    python -m bench one_text --model onnx/ --texts holdout.csv [--requests 300] [--clients 32] [--duration 20]
                             [--rounds 2] [--server-args "--int8"]

Two servers alternated --rounds times on the same folder: before, `--max-wait-ms 5` (the old default: an idle
engine waited 5 ms for company); after, the defaults. Each: --requests sequential requests of one text (p50/p90/p99),
then --clients closed-loop clients over --texts (requests/s, the mean batch formed). Ratios after/before (targets:
p50 lower, requests/s >= 1.0x). Then one request's stages in this process (medians, microseconds): tokenization,
the ONNX pass, baseline and blend, calibration, the rest of the engine, the JSON encoding; "HTTP and the rest" is
the API p50 (after) minus those.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]
from bench import harness as h

MODES = {"before": ["--max-wait-ms", "5"], "after": []}


async def sequential(url: str, text: str, n: int, warmup: int) -> dict:
    times, _ = await h.sequential(url, json.dumps({"text": text}, ensure_ascii=False).encode(), n, warmup)
    return h.percentiles(times, (50, 90, 99), 2)


def run_mode(mode: str, args, text: str, texts: list[str]) -> dict:
    proc, url = h.start_server(args.model, [*MODES[mode], *args.server_args.split()], args.work / f"server-{mode}.log")
    try:
        one = asyncio.run(sequential(url, text, args.requests, args.warmup))
        before = h.batch_stats(url)
        many = asyncio.run(h.load(url, texts, args.clients, args.duration))
        after = h.batch_stats(url)
    finally:
        h.stop_server(proc)
    return {**one, "rps": many["rps"], "rps_p50_ms": many["p50_ms"], "errors": many["errors"],
            "error_kinds": many["error_kinds"], "unanswered": many["unanswered"],
            "mean_batch_texts": h.ratio(after[0] - before[0], after[1] - before[1], 2)}


def _median_us(fn, repeats: int) -> float:
    return round(h.median_ms(h.timed(fn, repeats)) * 1000, 1)


def stages(model: Path, text: str, repeats: int, server_args: list[str]) -> dict:
    """Microseconds per stage of one text, as the server runs them (its engine settings)."""
    from starlette.responses import JSONResponse

    from app.config import parse_args, pass_size, quantized
    from app.http.api import _shape
    from serving.engine import Classifier

    cfg = parse_args(["--model", str(model), *server_args])
    clf = Classifier.load(model, batch_tokens=pass_size(cfg), threads=cfg.threads, quantized=quantized(cfg),
                          blend=cfg.blend)
    seqs = clf.encode([text])
    one = [np.arange(1)]
    logits = clf._logits(seqs, one)
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    out = {"tokenization": _median_us(lambda: clf.encode([text]), repeats),
           "onnx_pass": _median_us(lambda: clf._logits(seqs, one), repeats),
           "tokens": len(seqs[0]), "model_file": clf.info()["model_file"]}
    if clf.blend is not None:
        out["baseline"] = _median_us(lambda: clf.blend.baseline_proba([text]), repeats)
        base = clf.blend.baseline_proba([text])
        out["blend_combine"] = _median_us(lambda: clf.blend.combine(probs, base), repeats)
        probs = clf.blend.combine(probs, base)
    out["calibration"] = _median_us(lambda: clf.calibration.confident(clf.calibration(probs)), repeats)
    engine = _median_us(lambda: clf.predict_encoded(seqs), repeats)
    done = sum(out.get(k, 0) for k in ("onnx_pass", "baseline", "blend_combine", "calibration"))
    out["engine_rest"] = round(engine - done, 1)
    out["engine_total"] = engine
    pred = clf.predict_encoded(seqs)
    out["json_encoding"] = _median_us(lambda: JSONResponse({"model": "m", "model_version": "v1",
                                                             "predictions": [_shape(p, None) for p in pred]}),
                                      repeats)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, required=True, help="an export folder (serving.export)")
    ap.add_argument("--texts", type=Path, required=True, help="CSV with a text column: the load's texts; the "
                    "sequential text is its first of at least 64 words")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--duration", type=float, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--stage-repeats", type=int, default=300)
    ap.add_argument("--server-args", default="", help="extra flags for every server, e.g. '--int8'")
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-one-text"))
    ap.add_argument("--output", type=Path, default=h.RESULTS / "one_text.json")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    texts = pd.read_csv(args.texts, dtype=str, keep_default_na=False)["text"].tolist()
    text = next((t for t in texts if len(t.split()) >= 64), texts[0])
    runs = {mode: [] for mode in MODES}
    for r in range(args.rounds):
        for mode in MODES:
            print(f"round {r + 1}/{args.rounds}: {mode}...", flush=True)
            runs[mode].append(run_mode(mode, args, text, texts))
    med = {mode: {k: statistics.median(x[k] for x in rs) for k in rs[0] if isinstance(rs[0][k], (int, float))}
           for mode, rs in runs.items()}
    print("stages...", flush=True)
    stage = stages(args.model, text, args.stage_repeats, args.server_args.split())
    in_process = sum(stage.get(k, 0) for k in ("tokenization", "engine_total", "json_encoding"))
    stage["http_and_the_rest"] = round(med["after"]["p50_ms"] * 1000 - in_process, 1)
    ratios = {"p50_after_over_before": h.ratio(med["after"]["p50_ms"], med["before"]["p50_ms"]),
              "rps_after_over_before": h.ratio(med["after"]["rps"], med["before"]["rps"])}
    print(f"{'mode':<8}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'req/s @' + str(args.clients):>12}{'batch':>7}")
    for mode, m in med.items():
        print(f"{mode:<8}{m['p50_ms']:>9.2f}{m['p90_ms']:>9.2f}{m['p99_ms']:>9.2f}{m['rps']:>12.1f}"
              f"{m['mean_batch_texts'] or 0:>7.2f}")
    print(f"after/before: p50 {ratios['p50_after_over_before']}x, req/s {ratios['rps_after_over_before']}x")
    print("stages of one request (us): " + ", ".join(f"{k} {v}" for k, v in stage.items()))
    h.write_record(args.output, {"model": str(args.model), "text_words": len(text.split()), "requests": args.requests,
                                 "clients": args.clients, "duration_s": args.duration, "rounds": args.rounds,
                                 "server_args": args.server_args.split(), "modes": MODES, "median": med, "runs": runs,
                                 "ratios": ratios, "stages_us": stage})
    return 0


if __name__ == "__main__":
    sys.exit(main())
