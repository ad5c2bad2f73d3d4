"""The paper's efficiency comparison (Clark et al. 2020, table 5) at small scale: one pretraining per objective,
same model, data, steps and batch, each fine-tuned with the same grouped k-fold recipe.

    python pretraining/ablate.py --labeled ../shared/data/ko-help/train.csv --group-column page \\
        --output runs/ablation -- --corpus ../shared/data/corpus/ko-text.txt --preset tiny --max-steps 600

Everything after `--` is a pretraining flag (pretraining/train.py --help), shared by every row; --objective and
--output are set per row. Rows: electra, electra-15, replace-mlm, all-tokens-mlm, mlm (BERT), then the same
architecture with random weights and the char TF-IDF baseline on the same folds. Fine-tuning runs
`python -m finetune.kfold` in a subprocess (pretraining/ imports no other stage). Equal compute means equal steps
× batch on the same discriminator, as in the paper; the CPU seconds each pretraining took are in the table,
because the objectives do not cost the same per step (mlm has no generator, replace-mlm two MLM heads).

Resumable: finished rows are kept in OUTPUT/ablation.json and not recomputed; a killed pretraining or
fine-tuning continues from its own checkpoints. Writes OUTPUT/ablation.json, ablation.png, one folder per row.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

if __name__ == "__main__":  # outside the project's venv: a one-line hint, not a traceback
    try:
        from pretraining.config import hint_on_missing_module
    except ModuleNotFoundError as e:
        sys.exit(f"error: {e}: activate the project's venv (source .venv/bin/activate) or install it: pip install -e .")
    sys.excepthook = hint_on_missing_module

from pretraining.config import TrainConfig, UsageError, build_parser, config_from_args, exits_2_on_usage_error

ROWS = ("electra", "electra-15", "replace-mlm", "all-tokens-mlm", "mlm")
LABELS = {"electra": "ELECTRA", "electra-15": "ELECTRA 15%", "replace-mlm": "Replace MLM",
          "all-tokens-mlm": "All-Tokens MLM", "mlm": "BERT (MLM)", "random-init": "random init",
          "tfidf": "char TF-IDF + LR"}
# The recipe measured for tiny encoders on ko-help (docs/results.md, "Korean: ko-help grouped by page") (early stopping picks the epoch).
FINETUNE = "--folds 5 --max-length 64 --epochs 10 --batch-size 32 --lr 1e-3 --class-weights --patience 3"
CPU_DEFAULTS = ["--preset", "tiny", "--batch-size", "32", "--lr", "1e-3", "--warmup-steps", "60", "--max-steps", "600"]


def write_json(path: Path, value) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value, indent=1))
    os.replace(tmp, path)


def pretrain(cfg: TrainConfig) -> dict:
    """Pretrain (or finish) one row; returns its CPU/wall seconds and last log record."""
    from pretraining.train import train

    out = Path(cfg.output)
    timing_path = out / "timing.json"
    if not timing_path.exists():
        # A resumed pretraining counts only its own part: the time before the kill is lost with the process.
        cpu, wall = time.process_time(), time.perf_counter()
        train(dataclasses.replace(cfg, resume=(out / "checkpoint.pt").exists()))
        write_json(timing_path, {"cpu_seconds": round(time.process_time() - cpu, 1),
                                 "wall_seconds": round(time.perf_counter() - wall, 1), "load_average": os.getloadavg()})
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines() if line.strip()]
    return {**json.loads(timing_path.read_text()), "last_log": log[-1] if log else {}}


def finetune(model: Path, output: Path, labeled: str, group_column: str | None, finetune_args: str,
             random_init: bool = False) -> dict:
    """`python -m finetune.kfold` on `model`; returns its report.json."""
    cmd = [sys.executable, "-m", "finetune.kfold", "--model", str(model), "--data", labeled, "--output", str(output),
           *shlex.split(finetune_args), *(["--group-column", group_column] if group_column else []),
           *(["--random-init"] if random_init else []), *(["--resume"] if (output / "config.json").exists() else [])]
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0:
        raise UsageError(f"fine-tuning {model} failed ({' '.join(cmd)}): {proc.stderr.strip()[-500:]}")
    return json.loads((output / "report.json").read_text())


def score(report: dict) -> dict:
    return {k: report[k] for k in ("macro_f1_mean", "macro_f1_std", "accuracy_mean", "accuracy_std")}


def run(base: TrainConfig, args, pretrain=pretrain, finetune=finetune) -> list[dict]:
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "ablation.json"
    setup = {"pretraining": {**base.to_dict(), "objective": None, "output": None}, "labeled": args.labeled,
             "group_column": args.group_column, "finetune_args": args.finetune_args}
    setup = json.loads(json.dumps(setup))  # as it reads back from the file (tuples become lists)
    saved = json.loads(results_path.read_text()) if results_path.exists() else {"setup": setup, "rows": []}
    if saved["setup"] != setup:
        raise UsageError(f"{results_path} holds an ablation with other settings; choose another --output")
    rows = {r["row"]: r for r in saved["rows"]}
    if base.tokenizer is None:  # one vocabulary for every row, trained as pretraining/train.py trains its own
        from pretraining.corpus import corpus_as_text
        from pretraining.train import prepare_tokenizer

        corpus = corpus_as_text(base.corpus, base.text_column, out / "corpus")  # tables read by their column
        prepare_tokenizer(base, out, True, lambda: None, corpus)
        base = dataclasses.replace(base, tokenizer=str(out / "tokenizer"))

    def keep(row: dict) -> None:
        rows[row["row"]] = row
        write_json(results_path, {"setup": setup, "rows": [rows[k] for k in rows]})  # after every row: resumable
        print(f"{LABELS[row['row']]:<16} macro-F1 {row['macro_f1_mean']:.4f} ± {row['macro_f1_std']:.4f}",
              file=sys.stderr)

    ft = (args.labeled, args.group_column, args.finetune_args)
    for objective in args.objectives:
        if objective in rows:
            continue
        cfg = dataclasses.replace(base, objective=objective, output=str(out / objective))
        timing = pretrain(cfg)
        report = finetune(out / objective / "discriminator", out / objective / "kfold", *ft)
        baseline = report["baseline"]
        keep({"row": objective, **score(report), **timing, "steps": cfg.max_steps, "batch_size": cfg.batch_size,
              "tfidf_macro_f1_mean": baseline["macro_f1_mean"]})
        if "tfidf" not in rows:
            keep({"row": "tfidf", **{k: baseline[k] for k in ("macro_f1_mean", "macro_f1_std")}})
    if "random-init" not in rows:
        model = out / args.objectives[0] / "discriminator"
        keep({"row": "random-init", **score(finetune(model, out / "random-init" / "kfold", *ft, random_init=True))})
    order = [*args.objectives, "random-init", "tfidf"]
    table = [rows[k] for k in order if k in rows]
    print(format_table(table))
    plot(table, out / "ablation.png")
    return table


def accuracies(row: dict) -> tuple[float | None, float | None]:
    """(the fine-tuned model's own pretraining accuracy, the generator's MLM accuracy) at the last log:
    RTD accuracy for electra rows, masked-token accuracy for mlm and replace-mlm, none for all-tokens-mlm."""
    log = row.get("last_log", {})
    if row["row"] == "mlm":  # no generator: gen_acc is the model's own MLM accuracy
        return log.get("gen_acc"), None
    main = log.get("disc_acc") if log.get("disc_acc") is not None else log.get("main_mlm_acc")
    return main, log.get("gen_acc")


def format_table(rows: list[dict]) -> str:
    def cell(value):
        return "" if value is None else f"{value:.3f}"

    lines = [f"{'pretraining':<16} {'macro-F1':>17} {'accuracy':>9} {'pretrain CPU s':>15} {'own acc':>8} {'gen acc':>8}"]
    for r in rows:
        own, gen = accuracies(r)
        lines.append(f"{LABELS[r['row']]:<16} {r['macro_f1_mean']:>8.4f} ± {r['macro_f1_std']:.4f} "
                     f"{r.get('accuracy_mean', float('nan')):>9.4f} {r.get('cpu_seconds', float('nan')):>15.0f} "
                     f"{cell(own):>8} {cell(gen):>8}")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 0.45 * len(rows) + 1))
    names = [LABELS[r["row"]] for r in rows][::-1]
    ax.barh(names, [r["macro_f1_mean"] for r in rows][::-1], xerr=[r["macro_f1_std"] for r in rows][::-1],
            color=["#999" if r["row"] in ("tfidf", "random-init") else "#3b75af" for r in rows][::-1])
    ax.set_xlabel("macro-F1, mean ± std over folds")
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, path)


def parse(argv=None) -> tuple[TrainConfig, argparse.Namespace]:
    argv = list(sys.argv[1:] if argv is None else argv)
    ours, rest = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                allow_abbrev=False)
    p.add_argument("--labeled", required=True, help="labeled table for finetune/kfold.py (text and label columns)")
    p.add_argument("--group-column", help="passed to kfold: keep each group in one fold")
    p.add_argument("--output", required=True)
    p.add_argument("--objectives", nargs="+", default=list(ROWS), choices=ROWS)
    p.add_argument("--finetune-args", default=FINETUNE, help=f"kfold flags shared by every row (default: {FINETUNE})")
    args = p.parse_args(ours)
    # Without --preset the CPU-sized defaults; with one, that preset's own schedule.
    given = build_parser("pretraining flags").parse_args(
        [*([] if "--preset" in rest else CPU_DEFAULTS), *rest, "--output", "unused"])
    return config_from_args(given), args


@exits_2_on_usage_error
def main(argv=None) -> int:
    base, args = parse(argv)
    run(base, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
