"""Does correcting the served scores to a moved class mix (Saerens et al. 2002; serving/prior.py,
`--prior-correction`) win for this model? Measured at k-fold on the out-of-fold rows, so that the server turns
the correction on only for a model where it wins (the "prior_correction" of report.json's calibration section
and of calibration.json).

Each simulated window is drawn from the out-of-fold rows (each scored by a model that never saw it; with
--group-column, by one that saw none of its group) at a class mix: the rows' own (`same`), a Dirichlet(1) mix, or
half the rows from one class; the training mix the correction divides by is their mean calibrated probability
(what reference.json's `mean_probability` holds for the served model). In each window the served rule (textdata/prior_shift.py
should_correct) decides; where it fires the corrected log-loss is compared with the plain one. It wins where,
over the shifted windows where it fires, the corrected log-loss is lower in at least WIN_SHARE of them and
lower at the median, and where the mix did not move it costs at most SAME_SLACK at the median
(docs/notes/log.md, "Class-mix shift": BBC wins, ko-help's unseen pages lose).
"""

from __future__ import annotations

import numpy as np

from textdata.prior_shift import MIN_ROWS, adjust, estimate, should_correct

WINDOW = 300  # rows a simulated window holds (the served rule needs at least MIN_ROWS)
DRAWS = 20  # windows per mix
WIN_SHARE = 0.6
SAME_SLACK = 0.005  # nats: what a correction may cost at the unmoved mix, at the median
MIXES = ("same", "dirichlet", "one")


def mix_of(kind: str, base: np.ndarray, rng) -> np.ndarray:
    """A class mix: `base` (same), a Dirichlet(1) draw, or half one class and half `base` (one)."""
    if kind == "same":
        return base
    if kind == "dirichlet":
        return rng.dirichlet(np.ones(len(base)))
    one = np.zeros(len(base))
    one[rng.integers(len(base))] = 1
    return 0.5 * one + 0.5 * base


def sample(y_pool: np.ndarray, mix: np.ndarray, m: int, rng) -> np.ndarray:
    """`m` row indices of the pool drawn at class mix `mix` (with replacement within a class)."""
    counts = rng.multinomial(m, mix / mix.sum())
    return np.concatenate([rng.choice(np.flatnonzero(y_pool == c), k) for c, k in enumerate(counts) if k])


def _log_loss(p: np.ndarray, y: np.ndarray) -> float:
    return float(-np.log(p[np.arange(len(y)), y].clip(min=1e-15)).mean())


def _window(probs, y, fitted, kind, base, rng) -> dict:
    idx = sample(y, mix_of(kind, base, rng), min(WINDOW, len(y)), rng)
    p, yy = probs[idx], y[idx]
    # the server's monitor estimates with SQUAREM (app/monitoring/mix.py): plain EM's 200 rounds stop 0.013 (total
    # variation) short of that fixed point on a 300-row window of 40 classes, so the check would judge another mix
    est = estimate(p, fitted, accelerated=True)
    fires = should_correct(est)
    plain = _log_loss(p, yy)
    return {"fires": fires, "plain": plain, "prior": est["prior"],
            "corrected": _log_loss(adjust(p, fitted, est["prior"]), yy) if fires else plain}


def prior_check(probs: np.ndarray, y: np.ndarray, seed: int = 0) -> dict:
    """The k-fold check on calibrated out-of-fold probabilities: {"wins", "why", per mix the windows where the
    rule fired and the median log-loss without / with the rule}."""
    probs, y = np.asarray(probs, np.float64), np.asarray(y)
    if len(y) < MIN_ROWS:
        return {"wins": False, "why": f"{len(y)} out-of-fold rows: a window the served rule acts on needs {MIN_ROWS}"}
    rng = np.random.default_rng(seed)
    fitted, base = probs.mean(0), np.bincount(y, minlength=probs.shape[1]) / len(y)
    out = {"window": min(WINDOW, len(y)), "draws": DRAWS}
    for kind in MIXES:
        rows = [_window(probs, y, fitted, kind, base, rng) for _ in range(DRAWS)]
        fired = [r for r in rows if r["fires"]]
        out[kind] = {"fired": len(fired), "log_loss_plain": float(np.median([r["plain"] for r in rows])),
                     "log_loss_rule": float(np.median([r["corrected"] for r in rows])),
                     "median_cost": float(np.median([r["corrected"] - r["plain"] for r in rows])),
                     "lower_where_fired": float(np.mean([r["corrected"] < r["plain"] for r in fired])) if fired else None,
                     "median_gain_where_fired": float(np.median([r["plain"] - r["corrected"] for r in fired])) if fired else None}
    shifted = [r for kind in ("dirichlet", "one") for r in [out[kind]] if r["fired"]]
    lower = np.mean([r["lower_where_fired"] for r in shifted]) if shifted else 0.0
    gain = np.median([r["median_gain_where_fired"] for r in shifted]) if shifted else 0.0
    same_cost = out["same"]["median_cost"]
    wins = bool(shifted and lower >= WIN_SHARE and gain > 0 and same_cost <= SAME_SLACK)  # a JSON bool
    out.update(wins=wins, why=(
        f"shifted windows where the rule fired: corrected log-loss lower in {lower:.0%} (median gain {gain:.4f} nats); "
        f"at the rows' own mix the rule costs {same_cost:+.4f} nats at the median"
        f" -> {'served' if wins else 'not served'} with --prior-correction"))
    return out
