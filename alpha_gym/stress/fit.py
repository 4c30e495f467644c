"""Fit the world model on the train window, evaluate its gates, save the checkpoint (torch).

Training samples are pairs (current window [t - W, t), next window [t, t + W))
of the panel, t every `sample_stride` sessions. The last `tail_fraction` of
the samples is held back for the gates; training samples end 2W sessions
before the first tail sample, so no session is shared. One step:

* 25% of the current window's stock-day cells are hidden in aligned spans of
  8 sessions (exactly round(0.25 x N x W / 8) spans, drawn per sample);
* the online encoder reads the masked window; the predictor maps its latents
  to the next window's; the EMA target encoder reads the next window unmasked;
* loss = MSE(prediction, layer-normalised target latents)            (JEPA)
       + 0.1 x MSE(geometry head, standardised OMD targets), averaged over
         the forecast (head on the predicted latents vs the NEXT window's
         targets) and the reading (head on the current latents vs the
         current window's targets)
       + decoder_weight x mean of the decoder's negative log-likelihood of
         the current window (from the online latents: masked cells included)
         and of the next window (from the detached target latents, which is
         what scenarios decode);
* AdamW step; target <- ema x target + (1 - ema) x online.

With `val_fraction` > 0 (default 0.15) a validation block at the end of the
training part (before the tail, with 2W-session gaps on both sides) is held
out of training. Every `eval_every` steps the forecast error (JEPA + geometry)
is measured on it and the weights of the best step are kept; after training,
the weights of the gated geometry forecast (a combination of the ridge AR(1)
on the observed geometry, the head and "no change", `geometry_blend`) are
fitted on it. The held-back tail stays untouched by both choices.

Randomness comes from `seed` only: torch's generator (seeded; its state is
saved with partial checkpoints) draws the weights and the head's dropout, and
each step's batch and mask come from `np.random.default_rng([seed, step])`,
so a resumed fit continues exactly where it stopped. A partial checkpoint is
written every `save_every` steps.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from alpha_gym.market.panel import Panel
from alpha_gym.stress import checkpoint as ck
from alpha_gym.stress import scenarios as sc
from alpha_gym.stress.config import SCENARIOS, StressConfig, StressError
from alpha_gym.stress.data import data_info, feature_stats, raw_features, scaled_features
from alpha_gym.stress.geometry import TARGET_NAMES, stylised_facts, window_targets
from alpha_gym.stress.model import WorldModel, deterministic_torch, factor_nll, factor_scores, normalised
from alpha_gym.threads import blas_threads, single_threaded


@dataclass
class Prepared:
    raw: Any
    stats: dict
    x: np.ndarray            # (T, N, F) float32 standardised features
    targets: np.ndarray      # (T - W + 1, 10) geometry of the window starting at s (drift from s - W)
    train: np.ndarray        # sample times t (next window starts at t)
    tail: np.ndarray
    g_mean: np.ndarray
    g_std: np.ndarray
    val: np.ndarray          # validation samples (end of the training part) for picking the best step


def prepare(panel: Panel, cfg: StressConfig) -> Prepared:
    W = cfg.window
    raw = raw_features(panel, cfg.volume_window)
    stats = feature_stats(raw)
    x = scaled_features(raw, stats)
    ts = np.arange(W, panel.n_days - W + 1, cfg.sample_stride)
    n_tail = max(4, int(round(len(ts) * cfg.tail_fraction)))
    tail = ts[-n_tail:]
    before = ts[ts <= tail[0] - 2 * W]
    if cfg.val_fraction > 0:
        n_val = max(4, int(round(len(before) * cfg.val_fraction)))
        val = before[-n_val:]
        train = before[before <= val[0] - 2 * W]
    else:
        val, train = before[:0], before
    if len(train) < 2 * cfg.batch or len(tail) < 4:
        raise StressError(f"the panel ({panel.n_days} sessions) is too short for windows of {W} sessions: "
                          f"{len(train)} training samples, {len(tail)} tail samples")
    if panel.n_stocks < 4:
        raise StressError("the world model needs at least 4 stocks")
    targets = window_targets(raw.ret, np.arange(panel.n_days - W + 1), W)
    g = targets[train]
    g_mean, g_std = g.mean(axis=0), np.maximum(g.std(axis=0), 1e-6)
    return Prepared(raw, stats, x, targets, train, tail, g_mean, g_std, val)


def _windows(x_t: torch.Tensor, t: np.ndarray, offset: int, W: int) -> torch.Tensor:
    idx = torch.from_numpy(t[:, None] + offset + np.arange(W)[None, :])
    return x_t[idx].permute(0, 2, 1, 3)          # (B, N, W, F)


def make_mask(rng: np.random.Generator, batch: int, n: int, cfg: StressConfig) -> torch.Tensor:
    """(batch, n, W) bool: exactly round(ratio x slots) aligned spans of `mask_span` sessions hidden per sample."""
    slots = cfg.window // cfg.mask_span
    total = n * slots
    m = int(round(cfg.mask_ratio * total))
    order = rng.random((batch, total)).argsort(axis=1)[:, :m]
    hidden = np.zeros((batch, total), dtype=bool)
    np.put_along_axis(hidden, order, True, axis=1)
    return torch.from_numpy(np.repeat(hidden.reshape(batch, n, slots), cfg.mask_span, axis=2))


def _decoder_loss(model, z, win) -> torch.Tensor:
    params = model.decoder(z)
    x = win[..., 0].transpose(1, 2)
    v = win[..., 3].transpose(1, 2)
    return factor_nll(x, params) + 0.5 * F.mse_loss(params["volume"], v)


def step_losses(model: WorldModel, cfg: StressConfig, ctx, nxt, mask, g_next, g_now) -> dict[str, torch.Tensor]:
    z_ctx = model.online(ctx, mask)
    with torch.no_grad():
        z_tgt = model.target(nxt)
    pred = model.predictor(z_ctx)
    jepa = F.mse_loss(pred, normalised(z_tgt))
    # geometry: the forecast (next window, from the predicted latents) and, equally weighted, the reading of
    # the current window from its own latents, which anchors the latents to the observed co-movement
    geo = 0.5 * (F.mse_loss(model.head.forecast(pred, g_now), g_next)
                 + F.mse_loss(model.head(normalised(z_ctx)), g_now))
    dec = 0.5 * (_decoder_loss(model, z_ctx, ctx) + _decoder_loss(model, z_tgt, nxt))
    total = jepa + cfg.geometry_weight * geo + cfg.decoder_weight * dec
    return {"total": total, "jepa": jepa, "geometry": geo, "decoder": dec}


def validation_loss(model: WorldModel, cfg: StressConfig, prep: Prepared, x_t, g_std) -> float:
    """Forecast error on the validation samples: JEPA latent MSE + geometry forecast MSE (fixed masks)."""
    W = cfg.window
    rng = np.random.default_rng([cfg.seed, 424_242])
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(prep.val), 64):
            t = prep.val[i:i + 64]
            ctx, nxt = _windows(x_t, t, -W, W), _windows(x_t, t, 0, W)
            pred = model.predictor(model.online(ctx, make_mask(rng, len(t), ctx.shape[1], cfg)))
            jepa = ((pred - normalised(model.target(nxt))) ** 2).mean(dim=(1, 2))
            geo = ((model.head.forecast(pred, g_std[torch.from_numpy(t - W)]) - g_std[torch.from_numpy(t)]) ** 2
                   ).mean(dim=1)
            total += float((jepa + geo).sum())
            count += len(t)
    model.train(was_training)
    return total / max(count, 1)


def _optimizer(model: WorldModel, cfg: StressConfig):
    return torch.optim.AdamW(model.trainable(), lr=cfg.lr, weight_decay=cfg.weight_decay)


def _lr(cfg: StressConfig, step: int) -> float:
    warm = max(1, cfg.steps // 20)
    if step < warm:
        return cfg.lr * (step + 1) / warm
    frac = (step - warm) / max(1, cfg.steps - warm)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * frac)))


# --------------------------------------------------------------------------- partial checkpoints
def _save_partial(directory: Path, model, opt, step: int, cfg: StressConfig, fingerprint: str, log: list,
                  seconds: float = 0.0, best: dict | None = None) -> None:
    from safetensors.torch import save_file
    tensors = {f"model.{k}": v.detach().contiguous() for k, v in model.state_dict().items()}
    state = opt.state_dict()
    for i, st in state["state"].items():
        for name, val in st.items():
            t = val if torch.is_tensor(val) else torch.tensor(val)
            tensors[f"opt.{i}.{name}"] = t.detach().reshape(-1).contiguous() if t.dim() == 0 else t.contiguous()
    tensors["rng.torch"] = torch.get_rng_state()
    for k, v in (best or {}).get("state", {}).items():
        tensors[f"best.{k}"] = v.contiguous()
    tmp = directory / (ck.PARTIAL_FILE + ".tmp")
    save_file(tensors, str(tmp))
    tmp.replace(directory / ck.PARTIAL_FILE)
    ck.write_json(directory / ck.PARTIAL_JSON, {"step": step, "config_digest": cfg.digest(), "fingerprint": fingerprint,
                                               "param_groups": state["param_groups"], "log": log[-50:],
                                               "seconds": round(seconds, 3),
                                               "best": {k: v for k, v in (best or {}).items() if k != "state"}})


def _read_partial(directory: Path) -> tuple[dict, dict]:
    """The partial fit's JSON and tensors; files a killed fit left damaged are a StressError, not a traceback."""
    from safetensors.torch import load_file
    try:
        meta = json.loads((directory / ck.PARTIAL_JSON).read_text(encoding="utf-8"))
        tensors = load_file(str(directory / ck.PARTIAL_FILE))
    except Exception as err:  # JSON, UTF-8 and safetensors errors: the files cannot be used either way
        meta, tensors = err, None
    if not isinstance(meta, dict):
        raise StressError(f"the partial fit in {directory} is damaged ({type(meta).__name__}: {str(meta)[:200]}); "
                          "rerun with --restart to fit afresh")
    return meta, tensors


def _load_partial(directory: Path, model, opt, cfg: StressConfig, fingerprint: str
                  ) -> tuple[int, list, float, dict]:
    """(step, log, seconds so far, best state) of a partial fit."""
    meta, tensors = _read_partial(directory)
    if meta.get("config_digest") != cfg.digest() or meta.get("fingerprint") != fingerprint:
        raise StressError(f"{directory} holds a partial fit of another config or other data; "
                          f"use a new directory or --restart")
    model.load_state_dict({k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")})
    state: dict = {}
    for k, v in tensors.items():
        if k.startswith("opt."):
            _, i, name = k.split(".", 2)
            state.setdefault(int(i), {})[name] = v.reshape(()) if name == "step" else v
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    torch.set_rng_state(tensors["rng.torch"])
    best = dict(meta.get("best") or {})
    state = {k[len("best."):]: v for k, v in tensors.items() if k.startswith("best.")}
    if state:
        best["state"] = state
    return int(meta["step"]), list(meta.get("log", [])), float(meta.get("seconds", 0.0)), best


# --------------------------------------------------------------------------- calibration and gates
def calibrate(model: WorldModel, prep: Prepared, panel: Panel, cfg: StressConfig) -> dict[str, float]:
    """Constants measured on the train window after training: latent scale, tail index, volume noise, gap share."""
    W = cfg.window
    starts = sc.window_starts(panel.n_days, W)
    z = sc.encode_windows(model, prep.x, starts, W)
    scale = float(z.reshape(-1, z.shape[-1]).var(dim=0, unbiased=False).mean().sqrt())
    with torch.no_grad():
        params = sc.decode(model, z)
        xw = sc.window_tensor(prep.x, starts, W)
        f, u = factor_scores(xw[..., 0].transpose(1, 2), params)
        zres = (u / torch.exp(params["log_s"])).double().numpy().ravel()
        vres = (xw[..., 3].transpose(1, 2) - params["volume"]).double().numpy()
    zres = zres - zres.mean()
    kurt = float((zres ** 4).mean() / (zres ** 2).mean() ** 2 - 3.0)
    df = float(np.clip(4.0 + 6.0 / kurt, 4.2, 60.0)) if kurt > 0.1 else 60.0
    r, g = prep.raw.ret[1:], prep.raw.gap[1:]
    theta = float(np.clip(g.var() / max(r.var(), 1e-18), 0.05, 0.95))
    return {"latent_scale": scale, "t_df": df, "residual_excess_kurtosis": kurt,
            "volume_noise": float(vres.std()), "overnight_share": theta}


def ridge_ar1_forecast(prep: Prepared, W: int, times: np.ndarray, ridge: float = 1.0) -> np.ndarray:
    """Per-target ridge AR(1) on the OBSERVED geometry, fitted on the training samples, forecasting the
    standardised targets of the windows that start at `times`: next ~ a x this window's + b."""
    def std(t):
        return (prep.targets[t] - prep.g_mean) / prep.g_std
    x, y = std(prep.train - W), std(prep.train)
    xm, ym = x.mean(axis=0), y.mean(axis=0)
    a = ((x - xm) * (y - ym)).sum(axis=0) / (((x - xm) ** 2).sum(axis=0) + ridge)
    return ym + a * (std(times - W) - xm)


def ridge_ar1_r2(prep: Prepared, W: int, ridge: float = 1.0) -> np.ndarray:
    """Tail R^2 (about the training mean, as the gate's) of `ridge_ar1_forecast`: the baseline a geometry
    forecast should reach; it needs no model, only the windows' own correlation matrices."""
    truth = (prep.targets[prep.tail] - prep.g_mean) / prep.g_std
    return r2_about_training_mean(ridge_ar1_forecast(prep, W, prep.tail, ridge), truth)


def geometry_forecasts(model: WorldModel, prep: Prepared, cfg: StressConfig, times: np.ndarray, salt: int,
                       latents: dict | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(head's forecast, truth, observed current geometry) of the windows starting at `times`, standardised.

    The current window is masked as in training (masks from `[seed, salt]`, batches of 32, so a rerun is
    bit-identical). With `latents` (a dict), the squared errors of the predicted latents against the target
    encoder's ("model"), of "no change" ("naive") and of `latents["train_mean"]` ("mean") are added to it.
    """
    W = cfg.window
    x_t = torch.from_numpy(prep.x)
    rng = np.random.default_rng([cfg.seed, salt])
    head, truth, now = [], [], []
    with torch.no_grad():
        for i in range(0, len(times), 32):
            t = times[i:i + 32]
            ctx, nxt = _windows(x_t, t, -W, W), _windows(x_t, t, 0, W)
            mask = make_mask(rng, len(t), prep.x.shape[1], cfg)
            pred = model.predictor(model.online(ctx, mask))
            g_now = (prep.targets[t - W] - prep.g_mean) / prep.g_std
            head.append(model.head.forecast(pred, torch.as_tensor(g_now, dtype=pred.dtype)).double().numpy())
            truth.append((prep.targets[t] - prep.g_mean) / prep.g_std)
            now.append(g_now)
            if latents is not None:
                zt, zc = normalised(model.target(nxt)), normalised(model.target(ctx))
                latents["model"] = latents.get("model", 0.0) + float(((pred - zt) ** 2).sum())
                latents["naive"] = latents.get("naive", 0.0) + float(((zc - zt) ** 2).sum())
                latents["mean"] = latents.get("mean", 0.0) + float(((latents["train_mean"] - zt) ** 2).sum())
    return np.concatenate(head), np.concatenate(truth), np.concatenate(now)


def r2_about_training_mean(pred: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Per-target out-of-sample R^2 about the training mean (0 in standard units): the geometry gate's measure."""
    return 1.0 - ((pred - truth) ** 2).sum(axis=0) / np.maximum((truth ** 2).sum(axis=0), 1e-12)


def blend_weights(ar1: np.ndarray, truth: np.ndarray, **forecasts: np.ndarray) -> dict[str, float]:
    """Weights w_k in [0, 1] minimising sum (truth - ar1 - sum_k w_k (forecast_k - ar1))^2 over all targets.

    A forecast combination (Bates & Granger 1969, "The combination of forecasts"), by bounded least squares
    (exact active set, deterministic): one weight per forecast for all ten correlated targets, because a
    validation block of a few hundred overlapping windows holds only ~10 independent ones."""
    from scipy.optimize import lsq_linear
    names = list(forecasts)
    x = np.stack([(forecasts[k] - ar1).ravel() for k in names], axis=1)
    if not np.any(x):
        return {k: 0.0 for k in names}
    w = lsq_linear(x, (truth - ar1).ravel(), bounds=(0.0, 1.0), method="bvls").x
    return {k: float(v) for k, v in zip(names, w)}


def combine(ar1: np.ndarray, weights: dict[str, float], **forecasts: np.ndarray) -> np.ndarray:
    """ar1 + sum_k weights[k] x (forecasts[k] - ar1)."""
    out = ar1.copy()
    for k, w in weights.items():
        out = out + w * (forecasts[k] - ar1)
    return out


def fit_geometry_blend(model: WorldModel, prep: Prepared, cfg: StressConfig) -> dict:
    """Weights of the gated geometry forecast, fitted on the validation block (never the tail).

    The forecast: ridge AR(1) + w_head x (head - AR(1)) + w_now x (no change - AR(1)). Beside it, the same
    combination without the model (`baseline_weights`: AR(1) and no change only), which the gate asks the
    model's forecast to beat: the model must add to what the observed geometry already says."""
    if not len(prep.val):
        raise StressError("the geometry blend needs a validation block (val_fraction > 0)")
    head, truth, now = geometry_forecasts(model, prep, cfg, prep.val, 424_243)
    ar1 = ridge_ar1_forecast(prep, cfg.window, prep.val)
    w = blend_weights(ar1, truth, head=head, no_change=now)
    base = blend_weights(ar1, truth, no_change=now)

    def r2(p):
        return float(r2_about_training_mean(p, truth).mean())
    return {"kind": "ridge AR(1) + w_head x (head - AR(1)) + w_no_change x (no change - AR(1))",
            "weights": w, "baseline_weights": base, "validation_samples": int(len(prep.val)),
            "validation_mean_r2": {"head": r2(head), "ar1": r2(ar1), "no_change": r2(now),
                                   "baselines": r2(combine(ar1, base, no_change=now)),
                                   "blend": r2(combine(ar1, w, head=head, no_change=now))}}


def evaluate_gates(model: WorldModel, prep: Prepared, panel: Panel, cfg: StressConfig, calib: dict,
                   blend: dict | None = None) -> dict:
    """The three gates on the held-back tail and the decoded panel (see GateConfig); deterministic.

    `blend` (from `fit_geometry_blend`): the geometry forecast is the validation-weighted combination of the
    ridge AR(1), the head's forecast and "no change"; without it, the head's forecast alone."""
    gc = cfg.gates
    W = cfg.window
    x_t = torch.from_numpy(prep.x)
    with torch.no_grad():
        # mean baseline (information only): the average normalised target latent of the training samples
        acc, count = None, 0
        for i in range(0, len(prep.train), 64):
            t = prep.train[i:i + 64]
            zt = normalised(model.target(_windows(x_t, t, 0, W))).sum(dim=0)
            acc = zt if acc is None else acc + zt
            count += len(t)
    se = {"train_mean": acc / count}
    head, gt, gn = geometry_forecasts(model, prep, cfg, prep.tail, 999_983, latents=se)
    ar1 = ridge_ar1_forecast(prep, W, prep.tail)
    weights = None if blend is None else blend["weights"]
    gp = head if weights is None else combine(ar1, weights, head=head, no_change=gn)
    # the same combination without the model: what the observed geometry alone gives
    baselines = None if blend is None else combine(ar1, blend["baseline_weights"], no_change=gn)
    geo_mse, geo_naive = float(((gp - gt) ** 2).mean()), float(((gn - gt) ** 2).mean())
    latent_ratio = se["model"] / max(se["naive"], 1e-12)
    geometry_ratio = geo_mse / max(geo_naive, 1e-12)
    prediction = {"latent_mse_ratio_vs_no_change": latent_ratio, "geometry_mse_ratio_vs_no_change": geometry_ratio,
                  "latent_mse_ratio_vs_train_mean": se["model"] / max(se["mean"], 1e-12),
                  "max_ratio": gc.max_error_ratio,
                  "passed": bool(latent_ratio < gc.max_error_ratio and geometry_ratio < gc.max_error_ratio)}
    r2 = r2_about_training_mean(gp, gt)
    r2_naive = r2_about_training_mean(gn, gt)
    r2_ar1 = r2_about_training_mean(ar1, gt)
    r2_head = r2_about_training_mean(head, gt)
    passed = r2.mean() >= gc.min_geometry_r2 and (not gc.beat_baselines or r2.mean() >= r2_ar1.mean())
    r2_base = None if baselines is None else r2_about_training_mean(baselines, gt)
    if weights is not None:   # the model must add: weight > 0, and better than the combination without it
        passed = passed and weights["head"] > 0 and (not gc.beat_baselines or r2.mean() >= r2_base.mean())
    geometry = {"r2": dict(zip(TARGET_NAMES, map(float, r2))), "mean_r2": float(r2.mean()),
                "no_change_r2": dict(zip(TARGET_NAMES, map(float, r2_naive))),
                "no_change_mean_r2": float(r2_naive.mean()),
                "ar1_r2": dict(zip(TARGET_NAMES, map(float, r2_ar1))), "ar1_mean_r2": float(r2_ar1.mean()),
                "head_r2": dict(zip(TARGET_NAMES, map(float, r2_head))), "head_mean_r2": float(r2_head.mean()),
                "blend_weights": weights,
                "baselines_mean_r2": None if r2_base is None else float(r2_base.mean()),
                "min_mean_r2": gc.min_geometry_r2, "beat_baselines": gc.beat_baselines,
                "passed": bool(passed)}
    # stylised facts of a decoded panel with simulated shocks
    starts = sc.window_starts(panel.n_days, W)
    z = sc.encode_windows(model, prep.x, starts, W)
    with torch.no_grad():
        params = sc.decode(model, z)
    sim = sc.simulate_world(panel, prep.raw, prep.stats, params, starts, W, calib, cfg.seed)
    real_f, sim_f = stylised_facts(panel.field("close")), stylised_facts(sim["close"])

    def ratio(a, b):
        return a / b if abs(b) > 1e-12 else float("inf")
    acf_r = ratio(sim_f["abs_acf1"], real_f["abs_acf1"])
    kurt_r = ratio(sim_f["excess_kurtosis"], real_f["excess_kurtosis"])
    corr_d = sim_f["mean_corr"] - real_f["mean_corr"]
    facts = {"real": real_f, "decoded": sim_f, "abs_acf1_ratio": acf_r, "mean_corr_diff": corr_d,
             "excess_kurtosis_ratio": kurt_r, "acf_ratio_range": list(gc.acf_ratio),
             "corr_tolerance": gc.corr_tolerance, "kurtosis_ratio_range": list(gc.kurtosis_ratio),
             "ohlc_consistent": bool(np.all(sim["high"] >= np.maximum(sim["open"], sim["close"]) * (1 - 1e-12))
                                     and np.all(sim["low"] <= np.minimum(sim["open"], sim["close"]) * (1 + 1e-12))
                                     and np.all(sim["low"] > 0) and np.all(sim["volume"] > 0))}
    facts["passed"] = bool(gc.acf_ratio[0] <= acf_r <= gc.acf_ratio[1] and abs(corr_d) <= gc.corr_tolerance
                           and gc.kurtosis_ratio[0] <= kurt_r <= gc.kurtosis_ratio[1] and facts["ohlc_consistent"])
    tail_info = {"samples": int(len(prep.tail)), "first_target_session": str(panel.dates[prep.tail[0]]),
                 "last_target_session": str(panel.dates[min(prep.tail[-1] + W - 1, panel.n_days - 1)])}
    return {"prediction": prediction, "geometry": geometry, "stylised_facts": facts, "tail": tail_info,
            "passed": bool(prediction["passed"] and geometry["passed"] and facts["passed"])}


# --------------------------------------------------------------------------- save / load
def _state_tensors(model: WorldModel) -> dict[str, torch.Tensor]:
    return {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}


def save_checkpoint(directory, model: WorldModel, manifest: dict) -> dict:
    """Write weights and manifest (with the weights' sha256) atomically; returns the manifest."""
    from safetensors.torch import save_file
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / (ck.MODEL_FILE + ".tmp")
    save_file(_state_tensors(model), str(tmp), metadata={"format": str(ck.FORMAT_VERSION)})
    tmp.replace(d / ck.MODEL_FILE)
    manifest["model_sha256"] = ck.file_sha256(d / ck.MODEL_FILE)
    ck.write_json(d / ck.MANIFEST_FILE, manifest)
    return manifest


def finalise(directory, model: WorldModel, panel: Panel, cfg: StressConfig, prep: Prepared, data_extra: dict,
             fit_info: dict) -> dict:
    """Calibrate, gate, save, build and check the scenarios; returns the manifest."""
    with single_threaded():  # gates, blend weights and scenarios: bit-reproducible
        model.eval()
        calib = calibrate(model, prep, panel, cfg)
        blend = fit_geometry_blend(model, prep, cfg) if cfg.geometry_blend else None
        gates = evaluate_gates(model, prep, panel, cfg, calib, blend)
    manifest = {
        "format": ck.FORMAT_VERSION, "kind": "alpha-gym JEPA world model (R3 jepa_stress)",
        "data": data_info(panel, **data_extra), "config": cfg.to_dict(), "features": prep.stats,
        "geometry_standardisation": {"names": list(TARGET_NAMES), "mean": prep.g_mean.tolist(),
                                     "std": prep.g_std.tolist()},
        "calibration": calib, "geometry_forecast": blend, "gates": gates, "fit": fit_info, "versions": ck.versions(),
        "scenarios": {"names": list(SCENARIOS), "enabled": {s: False for s in SCENARIOS}, "checks": {},
                      "switched_off": {}},
    }
    manifest = save_checkpoint(directory, model, manifest)
    _panels, meta = sc.load_or_build(directory, panel, manifest, model)
    manifest["scenarios"]["checks"] = meta["checks"]
    manifest["scenarios"]["cache_key"] = meta["key"]
    manifest["scenarios"]["enabled"] = {s: bool(meta["checks"][s]["moved"]) for s in SCENARIOS}
    ck.write_json(Path(directory) / ck.MANIFEST_FILE, manifest)
    return manifest


def fit(panel: Panel, directory, cfg: StressConfig | None = None, progress: bool = True,
        data_extra: dict | None = None, max_steps: int | None = None, restart: bool = False) -> dict | None:
    """Fit (or resume fitting) a world model on `panel` into `directory`.

    Returns the manifest; or None when `max_steps` stopped the fit early (the
    partial checkpoint stays, and the next call resumes from it). An already
    complete checkpoint of the same data and config is returned as is.
    """
    with blas_threads(1):
        return _fit(panel, directory, cfg, progress, data_extra, max_steps, restart)


def _fit(panel, directory, cfg, progress, data_extra, max_steps, restart):
    cfg = cfg or StressConfig()
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    if ck.has_checkpoint(d) and not restart:
        manifest = ck.read_manifest(d)
        if (manifest["data"]["fingerprint"] == panel.fingerprint()
                and StressConfig.from_dict(manifest["config"]).digest() == cfg.digest()):
            return manifest
        raise StressError(f"{d} already holds a world model of other data or another config; "
                          f"use a new directory or --restart")
    if restart:
        for name in (ck.PARTIAL_FILE, ck.PARTIAL_JSON, ck.MANIFEST_FILE, ck.MODEL_FILE):
            (d / name).unlink(missing_ok=True)
    deterministic_torch(cfg.threads)
    t_start = time.perf_counter()
    prep = prepare(panel, cfg)
    torch.manual_seed(cfg.seed)
    model = WorldModel(cfg, panel.n_stocks)
    model.head.set_standardisation(prep.g_mean, prep.g_std)
    opt = _optimizer(model, cfg)
    step, log, earlier, best = 0, [], 0.0, {}
    if (d / ck.PARTIAL_FILE).is_file() and (d / ck.PARTIAL_JSON).is_file():
        step, log, earlier, best = _load_partial(d, model, opt, cfg, panel.fingerprint())
    x_t = torch.from_numpy(prep.x)
    g_std = torch.from_numpy(((prep.targets - prep.g_mean) / prep.g_std).astype(np.float32))
    W = cfg.window
    stop = cfg.steps if max_steps is None else min(cfg.steps, max_steps)
    bar = None
    if progress:
        try:
            from tqdm.auto import tqdm
            bar = tqdm(total=cfg.steps, initial=step, desc="stress fit", unit="step", dynamic_ncols=True)
        except ImportError:  # pragma: no cover
            bar = None
    model.train()
    while step < stop:
        rng = np.random.default_rng([cfg.seed, step])
        t = np.sort(rng.choice(prep.train, size=cfg.batch, replace=len(prep.train) < cfg.batch))
        ctx, nxt = _windows(x_t, t, -W, W), _windows(x_t, t, 0, W)
        mask = make_mask(rng, cfg.batch, panel.n_stocks, cfg)
        for group in opt.param_groups:
            group["lr"] = _lr(cfg, step)
        losses = step_losses(model, cfg, ctx, nxt, mask, g_std[torch.from_numpy(t)], g_std[torch.from_numpy(t - W)])
        opt.zero_grad(set_to_none=True)
        losses["total"].backward()
        torch.nn.utils.clip_grad_norm_(model.trainable(), 1.0)
        opt.step()
        model.update_target(cfg.ema)
        step += 1
        if step % 25 == 0 or step == stop:
            log.append({"step": step, **{k: round(float(v.detach()), 5) for k, v in losses.items()}})
        if len(prep.val) and (step % cfg.eval_every == 0 or step == cfg.steps):
            val = validation_loss(model, cfg, prep, x_t, g_std)
            log.append({"step": step, "validation": round(val, 5)})
            if not best or val < best["loss"]:
                best = {"step": step, "loss": val, "state": _state_tensors(model)}
        if bar is not None:
            bar.update(1)
            if step % 10 == 0:
                bar.set_postfix(loss=f"{float(losses['total']):.3f}", jepa=f"{float(losses['jepa']):.3f}")
        if step % cfg.save_every == 0 and step < cfg.steps:
            _save_partial(d, model, opt, step, cfg, panel.fingerprint(), log,
                          earlier + time.perf_counter() - t_start, best)
    if bar is not None:
        bar.close()
    if step < cfg.steps:
        _save_partial(d, model, opt, step, cfg, panel.fingerprint(), log, earlier + time.perf_counter() - t_start,
                      best)
        return None
    if best.get("state"):
        model.load_state_dict(best["state"])
    fit_info = {"steps": step, "best_step": best.get("step"), "best_validation_loss": best.get("loss"),
                "validation_samples": int(len(prep.val)),
                "training_seconds": round(earlier + time.perf_counter() - t_start, 2),
                "resumed_from_seconds": round(earlier, 2), "seed": cfg.seed,
                "threads": cfg.threads, "training_samples": int(len(prep.train)),
                "train_target_last_session": str(panel.dates[min(prep.train[-1] + W - 1, panel.n_days - 1)]),
                "loss_log": log[-20:]}
    manifest = finalise(d, model, panel, cfg, prep, data_extra or {}, fit_info)
    for name in (ck.PARTIAL_FILE, ck.PARTIAL_JSON):
        (d / name).unlink(missing_ok=True)
    manifest["fit"]["seconds"] = round(earlier + time.perf_counter() - t_start, 2)
    ck.write_json(d / ck.MANIFEST_FILE, manifest)
    return manifest


def regate(directory, panel: Panel) -> dict:
    """Evaluate a saved model's gates again under this version's rules (`GateConfig()`); the weights,
    calibration and scenarios stay. For checkpoints gated by an earlier version; returns the manifest."""
    from alpha_gym.stress.config import GateConfig
    from alpha_gym.stress.model import load_model
    d = Path(directory)
    manifest = ck.read_manifest(d)
    if manifest["data"]["fingerprint"] != panel.fingerprint():
        raise StressError(f"{d} was fitted on other data than this panel; regate it on the panel it was fitted on")
    manifest["config"] = {**manifest["config"], "gates": asdict(GateConfig())}   # this version's rules
    cfg = StressConfig.from_dict(manifest["config"])
    model = load_model(d, manifest)
    with single_threaded():  # gates, blend weights and scenarios: bit-reproducible
        prep = prepare(panel, cfg)
        blend = fit_geometry_blend(model, prep, cfg) if cfg.geometry_blend else None
        manifest["gates"] = evaluate_gates(model, prep, panel, cfg, manifest["calibration"], blend)
    manifest["geometry_forecast"] = blend
    ck.write_json(d / ck.MANIFEST_FILE, manifest)
    return manifest


def random_model_checkpoint(directory, panel: Panel, cfg: StressConfig, seed: int = 12345) -> dict:
    """A deliberately broken model: random weights, no training, gated honestly like a fitted one."""
    deterministic_torch(cfg.threads)
    prep = prepare(panel, cfg)
    torch.manual_seed(seed)
    model = WorldModel(cfg, panel.n_stocks)
    model.head.set_standardisation(prep.g_mean, prep.g_std)
    return finalise(directory, model, panel, cfg, prep, {}, {"steps": 0, "note": "random weights (broken on purpose)"})
