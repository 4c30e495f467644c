"""The operator table: every name a formula may call, its arguments and its lookback.

One table serves both spellings: the DSL names (`ts_corr`) and the aliases of
the 101 Formulaic Alphas paper (`correlation`). An alias maps to exactly one
DSL operator, so both spellings build the same node and print the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Fields a formula may read. `returns` and `vwap` are derived by the panel.
FIELDS = ("open", "high", "low", "close", "volume", "returns", "vwap")
#: Fields only some panels carry; a formula using them fails clearly elsewhere.
OPTIONAL_FIELDS = ("cap",)
#: The paper's `IndClass.<level>` names, the second argument of `IndNeutralize`. The panel
#: carries one sector map (`Panel.sectors`): every level is read as that one map.
INDCLASS_LEVELS = ("sector", "industry", "subindustry")


@dataclass(frozen=True)
class OpSpec:
    """How one operator is called.

    kind: `elem` (per cell), `ts` (rolling over the last `d` sessions) or `cs`
    (across stocks, per day). `n_series` is the number of expression arguments;
    `ts` operators take a constant window after them. `optional_const` names a
    trailing constant argument that may be omitted (`scale(x, a)`).
    `lookback(d)` is how many past sessions the operator needs beyond today.
    """

    name: str
    kind: str
    n_series: int
    commutative: bool = False
    optional_const: float | None = None
    lookback_offset: int = -1  # lookback = d + offset: rolling windows use d rows (d - 1 past)

    def lookback(self, d: int) -> int:
        return d + self.lookback_offset if self.kind == "ts" else 0


def _ts(name: str, n_series: int = 1, offset: int = -1, commutative: bool = False) -> OpSpec:
    return OpSpec(name, "ts", n_series, commutative=commutative, lookback_offset=offset)


OPERATORS: dict[str, OpSpec] = {spec.name: spec for spec in [
    # cross-sectional
    OpSpec("rank", "cs", 1),
    OpSpec("scale", "cs", 1, optional_const=1.0),
    # x minus its sector mean per day: needs the panel's sector map (the paper's IndNeutralize)
    OpSpec("ind_neutralize", "cs", 1),
    # time series: x, d
    _ts("delay", offset=0),
    _ts("ts_delta", offset=0),
    _ts("ts_mean"), _ts("ts_std"), _ts("ts_sum"), _ts("ts_max"), _ts("ts_min"),
    _ts("ts_rank"), _ts("ts_decay_linear"), _ts("ts_ema"), _ts("ts_skew"), _ts("ts_kurt"),
    _ts("ts_slope"), _ts("ts_argmax"), _ts("ts_argmin"), _ts("ts_product"),
    # time series: x, y, d
    _ts("ts_corr", 2, commutative=True), _ts("ts_cov", 2, commutative=True),
    # the paper's adv{d}: mean daily dollar volume over d sessions (no expression argument)
    _ts("adv", 0),
    # element-wise functions
    OpSpec("abs", "elem", 1), OpSpec("log", "elem", 1), OpSpec("sign", "elem", 1),
    OpSpec("power", "elem", 2), OpSpec("signed_power", "elem", 2),
    OpSpec("min", "elem", 2, commutative=True), OpSpec("max", "elem", 2, commutative=True),
    # element-wise operators written as symbols
    OpSpec("add", "elem", 2, commutative=True), OpSpec("sub", "elem", 2),
    OpSpec("mul", "elem", 2, commutative=True), OpSpec("div", "elem", 2),
    OpSpec("neg", "elem", 1),
    OpSpec("lt", "elem", 2), OpSpec("gt", "elem", 2), OpSpec("le", "elem", 2), OpSpec("ge", "elem", 2),
    OpSpec("eq", "elem", 2, commutative=True), OpSpec("ne", "elem", 2, commutative=True),
    OpSpec("or", "elem", 2, commutative=True), OpSpec("and", "elem", 2, commutative=True),
    OpSpec("where", "elem", 3),
]}

#: Names from the 101 Formulaic Alphas paper and common spellings -> DSL operator.
#: `min(x, d)` / `max(x, d)` with an integer literal `d` (the paper's ts_min / ts_max)
#: are resolved by the parser, not here: see `parser._ToNodes.call`.
ALIASES: dict[str, str] = {
    "correlation": "ts_corr", "covariance": "ts_cov", "stddev": "ts_std", "sum": "ts_sum",
    "product": "ts_product", "delta": "ts_delta", "decay_linear": "ts_decay_linear",
    "Ts_Rank": "ts_rank", "Ts_ArgMax": "ts_argmax", "Ts_ArgMin": "ts_argmin",
    "SignedPower": "signed_power", "signedpower": "signed_power",
    "Log": "log", "Sign": "sign", "Abs": "abs",
    "IndNeutralize": "ind_neutralize", "indneutralize": "ind_neutralize",
    "sma": "ts_mean", "mean": "ts_mean",
}

#: Symbols the printer writes infix, with their binding strength (higher binds tighter).
INFIX = {
    "or": ("||", 1), "and": ("&&", 2),
    "lt": ("<", 3), "gt": (">", 3), "le": ("<=", 3), "ge": (">=", 3), "eq": ("==", 3), "ne": ("!=", 3),
    "add": ("+", 4), "sub": ("-", 4), "mul": ("*", 5), "div": ("/", 5),
}
COMPARE_OPS = {"<": "lt", ">": "gt", "<=": "le", ">=": "ge", "==": "eq", "!=": "ne"}


def resolve(name: str) -> OpSpec | None:
    """The operator a called name refers to (DSL name or paper alias), or None."""
    spec = OPERATORS.get(name)
    if spec is None and name in ALIASES:
        spec = OPERATORS[ALIASES[name]]
    # Symbol-only operators are not callable by name.
    if spec is not None and (spec.name in INFIX or spec.name in ("neg", "where", "adv")):
        return None
    return spec
