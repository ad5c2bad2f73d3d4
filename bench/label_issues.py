"""Label-issue detection measured: flip 10% of the labels at random, find them, review them by oracle, retrain.

    OMP_NUM_THREADS=1 nice -n 10 python -m bench label_issues [--only bbc|ko-help] [--output runs/bench-li]

Per data set, three k-fold runs: clean, noisy (10% of labels flipped, fixed seed), repaired (every row the noisy
run's label_issues.csv flagged set back to its true label). Reports precision and recall of the flagged rows
(and of the top N), macro-F1 of what is served against the TRUE labels for the three, recovery = (repaired -
noisy) / (clean - noisy), and the step's share of the k-fold's wall time. BBC News: `finetune/kfold.py --model
minilm --folds 3 --epochs 1 --max-length 64` (the README's main job) as child processes; ko-help: grouped 5-fold
of the TF-IDF baseline in this process. Finished runs in --output are reused (delete them to rerun).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from baseline.folds import baseline_predict
from bench import harness as h
from finetune import label_issues
from finetune.data import bbcnews_csv, load_labeled, make_folds
from finetune.metrics import fold_metrics
from textdata.tables import write_json

KO_HELP = h.KO_HELP
BBC_ARGS = ["--model", "minilm", "--folds", "3", "--epochs", "1", "--max-length", "64"]


def flip(labels: pd.Series, share: float, seed: int) -> tuple[pd.Series, np.ndarray]:
    """`share` of the rows given another class, uniformly among the others (fixed seed); the flipped rows."""
    rng = np.random.default_rng(seed)
    names = np.array(sorted(labels.unique()))
    rows = np.sort(rng.choice(len(labels), size=round(share * len(labels)), replace=False))
    noisy = labels.to_numpy(dtype=object).copy()
    for i in rows:
        others = names[names != noisy[i]]
        noisy[i] = others[rng.integers(len(others))]
    return pd.Series(noisy, index=labels.index), rows


def detection(issues_csv: Path, flipped: np.ndarray) -> dict:
    found = pd.read_csv(issues_csv)
    flagged = found["row"].to_numpy()
    truth = set(flipped.tolist())
    top = flagged[:len(flipped)]
    hits = len(truth & set(flagged.tolist()))
    return {"n_flipped": len(flipped), "n_flagged": len(flagged),
            "precision": round(hits / max(len(flagged), 1), 4), "recall": round(hits / max(len(flipped), 1), 4),
            "top_n": len(top), "top_n_precision": round(len(truth & set(top.tolist())) / max(len(top), 1), 4)}


def served_f1(oof_csv: Path, true_labels: pd.Series, report: dict) -> float:
    """Macro-F1 of the served out-of-fold predictions against the true labels (not the noisy ones)."""
    oof = pd.read_csv(oof_csv, dtype={"pred_label": str, "blend_pred_label": str}, keep_default_na=False)
    column = "blend_pred_label" if (report.get("blend") or {}).get("kept") else "pred_label"
    labels = sorted(true_labels.unique())
    ids = {n: i for i, n in enumerate(labels)}
    pred = oof[column].map(ids).to_numpy()
    return round(fold_metrics(true_labels.map(ids).to_numpy(), pred, labels)["macro_f1"], 4)


def repaired(noisy: pd.DataFrame, true_labels: pd.Series, issues_csv: Path) -> pd.DataFrame:
    fixed = noisy.copy()
    rows = pd.read_csv(issues_csv)["row"].to_numpy()
    fixed.loc[fixed.index[rows], "label"] = true_labels.iloc[rows].to_numpy()
    return fixed


def kfold(data: Path, out: Path) -> dict:
    """finetune/kfold.py as a child process (reused when out/report.json exists); its report, CPU-seconds."""
    if not (out / "report.json").exists():
        cmd = [sys.executable, str(ROOT / "finetune" / "kfold.py"), "--data", str(data), *BBC_ARGS, "--output", str(out)]
        print("running", " ".join(cmd), file=sys.stderr)
        before = os.times()
        with open(out.parent / f"{out.name}.log", "w") as log:
            subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
        after = os.times()
        (out / "cpu_seconds.txt").write_text(f"{after.children_user + after.children_system - before.children_user - before.children_system:.1f}\n")
    return json.loads((out / "report.json").read_text())


def bbc(out: Path, share: float, seed: int) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    clean = pd.read_csv(bbcnews_csv(Path.home() / ".cache" / "electra-classify"), dtype=str, keep_default_na=False)
    truth = clean["label"]
    noisy = clean.copy()
    noisy["label"], flipped = flip(truth, share, seed)
    files = {"clean": out / "clean.csv", "noisy": out / "noisy.csv"}
    clean.to_csv(files["clean"], index=False)
    noisy.to_csv(files["noisy"], index=False)
    reports = {v: kfold(files[v], out / v) for v in ("noisy", "clean")}  # noisy first: the review waits on it
    issues = out / "noisy" / label_issues.FILE
    files["repaired"] = out / "repaired.csv"
    repaired(noisy, truth, issues).to_csv(files["repaired"], index=False)
    reports["repaired"] = kfold(files["repaired"], out / "repaired")
    return summarize("bbc", reports, {v: served_f1(out / v / "oof_predictions.csv", truth, reports[v])
                                      for v in reports}, detection(issues, flipped), out)


def summarize(name: str, reports: dict, f1: dict, found: dict, out: Path) -> dict:
    cost = {v: {"label_issues_seconds": r["label_issues"]["seconds"], "kfold_wall_seconds": r["wall_seconds"],
                "share": round(r["label_issues"]["seconds"] / r["wall_seconds"], 4)}
            for v, r in reports.items() if r.get("label_issues") and "seconds" in r["label_issues"]}
    lost = f1["clean"] - f1["noisy"]
    return {"data": name, "output": str(out), "detection": found, "served_macro_f1_vs_true_labels": f1,
            "served": {v: (r.get("label_issues") or {}).get("probabilities") for v, r in reports.items()},
            "reported_macro_f1": {v: round((r["blend"] if (r.get("blend") or {}).get("kept") else r)["macro_f1_mean"], 4)
                                  for v, r in reports.items()},
            "noise_cost": round(lost, 4), "recovered": round(f1["repaired"] - f1["noisy"], 4),
            "recovery_share": round((f1["repaired"] - f1["noisy"]) / lost, 3) if lost > 0 else None,
            "cost": cost, "cpu_seconds": {v: _cpu(out / v) for v in reports},
            "per_class_noisy": reports["noisy"]["label_issues"]["per_class"]}


def _cpu(run: Path) -> float | None:
    """The k-fold child's user + system seconds, where it ran as one (kfold())."""
    f = run / "cpu_seconds.txt"
    return float(f.read_text()) if f.exists() else None


def tfidf_kfold(csv: Path, out: Path, seed: int) -> dict:
    """ko-help: grouped 5-fold of the TF-IDF baseline (k-fold's folds and baseline), then the label-issue step
    as k-fold runs it; a report.json shaped like k-fold's for what summarize reads."""
    if (out / "report.json").exists():  # finished: reused, as the BBC runs are
        return json.loads((out / "report.json").read_text())
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    data = load_labeled(csv, group_column="page", folds=5)
    folds = make_folds(data.y, data.groups, 5, seed)
    oof = np.zeros((len(data.y), len(data.labels)))
    fold_of = np.zeros(len(data.y), dtype=np.int64)
    for k, (tr, va) in enumerate(folds):
        oof[va] = baseline_predict(data.texts, data.y, tr, va, seed * 1000 + k)
        fold_of[va] = k
    report = {"wall_seconds": None, "blend": None,
              "macro_f1_mean": float(np.mean([fold_metrics(data.y[va], oof[va].argmax(1), data.labels)["macro_f1"]
                                              for _, va in folds]))}
    warnings: list[str] = []
    report["label_issues"] = label_issues.run("auto", out, data, oof, None, None, fold_of, csv, warnings,
                                              label_issues.SingleLabelIssues())
    report["label_issues"]["probabilities"] = "TF-IDF baseline (out-of-fold)"  # passed where the model's go
    report["wall_seconds"] = round(time.time() - started, 1)
    pred = np.full(len(data.table), "", dtype=object)
    pred[data.keep] = np.array(data.labels, dtype=object)[oof.argmax(1)]
    pd.DataFrame({"pred_label": pred}).to_csv(out / "oof_predictions.csv", index=False)
    write_json(out / "report.json", report)
    return report


def ko_help(out: Path, share: float, seed: int, path: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    clean = pd.read_csv(path, dtype=str, keep_default_na=False)
    truth = clean["label"]
    noisy = clean.copy()
    noisy["label"], flipped = flip(truth, share, seed)
    noisy.to_csv(out / "noisy.csv", index=False)
    reports = {"clean": tfidf_kfold(path, out / "clean", seed), "noisy": tfidf_kfold(out / "noisy.csv", out / "noisy", seed)}
    issues = out / "noisy" / label_issues.FILE
    repaired(noisy, truth, issues).to_csv(out / "repaired.csv", index=False)
    reports["repaired"] = tfidf_kfold(out / "repaired.csv", out / "repaired", seed)
    f1 = {v: served_f1(out / v / "oof_predictions.csv", truth, reports[v]) for v in reports}
    return summarize("ko-help (TF-IDF baseline, grouped 5-fold)", reports, f1, detection(issues, flipped), out)


def table(results: list[dict]) -> str:
    head = f"{'data':<44} {'flipped':>7} {'flagged':>7} {'prec':>6} {'recall':>6} {'top-N prec':>10} " \
           f"{'F1 clean':>8} {'noisy':>6} {'repaired':>8} {'recovery':>8} {'step/k-fold':>11}"
    lines = [head, "-" * len(head)]
    for r in results:
        d, f = r["detection"], r["served_macro_f1_vs_true_labels"]
        rec = "n/a" if r["recovery_share"] is None else f"{r['recovery_share']:.0%}"
        share = max(c["share"] for c in r["cost"].values())
        lines.append(f"{r['data']:<44} {d['n_flipped']:>7} {d['n_flagged']:>7} {d['precision']:>6.3f} "
                     f"{d['recall']:>6.3f} {d['top_n_precision']:>10.3f} {f['clean']:>8.4f} {f['noisy']:>6.4f} "
                     f"{f['repaired']:>8.4f} {rec:>8} {share:>11.2%}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=("bbc", "ko-help"))
    p.add_argument("--output", default="runs/bench-label-issues", help="where the runs go (reused when finished)")
    p.add_argument("--ko-help", type=Path, default=KO_HELP, help="ko-help's train.csv")
    p.add_argument("--noise", type=float, default=0.1, help="share of labels flipped")
    p.add_argument("--seed", type=int, default=0, help="which rows are flipped, and to what")
    p.add_argument("--results", default=str(h.RESULTS / "label_issues.json"))
    a = p.parse_args(argv)
    out = Path(a.output)
    results = []
    if a.only in (None, "ko-help"):
        results.append(ko_help(out / "ko-help", a.noise, a.seed, a.ko_help))
    if a.only in (None, "bbc"):
        results.append(bbc(out / "bbc", a.noise, a.seed))
    print(table(results))
    previous = json.loads(Path(a.results).read_text()) if Path(a.results).exists() else {}
    kept = {r["data"]: r for r in previous.get("results", [])}
    kept.update({r["data"]: r for r in results})
    h.write_record(Path(a.results), {
        "what": "10% labels flipped at random; cleanlab on out-of-fold probabilities; oracle review; k-fold again",
        "kfold": "python finetune/kfold.py --data {clean,noisy,repaired}.csv " + " ".join(BBC_ARGS),
        "noise": a.noise, "seed": a.seed, "results": list(kept.values())})
    return 0


if __name__ == "__main__":
    sys.exit(main())
