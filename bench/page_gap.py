"""Is the gap between a resplit's out-of-fold and unseen precision page sampling, or more? For each resplit of
bench/threshold_transfer.py (its fitted scores, runs/threshold_transfer/*.npz, fitted here where absent): at fixed
out-of-fold coverages, the unseen precision (final model, same threshold) minus the out-of-fold one, in units of
the page bootstrap's prediction SD (finetune/group_bound.py prediction_gaps, a batch as many pages as the unseen
ones). Page sampling alone: z ~ N(0, 1), 10% below -1.28. Beside it the folds' dispersion phi at each threshold
(each fold's precision against the pooled one, in units of the same bootstrap scaled to the fold's rows; ~1
without shift between folds): can one run see the shift from its own folds?

    python bench/page_gap.py --resplits 10 --cap 5000 --output bench/results/page-gap-ko-help-5000.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.resplits import DATASETS, started, write_result
from bench.threshold_transfer import fitted

COVERAGES = (0.05, 0.1, 0.2, 0.3)


def gaps(f: dict, y, groups) -> list[dict]:
    from finetune.calibration import calibrate
    from finetune.group_bound import prediction_gaps

    tr, un = f["train"], f["unseen"]
    t_y, y_un, g = y[tr], y[un], groups[tr]
    _, _, final = calibrate(f["oof"], t_y, f["fold_of"], "model")
    oof, unseen = final(f["oof"]), final(f["final"][len(tr):])
    conf, ok, conf_un, ok_un = oof.max(1), oof.argmax(1) == t_y, unseen.max(1), unseen.argmax(1) == y_un
    order = np.argsort(-conf, kind="stable")
    answered = np.array([max(1, round(c * len(conf))) for c in COVERAGES])
    batch = len(np.unique(groups[un])) / len(np.unique(g))
    sd = np.nanstd(prediction_gaps(ok[order], g[order], answered, batch), axis=0)
    here_sd = sd / np.sqrt(1 + 1 / batch)  # the estimate's own: var(gap) = V (1 + 1 / batch)
    out = []
    for c, n, s, s0 in zip(COVERAGES, answered, sd, here_sd):
        t = conf[order][n - 1]
        sure, p = conf_un >= t, float(ok[order][:n].mean())
        fold = [(f["fold_of"] == k) & (conf >= t) for k in np.unique(f["fold_of"])]
        phi = np.mean([(ok[m].mean() - p) ** 2 / (s0**2 * n / m.sum()) for m in fold if m.any()]) * len(fold) / (len(fold) - 1)
        p_un = float(ok_un[sure].mean()) if sure.any() else float("nan")
        out.append({"oof_coverage": c, "threshold": round(float(t), 4), "oof_precision": round(p, 4),
                    "unseen_precision": round(p_un, 4), "unseen_coverage": round(float(sure.mean()), 4),
                    "prediction_sd": round(float(s), 4), "z": round((p_un - p) / float(s), 3),
                    "folds_phi": round(float(phi), 3)})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--resplits", type=int, default=10)
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--cap", type=int, default=5000)
    p.add_argument("--scores", type=Path, default=ROOT / "runs/threshold_transfer")
    p.add_argument("--output", type=Path, default=ROOT / "bench/results/page-gap-ko-help.json")
    a = p.parse_args(argv)
    texts, y, groups, labels = DATASETS["ko-help-grouped"](a.cap)
    result = started(sys.argv, resplits=[])
    for seed in range(a.resplits):
        f = fitted(texts, y, groups, len(labels), a.folds, seed, a.scores / f"ko-help-grouped-{a.cap}-{a.folds}-{seed}.npz")
        result["resplits"].append({"seed": seed, "at": gaps(f, y, groups)})
        z = np.array([r["z"] for s in result["resplits"] for r in s["at"]])
        phi = np.array([r["folds_phi"] for s in result["resplits"] for r in s["at"]])
        result["summary"] = {"z_mean": round(float(z.mean()), 3), "z_sd": round(float(z.std()), 3),
                             "z_below_-1.28": f"{int((z < -1.28).sum())} of {len(z)}",
                             "phi_median": round(float(np.median(phi)), 3)}
        write_result(result, a.output)
    print(result["summary"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
