"""The `alpha-gym` command line."""

from __future__ import annotations

import argparse
import functools
import os
import sys
import traceback
import warnings

from alpha_gym.commands.extras import OPTIONAL_MODULES, missing_extra
from alpha_gym.commands.flags import Parser


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="alpha-gym", description=__doc__)
    parser.add_argument("--debug", action="store_true", help="show the full traceback of any error")
    from alpha_gym._version import __version__
    parser.add_argument("--version", action="version", version=f"alpha-gym {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    from alpha_gym.commands import config, demo, score, sft
    config.register(sub)
    score.register(sub)
    demo.register(sub)
    sft.register(sub)  # sft-data, sft
    from alpha_gym.commands.briefs import register as register_briefs
    register_briefs(sub)
    from alpha_gym.commands.evaluation import register as register_evaluation
    register_evaluation(sub)
    try:  # `train` and `compare` need the train extra (torch); without it the command says how to install it
        from alpha_gym.commands.train import register as register_train, register_export
        from alpha_gym.commands.compare import register as register_compare
    except ImportError as err:
        for name, what in (("train", "RL training"), ("compare", "the trainer comparison")):
            p = sub.add_parser(name, help=f"{what} (needs: pip install alpha-gym[train])")
            p.set_defaults(func=lambda args, err=err: missing_extra("train", err), any_arguments=True)
        p = sub.add_parser("export-gguf", help="a model folder as a GGUF file (needs the train extra and "
                                               "sentencepiece: pip install -e '.[train]' sentencepiece)")
        p.set_defaults(func=lambda args, err=err: _export_gguf_missing(err), any_arguments=True)
    else:
        register_train(sub)
        register_compare(sub)  # the trainer comparison (trainers/compare/)
        register_export(sub)  # a trained model for llama.cpp (trainers/export_gguf.py)
    from alpha_gym.commands.stress import register as register_stress
    register_stress(sub)
    from alpha_gym.commands.serve import register as register_serve  # issue 12: the scoring service
    register_serve(sub)
    from alpha_gym.commands.score_batch import register as register_score_batch  # issue 12: batch scoring on Ray
    register_score_batch(sub)
    from alpha_gym.commands.evaluation import register_eval  # issue 30: a model behind an endpoint
    register_eval(sub)
    from alpha_gym.commands.evolve import register as register_evolve  # issue 40: evolution
    register_evolve(sub)
    from alpha_gym.commands.overfitting import register as register_overfitting  # PBO, deflated Sharpe of a run
    register_overfitting(sub)
    return parser


def _export_gguf_missing(err: Exception) -> int:
    """`export-gguf` where the train command cannot be imported: every need named at once (the export's own
    line where its module imports, else the train extra's)."""
    try:
        from trainers.export_gguf import missing_modules, needs_message
    except ImportError:
        return missing_extra("train", err)
    print(f"alpha-gym: {needs_message(missing_modules() or ['the train command ({err})'])}", file=sys.stderr)
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


def _show_warning(message, category, filename, lineno, file=None, line=None, *, data_flag: str = "--data") -> None:
    """A notice meant for the user (the synthetic market's) is one line, `alpha-gym: note: ...`, without the
    source path and code line Python adds, naming the command's own market-data flag (`data_flag`: `sft` reads its
    SFT rows from --data and prices from --market-data); every other warning is shown as Python shows it."""
    from alpha_gym.market.synthetic import SyntheticDataNotice
    if issubclass(category, SyntheticDataNotice):
        text = str(message).removeprefix("alpha-gym: ").replace(
            "load real data with alpha_gym.market.load_panel", f"give {data_flag} FILE for real prices")
        print(f"alpha-gym: note: {text}", file=sys.stderr if file is None else file)
        return
    _default_showwarning(message, category, filename, lineno, file, line)


def user_errors() -> tuple[type, ...]:
    """Exceptions that mean the input was wrong (a bad flag, file, formula or setting), not that we have a bug.

    These print one line; anything else is a bug and prints its traceback (as does any error with --debug).
    """
    from alpha_gym.errors import InputError
    return (InputError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


def market_data_flag(args) -> str:
    """The flag a command reads market prices from: `--market-data` where --data means something else (`sft`:
    its SFT rows; `add_data_args(data_flag=...)`), else `--data`."""
    return "--market-data" if hasattr(args, "market_data") else "--data"


def _main(argv=None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and not getattr(args, "any_arguments", False):  # a command standing in for one that cannot load
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")  # takes the real one's flags, to say so
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = functools.partial(_show_warning, data_flag=market_data_flag(args))
            return args.func(args)
    except ModuleNotFoundError as err:
        if not args.debug and err.name and err.name.split(".")[0] in OPTIONAL_MODULES:
            return missing_extra(OPTIONAL_MODULES[err.name.split(".")[0]], err)
        raise
    except user_errors() as err:
        if args.debug:
            traceback.print_exc()
        print(f"alpha-gym: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
