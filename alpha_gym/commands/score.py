"""`alpha-gym score`: one formula or one raw answer through the verifier, with the industry's tests beside it.

    alpha-gym score 'rank(-ts_delta(close, 5))' [--brief ID] [--json] [--data PATH --universe U] [--config F]
    alpha-gym score --answer '<alpha>...</alpha>'
"""

from __future__ import annotations

import sys

from alpha_gym.commands.flags import add_data_args, add_settings_args, panel_from_args, settings_from_args
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
    from alpha_gym.scoring.report import brief_object
    compliance = brief_object(brief, result.formula, result.valid)
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


def register(sub) -> None:
    """Add `score` to an argparse sub-parser collection."""
    p = sub.add_parser("score", help="score one formula or one raw answer")
    p.add_argument("formula", nargs="?", help="a formula, e.g. 'rank(-ts_delta(close, 5))'")
    p.add_argument("--answer", help="a raw model answer holding <alpha>...</alpha>")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--brief", metavar="ID", help="score for this seeded or fixed brief (e.g. g0-0113, fixed-003): R13 "
                                                 "reads it, and the report shows the brief's text and each of its "
                                                 "checks in words, met or missed (a fixed brief has none)")
    p.add_argument("--stress-checkpoint", metavar="DIR|auto|none",
                   help="R3's world model: a fitted model's folder, 'auto' (default: the model `alpha-gym stress "
                        "fit` registered for this panel) or 'none' (R3 off)")
    add_data_args(p)
    add_settings_args(p)
    p.set_defaults(func=cmd_score)
