"""Scenario worlds: shift the latents of the real windows along a channel and decode complete OHLCV panels.

The train panel is cut into consecutive windows of W sessions (the last one
overlaps its predecessor so the whole span is covered; only its new sessions
are used). Each window is encoded by the frozen EMA target encoder (no mask)
into one latent per stock: the world model's reading of that window's market
state. A scenario moves those latents (Adam steps on the latents, bounded
per window) until the DECODED regime meets the scenario's target while its
other statistics stay put (`ScenarioConfig`; defaults shown):

============  ================================================================
dispersion    cross-sectional std of the drifts mu_i x 2 (stocks diverge;
              mean drift, volatility and correlation held)
trend_flip    every drift mu_i -> -mu_i (volatility and correlation held)
correlation   mean pairwise correlation of B B' + D, +0.15 (volatility and
              drifts held)
volatility    total volatility of every stock-day x 1.5 (correlation and
              drifts held)
============  ================================================================

Decoding to a panel (the design, stated plainly). The decoder gives a factor
model per window (drift, smooth idiosyncratic-volatility paths, factor
loadings, a smooth volume path; see `model.py`); it does not give single
days. To produce complete panels the default mode, ``replay``, keeps the real
panel's shocks and re-dresses them in the shifted regime: the real window's
scaled log returns are split exactly into x = mu + B f + u (posterior-mean
factor realisations f, idiosyncratic residuals u), and the world's returns are

    x' = mu' + B' f + (s' / s) u

with the shifted parameters (primed). So a zero shift reproduces the real
panel, and the day-to-day structure a formula may exploit survives unless the
scenario changes the regime it lives in. Prices are rebuilt consistently: the
close compounds the new log returns from the real first close; the overnight
gap keeps its share of the move (g' = k g + theta (r' - k r), k = the ratio of
shifted to base total volatility); high and low extend beyond max/min(open,
close) by the real excursions times k; log volume moves by the change of the
decoded volume path. Mode ``simulate`` instead draws seeded shocks (Gaussian
factors, Student-t idiosyncratic shocks with the fitted tail index,
Brownian-bridge high/low): the decoder as a pure generator. The stylised-facts
gate always tests ``simulate`` (a replayed panel would reproduce the real facts
by construction).

Scenario panels are built once per (panel fingerprint, weights hash, scenario
config) and cached in the checkpoint directory; scoring a formula in them is
then only an evaluation. Building runs single-threaded with deterministic
torch algorithms, so a rebuilt cache is bit-identical.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from alpha_gym.jsonable import json_dumps
from alpha_gym.market.panel import Panel
from alpha_gym.stress import checkpoint as ck
from alpha_gym.stress.config import SCENARIOS, StressConfig
from alpha_gym.stress.geometry import correlation_matrix

#: The statistic each scenario must move, and in which direction (+1 up, -1 down).
INTENDED = {"dispersion": 1, "trend_flip": -1, "correlation": 1, "volatility": 1}
STAT_DOC = {
    "dispersion": "mean over windows of the cross-sectional std of the stocks' window log returns",
    "trend_flip": "slope of the world's window log returns on the real ones (1 = same trends, <0 = flipped)",
    "correlation": "mean over windows of the mean pairwise correlation of daily log returns",
    "volatility": "mean over stocks of the std of daily log returns",
}
PRICE_KEYS = ("open", "high", "low", "close", "volume")


def window_starts(n_days: int, window: int) -> list[int]:
    """Consecutive window starts covering [0, n_days); the last window may overlap its predecessor."""
    starts = list(range(0, n_days - window + 1, window))
    if starts and starts[-1] + window < n_days:
        starts.append(n_days - window)
    return starts


# --------------------------------------------------------------------------- panel statistics
def _log_close_returns(panel: Panel) -> np.ndarray:
    c = panel.field("close")
    r = np.zeros(panel.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        r[1:] = np.log(c[1:] / c[:-1])
    return np.where(np.isfinite(r), r, 0.0)


def scenario_statistics(real: Panel, world: Panel, window: int) -> dict[str, float]:
    """The four scenario statistics of `world` (see STAT_DOC); trend_flip is measured against `real`."""
    rw, rr = _log_close_returns(world), _log_close_returns(real)
    starts = list(range(0, world.n_days - window + 1, window))
    cum_w = np.array([rw[s:s + window].sum(axis=0) for s in starts])
    cum_r = np.array([rr[s:s + window].sum(axis=0) for s in starts])
    corr = []
    for s in starts:
        c = correlation_matrix(rw[s:s + window])
        n = c.shape[0]
        corr.append((c.sum() - n) / (n * (n - 1)))
    denom = float((cum_r * cum_r).sum())
    return {"dispersion": float(cum_w.std(axis=1).mean()),
            "trend_flip": float((cum_w * cum_r).sum() / denom) if denom > 0 else 1.0,
            "correlation": float(np.mean(corr)),
            "volatility": float(rw[1:].std(axis=0).mean())}


# --------------------------------------------------------------------------- torch parts
def window_tensor(x: np.ndarray, starts, window: int):
    """(n_windows, N, W, F) float32 tensor of the windows starting at `starts` of a (T, N, F) array."""
    import torch
    idx = np.asarray(starts)[:, None] + np.arange(window)[None, :]
    return torch.from_numpy(np.ascontiguousarray(x[idx].transpose(0, 2, 1, 3)))


def encode_windows(model, x: np.ndarray, starts, window: int, chunk: int = 32):
    """Latents (n_windows, N, d) of the EMA target encoder for unmasked windows."""
    import torch
    out = []
    with torch.no_grad():
        for i in range(0, len(starts), chunk):
            out.append(model.target(window_tensor(x, starts[i:i + chunk], window)))
    return torch.cat(out)


def decode(model, z, chunk: int = 64) -> dict:
    import torch
    parts = [model.decoder(z[i:i + chunk]) for i in range(0, z.shape[0], chunk)]
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}


def _regime(params: dict) -> dict:
    """Per-window statistics of a decoded regime that the scenarios target or hold fixed."""
    from alpha_gym.stress.model import implied_mean_corr, total_log_vol
    mu = params["mu"]
    return {"logvol": total_log_vol(params), "corr": implied_mean_corr(params), "mu": mu,
            "mu_mean": mu.mean(dim=1), "mu_std": mu.std(dim=1, unbiased=False)}


def _scenario_loss(name: str, new: dict, base: dict, scfg, mu_scale: float):
    """Per-window loss (n_w,): distance of the decoded regime from the scenario's target + side effects."""
    import torch
    d_vol = ((new["logvol"] - base["logvol"]) ** 2).mean(dim=(1, 2))
    d_corr = (new["corr"] - base["corr"]) ** 2
    d_mu = ((new["mu"] - base["mu"]) ** 2).mean(dim=1) / mu_scale ** 2
    d_mu_mean = (new["mu_mean"] - base["mu_mean"]) ** 2 / mu_scale ** 2
    if name == "volatility":
        goal = ((new["logvol"] - base["logvol"]).mean(dim=(1, 2)) - float(np.log(scfg.volatility_factor))) ** 2
        side = d_corr + d_mu
    elif name == "correlation":
        target = torch.clamp(base["corr"] + scfg.correlation_add, max=0.95)
        goal = (new["corr"] - target) ** 2
        side = d_vol + d_mu
    elif name == "dispersion":
        goal = (new["mu_std"] - scfg.dispersion_factor * base["mu_std"]) ** 2 / mu_scale ** 2
        side = d_vol + d_corr + d_mu_mean
    elif name == "trend_flip":
        goal = ((new["mu"] - scfg.trend_factor * base["mu"]) ** 2).mean(dim=1) / mu_scale ** 2
        side = d_vol + d_corr
    else:  # pragma: no cover
        raise ValueError(name)
    return goal + scfg.side_weight * side, goal


def shift_latents(model, z, name: str, scfg, latent_scale: float):
    """Latents moved (Adam, bounded per window) so the decoded regime meets scenario `name`'s target."""
    import torch
    n_w = z.shape[0]
    ball = scfg.max_shift * latent_scale * float(np.sqrt(z.shape[1] * z.shape[2]))
    with torch.no_grad():
        base = {k: v.detach() for k, v in _regime(model.decoder(z)).items()}
    mu_scale = max(float(base["mu"].std()), 1e-4)
    delta = torch.zeros_like(z, requires_grad=True)
    opt = torch.optim.Adam([delta], lr=scfg.lr * latent_scale)
    for _ in range(scfg.steps):
        loss, _goal = _scenario_loss(name, _regime(model.decoder(z + delta)), base, scfg, mu_scale)
        opt.zero_grad()
        loss.sum().backward()
        opt.step()
        with torch.no_grad():
            dn = delta.reshape(n_w, -1).norm(dim=1).clamp_min(1e-12)
            delta.mul_(torch.clamp(ball / dn, max=1.0)[:, None, None])
    z_new = (z + delta).detach()
    with torch.no_grad():
        new = _regime(model.decoder(z_new))
        _, goal = _scenario_loss(name, new, base, scfg, mu_scale)
    info = {"decoded_before": {k: float(base[k].mean()) for k in ("corr", "mu_std")}
            | {"vol": float(torch.exp(base["logvol"]).mean())},
            "decoded_after": {k: float(new[k].mean()) for k in ("corr", "mu_std")}
            | {"vol": float(torch.exp(new["logvol"]).mean())},
            "target_miss": float(goal.mean()),
            "latent_shift_rms": float((z_new - z).pow(2).mean().sqrt() / latent_scale)}
    return z_new, info


def _assemble(values_per_window: np.ndarray, starts, n_days: int, window: int, fill: float) -> np.ndarray:
    """(n_w, W, N) window values -> (T, N); each session taken from the first window that covers it."""
    out = np.full((n_days, values_per_window.shape[2]), fill, dtype=np.float64)
    covered = 0
    for j, s in enumerate(starts):
        lo = max(s, covered)
        out[lo:s + window] = values_per_window[j, lo - s:]
        covered = s + window
    return out


def _ohlcv(panel: Panel, raw, r_new: np.ndarray, k: np.ndarray, dlogvol: np.ndarray, theta: float,
           gap_noise: np.ndarray | None = None, excursions: tuple | None = None) -> dict[str, np.ndarray]:
    """Consistent OHLCV from new close-to-close log returns (session 0 copied from the real panel)."""
    r_new = r_new.copy()
    r_new[0] = 0.0
    if gap_noise is None:
        g = k * raw.gap + theta * (r_new - k * raw.ret)
    else:
        g = theta * r_new + gap_noise
    close = panel.field("close")[0] * np.exp(np.cumsum(r_new, axis=0))
    prev = np.vstack([close[:1], close[:-1]])
    open_ = prev * np.exp(g)
    if excursions is None:
        hi, lo = k * raw.high_exc, k * raw.low_exc
    else:
        hi, lo = excursions
    high = np.maximum(open_, close) * np.exp(hi)
    low = np.minimum(open_, close) * np.exp(-lo)
    volume = np.exp(raw.log_volume + dlogvol)
    out = {"open": open_, "high": high, "low": low, "close": close, "volume": volume}
    for key in PRICE_KEYS:   # session 0 is the real one
        out[key][0] = panel.field(key)[0]
    return out


def replay_world(panel: Panel, raw, stats: dict, x: np.ndarray, base: dict, shifted: dict, starts, window: int,
                 theta: float) -> dict[str, np.ndarray]:
    """OHLCV of the real shocks re-dressed in the shifted regime (see the module docstring)."""
    import torch

    from alpha_gym.stress.model import factor_scores, total_log_vol
    xw = window_tensor(x, starts, window)[..., 0].transpose(1, 2)       # (n_w, W, N)
    with torch.no_grad():
        f, u = factor_scores(xw, base)
        x_new = (shifted["mu"][:, None, :] + torch.einsum("bwnk,bwk->bwn", shifted["loadings"], f)
                 + torch.exp(shifted["log_s"] - base["log_s"]) * u)
        k = torch.exp(total_log_vol(shifted) - total_log_vol(base))
        dv = shifted["volume"] - base["volume"]
    T = panel.n_days
    dx = _assemble((x_new - xw).double().numpy(), starts, T, window, 0.0)
    kk = _assemble(k.double().numpy(), starts, T, window, 1.0)
    dlv = _assemble(dv.double().numpy(), starts, T, window, 0.0) * stats["volume_scale"]
    r_new = raw.ret + dx * stats["ret_scale"]
    return _ohlcv(panel, raw, r_new, kk, dlv, theta)


def simulate_world(panel: Panel, raw, stats: dict, params: dict, starts, window: int, calib: dict,
                   seed: int) -> dict[str, np.ndarray]:
    """OHLCV drawn from the decoded regime with seeded shocks (no real shock is used)."""
    import torch

    from alpha_gym.stress.model import total_log_vol
    rng = np.random.default_rng([int(seed), 7])
    mu = params["mu"].double().numpy()
    load = params["loadings"].double().numpy()
    s = np.exp(params["log_s"].double().numpy())
    n_w, W, N, K = load.shape
    df = float(calib["t_df"])
    f = rng.standard_normal((n_w, W, K))
    e = rng.standard_t(df, size=(n_w, W, N)) * np.sqrt((df - 2.0) / df)
    x = mu[:, None, :] + np.einsum("bwnk,bwk->bwn", load, f) + s * e
    with torch.no_grad():
        sig = torch.exp(total_log_vol(params)).double().numpy()
    vol = params["volume"].double().numpy() + calib["volume_noise"] * rng.standard_normal((n_w, W, N))
    T = panel.n_days
    scale = stats["ret_scale"]
    r_new = _assemble(x, starts, T, window, 0.0) * scale
    sigma = _assemble(sig, starts, T, window, 1.0) * scale
    v_new = _assemble(vol, starts, T, window, 0.0) * stats["volume_scale"]
    theta = calib["overnight_share"]
    z_gap = rng.standard_normal((T, N))
    e_hi, e_lo = rng.standard_exponential((T, N)), rng.standard_exponential((T, N))
    gap_noise = np.sqrt(theta * (1 - theta)) * sigma * z_gap
    intraday = r_new - (theta * r_new + gap_noise)
    s2 = (1 - theta) * sigma * sigma
    up = 0.5 * (intraday + np.sqrt(intraday ** 2 + 2 * s2 * e_hi))       # max of the bridge from 0 to intraday
    down = 0.5 * (intraday - np.sqrt(intraday ** 2 + 2 * s2 * e_lo))     # its min
    hi = up - np.maximum(intraday, 0.0)       # beyond max(open, close), in logs
    lo = np.minimum(intraday, 0.0) - down     # below min(open, close)
    dlogvol = (v_new - raw.volume)            # level: the real trailing mean of log volume
    return _ohlcv(panel, raw, r_new, np.ones_like(r_new), dlogvol, theta, gap_noise=gap_noise,
                  excursions=(np.maximum(hi, 0.0), np.maximum(lo, 0.0)))


def to_panel(panel: Panel, arrays: dict[str, np.ndarray], name: str) -> Panel:
    return Panel({k: arrays[k] for k in PRICE_KEYS}, panel.dates, panel.tickers,
                 source=f"{panel.source}|stress:{name}", sectors=panel.sectors)


# --------------------------------------------------------------------------- cache
def cache_key(fingerprint: str, model_sha256: str, scenario_cfg: dict) -> str:
    blob = json_dumps({"fingerprint": fingerprint, "model": model_sha256, "scenarios": scenario_cfg,
                       "format": ck.FORMAT_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _cache_paths(directory, key):
    d = Path(directory) / ck.SCENARIO_DIR
    return d / f"{key}.npz", d / f"{key}.json"


def build_worlds(model, panel: Panel, manifest: dict, cfg: StressConfig) -> tuple[dict, dict]:
    """Build the four scenario panels (arrays) and their statistics; deterministic (single thread)."""
    import torch

    from alpha_gym.stress.data import raw_features, scaled_features
    from alpha_gym.stress.model import deterministic_torch
    from alpha_gym.threads import torch_threads
    with torch_threads(1):
        deterministic_torch()
        model.eval()
        stats, calib = manifest["features"], manifest["calibration"]
        raw = raw_features(panel, cfg.volume_window)
        x = scaled_features(raw, stats)
        W = cfg.window
        starts = window_starts(panel.n_days, W)
        z = encode_windows(model, x, starts, W)
        with torch.no_grad():
            base = decode(model, z)
        worlds, info = {}, {}
        for name in SCENARIOS:
            torch.manual_seed(cfg.scenarios.seed)
            z_new, info[name] = shift_latents(model, z, name, cfg.scenarios, float(calib["latent_scale"]))
            with torch.no_grad():
                shifted = decode(model, z_new)
            if cfg.scenarios.innovations == "replay":
                arrays = replay_world(panel, raw, stats, x, base, shifted, starts, W, calib["overnight_share"])
            else:
                arrays = simulate_world(panel, raw, stats, shifted, starts, W, calib, cfg.scenarios.seed)
            worlds[name] = arrays
        return worlds, info


def scenario_checks(panel: Panel, worlds: dict[str, Panel], window: int) -> dict:
    """Each scenario's own statistic in the real panel and in its world; `moved` says if it went the intended way."""
    real = scenario_statistics(panel, panel, window)
    out = {}
    for name, world in worlds.items():
        st = scenario_statistics(panel, world, window)
        change = st[name] - real[name]
        out[name] = {"statistic": STAT_DOC[name], "real": real[name], "world": st[name], "change": change,
                     "intended": "up" if INTENDED[name] > 0 else "down",
                     "moved": bool(change * INTENDED[name] > 0), "all_statistics": st}
    return out


def load_or_build(directory, panel: Panel, manifest: dict, model=None) -> tuple[dict[str, Panel], dict]:
    """The scenario panels of `panel` (from the cache, or built, checked and cached). Returns (panels, meta)."""
    from alpha_gym.stress.config import StressConfig
    cfg = StressConfig.from_dict(manifest["config"])
    key = cache_key(panel.fingerprint(), manifest["model_sha256"], cfg.to_dict()["scenarios"])
    npz_path, meta_path = _cache_paths(directory, key)
    if npz_path.is_file() and meta_path.is_file():
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        with np.load(npz_path) as data:
            panels = {name: to_panel(panel, {k: data[f"{name}.{k}"] for k in PRICE_KEYS}, name)
                      for name in meta["scenarios"]}
        return panels, meta
    if model is None:
        from alpha_gym.stress.model import load_model
        model = load_model(directory, manifest)
    worlds, info = build_worlds(model, panel, manifest, cfg)
    panels = {name: to_panel(panel, arrays, name) for name, arrays in worlds.items()}
    checks = scenario_checks(panel, panels, cfg.window)
    for name in checks:
        checks[name].update(info[name])
    meta = {"key": key, "fingerprint": panel.fingerprint(), "model_sha256": manifest["model_sha256"],
            "scenarios": list(panels), "config": cfg.to_dict()["scenarios"], "checks": checks}
    npz_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = npz_path.with_suffix(".tmp.npz")
    np.savez(tmp, **{f"{name}.{k}": np.ascontiguousarray(p.field(k)) for name, p in panels.items()
                     for k in PRICE_KEYS})
    tmp.replace(npz_path)
    ck.write_json(meta_path, meta)
    return panels, meta
