"""A --final model's calibration and served threshold, scored on rows nothing was fitted on.

    python bench/unseen_confidence.py --model runs/short/run/model --data runs/short/unseen.csv \\
        --output bench/results/confidence-unseen-bbc-first-sentences.json

The engine (serving.engine.Classifier, as the API serves the folder) answers every row twice: with the
folder's calibration.json and with it switched off (the blend, where kept, stays on both times). Reported:
precision and coverage of the answers marked confident, top-label ECE (15 bins), log-loss and Brier,
calibrated against uncalibrated, beside k-fold's nested estimates from calibration.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--output", type=Path, required=True)
    a = p.parse_args(argv)
    import pandas as pd

    from finetune.calibration import scores
    from serving.calibration import ServedCalibration
    from serving.engine import Classifier

    load_before = os.getloadavg()
    df = pd.read_csv(a.data)
    clf = Classifier.load(a.model)
    labels = list(clf.labels)
    y = df["label"].map(labels.index).to_numpy()
    served = clf.calibration
    calibrated = clf.predict_proba(df["text"].astype(str).tolist())
    clf.calibration = ServedCalibration()
    raw = clf.predict_proba(df["text"].astype(str).tolist())
    alone = Classifier.load(a.model, blend=False)  # the model without the blend and calibration
    alone.calibration = ServedCalibration()
    model_alone = alone.predict_proba(df["text"].astype(str).tolist())
    sure = served.confident(calibrated)
    right = calibrated.argmax(1) == y
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "model": str(a.model),
        "data": str(a.data),
        "rows": len(y),
        "calibration": served.info(),
        "confident": {
            "coverage": float(sure.mean()),
            "precision": float(right[sure].mean()) if sure.any() else None,
            "answered": int(sure.sum()),
        },
        "calibrated": scores(calibrated, y),
        "uncalibrated": scores(raw, y),
        "model_alone": scores(model_alone, y),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
    }
    a.output.parent.mkdir(parents=True, exist_ok=True)
    a.output.write_text(json.dumps(result, indent=1) + "\n")
    c, u, s = result["calibrated"], result["uncalibrated"], result["confident"]
    print(
        f"{len(y)} unseen rows: accuracy {c['accuracy']:.4f}; ECE {u['ece']:.4f} -> {c['ece']:.4f}, log-loss "
        f"{u['log_loss']:.4f} -> {c['log_loss']:.4f}, Brier {u['brier']:.4f} -> {c['brier']:.4f}; confident: "
        f"coverage {s['coverage']:.4f}, precision {s['precision']}; k-fold's estimate: coverage "
        f"{result['calibration'].get('estimated_coverage')}, precision {result['calibration'].get('estimated_precision')}"
    )
    print(f"wrote {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
