"""Scenario validation: does a scenario's score drop separate formulas that hold up from those that don't?

The train window is split in time (never touching the holdout): an EARLIER
part (the first `split` of its sessions) and a LATER part. For every formula
of a pool that trades (turnover >= the 2% floor) and looks good on the earlier
part (CPCV > 0 there), we record

* its drop in each scenario world, computed on the earlier part only:
  max(0, CPCV(real earlier) - CPCV(world earlier));
* whether it HOLDS UP: its net Sharpe on the later part is > 0.

Per scenario, the AUC is the probability that a formula that holds up has a
smaller drop than one that does not (ties count half): 0.5 is chance, above
0.5 the scenario's drop is informative. Each AUC comes with a 95% bootstrap
interval over the formulas, and a scenario earns its place only where that
interval lies above 0.5 (`--apply` switches the others off in the manifest).
The same is reported for the mean drop over the enabled scenarios (what R3
uses), for the earlier CPCV itself, and for what the reward makes of both
(the clipped earlier CPCV plus R3's priority times R3 from the mean drop):
R3 earns its weight only if that beats the earlier CPCV alone.

The pool: a grid of reversal / momentum / volume / volatility / shape signals,
the archive's seeds, the 82 industry-free Alpha101s (paper limits), all with
both signs, and seeded random formulas from the task sampler.

Caveat, stated plainly: the world model was fitted on the whole train window,
so its weights have seen the later part's market (not the formulas, and each
world's earlier part is decoded from earlier windows only). A leak-free
variant fits a second model on the earlier part alone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from alpha_gym.scoring.channels import cpcv_channel
from alpha_gym.stress import checkpoint as ck
from alpha_gym.stress.config import SCENARIOS
from alpha_gym.stress.geometry import auc, auc_bootstrap, auc_interval, percentile_interval, r3_value
from alpha_gym.threads import blas_threads

#: Base signals of the pool ({w}: a lookback window).
_BASES = (
    "ts_delta(close, {w}) / close", "ts_mean(returns, {w})", "ts_std(returns, {w})",
    "volume / ts_mean(volume, {w})", "ts_corr(close, volume, {w})", "ts_rank(close, {w})",
    "(close - ts_mean(close, {w})) / ts_std(close, {w})", "ts_skew(returns, {w})",
    "ts_corr(returns, delay(returns, 1), {w})", "ts_mean((high - low) / close, {w})",
    "ts_mean(volume, 5) / ts_mean(volume, {w})", "ts_kurt(returns, {w})", "ts_slope(close, {w}) / close",
)
_WINDOWS = (5, 10, 20, 40, 60, 120)


def default_formulas(n_random: int = 0, alpha101: bool = False, seed: int = 0) -> list[str]:
    """A fixed pool: 13 reversal / momentum / volume / volatility / shape signals over six windows, raw
    and smoothed (10-day linear decay of the rank, which trades less), both signs; the archive's
    Alpha101-style seeds with their negations (~340 so far); with `alpha101` the 82 industry-free
    Alpha101s and their negations; and `n_random` formulas of the task sampler (seeded)."""
    from alpha_gym.scoring.seeds import SEED_FORMULAS
    pool = []
    for base in _BASES:
        for w in _WINDOWS:
            x = base.format(w=w)
            for sign in ("", "-"):
                pool.append(f"{sign}rank({x})")
                pool.append(f"{sign}ts_decay_linear(rank({x}), 10)")
    pool += list(SEED_FORMULAS) + [f"-1 * ({f})" for f in SEED_FORMULAS]
    if alpha101:
        from alpha_gym.alpha101 import formulas
        paper = list(formulas(industry_free=True).values())
        pool += paper + [f"-1 * ({f})" for f in paper]
    if n_random:
        from alpha_gym.language.sample import random_formula
        rng = np.random.default_rng(seed)
        pool += [random_formula(rng) for _ in range(n_random)]
    return list(dict.fromkeys(pool))


def validate(directory, panel, formulas=None, split: float = 2.0 / 3.0, config=None, n_boot: int = 2000) -> dict:
    """AUC per scenario with its bootstrap interval (see the module docstring). `panel` must be the
    checkpoint's panel; `formulas` defaults to `default_formulas(300, alpha101=True)`."""
    from alpha_gym.language.errors import MODEL_FAULTS
    from alpha_gym.scoring.config import VerifierConfig
    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.stress.scenarios import load_or_build
    d = Path(directory)
    manifest = ck.read_manifest(d)
    ck.check_data(manifest, panel, d)
    from alpha_gym.alpha101 import PAPER_LIMITS
    formulas = default_formulas(300, alpha101=True) if formulas is None else list(formulas)
    # the paper's limits: the Alpha101s are longer than an answer may be; the grid and the sampler fit either
    config = (config or VerifierConfig()).with_(archive_seed=False, stress_checkpoint=None, limits=PAPER_LIMITS)
    with blas_threads(1):
        panels, _ = load_or_build(d, panel, manifest)
        cut_index = int(panel.n_days * split) - 1
        cut = panel.dates[cut_index]
        after = panel.dates[cut_index + 1]
        early = Verifier(panel.window(end=cut), config)
        late = Verifier(panel.window(start=after), config)
        worlds = {name: Verifier(p.window(end=cut), config) for name, p in panels.items()}
        rows = []
        for f in formulas:
            try:
                ev = early.evaluate(f)
            except MODEL_FAULTS:  # the model's fault: the formula leaves the study
                continue
            if ev.turnover < config.min_turnover_invalid or not ev.cpcv > 0:
                continue
            try:
                late_sharpe = late.evaluate(f).sharpe
                world = {name: w.evaluate(f).cpcv for name, w in worlds.items()}
            except MODEL_FAULTS:  # the model's fault: the formula leaves the study
                continue
            rows.append({"formula": f, "early_cpcv": float(ev.cpcv), "late_sharpe": float(late_sharpe),
                         "world_cpcv": {k: float(v) for k, v in world.items()}})
    labels = np.array([r["late_sharpe"] > 0 for r in rows], dtype=bool)
    drops = {name: np.array([max(0.0, r["early_cpcv"] - r["world_cpcv"][name]) for r in rows]) for name in panels}
    # the scenarios R3 uses now (those that move their statistic, less any a validation switched off)
    enabled = [s for s in SCENARIOS if manifest["scenarios"]["checks"].get(s, {}).get("moved", False)
               and manifest["scenarios"].get("enabled", {}).get(s, True)]
    mean_drop = (np.mean([drops[s] for s in enabled], axis=0) if enabled and rows else np.zeros(len(rows)))
    early_cpcv = np.array([r["early_cpcv"] for r in rows])
    # what the reward does with it: R1 (the earlier CPCV, clipped) plus R3's weighted channel from the mean drop
    r3 = np.array([r3_value(r["early_cpcv"], [r["world_cpcv"][s] for s in enabled], config.stress_weight)[0]
                   for r in rows]) if enabled else np.zeros(len(rows))
    r1 = np.array([cpcv_channel(c, config.cpcv_clip) for c in early_cpcv])
    with_r3 = r1 + config.priorities["jepa_stress"] * r3
    result = {
        "split_last_earlier_session": str(cut), "first_later_session": str(after),
        "formulas": len(formulas), "candidates": len(rows), "hold_up": int(labels.sum()),
        "fail": int((~labels).sum()),
        "auc": {name: auc(-drops[name], labels) for name in SCENARIOS if name in drops},
        "auc_interval": {name: list(auc_interval(-drops[name], labels, n_boot)) for name in SCENARIOS
                         if name in drops},
        "auc_mean_drop": auc(-mean_drop, labels),
        "auc_mean_drop_interval": list(auc_interval(-mean_drop, labels, n_boot)),
        "auc_early_cpcv": auc(early_cpcv, labels),
        "auc_early_cpcv_interval": list(auc_interval(early_cpcv, labels, n_boot)),
        "auc_early_cpcv_with_r3": auc(with_r3, labels),
        "auc_early_cpcv_with_r3_interval": list(auc_interval(with_r3, labels, n_boot)),
        # paired resamples: does adding R3 rank the formulas better than the earlier CPCV alone?
        "auc_gain_from_r3": auc(with_r3, labels) - auc(early_cpcv, labels),
        "auc_gain_from_r3_interval": list(percentile_interval(
            auc_bootstrap(with_r3, labels, n_boot) - auc_bootstrap(early_cpcv, labels, n_boot))),
        "enabled_for_mean_drop": enabled,
        "mean_drop": {name: float(drops[name].mean()) if rows else 0.0 for name in drops},
        "note": "drops on the earlier part; hold up = net Sharpe > 0 on the later part; the world model's weights "
                "were fitted on the whole train window",
        "rows": rows,
    }
    return result


def apply(directory, result: dict, threshold: float = 0.5) -> dict:
    """Record a validation in the manifest and keep on only the scenarios whose AUC interval lies above
    `threshold` (its lower end; a point AUC alone where a result carries no interval)."""
    d = Path(directory)
    manifest = ck.read_manifest(d)
    manifest["validation"] = {k: v for k, v in result.items() if k != "rows"}
    manifest["validation"]["threshold"] = threshold
    switched = {}
    for name in SCENARIOS:
        moved = manifest["scenarios"]["checks"].get(name, {}).get("moved", False)
        a = result["auc"].get(name, float("nan"))
        lo, hi = result.get("auc_interval", {}).get(name, (a, a))
        a, lo, hi = (float("nan") if v is None else v for v in (a, lo, hi))
        if not moved:
            switched[name] = "does not move its statistic in the intended direction"
        elif not np.isfinite(lo):
            switched[name] = "no validation AUC (every candidate formula held up, or none did)"
        elif not lo > threshold:
            switched[name] = f"validation AUC {a:.3f} [{lo:.3f}, {hi:.3f}] does not lie above {threshold}"
        manifest["scenarios"]["enabled"][name] = bool(moved and name not in switched)
    manifest["scenarios"]["switched_off"] = switched
    ck.write_json(d / ck.MANIFEST_FILE, manifest)
    return manifest
