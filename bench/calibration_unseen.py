"""Which calibrator makes the served scores calibrated on texts the model never saw, and why scaling loses on the
nested log-loss: every candidate fitted on k-fold's out-of-fold rows, chosen nested, scored on unseen rows by the
final model (fitted on every train row, as --final serves it), beside the ECE a perfectly calibrated model would
show on as many unseen rows.

    python bench/calibration_unseen.py --data debtags-implemented-in ko-help-grouped --resplits 3 --folds 3 \\
        --train-rows 720 --unseen 3000 --output bench/results/calibration-unseen.json

The model is the TF-IDF + logistic-regression baseline (2 shared cores). Per resplit: `--train-rows` rows train
(grouped data: whole pages), up to `--unseen` of the rest are unseen (many, so that the unseen ECE is not mostly
its own sampling noise: on 480 rows of a 0.6-accurate model perfectly calibrated scores show ECE ~0.04).
Reported per candidate: nested log-loss and ECE on the out-of-fold rows, log-loss and ECE on the unseen rows,
which candidate finetune/calibration.py's `choose` serves; the fold models' and the final model's sharpness; per
fold, the temperature fitted on the other folds against the one that fold itself would want (why a temperature
can lose nested).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.resplits import DATASETS, started, write_result


def split(y, groups, train_rows: int, unseen: int, seed: int):
    """(train, unseen) indices: `train_rows` rows (whole groups where the data has them), up to `unseen` others."""
    from sklearn.model_selection import GroupShuffleSplit, StratifiedShuffleSplit

    rng = np.random.default_rng(seed)
    if groups is None:
        tr, rest = next(StratifiedShuffleSplit(1, train_size=train_rows, random_state=seed).split(y, y))
    else:
        tr, rest = next(GroupShuffleSplit(1, train_size=train_rows / len(y), random_state=seed).split(y, y, groups))
    return tr, np.sort(rng.permutation(rest)[:unseen])


def _logit(p):
    p = np.clip(p, 1e-9, 1 - 1e-9)
    return np.log(p) - np.log1p(-p)


def top_label(fit_top):
    """A map of the top label's probability only (Gupta & Ramdas 2021, top-label calibration), the other classes
    rescaled to share the rest as they did: `fit_top(p_top, right)` returns the map."""
    def fit(probs, y):
        top = probs.max(1)
        g = fit_top(top, probs.argmax(1) == y)

        def apply(p):
            p = np.asarray(p, np.float64)
            i, t = p.argmax(1), p.max(1)
            new = np.clip(g(t), 1e-9, 1 - 1e-9)
            q = p * ((1 - new) / np.clip(1 - t, 1e-12, None))[:, None]
            q[np.arange(len(p)), i] = new
            return q / q.sum(1, keepdims=True)
        return apply
    return fit


def _platt(top, right):
    from sklearn.linear_model import LogisticRegression

    m = LogisticRegression(C=1e4).fit(_logit(top)[:, None], right)
    return lambda t: m.predict_proba(_logit(t)[:, None])[:, 1]


def _isotonic_top(top, right):
    from sklearn.isotonic import IsotonicRegression

    m = IsotonicRegression(out_of_bounds="clip", y_min=1e-3, y_max=1 - 1e-3).fit(top, right)
    return m.predict


def dirichlet(c: float):
    """Dirichlet calibration (Kull et al. 2019): multinomial logistic regression on the log-probabilities."""
    def fit(probs, y):
        from sklearn.linear_model import LogisticRegression

        m = LogisticRegression(C=c, max_iter=2000).fit(np.log(np.clip(probs, 1e-12, 1)), y)

        def apply(p):
            q = np.full((len(p), probs.shape[1]), 1e-12)
            q[:, m.classes_] = m.predict_proba(np.log(np.clip(p, 1e-12, 1)))
            return q / q.sum(1, keepdims=True)
        return apply
    return fit


def candidates() -> dict:
    from bench.calibrators import isotonic
    from finetune.calibration import FITTERS

    return {"none": lambda p, y: (lambda q: q), **FITTERS, "isotonic": isotonic, "dirichlet_c1": dirichlet(1.0),
            "dirichlet_c10": dirichlet(10.0), "top_platt": top_label(_platt), "top_isotonic": top_label(_isotonic_top)}


def floor(p, draws=100, seed=0) -> float:
    """Mean ECE of these scores when each row's label is drawn from them (perfect calibration)."""
    from textdata.calibration import top_label_ece

    rng = np.random.default_rng(seed)
    cum = p.cumsum(1)
    return float(np.mean([top_label_ece(p, (rng.random((len(p), 1)) > cum).sum(1).clip(0, p.shape[1] - 1))
                          for _ in range(draws)]))


def spread(p) -> float:
    """Mean over rows of the std of the centred log-probabilities: what a temperature divides."""
    z = np.log(np.clip(p, 1e-12, 1))
    return float((z - z.mean(1, keepdims=True)).std(1).mean())


def models(t_texts, t_y, groups, n, folds, seed, un_texts):
    """(out-of-fold probabilities, fold of each row, the final model's on the unseen texts, how much sharper the
    final model is than the fold models on the rows both trained on: its spread over theirs, mean over folds)."""
    from baseline.blend import baseline_proba, fit_baseline
    from bench.resplits import folds_of

    oof, fold_of, own = np.zeros((len(t_y), n)), np.zeros(len(t_y), int), []
    for k, (a, b) in enumerate(folds_of(t_y, groups, folds, seed)):
        m = fit_baseline([t_texts[i] for i in a], t_y[a], seed)
        oof[b], fold_of[b] = baseline_proba(m, [t_texts[i] for i in b], n), k
        own.append((a, baseline_proba(m, [t_texts[i] for i in a], n)))
    final = fit_baseline(t_texts, t_y, seed)
    p_train = baseline_proba(final, t_texts, n)
    ratio = float(np.mean([spread(p_train[a]) / spread(q) for a, q in own]))
    return oof, fold_of, baseline_proba(final, un_texts, n), ratio


def one(texts, y, groups, n_classes, a, seed) -> dict:
    from finetune.calibration import calibrate, fit_temperature, scores
    from textdata.calibration import Calibrator
    from textdata.nested import fold_masks

    tr, un = split(y, groups, a.train_rows, a.unseen, seed)
    t_texts, t_y, y_un = [texts[i] for i in tr], y[tr], y[un]
    oof, fold_of, p_un, ratio = models(t_texts, t_y, None if groups is None else groups[tr], n_classes, a.folds, seed,
                                       [texts[i] for i in un])
    section, _, _ = calibrate(oof, t_y, fold_of, "model")
    out = {"seed": seed, "train": len(tr), "unseen": len(un), "served": section["method"], "why": section["why"],
           "mean_top": {"oof": float(oof.max(1).mean()), "final_unseen": float(p_un.max(1).mean())},
           "accuracy": {"oof": float((oof.argmax(1) == t_y).mean()), "final_unseen": float((p_un.argmax(1) == y_un).mean())},
           "folds": [], "candidates": {},
           # the temperature the unseen rows themselves would want (an oracle, not servable) against the served one
           "temperature": {"oof": fit_temperature(oof, t_y).temperature, "unseen_oracle": fit_temperature(p_un, y_un).temperature}}
    oracle = fit_temperature(p_un, y_un)(p_un)
    out["oracle_unseen_ece"] = {"temperature": scores(oracle, y_un)["ece"], "floor": floor(oracle)}
    # servable: the out-of-fold temperature times how much sharper the final model is on rows both trained on
    matched = Calibrator("temperature", temperature=out["temperature"]["oof"] * ratio)(p_un)
    out["sharpness_ratio"] = ratio
    out["matched_temperature"] = {**{k: scores(matched, y_un)[k] for k in ("ece", "log_loss")}, "floor": floor(matched)}
    for k, held, rest in fold_masks(fold_of):  # why a temperature loses nested: the other folds' T vs its own
        t_rest, t_own = fit_temperature(oof[rest], t_y[rest]).temperature, fit_temperature(oof[held], t_y[held]).temperature
        out["folds"].append({"fold": k, "rows": int(held.sum()), "t_rest": t_rest, "t_own": t_own,
                             "class_mix": np.bincount(t_y[held], minlength=n_classes).tolist()})
    for name, fit in candidates().items():
        nested_rows = [scores(np.asarray(fit(oof[rest], t_y[rest])(oof[held]), np.float64), t_y[held])
                       for _, held, rest in fold_masks(fold_of)]
        q_un = np.asarray(fit(oof, t_y)(p_un), np.float64)
        got = scores(q_un, y_un)
        out["candidates"][name] = {
            "nested_log_loss": float(np.mean([r["log_loss"] for r in nested_rows])),
            "nested_ece": float(np.mean([r["ece"] for r in nested_rows])),
            "nested_log_loss_folds": [r["log_loss"] for r in nested_rows],
            "unseen_ece": got["ece"], "unseen_log_loss": got["log_loss"], "unseen_accuracy": got["accuracy"],
            "unseen_floor": floor(q_un)}
    return out


def summarize(runs: list[dict]) -> dict:
    names = runs[0]["candidates"]
    return {n: {k: float(np.median([r["candidates"][n][k] for r in runs]))
                for k in ("nested_log_loss", "nested_ece", "unseen_ece", "unseen_log_loss", "unseen_floor")}
            for n in names}


def parser(doc: str, data: list[str], resplits: int, output: str) -> argparse.ArgumentParser:
    """The flags this bench and bench/prior_shift.py share."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", nargs="*", default=data)
    p.add_argument("--resplits", type=int, default=resplits)
    p.add_argument("--folds", type=int, default=3)
    p.add_argument("--train-rows", type=int, default=720)
    p.add_argument("--output", type=Path, default=ROOT / output)
    return p


def resplits(a, one, summarize):
    """Per data set and resplit: (name, the runs so far, the result), the result written after each resplit."""
    result = started(sys.argv, data={})
    for name in a.data:
        texts, y, groups, labels = DATASETS[name](10**9)
        runs = []
        for seed in range(a.resplits):
            runs.append(one(texts, y, groups, len(labels), a, seed))
            result["data"][name] = {"rows": len(y), "classes": len(labels), "summary": summarize(runs), "resplits": runs}
            write_result(result, a.output)
            yield name, runs, result


def main(argv=None) -> int:
    p = parser(__doc__, ["debtags-implemented-in", "ko-help-grouped"], 3, "bench/results/calibration-unseen.json")
    p.add_argument("--unseen", type=int, default=3000)
    a = p.parse_args(argv)
    for name, runs, result in resplits(a, one, summarize):
        r = runs[-1]
        print(f"{name} seed {r['seed']}: served {r['served']}; mean top oof {r['mean_top']['oof']:.3f} final "
              f"{r['mean_top']['final_unseen']:.3f}; T oof {r['temperature']['oof']:.2f} unseen-oracle "
              f"{r['temperature']['unseen_oracle']:.2f} (its ECE {r['oracle_unseen_ece']['temperature']:.4f}); "
              f"spread ratio {r['sharpness_ratio']:.3f}, matched T ECE {r['matched_temperature']['ece']:.4f}; T rest/own "
              + " ".join(f"{f['t_rest']:.2f}/{f['t_own']:.2f}" for f in r["folds"]))
        if len(runs) < a.resplits:
            continue
        print(f"\n{name} ({result['data'][name]['rows']} rows, medians of {len(runs)}):")
        print(f"{'calibrator':>12} {'nested LL':>10} {'nested ECE':>10} {'unseen ECE':>10} {'unseen LL':>10} {'floor':>7}")
        for n, s in result["data"][name]["summary"].items():
            print(f"{n:>12} {s['nested_log_loss']:>10.4f} {s['nested_ece']:>10.4f} {s['unseen_ece']:>10.4f} "
                  f"{s['unseen_log_loss']:>10.4f} {s['unseen_floor']:>7.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
