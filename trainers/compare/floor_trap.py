r"""The advantage-floor trap of Environment B, at CPU scale.

    python -m trainers.compare.floor_trap --model runs/sft/model --data ../shared/data/us_equities/us_daily_train.csv.gz \
        --universe ../shared/data/us_equities/universe_us46.txt --out runs/floor-trap          # ~25 min on 2 cores

Environment B charges about 19x the training costs per unit of turnover (`ENVIRONMENT_B_COSTS`,
`gym.make("AlphaFormulaEnvB-v0")`). There almost every answer's core score (R1) is at or below 0, so
an advantage floor at 0 (no positive advantage for an answer whose core score is <= 0) leaves almost
no answer with a learning signal: the reference saw 3-4% of answers with a non-zero advantage, against
about 100% without the floor, and a policy that barely moved. This runs the same recipe twice on
Environment B, with `advantage_floor=0` and without a floor, and reports per step the share of answers
with a non-zero advantage, the KL to the start model and the training reward.

Each arm is an ordinary training run (OUT/floor-0, OUT/no-floor) that checkpoints every step, so a
stopped benchmark resumes where it stopped. Writes OUT/floor_trap.json, OUT/floor_trap.md and
OUT/floor_trap.png.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from alpha_gym.jsonable import json_dumps

ARMS = (("floor-0", 0.0), ("no-floor", None))


def run(args) -> dict:
    """Both arms, each an ordinary training run under args.out (resumed where a checkpoint exists)."""
    from alpha_gym.book.costs import ENVIRONMENT_B_COSTS
    from alpha_gym.market.resolve import resolve_panel
    from alpha_gym.scoring.config import VerifierConfig
    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.tasks.sets import brief_set
    from trainers.config import RECIPES
    from trainers.checkpoints import latest_checkpoint
    from trainers.loop import train
    from trainers.run_log import read_log
    panel = resolve_panel(data=args.data, universe=args.universe, train_end=args.end)
    base = Verifier(panel, VerifierConfig(costs=ENVIRONMENT_B_COSTS))
    out = Path(args.out)
    arms = {}
    for name, floor in ARMS:
        config = RECIPES[args.recipe].with_(advantage_floor=floor, prompts_per_step=args.prompts,
                                            num_generations=args.generations, max_completion_length=args.tokens,
                                            temperature=args.temperature, learning_rate=args.lr, save_steps=1,
                                            seed=args.seed)
        run_dir = out / name
        print(f"=== {name}: recipe {args.recipe}, advantage_floor={floor}", flush=True)
        train(config, base.fork(), list(brief_set("train")), run_dir, model=args.model, steps=args.steps,
              resume=latest_checkpoint(run_dir) is not None, progress=True)
        arms[name] = [{k: x.get(k) for k in ("step", "nonzero_adv_share", "kl", "reward", "core", "valid_share")}
                      for x in read_log(run_dir)]
    return {"recipe": args.recipe, "steps": args.steps, "costs_bps": ENVIRONMENT_B_COSTS.rate() * 1e4,
            "settings": {k: getattr(args, k) for k in ("prompts", "generations", "tokens", "temperature", "lr",
                                                       "seed", "model", "data", "universe", "end")},
            "arms": arms}


def table(result: dict) -> str:
    """One row per step: the two arms side by side."""
    a, b = (result["arms"][n] for n, _ in ARMS)
    lines = [f"Environment B ({result['costs_bps']:.0f} bps per unit of turnover), recipe `{result['recipe']}`.", "",
             "| step | non-zero adv, floor 0 | non-zero adv, no floor | KL, floor 0 | KL, no floor | "
             "reward, floor 0 | reward, no floor |", "|---:|---:|---:|---:|---:|---:|---:|"]

    def f(x, spec):
        return "n/a" if x is None else format(x, spec)
    for x, y in zip(a, b):
        lines.append(f"| {x['step']} | {f(x['nonzero_adv_share'], '.1%')} | {f(y['nonzero_adv_share'], '.1%')} | "
                     f"{f(x['kl'], '.2e')} | {f(y['kl'], '.2e')} | {f(x['reward'], '+.2f')} | {f(y['reward'], '+.2f')} |")

    def mean(rows, key):
        vals = [r[key] for r in rows if r.get(key) is not None]
        return sum(vals) / len(vals) if vals else None
    lines.append(f"| mean | {f(mean(a, 'nonzero_adv_share'), '.1%')} | {f(mean(b, 'nonzero_adv_share'), '.1%')} | "
                 f"{f(mean(a, 'kl'), '.2e')} | {f(mean(b, 'kl'), '.2e')} | {f(mean(a, 'reward'), '+.2f')} | "
                 f"{f(mean(b, 'reward'), '+.2f')} |")
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    """Per step: the share of answers with a non-zero advantage, the KL and the reward of both arms."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for name, _ in ARMS:
        rows = result["arms"][name]
        steps = [r["step"] for r in rows]
        for ax, key, title in zip(axes, ("nonzero_adv_share", "kl", "reward"),
                                  ("answers with a non-zero advantage", "KL to the start model", "training reward")):
            ax.plot(steps, [r[key] for r in rows], marker="o", label=name)
            ax.set_title(title)
            ax.set_xlabel("step")
    axes[0].set_ylim(0, 1.05)
    axes[0].legend()
    fig.suptitle("Environment B: the advantage-floor trap")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="start model: a packaged name, folder or hub id (the SFT warm start; "
                                         "default: SmolLM2-135M-Instruct)")
    ap.add_argument("--data", help="market data (default: the synthetic market)")
    ap.add_argument("--universe")
    ap.add_argument("--end", help="last training session (YYYY-MM-DD)")
    ap.add_argument("--out", default="runs/floor-trap")
    ap.add_argument("--recipe", default="cispo_repo_r")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--generations", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.5)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args(argv)
    result = run(args)
    out = Path(args.out)
    (out / "floor_trap.json").write_text(json_dumps(result, indent=1))
    text = table(result)
    (out / "floor_trap.md").write_text(text)
    plot(result, out / "floor_trap.png")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
