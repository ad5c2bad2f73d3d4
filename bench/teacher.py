"""Learning from a simulated LLM teacher plus 8 gold labels a class, measured on unseen gold rows (BBC News).

    OMP_NUM_THREADS=1 nice -n 10 python -m bench teacher [--seeds 5]   # ~1-3 min on 2 shared cores
    python -m bench teacher --data ko-help|debtags --seeds 3
    python -m bench teacher --gold-weights 1 5 0   # --gold-weight's choice: gold rows x1, x5 and auto

The teacher errs as an LLM does, systematically: deterministic per text; errors on the texts a reference model
(TF-IDF + LR, out of fold) finds hardest, to its likeliest wrong class; one class never answered (`tech` as
`business`, cut to 120 texts). Teachers at ~70% and ~85%. Per seed: 40% unseen gold rows; from the rest 8 gold
labels a class, the teacher labels the others. The student (word TF-IDF + SGD logistic regression) trained on: the
teacher's labels as if gold (today, the baseline of every ratio), gold only, gold + corrected teacher
(finetune/teacher_data.py, what --teacher-column does), truth (ceiling). The cascade: the student answers its surest
70%, the teacher the rest. Medians over seeds. (A random-error teacher, --student baseline and --groups were
measured until issue 60: docs/notes/log.md, git history.)
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import harness as h
from finetune import teacher_data as td

NEVER, NEIGHBOUR, NEVER_KEEP = "tech", "business", 120
GOLD_PER_CLASS = 8
PRODUCT = "gold xauto + corrected"  # what --teacher-column does: gold rows repeated (auto), teacher rows corrected
KO_HELP = h.KO_HELP
# --data ko-help: the never-answered class is the smallest, Draw (2% of rows), answered as Impress (the same drawing
# tools: an LLM given a label set without Draw); no cut needed. Char n-grams: Korean words carry particles.
DEBTAGS = KO_HELP.parents[1] / "debtags" / "train.csv"
# --data debtags: the single-label form is the `role` facet (what a Debian package is: shared-lib, devel-lib,
# program, documentation, ...), rows with exactly one role tag (9,661 of 13,294); the never-answered class is
# role::data (1.2% of those rows), answered role::app-data (an LLM whose label set has one "data" label).
DATASETS = {"bbcnews": ("tech", "business", "word"), "ko-help": ("sdraw", "simpress", "char"),
            "debtags": ("role::data", "role::app-data", "char")}
ANALYZER = "word"
GOLD_WEIGHTS = (0,)  # gold rows repeated W times (0: auto, what --teacher-column does); --gold-weights


def use(name: str) -> None:
    """Point the module's settings at data set `name` (DATASETS)."""
    global NEVER, NEIGHBOUR, ANALYZER
    NEVER, NEIGHBOUR, ANALYZER = DATASETS[name]


def coded(df):
    """(texts, class ids, class names) of a table with `text` and `label`."""
    labels = sorted(df.label.unique())
    return df.text.tolist(), df.label.map({x: i for i, x in enumerate(labels)}).to_numpy(), labels


def load(name: str):
    import pandas as pd

    if name == "ko-help":
        return coded(pd.read_csv(KO_HELP))
    if name == "debtags":
        df = pd.read_csv(DEBTAGS)
        roles = df["labels"].fillna("").map(lambda cell: [t for t in cell.split(";") if t.startswith("role::")])
        one = roles.map(len) == 1
        return coded(df[one].assign(label=roles[one].str[0]))
    from finetune.data import bbcnews_csv

    df = pd.read_csv(bbcnews_csv(Path.home() / ".cache" / "electra-classify"))
    return coded(pd.concat([df[df.label != NEVER], df[df.label == NEVER].head(NEVER_KEEP)]).reset_index(drop=True))


def features(texts):
    from sklearn.feature_extraction.text import TfidfVectorizer

    if ANALYZER == "char":
        return TfidfVectorizer(sublinear_tf=True, min_df=2, max_features=50000, analyzer="char_wb",
                               ngram_range=(2, 4)).fit_transform(texts)
    return TfidfVectorizer(sublinear_tf=True, min_df=2, max_features=30000).fit_transform(texts)


def sgd(seed: int):
    from sklearn.linear_model import SGDClassifier

    return SGDClassifier(loss="log_loss", alpha=1e-5, max_iter=30, tol=None, random_state=seed)


def proba(m, X, n: int) -> np.ndarray:
    out = np.zeros((X.shape[0], n))
    out[:, m.classes_] = m.predict_proba(X)
    return out


def reference_margins(X, y, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Out-of-fold (margin of the true class, most likely wrong class) per row: what makes a text hard for a reader."""
    from sklearn.model_selection import StratifiedKFold

    oof = np.zeros((len(y), n))
    for tr, va in StratifiedKFold(5, shuffle=True, random_state=0).split(X, y):
        oof[va] = proba(sgd(0).fit(X[tr], y[tr]), X[va], n)
    wrong = oof.copy()
    wrong[np.arange(len(y)), y] = -1
    return oof[np.arange(len(y)), y] - wrong.max(1), wrong.argmax(1)


def jitter(texts) -> np.ndarray:
    return np.array([int(hashlib.sha256(t.encode()).hexdigest()[:8], 16) / 16**8 for t in texts])


def simulated_teacher(texts, y, labels, margin, confusable, accuracy: float) -> np.ndarray:
    """The teacher's answer per text (class ids): deterministic per text, `accuracy` overall."""
    never, neighbour = labels.index(NEVER), labels.index(NEIGHBOUR)
    answer = y.copy()
    jit = jitter(texts)
    answer[y == never] = neighbour
    n_errors = max(0, round((1 - accuracy) * len(y)) - int((y == never).sum()))
    hard = np.argsort(margin + 0.5 * jit)  # hardest first; the jitter keeps it from being the reference model itself
    hard = [i for i in hard if y[i] != never][:n_errors]
    answer[hard] = np.where(confusable[hard] == never, neighbour, confusable[hard])
    return answer


def split(y, seed: int):
    from sklearn.model_selection import train_test_split

    pool, test = train_test_split(np.arange(len(y)), test_size=0.4, stratify=y, random_state=seed)
    rng = np.random.default_rng(seed)
    gold = np.concatenate([rng.choice(pool[y[pool] == c], GOLD_PER_CLASS, replace=False) for c in np.unique(y)])
    return gold, np.setdiff1d(pool, gold), test


def fit(X, rows, targets, seed, repeats=None):
    idx = rows if repeats is None else np.concatenate([np.repeat(r, k) for r, k in zip(rows, repeats)])
    tgt = targets if repeats is None else np.repeat(targets, repeats)
    return sgd(seed).fit(X[idx], tgt)


def methods(X, y, teacher, gold, rest, seed, n) -> dict:
    """Every student's probabilities on all rows, by method name."""
    on_gold, oof = fit(X, gold, y[gold], seed), gold_oof(X, gold, y, seed, n)
    fixed, weight = td.corrected_answers(proba(on_gold, X[rest], n), oof, y[gold], teacher[gold], teacher[rest], n, None)
    full = td.absorbing(y[gold], teacher[gold], teacher[rest], n)  # the candidates' nested scores, for the record
    scores = td.weight_scores(oof, y[gold], teacher[gold], td.teacher_confusion(y[gold], teacher[gold], n), n, None, full)
    choice = {"weight": weight, "gold_macro_f1_by_weight": {str(w): round(x, 4) for w, x in zip(td.TEXT_WEIGHTS, scores)},
              "absorbing_answers": np.flatnonzero(full).tolist()}
    rows = np.concatenate([gold, rest])
    out = {"gold only": on_gold,
           "today": fit(X, rows, np.concatenate([y[gold], teacher[rest]]), seed),
           "truth (ceiling)": fit(X, rows, y[rows], seed)}
    for w in GOLD_WEIGHTS:
        reps = np.concatenate([np.full(len(gold), td.gold_repeats(len(gold), len(rest), w)), np.ones(len(rest), int)])
        out[f"gold x{'auto' if w == 0 else w} + corrected"] = fit(X, rows, np.concatenate([y[gold], fixed]), seed, reps)
    return {name: proba(m, X, n) for name, m in out.items()}, choice


def gold_oof(X, gold, y, seed, n) -> np.ndarray:
    """Out-of-fold p(class | text) of the gold-only student on the gold rows (4 folds), for `text_weight`."""
    from sklearn.model_selection import StratifiedKFold

    oof = np.zeros((len(gold), n))
    for tr, va in StratifiedKFold(4, shuffle=True, random_state=seed).split(gold, y[gold]):
        oof[va] = proba(fit(X, gold[tr], y[gold[tr]], seed), X[gold[va]], n)
    return oof


def cascade(p_test, teacher_test, y_test, keep: float = 0.7) -> dict:
    conf = p_test.max(1)
    threshold = np.quantile(conf, 1 - keep)
    own = conf >= threshold
    answer = np.where(own, p_test.argmax(1), teacher_test)
    return {"share_answered": float(own.mean()), "accuracy": float((answer == y_test).mean()),
            "student_accuracy_on_its_share": float((p_test.argmax(1)[own] == y_test[own]).mean())}


def run_setting(X, texts, y, labels, ref, accuracy, seeds) -> dict:
    n, never = len(labels), labels.index(NEVER)
    teacher = simulated_teacher(texts, y, labels, *ref, accuracy)
    rows = []
    for seed in range(seeds):
        gold, rest, test = split(y, seed)
        row = {"teacher": {"macro_f1": td.macro_f1(y[test], teacher[test], n),
                           "never_answered_f1": per_class_f1(y[test], teacher[test], n)[never],
                           "accuracy": float((teacher[test] == y[test]).mean())}}
        got, choice = methods(X, y, teacher, gold, rest, seed, n)
        row["text_weight"] = choice["weight"]
        row["text_weight_choice"] = {**choice, "absorbing_answers": [labels[j] for j in choice["absorbing_answers"]]}
        for name, p in got.items():
            pred = p[test].argmax(1)
            row[name] = {"macro_f1": td.macro_f1(y[test], pred, n),
                         "never_answered_f1": per_class_f1(y[test], pred, n)[never],
                         "accuracy": float((pred == y[test]).mean()),
                         "cascade": cascade(p[test], teacher[test], y[test])}
        rows.append(row)
    return {"teacher_accuracy_all_rows": float((teacher == y).mean()), "per_seed": rows,
            "median": medians([{k: v for k, v in r.items() if k != "text_weight_choice"} for r in rows])}


def per_class_f1(y, pred, n) -> list[float]:
    from sklearn.metrics import f1_score

    return f1_score(y, pred, labels=list(range(n)), average=None, zero_division=0).tolist()


def medians(rows: list[dict]) -> dict:
    def walk(items):
        first = items[0]
        if isinstance(first, dict):
            return {k: walk([x[k] for x in items]) for k in first}
        return round(float(np.median(items)), 4)

    return walk(rows)


def table(results: dict) -> str:
    lines = []
    for setting, r in results["settings"].items():
        m = r["median"]
        lines.append(f"\n{setting} (teacher accuracy on all rows {r['teacher_accuracy_all_rows']:.3f}; text weight, "
                     f"median: {m['text_weight']})")
        lines.append(f"{'method':28} {'macro-F1':>8} {'vs teacher':>10} {NEVER + ' F1':>8} {'accuracy':>8} "
                     f"{'cascade: answered':>18} {'accuracy':>8}")
        t = m["teacher"]
        lines.append(f"{'teacher alone':28} {t['macro_f1']:8.3f} {'':>10} {t['never_answered_f1']:8.3f} "
                     f"{t['accuracy']:8.3f}")
        for name, s in m.items():
            if name not in ("teacher", "text_weight"):
                c = s["cascade"]
                lines.append(f"{name:28} {s['macro_f1']:8.3f} {s['macro_f1'] - t['macro_f1']:+10.3f} "
                             f"{s['never_answered_f1']:8.3f} {s['accuracy']:8.3f} {c['share_answered']:18.2f} "
                             f"{c['accuracy']:8.3f}")
    return "\n".join(lines)


def targets_per_split(results: dict) -> dict:
    """Issue 47's targets, split by split, for the product's student: at ~70% macro-F1 >= the teacher's + 0.05, at
    ~85% >= the teacher's, the never-answered class's F1 >= 0.5 at both, and at 85% the cascade answering >= 70%
    itself (the share is set to 0.70: ties at the threshold may keep a few more) at least as accurately as the
    teacher alone."""
    out = {}
    for setting, margin in (("systematic 70%", 0.05), ("systematic 85%", 0.0)):
        rows = []
        for seed, r in enumerate(results["settings"][setting]["per_seed"]):
            t, s, truth = r["teacher"], r[PRODUCT], r["truth (ceiling)"]
            row = {"seed": seed, "teacher_macro_f1": round(t["macro_f1"], 4), "student_macro_f1": round(s["macro_f1"], 4),
                   "never_answered_f1": round(s["never_answered_f1"], 4),
                   "truth_ceiling_macro_f1": round(truth["macro_f1"], 4),
                   "truth_ceiling_never_answered_f1": round(truth["never_answered_f1"], 4),
                   "macro_f1_met": s["macro_f1"] >= t["macro_f1"] + margin, "never_answered_met": s["never_answered_f1"] >= 0.5,
                   "text_weight": r["text_weight"], "gold_macro_f1_by_weight": r["text_weight_choice"]["gold_macro_f1_by_weight"]}
            if margin == 0.0:
                c = s["cascade"]
                row.update(cascade_share=round(c["share_answered"], 4), cascade_accuracy=round(c["accuracy"], 4),
                           teacher_accuracy=round(t["accuracy"], 4),
                           cascade_met=c["share_answered"] >= 0.695 and c["accuracy"] >= t["accuracy"])
            rows.append(row)
        out[setting] = rows
    return out


def targets_lines(per_split: dict) -> list[str]:
    met = lambda ok: "met" if ok else "NOT met"
    lines = [f"\nissue 47's targets per split ({PRODUCT}):"]
    for setting, rows in per_split.items():
        for r in rows:
            cascade = (f"; cascade {r['cascade_share']:.2f} answered, accuracy {r['cascade_accuracy']:.3f} vs teacher "
                       f"{r['teacher_accuracy']:.3f} {met(r['cascade_met'])}" if "cascade_met" in r else "")
            lines.append(f"{setting} seed {r['seed']}: {r['student_macro_f1']:.3f} vs teacher {r['teacher_macro_f1']:.3f} "
                         f"{met(r['macro_f1_met'])}; {NEVER} F1 {r['never_answered_f1']:.3f} "
                         f"{met(r['never_answered_met'])}{cascade}; truth (ceiling) {r['truth_ceiling_macro_f1']:.3f}; "
                         f"text weight {r['text_weight']} (gold macro-F1 by weight {r['gold_macro_f1_by_weight']})")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=5, help="splits per setting; medians reported (default: 5)")
    p.add_argument("--data", choices=sorted(DATASETS), default="bbcnews",
                   help=f"ko-help: {KO_HELP}; debtags: {DEBTAGS}, its role facet (set BENCH_DATA to their folder "
                        "elsewhere)")
    p.add_argument("--output", default=None, help="default: bench/results/teacher.json (teacher-ko-help.json)")
    p.add_argument("--gold-weights", type=int, nargs="+", default=[0],
                   help="gold rows repeated W times, each a student of its own (0: auto, what --teacher-column does)")
    a = p.parse_args(argv)
    if 0 not in a.gold_weights:
        p.error("--gold-weights: 0 (auto, what --teacher-column does) must be among them")
    use(a.data)
    global GOLD_WEIGHTS
    GOLD_WEIGHTS = tuple(a.gold_weights)
    a.output = a.output or h.RESULTS / ("teacher.json" if a.data == "bbcnews" else f"teacher-{a.data}.json")
    started = time.time()
    texts, y, labels = load(a.data)
    X = features(texts)
    ref = reference_margins(X, y, len(labels))
    settings = {"systematic 70%": 0.70, "systematic 85%": 0.85}
    name = f"BBC News, {NEVER} cut to {NEVER_KEEP}" if a.data == "bbcnews" else f"{a.data}, {NEVER} never answered"
    results = {"data": f"{name}: {len(y)} rows, {len(labels)} classes",
               "student": f"{ANALYZER} TF-IDF + SGD logistic regression", "gold_per_class": GOLD_PER_CLASS, "seeds": a.seeds, "settings": {}}
    for name, acc in settings.items():
        results["settings"][name] = run_setting(X, texts, y, labels, ref, acc, a.seeds)
    results["targets_per_split"] = targets_per_split(results)
    results["wall_seconds"] = round(time.time() - started, 1)
    print(table(results))
    print("\n".join(targets_lines(results["targets_per_split"])))
    h.write_record(a.output, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
