"""Design briefs: what the model is asked for; a task (`alpha_gym.tasks.task`) renders them into prompts.

This module holds a small fixed set of briefs; the seeded generator of the
reference's six-part briefs (`alpha_gym.tasks.generator`) builds on the same
`Brief` type and fills its optional `parts` and `constraints`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from alpha_gym.language.parser import DEFAULT_LIMITS, Limits
from alpha_gym.tasks.task import render_prompt


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
        """The write task's prompt (`alpha_gym.tasks.task.render_prompt`, which callers use): the request, the
        answer contract and the DSL reference under `limits` (pass the verifier's `config.limits`)."""
        return render_prompt(self, limits)

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
