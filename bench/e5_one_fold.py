"""One fold of finetune/kfold.py, the model against the char TF-IDF + LR baseline on the same split: a first look
at issue 62's Korean quality on 2 cores, where all five folds of e5-small do not fit a session.

    nice -n 10 python bench/e5_one_fold.py [--fold 0] [--output bench/results/e5_one_fold.json] -- \\
        --model e5-small --data ../shared/data/ko-help/train.csv --group-column page --epochs 2 ...

Everything after `--` is finetune/kfold.py's own flags, read by its own parser: the folds are the ones a full run
with those flags fixes (OUTPUT/fold_ids.json), and the fold is trained and scored by kfold's own `run_fold`
(early stopping on the inner split of its training part, the baseline fitted on the same training rows).
One fold is not the target: issue 62 asks for the mean over five grouped folds and for the served blend, which is
fitted nested across folds and so has no one-fold value. Writes the fold's record, the `<unk>` count of the rows
(finetune/unknown_tokens.py), the machine's load average before and after, and the command.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def keep_model(folder: Path, model, prep, fold: int) -> None:
    import pandas as pd

    model.save_pretrained(folder, safe_serialization=True)
    prep.tokenizer.save_pretrained(folder)
    prep.normalizer.save(folder)
    rows = prep.folds[fold][1]
    pd.DataFrame({"text": [prep.data.texts[i] for i in rows],
                  "label": [prep.data.labels[prep.data.y[i]] for i in rows]}).to_csv(folder / "eval.csv", index=False)


def main() -> int:
    argv = sys.argv[1:]
    ours, kfold_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fold", type=int, default=0)
    p.add_argument("--output", default="bench/results/e5_one_fold.json")
    p.add_argument("--save-model", help="keep the fold's model here, with its held-out rows as eval.csv (for "
                                        "serving.export --quantize --eval-csv: the INT8 gate on a trained model)")
    a = p.parse_args(ours)

    import transformers

    from finetune import kfold, unknown_tokens
    from finetune.fold_runner import pick_accelerator
    from textdata.tables import write_json

    cfg = kfold.parse_args(kfold_args)
    if cfg is None:
        return 0
    if not 0 <= a.fold < cfg.folds:
        p.error(f"--fold {a.fold}: the run has folds 0..{cfg.folds - 1}")
    transformers.logging.set_verbosity_error()
    started, load0, t0 = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), os.getloadavg(), time.time()
    accelerator = pick_accelerator(cfg.device)
    kfold.cpu_threads(accelerator)
    prep = kfold.prepare(cfg)
    fold_dir = Path(cfg.output) / "folds"
    fold_dir.mkdir(parents=True, exist_ok=True)
    kept = {}
    if a.save_model:  # run_fold drops its model after scoring; its scoring call is where the trained one passes by
        scoring = kfold.predict_proba
        kfold.predict_proba = lambda model, *args, **kw: (kept.setdefault("model", model), scoring(model, *args, **kw))[1]
    saved, _, _ = kfold.run_fold(cfg, a.fold, prep, fold_dir, accelerator)
    if a.save_model:
        kfold.predict_proba = scoring
        keep_model(Path(a.save_model), kept["model"], prep, a.fold)
    history = saved.pop("history")
    base = saved["baseline"].get("macro_f1")
    versus = (f"char TF-IDF + LR {base:.4f} ({saved['macro_f1'] - base:+.4f})" if base is not None
              else f"no baseline ({saved['baseline'].get('error')})")
    print(f"fold {a.fold} of {cfg.folds} ({saved['n_train']} training rows, {saved['n_val']} scored): model macro-F1 "
          f"{saved['macro_f1']:.4f}, {versus}; best epoch {saved['best_epoch']}, {saved['train_seconds']:.0f} s training")
    print(unknown_tokens.line(prep.unknown))
    import torch

    write_json(a.output, {"command": "python bench/e5_one_fold.py " + " ".join(argv), "fold": a.fold,
                          "folds": cfg.folds, "model": prep.resolved, "record": saved, "history": history,
                          "unknown_tokens": prep.unknown, "started": started, "load_average_before": load0,
                          "load_average_after": os.getloadavg(), "wall_seconds": round(time.time() - t0, 1),
                          "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count()})
    print(f"wrote {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
