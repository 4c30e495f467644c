"""Design briefs: the prompts the model answers, each stating the answer contract and the DSL.

This module holds a small fixed set of briefs; the seeded generator of the
reference's six-part briefs (`alpha_gym.tasks.generator`) builds on the same
`Brief` type and fills its optional `parts` and `constraints`.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping

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

ANSWER_CONTRACT = ("Answer with exactly one formula inside <alpha>...</alpha>, at most 128 tokens. "
                   "The book goes long the stocks your formula ranks highest at today's close and short the "
                   "lowest, dollar-neutral, filled at the next open.")


@dataclass(frozen=True)
class Brief:
    """One design brief: an id, its template family and the text of its request.

    Optional, for generated briefs:
    parts        part name -> {"id", "family", "text"} of the vocabulary entry drawn for
                 it (mechanism, horizon, input, structure, forbidden, risk); excluded from hashing.
    constraints  machine-checkable constraints (`alpha_gym.tasks.compliance`) the answer should meet.
    """

    id: str
    family: str
    request: str
    parts: Mapping[str, Mapping[str, str]] | None = field(default=None, hash=False)
    constraints: tuple = ()

    def prompt(self, limits: Limits = DEFAULT_LIMITS) -> str:
        """The full prompt text: the request, the answer contract and the DSL reference under `limits`
        (pass the verifier's `config.limits`, so the prompt states the limits answers are held to)."""
        return f"{self.request}\n\n{ANSWER_CONTRACT}\n\n{dsl_reference(limits)}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (one line of a briefs JSONL file)."""
        return {"id": self.id, "family": self.family, "request": self.request,
                "parts": None if self.parts is None else {k: dict(v) for k, v in self.parts.items()},
                "constraints": [c.to_dict() for c in self.constraints]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Brief":
        """Inverse of `to_dict`."""
        from alpha_gym.tasks.compliance import constraint_from_dict
        parts = d.get("parts")
        return cls(id=str(d["id"]), family=str(d["family"]), request=str(d["request"]),
                   parts=None if parts is None else {str(k): dict(v) for k, v in parts.items()},
                   constraints=tuple(constraint_from_dict(c) for c in d.get("constraints") or ()))


FIXED_BRIEFS: tuple[Brief, ...] = (
    Brief("fixed-000", "reversal", "Market: US-listed stocks trading on weekday sessions. Design an alpha whose PRIMARY "
          "mechanism is: short-horizon price reversal. Target horizon: roughly 5-day windows. Risk preference: keep "
          "turnover moderate."),
    Brief("fixed-001", "volume", "Market: US-listed stocks trading on weekday sessions. Design an alpha whose PRIMARY "
          "mechanism is: abnormal trading volume relative to its recent average. Target horizon: roughly 21-day "
          "windows. Inputs: must use volume."),
    Brief("fixed-002", "price_volume_corr", "Market: US-listed stocks trading on weekday sessions. Design an alpha "
          "whose PRIMARY mechanism is: the rolling correlation between price and volume. Inputs: must use exactly "
          "one ts_corr. Structure: take the rank of the relationship."),
    Brief("fixed-003", "range", "Market: US-listed stocks trading on weekday sessions. Design an alpha whose PRIMARY "
          "mechanism is: where the close sits inside the day's high-low range. Target horizon: one day."),
    Brief("fixed-004", "volatility", "Market: US-listed stocks trading on weekday sessions. Design an alpha whose "
          "PRIMARY mechanism is: low realised volatility. Constraint: do NOT lean on long-horizon price sums - they "
          "proxy market beta. Risk preference: make it robust to a volatility-regime change."),
    Brief("fixed-005", "extremes", "Market: US-listed stocks trading on weekday sessions. Design an alpha whose "
          "PRIMARY mechanism is: mixed-signal extremes (rolling max or min of a price-volume composite). Target "
          "horizon: roughly 63-day windows."),
    Brief("fixed-006", "trend_shape", "Market: US-listed stocks trading on weekday sessions. Design an alpha whose "
          "PRIMARY mechanism is: the slope of a smoothed price path. Structure: take the sign of a time-series "
          "relationship."),
    Brief("fixed-007", "vwap", "Market: US-listed stocks trading on weekday sessions. Design an alpha whose PRIMARY "
          "mechanism is: the gap between the close and the day's vwap. Target horizon: a few days."),
)
