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
0.5 the scenario's drop is informative, below 0.5 it ranks worse than chance
and should be switched off (`--apply` does that in the manifest). The same is
reported for the mean drop over the enabled scenarios (what R3 uses), and,
for reference, for the earlier CPCV itself.

Caveat, stated plainly: the world model was fitted on the whole train window,
so its weights have seen the later part's market (not the formulas, and each
world's earlier part is decoded from earlier windows only). A leak-free
variant fits a second model on the earlier part alone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from alpha_gym.stress import checkpoint as ck
from alpha_gym.stress._blas import blas_threads
from alpha_gym.stress.config import SCENARIOS
from alpha_gym.stress.geometry import auc

#: Base signals of the pool ({w}: a lookback window).
_BASES = (
    "ts_delta(close, {w}) / close", "ts_mean(returns, {w})", "ts_std(returns, {w})",
    "volume / ts_mean(volume, {w})", "ts_corr(close, volume, {w})", "ts_rank(close, {w})",
    "(close - ts_mean(close, {w})) / ts_std(close, {w})", "ts_skew(returns, {w})",
    "ts_corr(returns, delay(returns, 1), {w})", "ts_mean((high - low) / close, {w})",
    "ts_mean(volume, 5) / ts_mean(volume, {w})", "ts_kurt(returns, {w})", "ts_slope(close, {w}) / close",
)
_WINDOWS = (5, 10, 20, 40, 60, 120)


def default_formulas() -> list[str]:
    """A fixed pool of ~340 formulas: 13 reversal / momentum / volume / volatility / shape signals over six
    windows, raw and smoothed (10-day linear decay of the rank, which trades less), both signs; and the
    archive's Alpha101-style seeds with their negations."""
    from alpha_gym.scoring.seeds import SEED_FORMULAS
    pool = []
    for base in _BASES:
        for w in _WINDOWS:
            x = base.format(w=w)
            for sign in ("", "-"):
                pool.append(f"{sign}rank({x})")
                pool.append(f"{sign}ts_decay_linear(rank({x}), 10)")
    pool += list(SEED_FORMULAS) + [f"-1 * ({f})" for f in SEED_FORMULAS]
    return list(dict.fromkeys(pool))


def validate(directory, panel, formulas=None, split: float = 2.0 / 3.0, config=None) -> dict:
    """AUC per scenario (see the module docstring). `panel` must be the checkpoint's panel."""
    from alpha_gym.language import FormulaError
    from alpha_gym.scoring.config import VerifierConfig
    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.stress.scenarios import load_or_build
    d = Path(directory)
    manifest = ck.read_manifest(d)
    ck.check_data(manifest, panel, d)
    formulas = default_formulas() if formulas is None else list(formulas)
    config = (config or VerifierConfig()).with_(archive_seed=False, stress_checkpoint=None)
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
            except (FormulaError, ValueError, FloatingPointError):
                continue
            if ev.turnover < config.min_turnover_invalid or not ev.cpcv > 0:
                continue
            try:
                late_sharpe = late.evaluate(f).sharpe
                world = {name: w.evaluate(f).cpcv for name, w in worlds.items()}
            except (FormulaError, ValueError, FloatingPointError):
                continue
            rows.append({"formula": f, "early_cpcv": float(ev.cpcv), "late_sharpe": float(late_sharpe),
                         "world_cpcv": {k: float(v) for k, v in world.items()}})
    labels = np.array([r["late_sharpe"] > 0 for r in rows], dtype=bool)
    drops = {name: np.array([max(0.0, r["early_cpcv"] - r["world_cpcv"][name]) for r in rows]) for name in panels}
    enabled = [s for s in SCENARIOS if manifest["scenarios"]["checks"].get(s, {}).get("moved", False)]
    mean_drop = (np.mean([drops[s] for s in enabled], axis=0) if enabled and rows else np.zeros(len(rows)))
    result = {
        "split_last_earlier_session": str(cut), "first_later_session": str(after),
        "formulas": len(formulas), "candidates": len(rows), "hold_up": int(labels.sum()),
        "fail": int((~labels).sum()),
        "auc": {name: auc(-drops[name], labels) for name in SCENARIOS if name in drops},
        "auc_mean_drop": auc(-mean_drop, labels),
        "auc_early_cpcv": auc(np.array([r["early_cpcv"] for r in rows]), labels),
        "mean_drop": {name: float(drops[name].mean()) if rows else 0.0 for name in drops},
        "note": "drops on the earlier part; hold up = net Sharpe > 0 on the later part; the world model's weights "
                "were fitted on the whole train window",
        "rows": rows,
    }
    return result


def apply(directory, result: dict, threshold: float = 0.5) -> dict:
    """Record a validation in the manifest and switch off scenarios whose AUC is below `threshold`."""
    d = Path(directory)
    manifest = ck.read_manifest(d)
    manifest["validation"] = {k: v for k, v in result.items() if k != "rows"}
    manifest["validation"]["threshold"] = threshold
    switched = {}
    for name in SCENARIOS:
        moved = manifest["scenarios"]["checks"].get(name, {}).get("moved", False)
        a = result["auc"].get(name, float("nan"))
        if not moved:
            switched[name] = "does not move its statistic in the intended direction"
        elif np.isfinite(a) and a < threshold:
            switched[name] = f"validation AUC {a:.3f} < {threshold}"
        manifest["scenarios"]["enabled"][name] = bool(moved and name not in switched)
    manifest["scenarios"]["switched_off"] = switched
    ck.write_json(d / ck.MANIFEST_FILE, manifest)
    return manifest
