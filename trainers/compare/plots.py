"""The comparison's figures: training curves and per-checkpoint probe scores of the runs of this session
(curves.png, holdout_per_checkpoint.png), and each seed's shipped score per rung from the kept answers
(seeds.png). Matplotlib only, drawn off screen.
"""

from __future__ import annotations

import json
from pathlib import Path


def write_plots(results, out: Path) -> None:
    """curves.png (reward, core, valid share per step) and holdout_per_checkpoint.png of `results` (runs)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    styles = ["-", "--", ":", "-.", (0, (5, 1))]  # rungs that coincide stay visible
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for i, r in enumerate(results):
        steps = [x["step"] for x in r["log"]]
        for ax, key in zip(axes, ("reward", "core", "valid_share")):
            ax.plot(steps, [x.get(key) for x in r["log"]], marker=".", ls=styles[i % len(styles)],
                    label=f"{r['rung']} s{r['seed']}")
            ax.set_title(key.replace("_", " "))
            ax.set_xlabel("step")
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=110)
    plt.close(fig)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for i, r in enumerate(results):
        steps = [c["step"] for c in r["checkpoints"]]
        ls = styles[i % len(styles)]
        label = f"{r['rung']} s{r['seed']}"
        axes[0].plot(steps, [c["train_cpcv"] for c in r["checkpoints"]], marker="o", ls=ls, label=label)
        axes[1].plot(steps, [c["holdout_score"] for c in r["checkpoints"]], marker="o", ls=ls, label=label)
    axes[0].set_title("probe answers: train-window CPCV (selects the checkpoint)")
    axes[1].set_title("probe answers: pseudo-holdout score (reported only)")
    for ax in axes:
        ax.set_xlabel("step")
        ax.axhline(0, color="grey", lw=0.5)
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "holdout_per_checkpoint.png", dpi=110)
    plt.close(fig)


def write_seed_plot(report, results: Path, folders) -> None:
    """seeds.png: what a seed does to a rung, and whether the checkpoint choice could have seen it.

    Left: each seed's shipped score per rung (dots) beside the rung's mean and 95% interval, with step 0
    and the best one-motif and overall baselines as lines. Right: train-window CPCV (which picks the
    checkpoint) against the pseudo-holdout score (which is only reported), one point per run.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from scipy.stats import spearmanr
    from alpha_gym.evaluation.bootstrap import valid_mean
    from alpha_gym.evaluation.baselines import best_baseline
    # the rungs only: an eval row has samples, not seeds with a training run behind each
    rungs = [(k, r) for k, r in report["rows"].items() if k != "step-0" and r.get("kind") != "eval"]
    if not rungs:
        return
    seeds = report["seeds"]
    colours = {s: plt.cm.tab10(i % 10) for i, s in enumerate(seeds)}
    markers = "osD^v<>ph"
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    cpcv, score = [], []
    for x, (name, r) in enumerate(rungs):
        if all(v is not None and np.isfinite(v) for v in (r["score"], r["lo"], r["hi"])):
            left.errorbar([x], [r["score"]], yerr=[[r["score"] - r["lo"]], [r["hi"] - r["score"]]], fmt="_",
                          color="black", ms=18, capsize=6, zorder=3)
        for j, seed in enumerate(r["seeds"]):
            s = valid_mean(r["table"][j])
            left.scatter([x + 0.12 * (j - (len(r["seeds"]) - 1) / 2)], [s], color=colours[seed], s=30, zorder=4,
                         label=f"seed {seed}" if x == 0 else None)
            run = json.loads((results / f"seed-{seed}" / f"{name}.json").read_text())
            shipped = {c["step"]: c for c in run["checkpoints"]}[run["selected_step"]]
            c = np.nan if shipped["train_cpcv"] is None else float(shipped["train_cpcv"])  # None: no valid answer
            right.scatter([c], [s], color=colours[seed], marker=markers[x % len(markers)], s=45)
            cpcv.append(c)
            score.append(s)
    lines = [("step 0", report["rows"]["step-0"]["score"], "grey")] if "step-0" in report["rows"] else []
    motifs = best_baseline([b for b in report.get("baselines", []) if b["kind"] == "motif"])
    best = best_baseline(report.get("baselines", []))
    if motifs is not None:
        lines.append((f"{motifs['name']} (best motif)", motifs["score"], "tab:green"))
    if best is not None and best is not motifs:
        lines.append((f"{best['name']} (best baseline)", best["score"], "tab:red"))
    for label, y, colour in lines:
        if y is None or not np.isfinite(y):
            continue
        left.axhline(y, color=colour, ls="--", lw=1)
        left.annotate(f"{label} {y:+.2f}", (len(rungs) - 0.5, y), fontsize=7, color=colour, ha="right", va="bottom")
    left.set_xticks(range(len(rungs)), [r["label"] for _, r in rungs], rotation=15, fontsize=8)
    left.set_xlim(-0.5, len(rungs) - 0.5)
    left.set_ylabel("pseudo-holdout score (valid answers)")
    left.set_title("each seed's shipped checkpoint; bars: mean and 95% interval")
    left.legend(fontsize=7, loc="lower left")
    cpcv, score = np.array(cpcv), np.array(score)
    ok = np.isfinite(cpcv) & np.isfinite(score)
    rho = spearmanr(cpcv[ok], score[ok])[0] if ok.sum() >= 3 else float("nan")
    right.set_xlabel("train-window CPCV (picks the checkpoint)")
    right.set_ylabel("pseudo-holdout score")
    right.set_title(f"one point per run: rank correlation {rho:+.2f}")
    right.axhline(0, color="grey", lw=0.5)
    from matplotlib.lines import Line2D  # marker = rung, colour = seed (as on the left)
    right.legend(handles=[Line2D([], [], marker=markers[x % len(markers)], ls="", color="grey", label=name)
                          for x, (name, _) in enumerate(rungs)], fontsize=7, loc="best")
    fig.tight_layout()
    for folder in folders:
        fig.savefig(Path(folder) / "seeds.png", dpi=110)
    plt.close(fig)
