"""Hostile inputs, round three (issue 41, item 7's first part): digits that are not ASCII digits.

Python's `\\d` and `float()` read every Unicode decimal digit: Arabic-Indic `٥`, fullwidth `５`,
Devanagari `५`, Thai `๕`, math-bold `𝟓` and some sixty more scripts. The grammar's number terminals
were written with `\\d`, so `ts_delta(close, ٥)` was a 5-day delta and `ts_delta(close, 5٥)` a 55-day
one: a window the model never wrote in the language's digits. The grammar now takes `[0-9]` only, and
an answer holding another digit is an invalid answer (the "unparseable" penalty) whose reason names
the character and says to write the ASCII digits 0-9.

    class                 a case misbehaves when                                        before      after
    non-ASCII digits      the answer is not refused with a reason that names the        455 of 455  0 of 455
                          character (U+....) and the ASCII digits 0-9
    ASCII numbers         a number written in ASCII digits is refused or read otherwise 0 of 12     0 of 12

65 runs of ten digits x 7 places. "Before" is commit 1606f8c (main when this work began), "after" this
branch, counted by running this script against each (2026-12-05):
`PYTHONPATH=<checkout>:<checkout>/tests python tests/test_hostile_round3_digits.py`. Before, 390 of the 455
were read as ASCII numbers (scored as `ts_delta(close, 5)`, `rank(-ts_delta(close, 55))`, `close * 2.5`,
...); the 65 `adv{d}` spellings were refused, with an "unexpected token" reason that did not say why.
"""

from __future__ import annotations

import sys
import unicodedata
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_hostile_inputs import _assert_none, run_probes  # noqa: E402,I001

#: Every Unicode decimal-digit run that is not ASCII: its zero (a character whose decimal value is 0,
#: the next nine code points being 1..9, as the standard lays decimal digits out).
ZEROS = [chr(c) for c in range(0x80, 0x110000)
         if unicodedata.decimal(chr(c), None) == 0
         and all(unicodedata.decimal(chr(c + k), None) == k for k in range(10))]
#: The scripts the issue names (all in ZEROS): Arabic-Indic, fullwidth, Devanagari, Thai, math-bold.
NAMED = ["\u0660", "\uff10", "\u0966", "\u0e50", "\U0001d7ce"]
#: Where a model writes digits: a window, a window next to an ASCII digit (`5٥` was 55), a decimal's
#: integer part and fraction, an exponent, a comparison constant, the paper's adv{d}.
TEMPLATES = ["ts_delta(close, {5})", "rank(-ts_delta(close, 5{5}))", "close * {2}.5", "close * 1.{5}",
             "ts_mean(close, 1e{1})", "close > {1}{0}", "adv{2}{0}"]
#: The same places in ASCII digits: what they must still read as.
ASCII = {"ts_delta(close, 5)": "ts_delta(close, 5)", "rank(-ts_delta(close, 55))": "rank(-ts_delta(close, 55))",
         "close * 2.5": "close * 2.5", "close * 1.5": "close * 1.5", "ts_mean(close, 1e1)": "ts_mean(close, 10)",
         "close > 10": "close > 10", "adv20": "adv20", "close * .5": "close * 0.5", "close * 5.": "close * 5",
         "close * 2.5e-3": "close * 0.0025", "close * 1E+2": "close * 100", "ts_sum(close, 007)": "ts_sum(close, 7)"}


def _spell(template: str, zero: str) -> str:
    digit = {str(k): chr(ord(zero) + k) for k in range(10)}
    return template.format(*[digit[str(k)] for k in range(10)])


def _verifier():
    from alpha_gym.market import synthetic_panel
    from alpha_gym.scoring.config import VerifierConfig
    from alpha_gym.scoring.verifier import Verifier
    return Verifier(synthetic_panel(n_stocks=20, n_days=200, seed=3), VerifierConfig(archive_seed=False))


def probe_non_ascii_digits(verifier=None) -> tuple[int, list[str]]:
    """Each non-ASCII digit run in each template, as a model's answer: an invalid answer naming the character."""
    verifier = verifier or _verifier()
    bad = []
    cases = [(zero, _spell(t, zero)) for zero in ZEROS for t in TEMPLATES]
    for zero, formula in cases:
        score = verifier.score(f"<alpha>{formula}</alpha>")
        if score.valid:
            bad.append(f"{formula!r} ({unicodedata.name(zero)} run) scored valid as {score.formula!r}")
        elif "ASCII digits 0-9" not in score.reason or "U+" not in score.reason:
            bad.append(f"{formula!r}: refused without naming the digit: {score.reason}")
    return len(cases), bad


def probe_ascii_numbers() -> tuple[int, list[str]]:
    """Numbers in ASCII digits still parse, to the same value."""
    from alpha_gym.language import FormulaError, parse, to_text
    bad = []
    for formula, want in ASCII.items():
        try:
            got = to_text(parse(formula))
        except FormulaError as err:
            bad.append(f"{formula!r} refused: {err}")
            continue
        if got != want:
            bad.append(f"{formula!r} read as {got!r}, not {want!r}")
    return len(ASCII), bad


def test_every_non_ascii_digit_run_is_an_invalid_answer_with_a_clear_reason():
    assert set(NAMED) <= set(ZEROS) and len(ZEROS) > 50
    _assert_none(probe_non_ascii_digits(), 50 * len(TEMPLATES))


@pytest.mark.parametrize("zero", NAMED)
def test_the_issues_digits_never_parse_as_a_window(zero):
    """`5٥` is not 55, `٥` is not 5: the parser refuses them (a syntax error at the digit's column)."""
    from alpha_gym.language import FormulaSyntaxError, parse
    for template, column in (("ts_delta(close, {5})", 17), ("rank(-ts_delta(close, 5{5}))", 24)):
        with pytest.raises(FormulaSyntaxError, match="ASCII digits 0-9") as err:
            parse(_spell(template, zero))
        assert err.value.column == column


def test_ascii_numbers_read_as_before():
    _assert_none(probe_ascii_numbers(), len(ASCII))


def main() -> int:
    """Print, per class, how many cases were tried and how many misbehaved."""
    run_probes([("non-ASCII digits", probe_non_ascii_digits), ("ASCII numbers", probe_ascii_numbers)], shown=20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
