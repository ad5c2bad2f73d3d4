"""finetune/search.py's own settings (SearchConfig, its flags) and its parser over k-fold's, torch-free: the search
checks its command line before torch loads."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from finetune.config import Config, build_parser, config_from_args, given_flags
from finetune.models import list_models
from textdata.flags import Flag, add_flags, config_from

DESCRIPTION = ("Hyperparameter search over k-fold: Optuna's TPE proposes recipes, each scored by its mean macro-F1 "
               "over the\nsame saved folds, with pruning on the running fold mean.")


@dataclass(frozen=True)
class SearchConfig:
    trials: int = 12
    space: str | None = None  # JSON (inline or a file) laid over the default space
    random_trials: int = 4  # trials sampled at random before TPE models the results
    prune: bool = True
    prune_after: int = 3  # finished trials before pruning starts
    parallel: int | None = None  # trials at once with --engine ray (default: as many as fold tasks fit)


FLAGS = {
    "trials": Flag("trials in the study, counting finished, pruned and failed ones (a rerun adds the missing ones)"),
    "space": Flag("search space: inline JSON or a JSON file laid over the default (finetune/search_space.py)",
                  shown="lr, epochs, batch size, warm-up, layer decay, class weights"),
    "random_trials": Flag("trials sampled at random before TPE models the results"),
    "prune": Flag("stop a trial whose running fold mean is below the median of earlier trials"),
    "prune_after": Flag("finished trials before pruning starts"),
    "parallel": Flag("--engine ray: trials at once", shown="as many as fold tasks fit"),
}


def parse_args(argv=None) -> tuple[Config, SearchConfig] | None:
    p = build_parser()
    p.description = DESCRIPTION
    add_flags(p, SearchConfig, FLAGS)
    argv = sys.argv[1:] if argv is None else list(argv)
    a = p.parse_args(argv)
    if a.list_models:
        print(list_models())
        return None
    if a.output is None and a.model:
        a.output = f"runs/{datetime.now():%Y%m%d-%H%M%S}-search-{Path(a.model.rstrip('/')).name}"
    base = config_from_args(p, a, given=given_flags(p, argv))  # the search starts from --model's recipe
    scfg = config_from(SearchConfig, {f.name: getattr(a, f.name) for f in dataclasses.fields(SearchConfig)})
    if scfg.trials < 1 or scfg.random_trials < 0 or scfg.prune_after < 0 or (scfg.parallel or 1) < 1:
        p.error("--trials and --parallel must be at least 1, --random-trials and --prune-after at least 0")
    return base, scfg
