"""What every task's prompt states: the `<alpha>` answer contract and the DSL reference.

The reference is generated from the operator registry (`SPECS`, field `prompt`) and the formula limits
the verifier applies (`VerifierConfig.limits`); a task (`alpha_gym.tasks.task`) composes its prompt from
these parts and its own request.
"""

from __future__ import annotations

import textwrap
from functools import lru_cache

from alpha_gym.language.operators import FIELDS, SPECS
from alpha_gym.language.parser import DEFAULT_LIMITS, Limits

#: The prompt's lines that operator entries do not write: the paper's spelling rules.
_PAPER_NOTE = """\
Paper names (correlation, stddev, sum, Ts_Rank, SignedPower, adv20, ...) are aliases; min(x, d)/max(x, d)
with an integer d is ts_min/ts_max (write max(x, 1.0) for element-wise)."""
#: Generated lines wrap at this width (the width the reference text was written to).
_WIDTH = 98


def _words(kind: str, n_series: int | None = None) -> list[str]:
    """The prompt words of the named operators of one kind (and argument count), in registry order."""
    return [s.prompt for s in SPECS if s.prompt is not None and s.kind == kind and s.form != "infix"
            and (n_series is None or s.n_series == n_series)]


@lru_cache(maxsize=16)
def dsl_reference(limits: Limits = DEFAULT_LIMITS) -> str:
    """The DSL reference every prompt ends with, from the operator registry (`SPECS`, field `prompt`)
    and the formula limits the verifier applies (`VerifierConfig.limits`)."""
    series = sorted({s.n_series for s in SPECS if s.kind == "ts" and s.prompt is not None})
    time_series = "; ".join(", ".join(_words("ts", n)) for n in series)
    symbols = " ".join(s.prompt for s in SPECS if s.prompt is not None and s.form == "infix")
    lines = [
        f"Fields: {' '.join(FIELDS)}.",
        f"Cross-sectional: {'; '.join(_words('cs'))}.",
        f"Time series (d = integer window, 1..{limits.max_window}): {time_series}.",
        f"Element-wise: {', '.join([symbols, *_words('elem')])}.",
    ]
    wrapped = [part for line in lines for part in textwrap.wrap(line, _WIDTH, break_long_words=False,
                                                                 break_on_hyphens=False)]
    limits_line = (f"Limits: total nested lookback <= {limits.max_lookback} sessions, <= {limits.max_tokens} "
                   f"tokens, depth <= {limits.max_depth}.")
    return "\n".join([*wrapped, _PAPER_NOTE, limits_line])


#: The DSL reference under the default limits.
DSL_REFERENCE = dsl_reference()

#: The answer contract of every task whose answer is one formula (`alpha_gym.language.answer` reads it).
ANSWER_CONTRACT = ("Answer with exactly one formula inside <alpha>...</alpha>, at most 128 tokens. "
                   "The book goes long the stocks your formula ranks highest at today's close and short the "
                   "lowest, dollar-neutral, filled at the next open.")
