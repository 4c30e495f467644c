"""R3 jepa_stress: geometry targets, the R3 formula, the world model's fit, gates, scenarios, provider and CLI."""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys

import numpy as np
import pytest

from alpha_gym import Verifier, VerifierConfig
from alpha_gym.stress.geometry import (TARGET_NAMES, auc, auc_bootstrap, auc_interval, percentile_interval,
                                       correlation_matrix, geometry_targets, projector_drift,
                                       r3_value, stylised_facts, window_targets)

FORMULAS = ["rank(-ts_delta(close, 5))", "rank(volume / ts_mean(volume, 10))", "-ts_corr(close, volume, 10)",
            "rank(ts_std(returns, 20))", "((close - open) / ((high - low) + .001))"]


# --------------------------------------------------------------------------- no torch at import
def test_importing_alpha_gym_and_the_stress_package_does_not_import_torch():
    code = ("import sys, alpha_gym, alpha_gym.stress, alpha_gym.stress.provider, alpha_gym.commands.stress, "
            "alpha_gym.evaluation.stress_validation, alpha_gym.stress.scenarios, alpha_gym.stress.geometry; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --------------------------------------------------------------------------- geometry targets
def _direct(c: np.ndarray) -> dict:
    """The targets straight from numpy's eigenvalues (no code shared with geometry.py)."""
    n = c.shape[0]
    lam = np.sort(np.linalg.eigvalsh(c))[::-1]
    rest = lam[1:]
    return {"mean_corr": (c.sum() - np.trace(c)) / (n * n - n),
            "market_share": lam[0] / np.trace(c),
            "effective_fraction": lam.sum() ** 2 / (lam ** 2).sum() / n,
            "residual_fraction": rest.sum() ** 2 / (rest ** 2).sum() / (n - 1),
            "top": lam[:5] / np.trace(c)}


def _check_against_direct(c):
    got = dict(zip(TARGET_NAMES, geometry_targets(c)))
    want = _direct(c)
    for key in ("mean_corr", "market_share", "effective_fraction", "residual_fraction"):
        assert got[key] == pytest.approx(want[key], abs=1e-12), key
    assert [got[f"top{i}_share"] for i in range(1, 6)] == pytest.approx(list(want["top"]), abs=1e-12)
    assert got["top1_share"] == got["market_share"]
    assert got["projector_drift"] == 0.0  # no previous window
    return got


def test_geometry_one_factor_matches_closed_form_and_numpy():
    n, rho = 10, 0.3
    c = (1 - rho) * np.eye(n) + rho * np.ones((n, n))
    got = _check_against_direct(c)
    lam1 = 1 + (n - 1) * rho
    assert got["mean_corr"] == pytest.approx(rho)
    assert got["market_share"] == pytest.approx(lam1 / n)
    assert got["effective_fraction"] == pytest.approx(n ** 2 / (lam1 ** 2 + (n - 1) * (1 - rho) ** 2) / n)
    assert got["residual_fraction"] == pytest.approx(1.0)   # the rest of the spectrum is flat
    assert got["top2_share"] == pytest.approx((1 - rho) / n)


def test_geometry_two_blocks_matches_numpy():
    sizes, within, across = (6, 4), (0.6, 0.5), 0.1
    n = sum(sizes)
    c = np.full((n, n), across)
    c[:6, :6], c[6:, 6:] = within
    np.fill_diagonal(c, 1.0)
    got = _check_against_direct(c)
    # two blocks -> two large eigenvalues, the rest 1 - within of each block
    lam = np.sort(np.linalg.eigvalsh(c))[::-1]
    assert got["top2_share"] == pytest.approx(lam[1] / n)
    assert lam[1] > 1.5 and got["top3_share"] == pytest.approx(0.5 / n)  # 1 - within of the 2nd block
    assert got["residual_fraction"] < 1.0


def test_geometry_identity():
    got = _check_against_direct(np.eye(8))
    assert got["mean_corr"] == 0.0
    assert got["market_share"] == pytest.approx(1 / 8)
    assert got["effective_fraction"] == pytest.approx(1.0) and got["residual_fraction"] == pytest.approx(1.0)


def test_projector_drift_against_numpy():
    rng = np.random.default_rng(0)
    a = correlation_matrix(rng.standard_normal((200, 9)) + rng.standard_normal((200, 1)))
    b = correlation_matrix(rng.standard_normal((200, 9)) @ rng.standard_normal((9, 9)))
    ua = np.linalg.eigh(a)[1][:, ::-1][:, :3]
    ub = np.linalg.eigh(b)[1][:, ::-1][:, :3]
    pa, pb = ua @ ua.T, ub @ ub.T
    assert projector_drift(a, b) == pytest.approx(np.linalg.norm(pa - pb) ** 2 / 6, abs=1e-10)
    assert projector_drift(a, a) == pytest.approx(0.0, abs=1e-12)
    # block-diagonal matrices whose top-3 subspaces are (nearly) orthogonal
    big = np.eye(6)
    big[:3, :3] = 0.8 + 0.2 * np.eye(3)
    swapped = np.eye(6)
    swapped[3:, 3:] = 0.8 + 0.2 * np.eye(3)
    big[0, 1] = big[1, 0] = 0.7                     # break degeneracy inside the blocks
    swapped[3, 4] = swapped[4, 3] = 0.7
    lam_b, u_b = np.linalg.eigh(big)
    lam_s, u_s = np.linalg.eigh(swapped)
    top_b, top_s = u_b[:, np.argsort(lam_b)[::-1][:3]], u_s[:, np.argsort(lam_s)[::-1][:3]]
    direct = 1 - np.linalg.norm(top_b.T @ top_s) ** 2 / 3
    assert projector_drift(big, swapped) == pytest.approx(direct, abs=1e-10)
    assert 0.0 <= projector_drift(big, swapped) <= 1.0
    assert geometry_targets(b, a)[TARGET_NAMES.index("projector_drift")] == pytest.approx(projector_drift(a, b))


def test_correlation_matrix_and_window_targets():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((120, 7))
    assert correlation_matrix(x) == pytest.approx(np.corrcoef(x.T), abs=1e-12)
    x[:, 3] = 2.0                                   # a constant column is uncorrelated, diagonal 1
    c = correlation_matrix(x)
    assert c[3, 3] == 1.0 and np.all(c[3, np.arange(7) != 3] == 0.0)
    t = window_targets(x, [0, 40, 80], 40)
    assert t[0] == pytest.approx(geometry_targets(correlation_matrix(x[:40])))
    assert t[2] == pytest.approx(geometry_targets(correlation_matrix(x[80:120]), correlation_matrix(x[40:80])))


# --------------------------------------------------------------------------- R3 value, AUC, facts
def test_r3_value_formula_and_bounds():
    assert r3_value(0.5, [0.6, 0.9, 0.5, 1.0])[0] == 0.0           # no world lowers the score
    value, mean_drop, drops = r3_value(1.0, [0.5, 1.5, 0.0, 1.0])
    assert list(drops) == [0.5, 0.0, 1.0, 0.0] and mean_drop == 0.375
    assert value == pytest.approx(-0.4 * math.log(1.375))
    assert r3_value(1.0, [-100.0] * 4)[0] == -1.0
    assert r3_value(0.0, [])[0] == 0.0
    for base in (-2.0, 0.0, 3.0):
        for scores in ([-5, -1, 0, 2], [10, 10, 10, 10], [-30, 0, 0, 0]):
            assert -1.0 <= r3_value(base, scores)[0] <= 0.0


def test_auc_interval_brackets_the_auc_and_narrows_with_more_formulas():
    rng = np.random.default_rng(0)
    assert auc_interval([3, 2, 1, 0], [True, True, False, False]) == (1.0, 1.0)
    assert auc_interval([1.0] * 6, [True, False] * 3) == (0.5, 0.5)  # all tied: exactly chance
    assert all(math.isnan(v) for v in auc_interval([1, 2, 3], [True, True, True]))
    # a weak real signal: the interval holds the point AUC; on 40 formulas it straddles 0.5, on 800 it does not
    widths = []
    for n in (40, 800):
        y = rng.random(n) < 0.6
        score = rng.standard_normal(n) + 0.5 * y
        lo, hi = auc_interval(score, y)
        a = auc(score, y)
        assert lo <= a <= hi
        widths.append(hi - lo)
        if n == 40:
            assert lo < 0.5 < hi or hi - lo > 0.2
        else:
            assert 0.5 < lo and hi - lo < 0.1
    assert widths[1] < widths[0] / 3
    # ties count half, as in `auc`: a resample's rank-sum AUC agrees with the pairwise one
    score = np.round(rng.standard_normal(300))
    y = rng.random(300) < 0.5
    lo, hi = auc_interval(score, y, n_boot=4000)
    assert abs((lo + hi) / 2 - auc(score, y)) < 0.02
    # resamples are paired across scores of the same items: a difference of AUCs gets its own interval
    assert percentile_interval(auc_bootstrap(score, y) - auc_bootstrap(score, y)) == (0.0, 0.0)
    better = score + 2.0 * y
    lo, hi = percentile_interval(auc_bootstrap(better, y) - auc_bootstrap(score, y))
    assert 0.0 < lo <= auc(better, y) - auc(score, y) <= hi


def test_auc_and_stylised_facts():
    assert auc([3, 2, 1, 0], [True, True, False, False]) == 1.0
    assert auc([0, 1], [True, False]) == 0.0
    assert auc([1, 1], [True, False]) == 0.5
    assert math.isnan(auc([1, 2], [True, True]))
    rng = np.random.default_rng(2)
    close = 100 * np.exp(np.cumsum(0.01 * rng.standard_normal((2000, 5)), axis=0))
    f = stylised_facts(close)
    assert abs(f["abs_acf1"]) < 0.1 and abs(f["mean_corr"]) < 0.1 and abs(f["excess_kurtosis"]) < 0.5


# --------------------------------------------------------------------------- off without a model
def test_r3_is_off_without_a_model(small_synthetic, tmp_path):
    from alpha_gym.stress import StressProvider, attach
    from alpha_gym.stress.config import StressError
    v = Verifier(small_synthetic, VerifierConfig(archive_seed=False))
    (tmp_path / "nothing-here").mkdir()  # a folder without a model (a fit not begun); one that is not there is refused
    with pytest.raises(StressError, match="does not exist"):
        StressProvider.from_checkpoint(tmp_path / "not-there", v)
    for directory in (None, tmp_path / "nothing-here"):
        p = StressProvider.from_checkpoint(directory, v)
        assert not p.on
        value, state = p.channel("rank(-ts_delta(close, 5))", 0.7)
        assert value == 0.0 and state.startswith("off:")
    attach(v, tmp_path / "nothing-here")
    s = v.score_formula("rank(-ts_delta(close, 5))")
    assert s.channels["jepa_stress"] == 0.0
    assert s.diagnostics["channel_state"]["jepa_stress"].startswith("off: no world model at")


def test_registry_finds_the_model_fitted_for_a_panel_and_nothing_else(small_synthetic, tmp_path, monkeypatch):
    from alpha_gym.market import synthetic_panel
    from alpha_gym.stress import checkpoint as ck
    from alpha_gym.stress.config import StressError
    from alpha_gym.stress.registry import lookup, register, resolve
    monkeypatch.setenv("ALPHA_GYM_CACHE", str(tmp_path / "cache"))
    other = synthetic_panel(n_stocks=12, n_days=300, seed=9)
    assert lookup(small_synthetic) is None and resolve("auto", small_synthetic) is None  # empty registry
    model = tmp_path / "model"
    model.mkdir()
    (model / ck.MANIFEST_FILE).write_text("{}")
    (model / ck.MODEL_FILE).write_bytes(b"")
    assert register(model, small_synthetic.fingerprint()).is_file()
    assert lookup(small_synthetic) == model.resolve()
    assert resolve("auto", small_synthetic) == str(model.resolve())
    assert resolve(str(tmp_path), small_synthetic) == str(tmp_path)                    # a folder: unchanged
    assert resolve(None, small_synthetic) is None
    with pytest.raises(StressError, match="somewhere/else: does not exist"):     # not a folder: refused, not off
        resolve("somewhere/else", small_synthetic)
    assert lookup(other) is None                          # registered for another panel only
    (model / ck.MODEL_FILE).unlink()
    assert lookup(small_synthetic) is None                # the folder no longer holds a model
    monkeypatch.setenv("ALPHA_GYM_CACHE", "off")
    assert register(model, small_synthetic.fingerprint()) is None and lookup(small_synthetic) is None


def test_auto_without_a_registered_model_is_off_and_says_how_to_fit_one(small_synthetic, tmp_path, monkeypatch):
    monkeypatch.setenv("ALPHA_GYM_CACHE", str(tmp_path / "cache"))
    assert VerifierConfig().stress_checkpoint == "auto"
    v = Verifier(small_synthetic, VerifierConfig(archive_seed=False))
    assert v.config.stress_checkpoint is None             # resolved once: the config names what R3 uses
    s = v.score_formula("rank(-ts_delta(close, 5))")
    assert s.channels["jepa_stress"] == 0.0
    assert "no world model fitted for this panel" in s.diagnostics["channel_state"]["jepa_stress"]
    assert "alpha-gym stress fit" in s.diagnostics["channel_state"]["jepa_stress"]


def test_stress_config_round_trip_and_presets():
    from alpha_gym.stress.config import StressConfig, StressError, preset
    cfg = preset("tiny", seed=3)
    again = StressConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg and again.digest() == cfg.digest()
    assert cfg.with_(threads=2).digest() == cfg.digest()      # threads do not define the weights
    with pytest.raises(StressError):
        StressConfig(window=12)
    with pytest.raises(StressError):
        preset("huge")
    assert preset("default") == StressConfig() and preset("large").digest() != StressConfig().digest()
    with pytest.raises(StressError, match="val_fraction > 0"):
        preset("tiny", val_fraction=0.0)                       # the blend's weight needs a validation block
    assert not preset("tiny", val_fraction=0.0, geometry_blend=False).geometry_blend
    # a checkpoint written before the blend existed (no such field) gated the head alone, without validation
    old = {k: v for k, v in preset("tiny").to_dict().items() if k != "geometry_blend"}
    old["val_fraction"] = 0.0
    assert StressConfig.from_dict(old).geometry_blend is False


def test_blend_weights_are_bounded_least_squares_over_the_ar1():
    _need_torch()
    from alpha_gym.stress.fit import blend_weights, combine
    rng = np.random.default_rng(1)
    ar1, head, now = (rng.standard_normal((400, 10)) for _ in range(3))
    truth = ar1 + 0.3 * (head - ar1) + 0.5 * (now - ar1) + 0.1 * rng.standard_normal((400, 10))
    w = blend_weights(ar1, truth, head=head, no_change=now)
    assert w["head"] == pytest.approx(0.3, abs=0.02) and w["no_change"] == pytest.approx(0.5, abs=0.02)
    # and the fitted combination is the least-squares one: no other weights in the box do better on its data
    best = ((combine(ar1, w, head=head, no_change=now) - truth) ** 2).sum()
    for dh, dn in ((0.02, 0), (-0.02, 0), (0, 0.02), (0, -0.02)):
        other = {"head": w["head"] + dh, "no_change": w["no_change"] + dn}
        assert ((combine(ar1, other, head=head, no_change=now) - truth) ** 2).sum() > best
    assert blend_weights(ar1, ar1 - 0.5 * (head - ar1), head=head) == {"head": 0.0}   # the head points the wrong way
    assert blend_weights(ar1, ar1 + 2.0 * (head - ar1), head=head) == {"head": 1.0}   # never more than the head
    assert blend_weights(ar1, truth, head=ar1) == {"head": 0.0}                        # nothing to add


# --------------------------------------------------------------------------- fitted models (slow)
def _need_torch():
    pytest.importorskip("torch")
    pytest.importorskip("safetensors")


@pytest.fixture(scope="module")
def tiny_panel():
    from alpha_gym.market import synthetic_panel
    return synthetic_panel(n_stocks=16, n_days=640, seed=5)


@pytest.fixture(scope="module")
def tiny_fit(tiny_panel, tmp_path_factory):
    _need_torch()
    from alpha_gym.stress.config import preset
    from alpha_gym.stress.fit import fit
    d = tmp_path_factory.mktemp("stress_tiny")
    manifest = fit(tiny_panel, d, preset("tiny"), progress=False)
    return d, manifest


def _recheck(gates: dict) -> bool:
    """The verdicts, recomputed from the stored values and thresholds."""
    p, g, f = gates["prediction"], gates["geometry"], gates["stylised_facts"]
    pred = p["latent_mse_ratio_vs_no_change"] < p["max_ratio"] and p["geometry_mse_ratio_vs_no_change"] < p["max_ratio"]
    r2 = np.mean(list(g["r2"].values()))
    beat = not g["beat_baselines"] or (r2 >= np.mean(list(g["ar1_r2"].values()))
                                       and (g["blend_weights"] is None or r2 >= g["baselines_mean_r2"]))
    geo = r2 >= g["min_mean_r2"] and beat and (g["blend_weights"] is None or g["blend_weights"]["head"] > 0)
    lo, hi = f["acf_ratio_range"]
    klo, khi = f["kurtosis_ratio_range"]
    facts = (lo <= f["abs_acf1_ratio"] <= hi and abs(f["mean_corr_diff"]) <= f["corr_tolerance"]
             and klo <= f["excess_kurtosis_ratio"] <= khi and f["ohlc_consistent"])
    assert (pred, geo, facts) == (p["passed"], g["passed"], f["passed"])
    return pred and geo and facts


@pytest.mark.slow
def test_small_model_fits_and_its_gates_are_evaluated_honestly(tiny_fit, tiny_panel):
    d, manifest = tiny_fit
    gates = manifest["gates"]
    assert _recheck(gates) == gates["passed"]
    assert set(gates["geometry"]["r2"]) == set(TARGET_NAMES)
    # a trained predictor beats "no change" in latent space on the held-back tail
    assert gates["prediction"]["latent_mse_ratio_vs_no_change"] < 1.0
    assert manifest["data"]["fingerprint"] == tiny_panel.fingerprint()
    assert manifest["fit"]["steps"] == manifest["config"]["steps"]
    for key in ("torch", "numpy", "safetensors", "alpha_gym"):
        assert key in manifest["versions"]
    assert (d / "model.safetensors").is_file() and not (d / "partial.json").exists()


@pytest.mark.slow
def test_the_gated_geometry_forecast_is_the_validation_weighted_combination(tiny_fit, tiny_panel):
    """The weights come from the validation block only (refitted here from the checkpoint), and the gate's
    R^2 are those of the combinations with and without the head on the tail, recomputed from the model."""
    d, manifest = tiny_fit
    from alpha_gym.stress.config import StressConfig
    from alpha_gym.stress.fit import (blend_weights, combine, geometry_forecasts, prepare, r2_about_training_mean,
                                      ridge_ar1_forecast)
    from alpha_gym.stress.model import load_model
    cfg = StressConfig.from_dict(manifest["config"])
    prep, model = prepare(tiny_panel, cfg), load_model(d)
    W = cfg.window
    assert len(prep.val) and prep.val[-1] <= prep.tail[0] - 2 * W and prep.train[-1] <= prep.val[0] - 2 * W
    head, truth, now = geometry_forecasts(model, prep, cfg, prep.val, 424_243)
    ar1 = ridge_ar1_forecast(prep, W, prep.val)
    w = blend_weights(ar1, truth, head=head, no_change=now)
    base = blend_weights(ar1, truth, no_change=now)
    blend = manifest["geometry_forecast"]
    assert blend["weights"] == w == manifest["gates"]["geometry"]["blend_weights"] and blend["baseline_weights"] == base
    head, truth, now = geometry_forecasts(model, prep, cfg, prep.tail, 999_983)
    ar1 = ridge_ar1_forecast(prep, W, prep.tail)
    geo = manifest["gates"]["geometry"]

    def r2(p):
        return float(r2_about_training_mean(p, truth).mean())
    assert geo["mean_r2"] == pytest.approx(r2(combine(ar1, w, head=head, no_change=now)), abs=1e-12)
    assert geo["baselines_mean_r2"] == pytest.approx(r2(combine(ar1, base, no_change=now)), abs=1e-12)
    assert geo["head_mean_r2"] == pytest.approx(r2(head), abs=1e-12)


@pytest.mark.slow
def test_regate_reproduces_the_fits_gates_and_refuses_other_data(tiny_fit, tiny_panel, small_synthetic, tmp_path):
    """`alpha-gym stress check --regate`: the gates of a saved model evaluated again equal, bit for bit, those
    its fit wrote; a manifest gated under other rules (here: tampered) is brought back to them."""
    import shutil

    from alpha_gym.stress import checkpoint as ck
    from alpha_gym.stress.config import StressError
    from alpha_gym.stress.fit import regate
    d, manifest = tiny_fit
    copy = tmp_path / "m"
    shutil.copytree(d, copy)
    m = ck.read_manifest(copy)
    m["gates"] = {"passed": True}
    m["geometry_forecast"] = None
    ck.write_json(copy / ck.MANIFEST_FILE, m)
    again = regate(copy, tiny_panel)
    assert again["gates"] == manifest["gates"] and again["geometry_forecast"] == manifest["geometry_forecast"]
    assert ck.read_manifest(copy)["gates"] == manifest["gates"]
    with pytest.raises(StressError, match="other data"):
        regate(copy, small_synthetic)


def test_ridge_ar1_r2_recovers_the_skill_of_an_ar1_series():
    """Targets that follow an AR(1) with coefficient 0.8 give a tail R^2 near 0.8^2 = 0.64 (the share of a
    stationary AR(1)'s variance its last value explains); independent targets give about 0."""
    _need_torch()
    from alpha_gym.stress.fit import Prepared, ridge_ar1_r2
    rng = np.random.default_rng(0)
    n, W = 6000, 1
    ar = np.zeros((n, 10))
    for s_ in range(1, n):
        ar[s_] = 0.8 * ar[s_ - 1] + rng.standard_normal(10)
    for targets, want in ((ar, 0.64), (rng.standard_normal((n, 10)), 0.0)):
        prep = Prepared(None, {}, None, targets, np.arange(W, 5000), np.arange(5000 + W, n),
                        targets[:5000].mean(axis=0), targets[:5000].std(axis=0), np.array([], dtype=int))
        r2 = ridge_ar1_r2(prep, W)
        assert abs(r2.mean() - want) < 0.03 and np.all(np.abs(r2 - want) < 0.1)


@pytest.mark.slow
def test_geometry_skip_learns_an_ar1_path_and_the_gates_report_the_ridge_ar1(tiny_panel, tmp_path):
    """The AR(1) path of the geometry forecast trains, survives a reload, and the gates put the model's
    R^2 beside the ridge AR(1) fitted on the observed geometry (recomputed here from the same windows)."""
    _need_torch()
    from alpha_gym.stress.config import preset
    from alpha_gym.stress.fit import fit, prepare, ridge_ar1_r2
    from alpha_gym.stress.model import load_model
    cfg = preset("tiny", geometry_skip=True)
    manifest = fit(tiny_panel, tmp_path / "skip", cfg, progress=False)
    geo = manifest["gates"]["geometry"]
    prep = prepare(tiny_panel, cfg)
    assert np.allclose(list(geo["ar1_r2"].values()), ridge_ar1_r2(prep, cfg.window))
    assert geo["ar1_mean_r2"] == pytest.approx(np.mean(list(geo["ar1_r2"].values())))
    model = load_model(tmp_path / "skip")
    assert model.head.ar is not None and float(model.head.ar.detach().abs().sum()) > 0  # learned, saved, reloaded
    from alpha_gym.stress.model import WorldModel
    assert WorldModel(preset("tiny"), tiny_panel.n_stocks).head.ar is None  # off by default


@pytest.mark.slow
def test_a_random_weight_model_fails_its_gates_and_r3_stays_off(tiny_panel, tmp_path):
    _need_torch()
    from alpha_gym.stress import StressProvider
    from alpha_gym.stress.config import preset
    from alpha_gym.stress.fit import random_model_checkpoint
    manifest = random_model_checkpoint(tmp_path, tiny_panel, preset("tiny"))
    gates = manifest["gates"]
    assert not gates["passed"] and not _recheck(gates)
    assert not gates["prediction"]["passed"]
    # whatever weight the validation block gives its head, the blend scores below the AR(1) on the tail
    geo = gates["geometry"]
    assert geo["blend_weights"] == manifest["geometry_forecast"]["weights"]
    assert not geo["passed"] and (geo["blend_weights"]["head"] == 0 or geo["mean_r2"] < geo["baselines_mean_r2"])
    v = Verifier(tiny_panel, VerifierConfig(archive_seed=False))
    p = StressProvider.from_checkpoint(tmp_path, v)
    assert not p.on
    value, state = p.channel("rank(-ts_delta(close, 5))", 1.0)
    assert value == 0.0 and "failed its gates" in state


@pytest.mark.slow
def test_checkpoint_refuses_other_data(tiny_fit, small_synthetic):
    from alpha_gym.stress import StressError, StressProvider
    d, _ = tiny_fit
    v = Verifier(small_synthetic, VerifierConfig(archive_seed=False))
    with pytest.raises(StressError, match="fitted on .* not on this panel"):
        StressProvider.from_checkpoint(d, v)


def _forced_provider(directory, panel):
    """A provider over the checkpoint's worlds whatever its gates say (to test the channel's arithmetic)."""
    from alpha_gym.stress import checkpoint as ck
    from alpha_gym.stress.provider import StressProvider
    from alpha_gym.stress.scenarios import load_or_build
    manifest = ck.read_manifest(directory)
    panels, _ = load_or_build(directory, panel, manifest)
    cfg = VerifierConfig(archive_seed=False)
    return StressProvider({k: Verifier(p, cfg) for k, p in panels.items()}, "on", manifest, str(directory))


@pytest.mark.slow
def test_r3_is_bounded_and_deterministic_given_the_checkpoint(tiny_fit, tiny_panel):
    d, _ = tiny_fit
    v = Verifier(tiny_panel, VerifierConfig(archive_seed=False))
    first = _forced_provider(d, tiny_panel)
    values = []
    for f in FORMULAS:
        base = v.evaluate(f).cpcv
        value, state = first.channel(f, base)
        assert -1.0 <= value <= 0.0 and state.startswith("on: model") and "mean drop" in state
        values.append(value)
    assert any(val < 0 for val in values)
    # the cache deleted: the worlds are rebuilt from the weights, bit-identically
    shutil.rmtree(d / "scenarios")
    second = _forced_provider(d, tiny_panel)
    assert [second.channel(f, v.evaluate(f).cpcv)[0] for f in FORMULAS] == values
    for name, world in first.worlds.items():
        for field in ("open", "high", "low", "close", "volume"):
            assert np.array_equal(world.panel.field(field), second.worlds[name].panel.field(field))


@pytest.mark.slow
def test_scenario_panels_are_complete_and_a_zero_shift_replays_the_real_panel(tiny_fit, tiny_panel):
    _need_torch()
    import torch as th

    from alpha_gym.stress import checkpoint as ck
    from alpha_gym.stress import scenarios as sc
    from alpha_gym.stress.config import StressConfig
    from alpha_gym.stress.data import raw_features, scaled_features
    from alpha_gym.stress.model import load_model
    d, _ = tiny_fit
    manifest = ck.read_manifest(d)
    panels, _ = sc.load_or_build(d, tiny_panel, manifest)
    for name, p in panels.items():
        assert p.shape == tiny_panel.shape and np.array_equal(p.dates, tiny_panel.dates)
        assert p.tickers == tiny_panel.tickers
        o, h, l, c, vol = (p.field(k) for k in ("open", "high", "low", "close", "volume"))
        assert np.all(np.isfinite(c)) and np.all(l > 0) and np.all(vol > 0)
        assert np.all(h >= np.maximum(o, c) * (1 - 1e-12)) and np.all(l <= np.minimum(o, c) * (1 + 1e-12))
    cfg = StressConfig.from_dict(manifest["config"])
    model = load_model(d, manifest)
    raw = raw_features(tiny_panel, cfg.volume_window)
    x = scaled_features(raw, manifest["features"])
    starts = sc.window_starts(tiny_panel.n_days, cfg.window)
    with th.no_grad():
        params = sc.decode(model, sc.encode_windows(model, x, starts, cfg.window))
    same = sc.replay_world(tiny_panel, raw, manifest["features"], x, params, params, starts, cfg.window,
                           manifest["calibration"]["overnight_share"])
    for k in ("open", "high", "low", "close", "volume"):
        assert same[k] == pytest.approx(tiny_panel.field(k), rel=1e-5)


@pytest.mark.slow
def test_fit_is_resumable_and_seeded(tiny_panel, tmp_path):
    _need_torch()
    from safetensors.numpy import load_file

    from alpha_gym.stress.config import preset
    from alpha_gym.stress.fit import fit
    cfg = preset("tiny", steps=60, save_every=1000)
    assert fit(tiny_panel, tmp_path / "a", cfg, progress=False, max_steps=20) is None
    assert fit(tiny_panel, tmp_path / "a", cfg, progress=False, max_steps=40) is None   # resumed at 20
    assert fit(tiny_panel, tmp_path / "b", cfg, progress=False, max_steps=40) is None   # straight to 40
    a = load_file(str(tmp_path / "a" / "partial.safetensors"))
    b = load_file(str(tmp_path / "b" / "partial.safetensors"))
    assert json.loads((tmp_path / "a" / "partial.json").read_text())["step"] == 40
    assert set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_cli_fit_check_validate(tiny_panel, tmp_path, capsys):
    _need_torch()
    from alpha_gym.stress import checkpoint as ck
    from alpha_gym.commands.stress import register
    rows = ["date,ticker,open,high,low,close,volume"]
    small = tiny_panel.select(tiny_panel.tickers[:10]).head(420)
    for i, day in enumerate(small.dates):
        for j, t in enumerate(small.tickers):
            rows.append(f"{day},{t}," + ",".join(repr(float(small.field(k)[i, j]))
                                                  for k in ("open", "high", "low", "close", "volume")))
    data = tmp_path / "panel.csv"
    data.write_text("\n".join(rows) + "\n")
    parser = argparse.ArgumentParser(prog="alpha-gym")
    register(parser.add_subparsers(dest="command", required=True))
    out = tmp_path / "ck"
    args = parser.parse_args(["stress", "fit", "--data", str(data), "--out", str(out), "--size", "tiny",
                              "--steps", "40", "--no-progress"])
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    assert "prediction beats 'no change'" in printed and "geometry R^2" in printed
    # registered for the CSV's panel: `alpha-gym score` on that data names the model (or why it is off) unasked
    from alpha_gym.commands.main import main as cli_main
    from alpha_gym.market.resolve import resolve_panel
    from alpha_gym.stress.registry import lookup
    assert lookup(resolve_panel(data=str(data))) == out.resolve()
    assert cli_main(["score", "rank(-ts_delta(close, 5))", "--data", str(data), "--json"]) == 0
    state = json.loads(capsys.readouterr().out)["diagnostics"]["channel_state"]["jepa_stress"]
    assert str(out.resolve()) in state and state.startswith(("on: model", "off: the world model at"))
    assert cli_main(["score", "rank(-ts_delta(close, 5))", "--data", str(data), "--json",
                     "--stress-checkpoint", "none"]) == 0
    state = json.loads(capsys.readouterr().out)["diagnostics"]["channel_state"]["jepa_stress"]
    assert state.startswith("off: no world model configured")
    args = parser.parse_args(["stress", "check", str(out)])
    code = args.func(args)
    text = capsys.readouterr().out
    assert code == (0 if ck.read_manifest(out)["gates"]["passed"] else 1)
    assert "stylised facts" in text and "scenarios" in text
    args = parser.parse_args(["stress", "validate", str(out), "--random", "20", "--no-alpha101"])
    assert args.func(args) == 0
    text = capsys.readouterr().out
    assert "95% bootstrap interval" in text and "earlier CPCV itself" in text
    args = parser.parse_args(["stress", "validate", str(out), "--apply", "--json"])
    assert args.func(args) == 0
    result = json.loads(capsys.readouterr().out.split("\nswitched off")[0])
    assert set(result["auc"]) <= {"dispersion", "trend_flip", "correlation", "volatility"}
    for a in [*result["auc"].values(), result["auc_early_cpcv_with_r3"]]:
        assert a is None or math.isnan(a) or 0.0 <= a <= 1.0
    manifest = ck.read_manifest(out)
    assert manifest["validation"]["candidates"] == result["candidates"]
    for name, reason in manifest["scenarios"]["switched_off"].items():
        assert not manifest["scenarios"]["enabled"][name] and reason
    for name, on in manifest["scenarios"]["enabled"].items():  # on only where the interval lies above 0.5
        lo, hi = result["auc_interval"][name]
        assert not on or (lo > 0.5 and lo <= result["auc"][name] <= hi)


@pytest.mark.slow
def test_auto_uses_the_model_registered_for_the_panel(tiny_fit, tiny_panel, tmp_path, monkeypatch):
    from alpha_gym.stress import checkpoint as ck
    from alpha_gym.stress.registry import register
    monkeypatch.setenv("ALPHA_GYM_CACHE", str(tmp_path / "cache"))
    d, _ = tiny_fit
    model = tmp_path / "model"
    shutil.copytree(d, model)
    register(model, tiny_panel.fingerprint())
    f = "rank(-ts_delta(close, 5))"
    v = Verifier(tiny_panel, VerifierConfig(archive_seed=False))
    assert v.config.stress_checkpoint == str(model.resolve())
    m = ck.read_manifest(model)
    state = v.score_formula(f).diagnostics["channel_state"]["jepa_stress"]
    if m["gates"]["passed"] and any(m["scenarios"]["enabled"].values()):
        assert state.startswith(f"on: model {model.resolve()}")
    else:
        assert state.startswith(f"off: the world model at {model.resolve()}") or "switched off" in state
    # a model that passes (its gates marked passed here, every scenario on): R3 is on with no argument at all,
    # and gives exactly what the explicit folder gives
    m["gates"]["passed"] = True
    m["scenarios"]["enabled"] = {k: True for k in m["scenarios"]["enabled"]}
    ck.write_json(model / ck.MANIFEST_FILE, m)
    auto = Verifier(tiny_panel, VerifierConfig(archive_seed=False)).score_formula(f)
    explicit = Verifier(tiny_panel, VerifierConfig(archive_seed=False, stress_checkpoint=str(model))).score_formula(f)
    assert auto.diagnostics["channel_state"]["jepa_stress"].startswith(f"on: model {model.resolve()}")
    assert auto.channels["jepa_stress"] == explicit.channels["jepa_stress"] and auto.reward == explicit.reward
    assert auto.reward == sum(auto.channels[c] * p for c, p in VerifierConfig().priorities.items())
    # the score names the model: its content hash, the same for the registered and the explicit folder
    ident = ck.identity(model, m["model_sha256"])
    assert ident.startswith("sha256:") and auto.world_model == explicit.world_model == ident
    assert auto.to_dict()["world_model"] == ident and ident in auto.diagnostics["channel_state"]["jepa_stress"]
    # gym.make says which one it found (a WARNING: "auto" took it from this machine's registry), and the info names it
    import logging

    import gymnasium as gym

    import alpha_gym  # noqa: F401
    from alpha_gym import env as env_module
    monkeypatch.setattr(env_module, "_ANNOUNCED", set())
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("alpha_gym").addHandler(handler)
    try:
        env = gym.make("AlphaFormula-v0", panel=tiny_panel, config=VerifierConfig(archive_seed=False))
    finally:
        logging.getLogger("alpha_gym").removeHandler(handler)
    found = [r for r in records if "R3 world model" in r.getMessage()]
    assert len(found) == 1 and found[0].levelno == logging.WARNING and ident in found[0].getMessage()
    env.reset(seed=0)
    assert env.step(f"<alpha>{f}</alpha>")[4]["world_model"] == ident
    # an edited checkpoint is another model: another identity (here the same reward: the edit is a note)
    m["note"] = "edited"
    ck.write_json(model / ck.MANIFEST_FILE, m)
    edited = Verifier(tiny_panel, VerifierConfig(archive_seed=False)).score_formula(f)
    assert edited.world_model.startswith("sha256:") and edited.world_model != ident
    assert edited.reward == auto.reward


# --------------------------------------------------------------------------- real data (slow)
@pytest.fixture(scope="module")
def real_fit(real_us46, tmp_path_factory):
    _need_torch()
    from alpha_gym.stress.config import preset
    from alpha_gym.stress.fit import fit
    panel = real_us46.window("2021-06-01", None)
    d = tmp_path_factory.mktemp("stress_real")
    return d, fit(panel, d, preset("tiny", steps=150), progress=False), panel


@pytest.mark.slow
@pytest.mark.real_data
def test_scenarios_move_their_statistics_on_the_real_us46_panel(real_fit):
    from alpha_gym.stress import checkpoint as ck
    from alpha_gym.stress.scenarios import INTENDED, load_or_build, scenario_statistics
    d, manifest, panel = real_fit
    panels, _ = load_or_build(d, panel, ck.read_manifest(d))
    window = manifest["config"]["window"]
    real = scenario_statistics(panel, panel, window)
    for name, world in panels.items():
        moved = scenario_statistics(panel, world, window)[name] - real[name]
        assert moved * INTENDED[name] > 0, (name, real[name], moved)
        assert manifest["scenarios"]["checks"][name]["moved"]


@pytest.mark.slow
@pytest.mark.real_data
def test_r3_on_real_us46_is_bounded(real_fit):
    from alpha_gym.stress import StressProvider
    d, manifest, panel = real_fit
    v = Verifier(panel, VerifierConfig(archive_seed=False))
    provider = StressProvider.from_checkpoint(d, v) if manifest["gates"]["passed"] else _forced_provider(d, panel)
    assert provider.on
    for f in FORMULAS:
        value, state = provider.channel(f, v.evaluate(f).cpcv)
        assert -1.0 <= value <= 0.0, state
