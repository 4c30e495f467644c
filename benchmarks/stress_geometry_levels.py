"""Why the world model's geometry forecast fails its gate (issue 14, item 1): level against direction.

    python benchmarks/stress_geometry_levels.py --model DIR --data ../shared/data/us_equities/us_daily_train.csv.gz \
        --universe ../shared/data/us_equities/universe_us46.txt

Reads a fitted checkpoint (`alpha-gym stress fit`) and recomputes, on the gate's held-back tail, the
geometry head's forecasts (as `fit.evaluate_gates` does), the ridge AR(1) on the observed geometry
 and "no change". Prints, per target, each forecast's tail mean against the
truth's (all in the training targets' standard units, so the training mean is 0), each forecast's
correlation with the truth, and the gate's R^2 (about the training mean) of:
- the head and the AR(1) (`fit.ridge_ar1_forecast`) alone, on the tail and on as many of the last
  training samples (in-sample for the head: how much it fits its training period);
- the checkpoint's own blend (`geometry_blend`: weights fitted on the validation block), where it has one;
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
    head, truth, now = F.geometry_forecasts(model, prep, cfg, prep.tail, 999_983)   # the gate's windows and masks
    r2 = F.r2_about_training_mean

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
    # the same on windows the head trained on (the last training samples, as many as the tail): overfitting
    last = prep.train[-len(prep.tail):]
    h_in, t_in, _ = F.geometry_forecasts(model, prep, cfg, last, 999_983)
    print(f"in-sample (last {len(last)} training samples): head {r2(h_in, t_in).mean():+.3f}, "
          f"ridge AR(1) {r2(F.ridge_ar1_forecast(prep, cfg.window, last), t_in).mean():+.3f}")
    blend = manifest.get("geometry_forecast")
    if blend:
        w = blend["weights"]
        mix = F.combine(ar1, w, head=head, no_change=now)
        base = F.combine(ar1, blend["baseline_weights"], no_change=now)
        print(f"the checkpoint's blend: AR(1) + {w['head']:.3f} x (head - AR(1)) + {w['no_change']:.3f} x (no change - "
              f"AR(1)), weights fitted on {blend['validation_samples']} validation samples (there: "
              f"{blend['validation_mean_r2']}); tail {r2(mix, truth).mean():+.3f}, without the head "
              f"{r2(base, truth).mean():+.3f}")
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
