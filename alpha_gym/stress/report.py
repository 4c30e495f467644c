"""The world model's gates, scenarios and validation as text (`alpha-gym stress check`, the fit benchmark)."""

from __future__ import annotations

import math


def fmt(x, spec="+.3f") -> str:
    """A number in `spec`, anything else (None, nan, a note) as its text."""
    if isinstance(x, (int, float)) and math.isfinite(x):
        return format(x, spec)
    return str(x)


def format_gates(manifest: dict, directory="") -> str:
    """A fitted world model's gates, scenarios and validation as `alpha-gym stress check` prints them."""
    g = manifest["gates"]
    p, geo, sf = g["prediction"], g["geometry"], g["stylised_facts"]
    ok = {True: "PASS", False: "FAIL"}
    data = manifest["data"]
    lines = [f"world model {directory}: fitted on {data['source']} ({data['n_stocks']} stocks x {data['n_days']} "
             f"sessions, {data['first']}..{data['last']}), {manifest['fit'].get('steps')} steps, "
             f"{manifest['fit'].get('seconds', manifest['fit'].get('training_seconds', '?'))} s",
             f"held-back tail: {g['tail']['samples']} samples, targets {g['tail']['first_target_session']}.."
             f"{g['tail']['last_target_session']}",
             f"[{ok[p['passed']]}] prediction beats 'no change' (error ratio < {p['max_ratio']}): "
             f"latent {fmt(p['latent_mse_ratio_vs_no_change'], '.3f')}, "
             f"geometry {fmt(p['geometry_mse_ratio_vs_no_change'], '.3f')} "
             f"(latent vs train-mean baseline {fmt(p['latent_mse_ratio_vs_train_mean'], '.3f')})",
             f"[{ok[geo['passed']]}] geometry R^2 ({_geometry_rule(geo)}): "
             f"{fmt(geo['mean_r2'])} (no-change baseline {fmt(geo['no_change_mean_r2'])}"
             + (f", ridge AR(1) on the observed geometry {fmt(geo['ar1_mean_r2'])}" if "ar1_mean_r2" in geo else "")
             + (f", AR(1) and no change combined {fmt(geo['baselines_mean_r2'])}; the forecast = AR(1) + "
                f"{fmt(geo['blend_weights']['head'], '.3f')} x (head - AR(1)) + "
                f"{fmt(geo['blend_weights']['no_change'], '.3f')} x (no change - AR(1)), weights fitted on the "
                f"validation block; head alone {fmt(geo['head_mean_r2'])}" if geo.get("blend_weights") else "")
             + ")",
             "        " + ", ".join(f"{k} {fmt(v, '+.2f')}" for k, v in geo["r2"].items()),
             f"[{ok[sf['passed']]}] stylised facts of a decoded panel (simulated shocks) vs real:",
             f"        |r| lag-1 autocorrelation {fmt(sf['decoded']['abs_acf1'], '.3f')} vs "
             f"{fmt(sf['real']['abs_acf1'], '.3f')} (ratio {fmt(sf['abs_acf1_ratio'], '.2f')}, allowed "
             f"{sf['acf_ratio_range'][0]:.2f}..{sf['acf_ratio_range'][1]:.2f})",
             f"        mean correlation {fmt(sf['decoded']['mean_corr'], '.3f')} vs "
             f"{fmt(sf['real']['mean_corr'], '.3f')}"
             f" (difference {fmt(sf['mean_corr_diff'], '+.3f')}, allowed +-{sf['corr_tolerance']})",
             f"        excess kurtosis {fmt(sf['decoded']['excess_kurtosis'], '.2f')} vs "
             f"{fmt(sf['real']['excess_kurtosis'], '.2f')} (ratio {fmt(sf['excess_kurtosis_ratio'], '.2f')}, "
             f"allowed {sf['kurtosis_ratio_range'][0]:.2f}..{sf['kurtosis_ratio_range'][1]:.2f}); "
             f"OHLC consistent: {sf['ohlc_consistent']}",
             "scenarios (own statistic, real -> world, intended direction):"]
    sc = manifest["scenarios"]
    for name in sc["names"]:
        c = sc["checks"].get(name)
        state = "on " if sc["enabled"].get(name) else "OFF"
        if c is None:
            lines.append(f"  [{state}] {name}: not built")
            continue
        why = sc.get("switched_off", {}).get(name, "")
        lines.append(f"  [{state}] {name:<11} {fmt(c['real'], '.4f')} -> {fmt(c['world'], '.4f')} "
                     f"({c['intended']}: {'moved' if c['moved'] else 'DID NOT MOVE'}){'  ' + why if why else ''}")
    v = manifest.get("validation")
    if v:
        iv = v.get("auc_interval", {})
        lines.append(f"validation AUC ({v['candidates']} formulas, {v['hold_up']} hold up): "
                     + ", ".join(f"{k} {fmt(a, '.3f')}{fmt_interval(iv.get(k))}" for k, a in v["auc"].items())
                     + f"; mean drop {fmt(v['auc_mean_drop'], '.3f')}{fmt_interval(v.get('auc_mean_drop_interval'))}")
    lines.append(f"R3 with this model: {'ON' if g['passed'] and any(sc['enabled'].values()) else 'OFF'}")
    return "\n".join(lines)


def _geometry_rule(geo: dict) -> str:
    """The geometry gate's rule as stored with the checkpoint (older checkpoints: the minimum R^2 only)."""
    rule = f"mean over 10 targets >= {geo['min_mean_r2']}"
    if geo.get("beat_baselines"):
        rule += ", >= the AR(1)'s" + (" and the baselines' combined" if geo.get("blend_weights") else "")
    if geo.get("blend_weights"):
        rule += ", head weight > 0"
    return rule


def fmt_interval(iv) -> str:
    """' [lo, hi]' of an AUC interval, '' when there is none."""
    if not iv or any(v is None or not math.isfinite(v) for v in iv):
        return ""
    return f" [{iv[0]:.3f}, {iv[1]:.3f}]"
