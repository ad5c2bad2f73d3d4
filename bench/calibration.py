"""What serving a calibrator costs: engine rows/s with calibration.json applied against without, same run.

    python -m bench calibration [--model FOLDER] [--rows 1000] [--repeats 7]
    python -m bench calibration --model FOLDER --ood   # the folder's out-of-domain detector against none (issue 42)

One engine (--model, or MiniLM with a 5-label head exported to ONNX fp32) whose calibration is switched between
none (the baseline), temperature and vector scaling (with a threshold, so `confident` is computed) between
interleaved passes over the same BBC News texts (the order reversed every other round: drifting load hits every
mode alike). Per pass `predict` and `predict_proba`; medians over --repeats, each round's ratio against none, and
the calibration step alone. Goal (issue 33): rows/s with the calibrator >= 0.97x without.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import harness as h


def build_model(work: Path) -> Path:
    """MiniLM with a 5-label head (its values do not change the cost), exported to ONNX fp32 once."""
    out = work / "onnx"
    if (out / "model.onnx").exists():
        return out
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from finetune.models import resolve_model
    from serving.export import ExportConfig, run

    src = resolve_model("minilm")
    labels = ["business", "entertainment", "politics", "sport", "tech"]
    model = AutoModelForSequenceClassification.from_pretrained(
        src, num_labels=5, id2label=dict(enumerate(labels)), label2id={k: i for i, k in enumerate(labels)})
    tok = AutoTokenizer.from_pretrained(src, model_max_length=64)
    model.save_pretrained(work / "model")
    tok.save_pretrained(work / "model")
    run(ExportConfig(model=work / "model", output=out))
    return out


def calibrations(labels: list[str], multi_label: bool = False) -> dict:
    from serving.calibration import ServedCalibration
    from textdata.calibration import Calibrator, LabelCalibrator

    n = len(labels)
    t, w, b = np.full(n, 0.6), tuple(np.linspace(0.8, 1.2, n)), tuple(np.linspace(-0.2, 0.2, n))
    if multi_label:  # a multi-label --model: per label, a temperature, or Platt's slope and intercept (textdata/calibration.py)
        cals = {"temperature": LabelCalibrator("temperature", temperature=tuple(np.linspace(0.7, 1.3, n))),
                "platt": LabelCalibrator("platt", weights=w, bias=b)}
    else:
        cals = {"temperature": Calibrator("temperature", temperature=0.7), "vector": Calibrator("vector", weights=w, bias=b)}
    return {"none": ServedCalibration(), **{k: ServedCalibration(c, t, {"method": k}, "") for k, c in cals.items()}}


def ood_modes(clf) -> dict:
    """The folder's served calibration as loaded ('ood': with its detector) and a copy without the detector
    ('none'): the only difference between the two modes is the detector."""
    import copy

    served = clf.calibration
    if served.ood is None:
        raise SystemExit("this folder has no out-of-domain detector (ood/): k-fold --final writes one")
    bare = copy.copy(served)
    bare.ood = None
    return {"none": bare, "ood": served}


def measure(clf, modes: dict, texts: list[str], repeats: int, multi_label: bool = False) -> tuple[dict, dict, dict]:
    """(rows/s per mode and call, the calibration step alone in µs per row, the median of each round's ratio
    against none: a pair measured seconds apart shares its load, which the medians of whole runs do not)."""
    times = {m: {"predict": [], "predict_proba": []} for m in modes}
    for r in range(repeats):
        for mode in list(modes)[:: 1 if r % 2 == 0 else -1]:
            clf.calibration = modes[mode]
            for call in ("predict", "predict_proba"):
                times[mode][call] += h.timed(lambda call=call: getattr(clf, call)(texts), 1)
    clf.calibration = modes["none"]
    raw = clf.predict_proba(texts)
    step = {mode: statistics.median(h.timed(lambda cal=cal: cal.confident(cal(raw), raw > 0.5 if multi_label else None),
                                            50)) / len(texts) * 1e6 for mode, cal in modes.items()}
    paired = {m: {c: statistics.median(a / b for a, b in zip(times["none"][c], v)) for c, v in calls.items()}
              for m, calls in times.items() if m != "none"}
    rows = {m: {c: len(texts) / statistics.median(v) for c, v in calls.items()} for m, calls in times.items()}
    return rows, step, paired


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path)
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--work", type=Path, default=Path("/tmp/bench-calibration"))
    p.add_argument("--output", type=Path, help="default: bench/results/calibration-serving[-ood].json")
    p.add_argument("--ood", action="store_true", help="--model's calibration with its out-of-domain detector against "
                   "the same calibration without it (modes 'none' and 'ood'; blend as the folder says)")
    p.add_argument("--quantized", action="store_true", help="the folder's INT8 model (what this CPU serves by default)")
    a = p.parse_args(argv)
    if a.ood and not a.model:
        p.error("--ood measures a k-fold --final folder's own detector: give --model FOLDER")
    a.output = a.output or h.RESULTS / f"calibration-serving{'-ood' if a.ood else ''}.json"
    import pandas as pd

    from finetune.data import bbcnews_csv
    from serving.engine import Classifier

    a.work.mkdir(parents=True, exist_ok=True)
    folder = a.model or build_model(a.work)
    texts = pd.read_csv(bbcnews_csv(Path.home() / ".cache" / "electra-classify"))["text"].astype(str).tolist()[: a.rows]
    clf = Classifier.load(folder, quantized=a.quantized, max_length=64)
    modes = ood_modes(clf) if a.ood else calibrations(list(clf.labels), clf.multi_label)
    rows, step, paired = measure(clf, modes, texts, a.repeats, clf.multi_label)
    result = {"model": str(folder), "backend": clf.info()["backend"], "multi_label": clf.multi_label,
              "model_file": clf.info()["model_file"], "rows": len(texts), "repeats": a.repeats, "max_length": 64,
              "rows_per_second": {m: {c: round(v, 1) for c, v in r.items()} for m, r in rows.items()},
              "ratio_vs_none": {m: {c: round(r[c] / rows["none"][c], 4) for c in r} for m, r in rows.items()
                                if m != "none"},
              "ratio_vs_none_paired": {m: {c: round(v, 4) for c, v in r.items()} for m, r in paired.items()},
              "calibration_step_us_per_row": {m: round(v, 3) for m, v in step.items()},
              "pass_us_per_row": round(1e6 / rows["none"]["predict_proba"], 1), "blend": clf.blend is not None,
              "goal": ("rows/s with the out-of-domain detector >= 0.97x without (issue 42)" if a.ood else
                       "rows/s with the calibrator >= 0.97x without (issue 33)")}
    result["met"] = all(v >= 0.97 for r in result["ratio_vs_none_paired"].values() for v in r.values())
    print(f"{'calibration':<12} {'predict rows/s':>15} {'ratio':>7} {'predict_proba rows/s':>21} {'ratio':>7} "
          f"{'step µs/row':>12}")
    for m in modes:  # ratios: the median of each round's pair
        r, q = rows[m], result["ratio_vs_none_paired"].get(m, {"predict": 1.0, "predict_proba": 1.0})
        print(f"{m:<12} {r['predict']:>15.1f} {q['predict']:>7.3f} {r['predict_proba']:>21.1f} "
              f"{q['predict_proba']:>7.3f} {step[m]:>12.2f}")
    print(f"goal >= 0.97x: {'met' if result['met'] else 'NOT met'}")
    h.write_record(a.output, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
