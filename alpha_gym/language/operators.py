"""The operator registry: every operator of the formula language, declared once.

One `OpSpec` per operator names its arguments, its kernel (`ops.py`), its cost in work units
(`cost.py` adds them up), how the printer writes it, its paper aliases, its one-line doc and
its words in the prompt's DSL reference. Everything else is read from this table: the
parser's function names (`resolve`), the evaluator's kernels (`KERNELS`), the cost model,
the printer's symbols and binding strengths, the DSL reference of every brief
(`alpha_gym.tasks.dsl.dsl_reference`) and the table in `docs/operators.md`
(`operator_table_markdown`). Adding an operator is one entry here and its kernel in `ops.py`.

One table serves both spellings: the DSL names (`ts_corr`) and the aliases of
the 101 Formulaic Alphas paper (`correlation`). An alias maps to exactly one
DSL operator, so both spellings build the same node and print the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from alpha_gym.language import bounds, ops

#: Fields a formula may read. `returns` and `vwap` are derived by the panel.
FIELDS = ("open", "high", "low", "close", "volume", "returns", "vwap")
#: Fields only some panels carry; a formula using them fails clearly elsewhere.
OPTIONAL_FIELDS = ("cap",)
#: The paper's `IndClass.<level>` names, the second argument of `IndNeutralize`. The panel
#: carries one sector map (`Panel.sectors`): every level is read as that one map.
INDCLASS_LEVELS = ("sector", "industry", "subindustry")

KINDS = ("elem", "ts", "cs")
#: How an operator is written: `name(args)`, `x + y`, `-x`, `c ? a : b`, or `adv{d}` (the window in the name).
FORMS = ("call", "infix", "prefix", "ternary", "window_name")
#: The binding strength of comparisons: they do not chain, so the printer brackets an equal-strength operand.
COMPARISON = 3


class OperatorSpecError(ValueError):
    """An operator entry that contradicts itself (raised when the table is built, so at import)."""


@dataclass(frozen=True)
class Cost:
    """Work units per cell of one node (`cost.py`): `base + per_window * d` (`d` = 0 without a window).

    `general_exponent`, for powers: `base` is the cost of the constant exponents `ops._pow`
    special-cases (x*x, sqrt, 1/x, ...), this the cost of any other exponent (libm's pow per cell).
    """

    base: float
    per_window: float = 0.0
    general_exponent: float | None = None

    def text(self) -> str:
        """The cost as a reader writes it: `12 + d/40`, `4`, `8 (90 for a general exponent)`."""
        out = f"{self.base:g}"
        if self.per_window:
            inv = 1 / self.per_window
            out += f" + d/{inv:g}" if abs(inv - round(inv)) < 1e-9 else f" + {self.per_window:g}d"
        if self.general_exponent is not None:
            out += f" ({self.general_exponent:g} for a general exponent)"
        return out


@dataclass(frozen=True)
class OpSpec:
    """One operator, declared once.

    name          the DSL name (also the node's `name`)
    kind          `elem` (per cell), `ts` (rolling over the last `d` sessions) or `cs` (across stocks, per day)
    n_series      expression arguments; `ts` operators take a constant window after them
    kernel        its numpy kernel in `ops.py` (None for `adv`, which is `ts_mean` of the panel's dollar volume)
    cost          its work units per cell (`Cost`)
    doc           one line: what it computes
    commutative   its arguments may be reordered (the canonical form sorts them)
    optional_const  a trailing constant argument that may be omitted, and its default (`scale(x, a)`)
    lookback_offset lookback = d + offset: rolling windows use d rows (d - 1 past); `delay`/`ts_delta` d
    form          how it is written (`FORMS`); only `call` operators can be called by name
    symbol        the printed symbol of an `infix` or `prefix` operator
    precedence    its binding strength (higher binds tighter) for `infix`, `prefix` and `ternary`
    aliases       other names of the paper or common use that call it
    bound         how it propagates a rounding-error bound (`bounds.py`): `bound(args, bounds, out, node)` -> the
                  absolute bound of `out`, its exact-arithmetic value lying within it (docs/operators.md, rule 5)
    prompt        its words in the prompt's DSL reference (None: left out, to keep the prompt short)
    """

    name: str
    kind: str
    n_series: int
    kernel: Callable | None
    cost: Cost
    doc: str
    commutative: bool = False
    optional_const: float | None = None
    lookback_offset: int = -1
    form: str = "call"
    symbol: str | None = None
    precedence: int | None = None
    aliases: tuple[str, ...] = ()
    bound: Callable | None = None
    prompt: str | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise OperatorSpecError(f"{self.name}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.form not in FORMS:
            raise OperatorSpecError(f"{self.name}: form must be one of {FORMS}, got {self.form!r}")
        if (self.symbol is not None) != (self.form in ("infix", "prefix")):
            raise OperatorSpecError(f"{self.name}: a symbol is needed by, and only by, infix and prefix forms")
        if (self.precedence is not None) != (self.form in ("infix", "prefix", "ternary")):
            raise OperatorSpecError(f"{self.name}: a precedence is needed by, and only by, infix, prefix and "
                                    "ternary forms")
        if self.kernel is None and self.form != "window_name":
            raise OperatorSpecError(f"{self.name}: every operator but adv{{d}} needs a kernel in ops.py")
        if not self.doc or "\n" in self.doc:
            raise OperatorSpecError(f"{self.name}: doc must be one non-empty line")
        if self.bound is None:
            raise OperatorSpecError(f"{self.name}: every operator declares how it propagates a rounding bound "
                                    "(a function of bounds.py)")

    @property
    def callable(self) -> bool:
        """Whether a formula may call it by name (`name(...)`); symbols and `adv{d}` may not."""
        return self.form == "call"

    def lookback(self, d: int) -> int:
        return d + self.lookback_offset if self.kind == "ts" else 0

    def signature(self) -> str:
        """How a formula writes it: `ts_corr(x, y, d)`, `scale(x, a=1)`, `x + y`, `-x`, `c ? a : b`, `adv{d}`."""
        if self.form == "infix":
            return f"x {self.symbol} y"
        if self.form == "prefix":
            return f"{self.symbol}x"
        if self.form == "ternary":
            return "c ? a : b"
        if self.form == "window_name":
            return f"{self.name}{{d}}"
        args = list(("x", "y", "z")[:self.n_series])
        if self.kind == "ts":
            args.append("d")
        if self.optional_const is not None:
            args.append(f"a={self.optional_const:g}")
        return f"{self.name}({', '.join(args)})"


def _ts(name: str, kernel: Callable | None, cost: Cost, doc: str, n_series: int = 1, offset: int = -1,
        **more) -> OpSpec:
    return OpSpec(name, "ts", n_series, kernel, cost, doc, lookback_offset=offset, **more)


def _elem(name: str, n_series: int, kernel: Callable, cost: float | Cost, doc: str, **more) -> OpSpec:
    return OpSpec(name, "elem", n_series, kernel, cost if isinstance(cost, Cost) else Cost(cost), doc, **more)


def _infix(name: str, symbol: str, precedence: int, kernel: Callable, cost: float, doc: str, **more) -> OpSpec:
    return OpSpec(name, "elem", 2, kernel, Cost(cost), doc, form="infix", symbol=symbol, precedence=precedence,
                  **more)


# Cost units: see cost.py for how they were measured (benchmarks/kernel_costs.py, BENCHMARKS.md). Rolling
# kernels grow mildly with the window (cache effects); ts_rank is O(d).
_SUM = Cost(12.0, 1 / 40)
_ARG = Cost(24.0, 1 / 14)
_SPREAD = Cost(24.0, 1 / 8)
_MOMENT = Cost(45.0, 1 / 8)
_BOOL = 6.0  # comparisons and logic: bool results written back as floats
_PASS = 4.0  # one pass in, one out

#: Every operator, in the order the prompt and the docs list them.
SPECS: tuple[OpSpec, ...] = (
    # cross-sectional
    OpSpec("rank", "cs", 1, ops.rank, Cost(50.0), "rank among the day's stocks, scaled to [0, 1] (ties share)",
           prompt="rank(x) in [0, 1] per day", bound=bounds.rank),
    OpSpec("scale", "cs", 1, ops.scale, Cost(10.0), "x rescaled each day so that sum(abs(x)) = a",
           optional_const=1.0, prompt="scale(x) rescales so sum |x| = 1", bound=bounds.scale),
    # x minus its sector mean per day: needs the panel's sector map (the paper's IndNeutralize)
    OpSpec("ind_neutralize", "cs", 1, ops.ind_neutralize, Cost(10.0),
           "x minus its sector's mean that day (needs Panel.sectors)", aliases=("IndNeutralize", "indneutralize"),
           bound=bounds.ind_neutralize),
    # time series: x, d
    _ts("delay", ops.delay, Cost(3.0, 0.0), "x d sessions ago", offset=0, prompt="delay(x, d)", bound=bounds.delay),
    _ts("ts_delta", ops.ts_delta, Cost(4.0, 0.0), "x today minus x d sessions ago", offset=0, aliases=("delta",),
        prompt="ts_delta(x, d)", bound=bounds.ts_delta),
    _ts("ts_mean", ops.ts_mean, _SUM, "mean of the window", aliases=("sma", "mean"), prompt="ts_mean",
        bound=bounds.ts_mean),
    _ts("ts_std", ops.ts_std, _SPREAD, "population standard deviation of the window (ddof 0)",
        aliases=("stddev",), prompt="ts_std", bound=bounds.ts_std),
    _ts("ts_sum", ops.ts_sum, _SUM, "sum of the window", aliases=("sum",), prompt="ts_sum", bound=bounds.ts_sum),
    _ts("ts_max", ops.ts_max, _SUM, "maximum of the window", prompt="ts_max", bound=bounds.window_extremum),
    _ts("ts_min", ops.ts_min, _SUM, "minimum of the window", prompt="ts_min", bound=bounds.window_extremum),
    _ts("ts_rank", ops.ts_rank, Cost(10.0, 0.8), "today's rank within the window, in [0, 1]",
        aliases=("Ts_Rank",), prompt="ts_rank", bound=bounds.ts_rank),
    _ts("ts_decay_linear", ops.ts_decay_linear, _SPREAD, "linearly weighted mean, today weighs d, the oldest 1",
        aliases=("decay_linear",), prompt="ts_decay_linear", bound=bounds.window_mean),
    _ts("ts_ema", ops.ts_ema, Cost(20.0, 1 / 40), "exponential mean over a finite window, q = 1 - 2/(d+1)",
        prompt="ts_ema", bound=bounds.window_mean),
    _ts("ts_skew", ops.ts_skew, _MOMENT, "population skewness of the window (NaN for d < 3)", prompt="ts_skew",
        bound=bounds.ts_skew),
    _ts("ts_kurt", ops.ts_kurt, _MOMENT, "population excess kurtosis of the window (NaN for d < 4)",
        prompt="ts_kurt", bound=bounds.ts_kurt),
    _ts("ts_slope", ops.ts_slope, _ARG, "OLS slope of the window on the time index", prompt="ts_slope",
        bound=bounds.ts_slope),
    _ts("ts_argmax", ops.ts_argmax, _ARG, "days since the window's maximum (today 0, ties to the oldest)",
        aliases=("Ts_ArgMax",), prompt="ts_argmax", bound=bounds.ts_arg),
    _ts("ts_argmin", ops.ts_argmin, _ARG, "days since the window's minimum (today 0, ties to the oldest)",
        aliases=("Ts_ArgMin",), prompt="ts_argmin", bound=bounds.ts_arg),
    # the bare names before it share its arguments in the prompt
    _ts("ts_product", ops.ts_product, _SUM, "product of the window", aliases=("product",),
        prompt="ts_product (x, d)", bound=bounds.ts_product),
    # time series: x, y, d
    _ts("ts_corr", ops.ts_corr, Cost(45.0, 1 / 3), "Pearson correlation of x and y over the window",
        n_series=2, commutative=True, aliases=("correlation",), prompt="ts_corr(x, y, d)", bound=bounds.ts_corr),
    _ts("ts_cov", ops.ts_cov, Cost(40.0, 1 / 6), "population covariance of x and y over the window (ddof 0)",
        n_series=2, commutative=True, aliases=("covariance",), prompt="ts_cov(x, y, d)", bound=bounds.ts_cov),
    # the paper's adv{d}: mean daily dollar volume over d sessions (no expression argument)
    _ts("adv", None, _SUM, "mean daily dollar volume (vwap * volume) over d sessions", n_series=0,
        form="window_name", bound=bounds.adv),
    # element-wise functions
    _elem("abs", 1, ops.abs_, _PASS, "absolute value", aliases=("Abs",), prompt="abs", bound=bounds.same),
    _elem("log", 1, ops.log, 10.0, "natural logarithm (NaN for x <= 0)", aliases=("Log",), prompt="log",
          bound=bounds.monotone(ops.log)),
    _elem("sign", 1, ops.sign, _BOOL, "-1, 0 or 1", aliases=("Sign",), prompt="sign",
          bound=bounds.monotone(ops.sign, exact=True)),
    _elem("power", 2, ops.power, Cost(8.0, general_exponent=90.0), "x to the power y (also written x ^ y)",
          prompt="power(x, y)", bound=bounds.monotone(ops.power, zero=True)),
    _elem("signed_power", 2, ops.signed_power, Cost(10.0, general_exponent=92.0), "sign(x) * abs(x) ^ y",
          aliases=("SignedPower", "signedpower"), prompt="signed_power(x, y)",
          bound=bounds.monotone(ops.signed_power, zero=True)),
    _elem("min", 2, ops.minimum, _PASS, "element-wise minimum (min(x, d) with an integer d is ts_min)",
          commutative=True, prompt="min(x, y)", bound=bounds.extremum),
    _elem("max", 2, ops.maximum, _PASS, "element-wise maximum (max(x, d) with an integer d is ts_max)",
          commutative=True, prompt="max(x, y)", bound=bounds.extremum),
    # element-wise operators written as symbols
    _infix("add", "+", 4, ops.add, _PASS, "sum (exactly 0 where the operands cancel)", commutative=True,
           prompt="+", bound=bounds.add),
    _infix("sub", "-", 4, ops.sub, _PASS, "difference (exactly 0 where the operands cancel)", prompt="-",
           bound=bounds.sub),
    _infix("mul", "*", 5, ops.mul, _PASS, "product", commutative=True, prompt="*", bound=bounds.mul),
    _infix("div", "/", 5, ops.div, _PASS, "quotient (NaN for y = 0)", prompt="/", bound=bounds.div),
    OpSpec("neg", "elem", 1, ops.neg, Cost(_PASS), "minus x", form="prefix", symbol="-", precedence=6,
           bound=bounds.same),
    _infix("lt", "<", COMPARISON, ops.lt, _BOOL, "1 where x < y, else 0", bound=bounds.compare),
    _infix("gt", ">", COMPARISON, ops.gt, _BOOL, "1 where x > y, else 0", bound=bounds.compare),
    _infix("le", "<=", COMPARISON, ops.le, _BOOL, "1 where x <= y, else 0", bound=bounds.compare),
    _infix("ge", ">=", COMPARISON, ops.ge, _BOOL, "1 where x >= y, else 0", bound=bounds.compare),
    _infix("eq", "==", COMPARISON, ops.eq, _BOOL, "1 where x == y, else 0", commutative=True, bound=bounds.compare),
    _infix("ne", "!=", COMPARISON, ops.ne, _BOOL, "1 where x != y, else 0", commutative=True, bound=bounds.compare),
    _infix("or", "||", 1, ops.logical_or, _BOOL, "1 where x != 0 or y != 0, else 0", commutative=True,
           bound=bounds.logic),
    _infix("and", "&&", 2, ops.logical_and, _BOOL, "1 where x != 0 and y != 0, else 0", commutative=True,
           bound=bounds.logic),
    OpSpec("where", "elem", 3, ops.where, Cost(14.0), "a where c != 0, else b", form="ternary", precedence=0,
           bound=bounds.where),
)


def _by_name(specs: tuple[OpSpec, ...]) -> dict[str, OpSpec]:
    table: dict[str, OpSpec] = {}
    for spec in specs:
        if spec.name in table:
            raise OperatorSpecError(f"operator {spec.name!r} is declared twice")
        table[spec.name] = spec
    return table


def _aliases(specs: tuple[OpSpec, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for spec in specs:
        for alias in spec.aliases:
            if alias in out or alias in OPERATORS or alias in FIELDS:
                raise OperatorSpecError(f"alias {alias!r} of {spec.name} is already a name")
            out[alias] = spec.name
    return out


#: DSL name -> its entry.
OPERATORS: dict[str, OpSpec] = _by_name(SPECS)
#: Names from the 101 Formulaic Alphas paper and common spellings -> DSL operator.
#: `min(x, d)` / `max(x, d)` with an integer literal `d` (the paper's ts_min / ts_max)
#: are resolved by the parser, not here: see `parser._ToNodes.call`.
ALIASES: dict[str, str] = _aliases(SPECS)
#: DSL name -> its kernel (what the evaluator calls; tests may swap one for another implementation).
KERNELS: dict[str, Callable] = {s.name: s.kernel for s in SPECS if s.kernel is not None}
#: The grammar's comparison symbols -> operator.
COMPARE_OPS: dict[str, str] = {s.symbol: s.name for s in SPECS if s.form == "infix" and s.precedence == COMPARISON}


def resolve(name: str) -> OpSpec | None:
    """The operator a called name refers to (DSL name or paper alias), or None."""
    spec = OPERATORS.get(name)
    if spec is None and name in ALIASES:
        spec = OPERATORS[ALIASES[name]]
    # Symbol-only operators (and adv{d}) are not callable by name.
    if spec is not None and not spec.callable:
        return None
    return spec


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def operator_table_markdown() -> str:
    """The operator table of `docs/operators.md`, generated from `SPECS` (a test keeps the file current)."""
    lines = ["| Operator | Kind | Lookback | Cost (units a cell) | Aliases | What it computes |",
             "|---|---|---|---|---|---|"]
    for s in SPECS:
        lookback = "-" if s.kind != "ts" else ("d" if s.lookback_offset == 0 else f"d{s.lookback_offset:+d}")
        aliases = ", ".join(f"`{a}`" for a in s.aliases) or "-"
        lines.append(f"| `{_cell(s.signature())}` | {s.kind} | {lookback} | {s.cost.text()} | {aliases} | "
                     f"{_cell(s.doc)} |")
    return "\n".join(lines) + "\n"


#: The markers around the generated table in `docs/operators.md`.
TABLE_BEGIN = "<!-- operator table: generated by alpha_gym.language.operators (python tests/make_operator_docs.py) -->"
TABLE_END = "<!-- end of the generated operator table -->"


def with_operator_table(doc: str) -> str:
    """`doc` (the text of docs/operators.md) with the part between the markers replaced by the current table."""
    if doc.count(TABLE_BEGIN) != 1 or doc.count(TABLE_END) != 1:
        raise ValueError("the operators page must hold each table marker exactly once")
    head, rest = doc.split(TABLE_BEGIN)
    _, tail = rest.split(TABLE_END)
    return f"{head}{TABLE_BEGIN}\n{operator_table_markdown()}{TABLE_END}{tail}"
