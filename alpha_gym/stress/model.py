"""The JEPA world model (torch): encoder, EMA target encoder, predictor, geometry head, decoder.

Shapes: B windows, N stocks, W sessions, F features, d latent size.

* `Encoder`: (B, N, W, F) features + (B, N, W) mask -> (B, N, d), one latent
  per stock. Each stock's window is cut into patches of 4 sessions, embedded
  and flattened (masked cells are zeroed and flagged in an extra input
  channel), plus an embedding of the stock's row of the window's return
  correlation matrix (co-movement is pairwise: a per-stock summary alone
  carried the market's correlation geometry poorly); attention blocks
  across stocks (with a learned per-stock embedding) let each latent see the
  rest of the market.
* `Predictor`: the latents of the current window -> the (layer-normalised)
  latents of the next window, as "no change" plus a learned change (a small
  per-stock MLP that also sees the market's mean latent).
* `GeometryHead`: predicted latents -> the ten OMD geometry targets of the
  next window's correlation matrix (`geometry.TARGET_NAMES`), standardised.
* `Decoder`: latents of a window -> a factor model of that window, per
  session tau and stock i:

      x[tau, i] = mu[i] + B[tau, i, :] . f[tau] + s[tau, i] * e[tau, i]
      f ~ N(0, I_K),  e ~ unit shocks,   B[tau] = L[i, :] * exp(g(tau)),
      log s[tau, i] and the volume level v[tau, i] are smooth paths

  (x: log returns in units of the panel's daily volatility; the paths are
  spanned by a Legendre basis of `basis` smooth functions over the window, so
  the decoder describes a REGIME and cannot copy single days). It is trained
  by the exact Gaussian likelihood of the window's returns under the
  low-rank-plus-diagonal covariance B B' + diag(s^2), plus a squared error on
  the volume path. `decode_window` in `scenarios.py` turns these parameters
  into complete OHLCV panels.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from alpha_gym.stress import checkpoint as ck
from alpha_gym.stress.config import StressConfig
from alpha_gym.stress.data import N_FEATURES
from alpha_gym.stress.geometry import N_TARGETS


class Block(nn.Module):
    """Pre-norm attention block across stocks (hand-written, so training and inference share one code path)."""

    def __init__(self, h: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(h)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h)
        self.mlp = nn.Sequential(nn.Linear(h, 2 * h), nn.GELU(), nn.Linear(2 * h, h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).reshape(b, n, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(h // self.heads), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, n, h)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


def window_correlation(r: torch.Tensor) -> torch.Tensor:
    """(B, N, N) correlation of the stocks' (B, N, W) return paths (hidden cells count as 0)."""
    c = r - r.mean(dim=-1, keepdim=True)
    c = c / c.norm(dim=-1, keepdim=True).clamp_min(1e-6)
    return c @ c.transpose(1, 2)


class Encoder(nn.Module):
    PATCH = 4   # sessions per temporal patch

    def __init__(self, cfg: StressConfig, n_stocks: int):
        super().__init__()
        h = cfg.hidden
        self.patch = nn.Sequential(nn.Linear(self.PATCH * (N_FEATURES + 1), h), nn.GELU())
        self.flat = nn.Linear(h * (cfg.window // self.PATCH), h)
        self.corr_row = nn.Linear(n_stocks, h)     # the stock's row of the window's correlation matrix
        self.stock = nn.Parameter(torch.randn(n_stocks, h) * 0.02)
        self.blocks = nn.ModuleList(Block(h, cfg.heads) for _ in range(cfg.encoder_layers))
        self.out = nn.Sequential(nn.LayerNorm(h), nn.Linear(h, cfg.latent))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, n, w, f = x.shape
        if mask is None:
            mask = torch.zeros(b, n, w, dtype=torch.bool)
        x = x.masked_fill(mask[..., None], 0.0)
        inp = torch.cat([x, mask[..., None].to(x.dtype)], dim=-1).reshape(b, n, w // self.PATCH, -1)
        y = self.flat(self.patch(inp).flatten(2)) + self.corr_row(window_correlation(x[..., 0])) + self.stock
        for blk in self.blocks:
            y = blk(y)
        return self.out(y)


class Predictor(nn.Module):
    """Current latents -> next window's layer-normalised latents, as "no change" plus a learned change.

    Deliberately small: the change of stock i's latent is an MLP of its own
    latent and the market's mean latent, with dropout, no per-stock embedding
    and no attention. With only ~T / W independent windows in a train window,
    larger predictors (attention across stocks, stock embeddings) memorised
    the training period's next windows (in-sample geometry R^2 ~0.9, negative
    on the held-back tail) instead of learning dynamics.
    """

    def __init__(self, cfg: StressConfig, n_stocks: int):
        super().__init__()
        h, d = cfg.hidden, cfg.latent
        layers, width = [], 2 * d
        for _ in range(cfg.predictor_layers):       # 0: a linear map (latent AR(1) dynamics)
            layers += [nn.Linear(width, h), nn.GELU(), nn.Dropout(cfg.predictor_dropout)]
            width = h
        layers.append(nn.Linear(width, d))
        self.mlp = nn.Sequential(*layers)
        with torch.no_grad():
            self.mlp[-1].weight.mul_(0.1)
            self.mlp[-1].bias.zero_()

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        base = F.layer_norm(z, z.shape[-1:])
        market = base.mean(dim=1, keepdim=True).expand_as(base)
        return base + self.mlp(torch.cat([base, market], dim=-1))


class GeometryHead(nn.Module):
    """Predicted latents -> the ten geometry targets of the next window, standardised.

    The head does not regress the targets on pooled features (with only ~T/W
    independent correlation matrices in a train window, that overfits and
    breaks when the market's level of co-movement shifts). It builds a
    correlation matrix from the latents instead, C_hat = corr(L L' + diag(psi))
    with per-stock loadings L (N x `rank`) and idiosyncratic variances psi
    read from each stock's latent, and computes the targets from it exactly
    as `geometry.py` does from data: mean off-diagonal entry, lambda_1 / N,
    participation fraction N / sum lambda^2, the residual fraction, and the
    top-5 shares (eigenvalues by `eigvalsh`). Projector drift, which needs
    eigenvectors (unstable gradients), comes from a small MLP on the pooled
    latents. A per-target affine map (initialised to identity) absorbs the
    finite-sample bias of correlation matrices estimated from W sessions; the
    result is standardised with the training targets' mean and std.
    """

    def __init__(self, cfg: StressConfig, rank: int = 8):
        super().__init__()
        d, h = cfg.latent, cfg.hidden
        self.loadings = nn.Linear(d, rank)
        self.psi = nn.Linear(d, 1)
        self.drift = nn.Sequential(nn.Dropout(cfg.head_dropout), nn.Linear(2 * d, h), nn.GELU(), nn.Linear(h, 1))
        self.scale = nn.Parameter(torch.ones(N_TARGETS))
        self.shift = nn.Parameter(torch.zeros(N_TARGETS))
        # cfg.geometry_skip: the forecast adds ar x (the current window's observed standardised geometry)
        self.ar = nn.Parameter(torch.zeros(N_TARGETS)) if cfg.geometry_skip else None
        self.register_buffer("target_mean", torch.zeros(N_TARGETS))
        self.register_buffer("target_std", torch.ones(N_TARGETS))

    def set_standardisation(self, mean, std) -> None:
        with torch.no_grad():
            self.target_mean.copy_(torch.as_tensor(np.asarray(mean), dtype=torch.float32))
            self.target_std.copy_(torch.as_tensor(np.asarray(std), dtype=torch.float32))

    def raw(self, z: torch.Tensor) -> torch.Tensor:
        """(B, 10) targets in their natural units (before the affine map)."""
        b, n, _ = z.shape
        load = self.loadings(z)
        cov = load @ load.transpose(1, 2) + torch.diag_embed(F.softplus(self.psi(z))[..., 0] + 1e-3)
        sd = torch.sqrt(torch.diagonal(cov, dim1=1, dim2=2))
        corr = cov / (sd[:, :, None] * sd[:, None, :])
        lam = torch.flip(torch.linalg.eigvalsh(corr), dims=[-1]).clamp_min(0.0)
        total = lam.sum(-1)
        sq = (lam ** 2).sum(-1)
        mean_corr = (corr.sum(dim=(1, 2)) - total) / (n * (n - 1))
        market = lam[:, 0] / total
        effective = total ** 2 / sq / n
        rest = total - lam[:, 0]
        residual = rest ** 2 / (sq - lam[:, 0] ** 2).clamp_min(1e-9) / (n - 1)
        drift = torch.sigmoid(self.drift(torch.cat([z.mean(dim=1), z.std(dim=1, unbiased=False)], dim=-1)))[:, 0]
        top = lam[:, :5] / total[:, None]
        if top.shape[1] < 5:
            top = F.pad(top, (0, 5 - top.shape[1]))
        return torch.cat([torch.stack([mean_corr, market, effective, residual, drift], dim=1), top], dim=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        standard = (self.raw(z) - self.target_mean) / self.target_std
        return self.scale * standard + self.shift

    def forecast(self, z_pred: torch.Tensor, g_now: torch.Tensor) -> torch.Tensor:
        """The next window's standardised geometry from the predicted latents (and, with the AR(1) path, from
        the current window's observed geometry `g_now`, standardised the same way)."""
        out = self(z_pred)
        return out if self.ar is None else out + self.ar * g_now


def legendre_basis(window: int, degree: int) -> torch.Tensor:
    """(window, degree) Legendre polynomials P_0..P_{degree-1} on an even grid of [-1, 1]."""
    t = np.linspace(-1.0, 1.0, window)
    cols = [np.ones_like(t), t]
    for k in range(2, degree):
        cols.append(((2 * k - 1) * t * cols[-1] - (k - 1) * cols[-2]) / k)
    return torch.tensor(np.stack(cols[:degree], axis=1), dtype=torch.float32)


class Decoder(nn.Module):
    def __init__(self, cfg: StressConfig):
        super().__init__()
        h, d, p, k = cfg.hidden, cfg.latent, cfg.basis, cfg.factors
        self.k, self.p = k, p
        self.register_buffer("basis", legendre_basis(cfg.window, p), persistent=False)
        self.stock = nn.Sequential(nn.Linear(2 * d, h), nn.GELU(), nn.Linear(h, h), nn.GELU(),
                                   nn.Linear(h, 1 + p + k + p))
        self.market = nn.Sequential(nn.Linear(d, h), nn.GELU(), nn.Linear(h, p))
        with torch.no_grad():
            last = self.stock[-1]
            last.weight.mul_(0.1)
            last.bias.zero_()
            last.bias[1] = math.log(0.8)                 # idiosyncratic vol ~0.8 daily-vol units
            last.bias[1 + p:1 + p + k] = 0.35            # loadings
            self.market[-1].weight.mul_(0.1)
            self.market[-1].bias.zero_()

    def forward(self, z: torch.Tensor) -> dict[str, torch.Tensor]:
        """Parameters of the window: mu (B,N), log_s (B,W,N), loadings (B,W,N,K), volume (B,W,N)."""
        n = z.shape[1]
        pooled = z.mean(dim=1)
        out = self.stock(torch.cat([z, pooled[:, None, :].expand(-1, n, -1)], dim=-1))
        p, k = self.p, self.k
        mu = out[..., 0]
        log_s = torch.einsum("wp,bnp->bwn", self.basis, out[..., 1:1 + p])
        load = out[..., 1 + p:1 + p + k]
        vol_path = torch.einsum("wp,bnp->bwn", self.basis, out[..., 1 + p + k:])
        g = torch.einsum("wp,bp->bw", self.basis, self.market(pooled))
        loadings = load[:, None, :, :] * torch.exp(g)[:, :, None, None]
        return {"mu": mu, "log_s": log_s.clamp(-6.0, 3.0), "loadings": loadings, "volume": vol_path}


def factor_nll(x: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean negative log-likelihood per cell of returns x (B, W, N) under the decoded factor model."""
    s2 = torch.exp(2 * params["log_s"])
    dist = torch.distributions.LowRankMultivariateNormal(params["mu"][:, None, :].expand_as(x),
                                                         params["loadings"], s2, validate_args=False)
    return -dist.log_prob(x).mean() / x.shape[-1]


def factor_scores(x: torch.Tensor, params: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Posterior-mean factor realisations f (B, W, K) and idiosyncratic residuals u (B, W, N) of returns x.

    x = mu + B f + u exactly, with f = (I + B' D^-1 B)^-1 B' D^-1 (x - mu).
    """
    e = x - params["mu"][:, None, :]
    b = params["loadings"]
    d_inv = torch.exp(-2 * params["log_s"])
    bd = b * d_inv[..., None]
    a = torch.einsum("bwnk,bwnl->bwkl", bd, b) + torch.eye(b.shape[-1])
    rhs = torch.einsum("bwnk,bwn->bwk", bd, e)
    f = torch.linalg.solve(a, rhs[..., None])[..., 0]
    u = e - torch.einsum("bwnk,bwk->bwn", b, f)
    return f, u


def total_log_vol(params: dict[str, torch.Tensor]) -> torch.Tensor:
    """log of each stock-day's decoded total volatility (B, W, N)."""
    return 0.5 * torch.log((params["loadings"] ** 2).sum(-1) + torch.exp(2 * params["log_s"]))


def implied_mean_corr(params: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean off-diagonal correlation of the decoded covariance, per window (B,)."""
    b = params["loadings"]
    cov = torch.einsum("bwnk,bwmk->bwnm", b, b)
    var = (b ** 2).sum(-1) + torch.exp(2 * params["log_s"])
    sd = torch.sqrt(var)
    corr = cov / (sd[..., :, None] * sd[..., None, :])
    n = b.shape[2]
    off = (corr.sum(dim=(-1, -2)) - torch.diagonal(corr, dim1=-2, dim2=-1).sum(-1)) / (n * (n - 1))
    return off.mean(dim=1)


class WorldModel(nn.Module):
    """All parts together; `target` is the EMA copy of `online` and receives no gradients."""

    def __init__(self, cfg: StressConfig, n_stocks: int):
        super().__init__()
        self.cfg = cfg
        self.online = Encoder(cfg, n_stocks)
        self.target = Encoder(cfg, n_stocks)
        self.target.load_state_dict(self.online.state_dict())
        for p in self.target.parameters():
            p.requires_grad_(False)
        self.predictor = Predictor(cfg, n_stocks)
        self.head = GeometryHead(cfg)
        self.decoder = Decoder(cfg)

    @torch.no_grad()
    def update_target(self, momentum: float) -> None:
        for pt, po in zip(self.target.parameters(), self.online.parameters()):
            pt.mul_(momentum).add_(po.detach(), alpha=1.0 - momentum)

    def trainable(self):
        return [p for name, p in self.named_parameters() if not name.startswith("target.")]


def normalised(z: torch.Tensor) -> torch.Tensor:
    """The JEPA target space: each latent layer-normalised (no learned scale)."""
    return F.layer_norm(z, z.shape[-1:])


def deterministic_torch(threads: int | None = None) -> None:
    """Deterministic algorithms (without NaN-filling fresh memory, which costs time and changes no result)."""
    if threads is not None:
        torch.set_num_threads(max(1, int(threads)))
    torch.use_deterministic_algorithms(True)
    try:
        import torch.utils.deterministic as det
        det.fill_uninitialized_memory = False
    except (ImportError, AttributeError):  # pragma: no cover
        pass


def load_model(directory, manifest: dict | None = None) -> WorldModel:
    """The frozen world model of a checkpoint (weights checked against the manifest's hash)."""
    from safetensors.torch import load_file
    manifest = manifest or ck.read_manifest(directory)
    ck.check_weights(manifest, directory)
    cfg = StressConfig.from_dict(manifest["config"])
    torch.manual_seed(0)
    model = WorldModel(cfg, int(manifest["data"]["n_stocks"]))
    model.load_state_dict(load_file(str(Path(directory) / ck.MODEL_FILE)))
    model.eval()
    return model
