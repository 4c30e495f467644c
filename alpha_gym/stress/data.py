"""From a `Panel` to the world model's per stock-day features (numpy only).

Features of stock i on session t (F = 4), in this order:

* ``ret``: close-to-close log return log(c_t / c_{t-1}) (0 on the first session);
* ``gap``: overnight log gap log(o_t / c_{t-1}) (0 on the first session);
* ``range``: log(h_t / l_t);
* ``volume``: log volume minus its mean over the previous `volume_window`
  sessions (causal; expanding at the start).

They are standardised with statistics of the panel the model is fitted on
(stored in the manifest): ret and gap by the pooled std of ret (so the decoder
works in "daily-vol units"), range and volume by their own mean / std.
Non-finite cells become 0. Values are clipped to +-10 standard units.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from alpha_gym.market.panel import Panel

FEATURES = ("ret", "gap", "range", "volume")
N_FEATURES = len(FEATURES)
CLIP = 10.0


@dataclass(frozen=True)
class RawFeatures:
    """Unscaled log quantities of a panel, each (days x stocks)."""

    ret: np.ndarray
    gap: np.ndarray
    range: np.ndarray
    volume: np.ndarray       # log volume minus its trailing mean
    log_volume: np.ndarray
    high_exc: np.ndarray     # log(high / max(open, close)) >= 0
    low_exc: np.ndarray      # log(min(open, close) / low) >= 0


def _safe_log_ratio(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log(np.asarray(a, dtype=np.float64) / np.asarray(b, dtype=np.float64))
    return np.where(np.isfinite(out), out, 0.0)


def trailing_mean(x: np.ndarray, window: int) -> np.ndarray:
    """Mean of the previous `window` rows (excluding the current one; expanding at the start, row 0 -> itself)."""
    x = np.asarray(x, dtype=np.float64)
    cs = np.vstack([np.zeros((1, x.shape[1])), np.cumsum(x, axis=0)])
    t = np.arange(x.shape[0])
    lo = np.maximum(t - window, 0)
    count = (t - lo)[:, None]
    out = (cs[t] - cs[lo]) / np.maximum(count, 1)
    out[0] = x[0]
    return out


def raw_features(panel: Panel, volume_window: int = 60) -> RawFeatures:
    o, h, l, c, v = (panel.field(k) for k in ("open", "high", "low", "close", "volume"))
    ret = np.zeros(panel.shape)
    gap = np.zeros(panel.shape)
    ret[1:] = _safe_log_ratio(c[1:], c[:-1])
    gap[1:] = _safe_log_ratio(o[1:], c[:-1])
    rng = _safe_log_ratio(h, l)
    with np.errstate(divide="ignore", invalid="ignore"):
        lv = np.log(np.maximum(np.asarray(v, dtype=np.float64), 1.0))
    lv = np.where(np.isfinite(lv), lv, 0.0)
    vol = lv - trailing_mean(lv, volume_window)
    hi_exc = np.maximum(_safe_log_ratio(h, np.maximum(o, c)), 0.0)
    lo_exc = np.maximum(_safe_log_ratio(np.minimum(o, c), l), 0.0)
    return RawFeatures(ret, gap, rng, vol, lv, hi_exc, lo_exc)


def feature_stats(raw: RawFeatures) -> dict[str, float]:
    """Standardisation constants (JSON-able floats)."""
    def sd(x):
        s = float(np.std(x))
        return s if s > 1e-12 else 1.0
    return {"ret_scale": sd(raw.ret), "range_mean": float(np.mean(raw.range)), "range_scale": sd(raw.range),
            "volume_scale": sd(raw.volume)}


def scaled_features(raw: RawFeatures, stats: dict[str, float]) -> np.ndarray:
    """(days, stocks, F) float32 array of standardised features."""
    x = np.stack([raw.ret / stats["ret_scale"], raw.gap / stats["ret_scale"],
                  (raw.range - stats["range_mean"]) / stats["range_scale"], raw.volume / stats["volume_scale"]],
                 axis=-1)
    return np.clip(x, -CLIP, CLIP).astype(np.float32)


def data_info(panel: Panel, **extra) -> dict:
    """What the manifest records about the data a model was fitted on."""
    info = {"fingerprint": panel.fingerprint(), "n_days": panel.n_days, "n_stocks": panel.n_stocks,
            "first": str(panel.dates[0]), "last": str(panel.dates[-1]), "source": panel.source,
            "tickers": list(panel.tickers)}
    info.update(extra)
    return info
