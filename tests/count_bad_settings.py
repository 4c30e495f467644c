"""Count the hostile settings (issue 27, item 2) that are not refused with an error naming the key.

    PYTHONPATH=$PWD python tests/count_bad_settings.py      # prints one line per case and the total

A case misbehaves when it is accepted (and then, where it scores, its reward is shown), or when the error
it raises does not name the key it is about.
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path

#: (what is given, the key the error must name). `--set` items, a TOML file's text ("toml:"), a --config path
#: ("config:") or `serve` flags ("serve:").
CASES = [
    ("verifier.cpcv.n_blocks=0", "n_blocks"),
    ("verifier.cpcv.n_blocks=1", "n_blocks"),
    ("verifier.cpcv.n_test_blocks=7", "n_test_blocks"),
    ("verifier.cpcv.n_test_blocks=0", "n_test_blocks"),
    ("verifier.priorities.cpcv=1e308", "priorities.cpcv"),
    ("verifier.cpcv.purge=-1", "purge"),
    ("verifier.cpcv.embargo=-1", "embargo"),
    ("verifier.turnover_cap=-0.5", "turnover_cap"),
    ("verifier.costs.fee_bps=-2", "fee_bps"),
    ("holdout.costs.fee_bps=-2", "fee_bps"),
    ("holdout.costs.book_size=-1", "book_size"),
    ("verifier.limits.max_window=0", "max_window"),
    ("verifier.limits.max_window=-5", "max_window"),
    ("verifier.limits.max_depth=0", "max_depth"),
    ("verifier.limits.max_chars=-1", "max_chars"),
    ("toml:[verifier.priorities]\ncpcv = \"3.0\"\n", "priorities.cpcv"),
    ("verifier.priorities.cpcv.x=1", "priorities.cpcv"),
    ("config:/tmp", "is a directory"),
    ("serve:--max-bytes -1", "--max-bytes"),
    ("serve:--max-answers 0", "--max-answers"),
]

FORMULAS = ["<alpha>rank(-ts_delta(close, 5))</alpha>", "<alpha>rank(returns)</alpha>"]


def _try(case: str):
    """(error text or None, the settings' verifier or None)."""
    from alpha_gym.errors import InputError
    from alpha_gym.settings import load
    try:
        if case.startswith("serve:"):
            import contextlib
            import io
            from alpha_gym.commands.main import build_parser
            with contextlib.redirect_stderr(io.StringIO()):
                build_parser().parse_args(["serve", *case[6:].split()])
            return None, None
        if case.startswith("config:"):
            return None, load(case[7:]).verifier
        if case.startswith("toml:"):
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "run.toml"
                path.write_text(case[5:], encoding="utf-8")
                return None, load(path).verifier
        return None, load(sets=[case]).verifier
    except InputError as err:
        return str(err), None
    except SystemExit:
        return _argparse_message(case), None
    except Exception as err:  # a bug: counted, shown
        return f"BUG {type(err).__name__}: {err}", None


def _argparse_message(case):
    import contextlib
    import io
    from alpha_gym.commands.main import build_parser
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf), contextlib.suppress(SystemExit):
        build_parser().parse_args(["serve", *case[6:].split()])
    return buf.getvalue().strip().splitlines()[-1]


def _rewards(config) -> list[float]:
    from alpha_gym.market import synthetic_panel
    from alpha_gym.scoring.verifier import Verifier
    verifier = Verifier(synthetic_panel(n_stocks=12, n_days=400, seed=3), config=config.with_(archive_seed=False))
    return [verifier.score(a).reward for a in FORMULAS]


def main() -> int:
    bad = 0
    for case, key in CASES:
        error, config = _try(case)
        if error is not None and key in error and not error.startswith("BUG"):
            print(f"ok      {case!r}: {error}")
            continue
        bad += 1
        if error is not None:
            print(f"UNCLEAR {case!r}: {error}")
            continue
        try:
            shown = [r if math.isfinite(r) else f"non-finite {r}" for r in _rewards(config)] if config else "-"
        except Exception as err:
            shown = f"scoring fails: {type(err).__name__}: {err}"
        print(f"ACCEPTED {case!r}: rewards {shown}")
    print(f"{bad} of {len(CASES)} bad settings not refused with an error naming the key")
    return 0


if __name__ == "__main__":
    sys.exit(main())
