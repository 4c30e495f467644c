"""Why the world model's geometry forecast fails its gate (issue 14, item 1): level against direction.

    python benchmarks/stress_geometry_levels.py --model DIR --data ../shared/data/us_equities/us_daily_train.csv.gz \
        --universe ../shared/data/us_equities/universe_us46.txt

Reads a fitted checkpoint (`alpha-gym stress fit`) and recomputes, on the gate's held-back tail, the
geometry head's forecasts (as `fit.evaluate_gates` does), the ridge AR(1) on the observed geometry
 and "no change". Prints, per target, each forecast's tail mean against the
truth's (all in the training targets' standard units, so the training mean is 0), each forecast's
correlation with the truth, and the gate's R^2 (about the training mean) of:
- the head and the AR(1) (`fit.ridge_ar1_forecast`) alone;
- AR(1) plus the head's deviation from its own trailing mean (causal: the level from the observed
  geometry, the direction from the model);
- blends and a least-squares fit chosen ON THE TAIL itself: marked ORACLE, upper bounds only, never a
  forecast (no one tunes on the sample that scores them).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def r2(pred, truth):
    """The gate's R^2: about the training mean (0 in standard units), per target."""
    import numpy as np
    return 1.0 - ((pred - truth) ** 2).sum(axis=0) / np.maximum((truth ** 2).sum(axis=0), 1e-12)


def tail_forecasts(model, prep, panel, cfg):
    """(head, truth, observed now) on the tail, in standard units: the same windows, mask and order as the gate."""
    import numpy as np
    import torch

    from alpha_gym.stress import fit as F
    W = cfg.window
    x_t = torch.from_numpy(prep.x)
    rng = np.random.default_rng([cfg.seed, 999_983])
    head, truth, now = [], [], []
    with torch.no_grad():
        for i in range(0, len(prep.tail), 32):
            t = prep.tail[i:i + 32]
            mask = F.make_mask(rng, len(t), panel.n_stocks, cfg)
            pred = model.predictor(model.online(F._windows(x_t, t, -W, W), mask))
            g_now = (prep.targets[t - W] - prep.g_mean) / prep.g_std
            head.append(model.head.forecast(pred, torch.as_tensor(g_now, dtype=pred.dtype)).double().numpy())
            truth.append((prep.targets[t] - prep.g_mean) / prep.g_std)
            now.append(g_now)
    return map(np.concatenate, (head, truth, now))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--universe", type=Path)
    args = ap.parse_args()

    import numpy as np
    import torch

    from alpha_gym.market import load_panel, load_universe
    from alpha_gym.stress import fit as F
    from alpha_gym.stress.config import StressConfig
    from alpha_gym.stress.geometry import TARGET_NAMES
    from alpha_gym.stress.model import load_model
    torch.set_num_threads(1)
    manifest = json.loads((args.model / "manifest.json").read_text())
    cfg = StressConfig.from_dict(manifest["config"])
    panel = load_panel(args.data)
    if args.universe:
        panel = panel.select(load_universe(args.universe))
    if panel.fingerprint() != manifest["data"]["fingerprint"]:
        sys.exit(f"{args.model} was fitted on other data than {args.data} / {args.universe}")
    prep = F.prepare(panel, cfg)
    model = load_model(args.model, manifest)
    model.eval()
    head, truth, now = tail_forecasts(model, prep, panel, cfg)

    ar1 = F.ridge_ar1_forecast(prep, cfg.window, prep.tail)

    def corr(p):
        return [float(np.corrcoef(p[:, k], truth[:, k])[0, 1]) for k in range(truth.shape[1])]
    print(f"tail: {len(truth)} samples; train: {len(prep.train)}")
    print(f"{'target':22s} {'truth mean':>10s} {'head mean':>10s} {'ar1 mean':>9s} {'corr head':>9s} {'corr ar1':>9s}")
    for k, name in enumerate(TARGET_NAMES):
        print(f"{name:22s} {truth[:, k].mean():+10.2f} {head[:, k].mean():+10.2f} {ar1[:, k].mean():+9.2f} "
              f"{corr(head)[k]:+9.2f} {corr(ar1)[k]:+9.2f}")
    print(f"mean R^2 (gate): head {r2(head, truth).mean():+.3f}, ridge AR(1) {r2(ar1, truth).mean():+.3f}, "
          f"no change {r2(now, truth).mean():+.3f}")
    for look in (25, 50, 100):
        dev = np.zeros_like(head)
        for i in range(1, len(head)):
            dev[i] = head[i] - head[max(0, i - look):i].mean(axis=0)
        print(f"causal: AR(1) + 0.5 x (head - its trailing {look}-sample mean): {r2(ar1 + 0.5 * dev, truth).mean():+.3f}")
    for s in (0.1, 0.25, 0.5):
        print(f"ORACLE blend {s} x head + {1 - s:.2f} x AR(1): {r2(s * head + (1 - s) * ar1, truth).mean():+.3f}")
    fitted = np.stack([np.linalg.lstsq(np.stack([head[:, k], ar1[:, k], np.ones(len(truth))], 1), truth[:, k],
                                       rcond=None)[0] @ np.stack([head[:, k], ar1[:, k], np.ones(len(truth))])
                       for k in range(truth.shape[1])], axis=1)
    print(f"ORACLE least squares truth ~ head + AR(1) + 1 on the tail: {r2(fitted, truth).mean():+.3f}")


if __name__ == "__main__":
    main()
