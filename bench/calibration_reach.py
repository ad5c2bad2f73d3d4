"""How low can any calibrator bring the ECE of a --final encoder's scores on unseen rows? The k-fold calibrator
(fitted on the fold models' out-of-fold scores, cooled on the final model's held-out share) against calibrators
fitted on the unseen rows themselves (an oracle no run has), so that "ECE <= 0.05 where the floor allows it"
(issue 42) can be told apart from "the served calibrator falls short".

    python bench/calibration_reach.py --data debtags-implemented-in \\
        --output bench/results/calibration-reach-debtags-implemented-in.json

It reads the run folders bench/encoder_transfer.py kept (`--work`, its cached unseen_scores.npz; it trains
nothing) for every seed in that bench's JSON (`--transfer`). Per resplit, the final model's scores (`--part
alone`: the MiniLM without the TF-IDF baseline, what `--blend off` serves; `served`: the blend, uncalibrated) on
the 1,000 unseen rows are cut in two halves at random (--draws times); every candidate of
bench/calibration_unseen.py (temperature, vector, Dirichlet, isotonic, top-label) is fitted on one half and
scored on the other, both ways. Beside them: what k-fold serves (the folds' calibrator cooled by
finetune/sharpness.py on its held-out share) on the same halves, and the floor (the ECE of perfectly calibrated
scores on as many rows: each label drawn from the oracle-vector scores).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.resplits import DATASETS, started, write_result

SHOWN = ("served", "temperature", "vector", "dirichlet_c10", "isotonic", "top_isotonic", "floor")


def served_calibrator(oof: dict, part: str, sv: dict, y_tr: np.ndarray):
    """What k-fold serves for this part: the calibrator fitted on the out-of-fold rows, cooled on the share."""
    from bench.encoder_transfer import thresholds
    from finetune.sharpness import cooled, fit_tau, share_positions

    source = {**oof, "served": oof["model"], "fitted_on": "model"} if part == "alone" else oof
    cal = thresholds(source, 0.8)["final"]
    config = oof["report"]["config"]
    _, pos = share_positions(SimpleNamespace(texts=list(y_tr), targets=y_tr, groups=None),
                             config["calibration_share"], config["seed"])
    share = np.asarray(sv[f"{'alone' if part == 'alone' else 'raw'}_train"][pos], np.float64)
    return cooled(cal, fit_tau(cal, share, y_tr[pos]))


def one(name: str, seed: int, work: Path, part: str, draws: int) -> dict:
    from bench.calibration_unseen import candidates, floor
    from bench.encoder_transfer import TRAIN, UNSEEN, draw, out_of_fold
    from finetune.calibration import scores

    _, y, _, names = DATASETS[name](10**9)
    tr, un = draw(y, *TRAIN[name], UNSEEN, seed)
    run = work / name / f"seed{seed}"
    oof = out_of_fold(run)
    sv = dict(np.load(run / "unseen_scores.npz"))
    y_tr = np.array([oof["labels"].index(names[y[i]]) for i in tr])
    y_un = np.array([oof["labels"].index(names[y[i]]) for i in un])
    p = np.asarray(sv["alone" if part == "alone" else "raw"], np.float64)
    served = served_calibrator(oof, part, sv, y_tr)(p)
    fits = {k: v for k, v in candidates().items() if k in SHOWN}
    got = {k: [] for k in SHOWN}
    for d in range(draws):
        idx = np.random.default_rng(d).permutation(len(y_un))
        for fit_on, score_on in ((idx[: len(idx) // 2], idx[len(idx) // 2:]), (idx[len(idx) // 2:], idx[: len(idx) // 2])):
            got["served"].append(scores(served[score_on], y_un[score_on])["ece"])
            for k, fit in fits.items():
                got[k].append(scores(fit(p[fit_on], y_un[fit_on])(p[score_on]), y_un[score_on])["ece"])
            vector = fits["vector"](p[fit_on], y_un[fit_on])(p[score_on])
            got["floor"].append(floor(vector, draws=20, seed=d))
    return {"seed": seed, "accuracy": float((p.argmax(1) == y_un).mean()), "rows_scored": len(y_un) // 2,
            "ece_all_rows": {"served": scores(served, y_un)["ece"], "raw": scores(p, y_un)["ece"]},
            "ece_half": {k: float(np.mean(v)) for k, v in got.items()}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="debtags-implemented-in", choices=["bbc-first-sentences", "debtags-implemented-in"])
    p.add_argument("--part", default="alone", choices=["alone", "served"])
    p.add_argument("--work", type=Path, default=ROOT / "runs/encoder_transfer_share")
    p.add_argument("--transfer", type=Path, default=None, help="bench/encoder_transfer.py's JSON (its seeds)")
    p.add_argument("--draws", type=int, default=5)
    p.add_argument("--output", type=Path, default=None)
    a = p.parse_args(argv)
    transfer = a.transfer or ROOT / f"bench/results/encoder-transfer-share-{a.data}.json"
    seeds = [r["seed"] for r in json.loads(transfer.read_text())["data"][a.data]["resplits"]]
    result = started(sys.argv, data=a.data, part=a.part, draws=a.draws, resplits=[])
    print(f"{a.data}, {a.part}: ECE on half the unseen rows (fitted on the other half; mean of {2 * a.draws})")
    print("seed  acc    " + "  ".join(f"{k:>13}" for k in SHOWN))
    for seed in seeds:
        row = one(a.data, seed, a.work, a.part, a.draws)
        result["resplits"].append(row)
        print(f"{seed:>4}  {row['accuracy']:.3f}  " + "  ".join(f"{row['ece_half'][k]:>13.3f}" for k in SHOWN), flush=True)
    result["median"] = {k: float(np.median([r["ece_half"][k] for r in result["resplits"]])) for k in SHOWN}
    print("median       " + "  ".join(f"{result['median'][k]:>13.3f}" for k in SHOWN))
    write_result(result, a.output or ROOT / f"bench/results/calibration-reach-{a.data}-{a.part}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
