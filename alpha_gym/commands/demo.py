"""`alpha-gym demo`: the environment on the embedded synthetic market scoring example answers (and, with
--train STEPS, a short RL run with the built-in small model)."""

from __future__ import annotations

import time

from alpha_gym.commands.extras import missing_extra
from alpha_gym.commands.flags import add_settings_args, settings_from_args
from alpha_gym.jsonable import json_dumps

DEMO_ANSWERS = [
    ("a reversal formula", "<alpha>rank(-ts_delta(close, 5))</alpha>"),
    ("Alpha#101 from the paper", "<alpha>((close - open) / ((high - low) + .001))</alpha>"),
    ("a volume-variability formula", "<alpha>rank(ts_std(volume, 20) / ts_mean(volume, 20))</alpha>"),
    ("a slow price-level tilt (static book)", "<alpha>rank(ts_mean(close, 250))</alpha>"),
    ("a formula that trades nothing",
     "<alpha>scale(ts_rank(ts_delta(volume, 23), 47) - ts_rank(ts_delta(volume, 23), 47))</alpha>"),
    ("lookback over 252 sessions", "<alpha>ts_mean(delay(close, 200), 100)</alpha>"),
    ("a syntax error", "<alpha>rank(close -)</alpha>"),
    ("no answer tag", "I think momentum works: rank(returns)"),
]


def cmd_demo(args) -> int:
    import gymnasium as gym
    import alpha_gym  # noqa: F401  (registers the environment)
    print("alpha-gym demo: AlphaFormula-v0 on the embedded synthetic market (46 stocks x 3,304 sessions).")
    print("Each answer below is one episode: brief -> answer -> deterministic verifier.\n")
    t0 = time.perf_counter()
    env = gym.make("AlphaFormula-v0", render_mode="ansi", config=settings_from_args(args).verifier)
    build_s = time.perf_counter() - t0
    prompt, info = env.reset(seed=args.seed)
    print(f"First brief ({info['brief_id']}):\n  " + prompt.splitlines()[0] + "\n")
    rows = []
    for label, answer in DEMO_ANSWERS:
        t = time.perf_counter()
        env.reset()
        _, reward, terminated, truncated, info = env.step(answer)
        ms = (time.perf_counter() - t) * 1000
        print(f"=== {label}  ({ms:.0f} ms)")
        print(env.render())
        print()
        rows.append((label, info["valid"], reward))
    print("Summary")
    for label, valid, reward in rows:
        print(f"  {reward:+8.3f}  {'valid  ' if valid else 'INVALID'}  {label}")
    print(f"\n(market built in {build_s:.1f} s; the numbers are on synthetic data, not a claim about real markets)")
    env.close()
    if args.train:
        return _demo_training(args)
    return 0


def _demo_training(args) -> int:
    """A short RL run: SmolLM2-135M, recipe cispo_repo_r, tiny settings, on the same synthetic market."""
    try:
        from trainers.config import register_train_table
        from trainers.loop import train
    except ImportError as err:
        return missing_extra("train", err)
    register_train_table()
    from alpha_gym.market.resolve import default_panel
    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.tasks.sets import brief_set
    settings = settings_from_args(args, {"train": {"recipe": "cispo_repo_r", "prompts_per_step": 1,
                                                   "num_generations": 4, "max_completion_length": 48,
                                                   "save_steps": 0, "seed": args.seed}})
    config = settings["train"].config
    print(f"\nShort training run: recipe cispo_repo_r, {args.train} steps of 1 brief x 4 answers, 48 tokens "
          f"(SmolLM2-135M-Instruct; without a supervised warm start it rarely writes a valid answer yet)")
    summary = train(config, Verifier(default_panel(), settings.verifier), list(brief_set("train")), args.out,
                    steps=args.train)
    print(json_dumps({k: v for k, v in summary.items() if isinstance(v, (str, int, float)) and k != "policy"},
                     indent=2))
    return 0


def register(sub) -> None:
    """Add `demo` to an argparse sub-parser collection."""
    p = sub.add_parser("demo", help="the environment on the embedded market scoring example answers")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train", type=int, default=0, metavar="STEPS",
                   help="then a short RL run of STEPS steps with the built-in small model (needs the train extra)")
    p.add_argument("--out", default="runs/demo", help="run folder of the short training run")
    add_settings_args(p)
    p.set_defaults(func=cmd_demo)
