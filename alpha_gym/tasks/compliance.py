"""Brief compliance: does a formula do what its brief asked?

A generated brief carries machine-checkable constraints next to its text
(`Brief.constraints`). Each constraint is a small frozen dataclass with
`check(node) -> bool` over the parsed formula tree and a `description` in
plain words. Nothing here looks at market data: compliance is a property of
the formula's structure only, so it is cheap and fully deterministic.

    check_compliance(brief, node)  -> {"input": True, "forbidden": False, ...}
    brief_compliance(brief, node)  -> {"checks": {...}, "share": 0.5, "n": 2}

The share is the fraction of constraints met; a brief without constraints
(the fixed briefs) has share 1.0 and n = 0. `brief_compliance` is the
object the verifier puts into its diagnostics as `brief_compliance`.

Constraints serialise to plain dicts (`to_dict`, `constraint_from_dict`) so
briefs saved as JSONL keep their checks even if the generator's vocabulary
changes later.

Extended checks (`extended=True`, issue 39): a generated brief says more than
its constraints check. `extended_constraints(brief)` adds, from what the brief
itself holds (so briefs saved as JSONL get them too):

    horizon band  "roughly N-day windows" checks that some window lies in the
                  band; the band's top is checked too: no window above it
                  (the longest window lies in the band)
    part checks   `EXTRA_CHECKS`, by the vocabulary entry id in `brief.parts`:
                  what a mechanism or structure says beyond "uses volume" or
                  "calls ts_std" (the variability OF volume RELATIVE TO its
                  level; a correlation of a price WITH volume; a smoothing
                  applied to the final signal; a short AND a long ts_std; a
                  decay over moves, not levels; ...)

Risk preferences about turnover, beta and regimes are not structural and stay
unchecked. The default (`extended=False`) keeps the checks, names and shares
every saved result was computed with.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, Iterable, Mapping

from alpha_gym.language.nodes import Field, Node, Num, Op, size, walk
from alpha_gym.language.operators import OPERATORS

#: Every time-series operator (rolling window `d`).
TS_OPS: tuple[str, ...] = tuple(sorted(n for n, s in OPERATORS.items() if s.kind == "ts"))
#: Fields that carry price information (returns are close-to-close price changes).
PRICE_FIELDS: tuple[str, ...] = ("open", "high", "low", "close", "vwap", "returns")
#: Rolling averages and sums: the operators that turn a price into a slow price level.
AVERAGING_OPS: tuple[str, ...] = ("ts_sum", "ts_mean", "ts_decay_linear", "ts_ema")
COMPARISON_OPS: tuple[str, ...] = ("lt", "gt", "le", "ge", "eq", "ne", "and", "or", "where")


def fields_used(node: Node) -> frozenset[str]:
    """The market fields a formula reads. `adv{d}` (mean dollar volume) counts as reading volume."""
    out = set()
    for n in walk(node):
        if isinstance(n, Field):
            out.add(n.name)
        elif isinstance(n, Op) and n.name == "adv":
            out.add("volume")
    return frozenset(out)


def windows(node: Node) -> list[int]:
    """The windows of every time-series operator in the formula, parents first."""
    return [n.window for n in walk(node) if isinstance(n, Op) and n.window is not None]


def _leaf_fields(node: Node) -> set[str]:
    return {n.name for n in walk(node) if isinstance(n, Field)}


def _contains(node: Node, names: Iterable[str], strict: bool = True) -> bool:
    names = set(names)
    it = walk(node)
    if strict:
        next(it)
    return any(isinstance(n, Op) and n.name in names for n in it)


# --------------------------------------------------------------------------- constraints
@dataclass(frozen=True)
class Constraint:
    """Base class. `part` names the brief part the constraint comes from; `description` says it in words."""

    kind: ClassVar[str] = "constraint"
    description: str
    part: str = ""

    def check(self, node: Node) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def name(self) -> str:
        return self.part or self.kind

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, tuple):
                d[k] = list(v)
        return {"kind": self.kind, **d}


@dataclass(frozen=True)
class OpCount(Constraint):
    """The number of nodes calling any of `ops` lies in [lo, hi] (hi None: no upper bound).

    "must use exactly one ts_corr" -> OpCount(ops=("ts_corr",), lo=1, hi=1);
    "do NOT use ts_corr" -> lo=0, hi=0; "use a rolling max or min" -> ops=("ts_max", "ts_min"), lo=1.
    """

    kind: ClassVar[str] = "op_count"
    ops: tuple[str, ...] = ()
    lo: int = 0
    hi: int | None = None

    def check(self, node: Node) -> bool:
        ops = set(self.ops)
        n = sum(1 for x in walk(node) if isinstance(x, Op) and x.name in ops)
        return n >= self.lo and (self.hi is None or n <= self.hi)


@dataclass(frozen=True)
class UsesFields(Constraint):
    """Field use: mode "all" (every field of `fields` appears), "any" (at least one) or "none" (none appears)."""

    kind: ClassVar[str] = "uses_fields"
    fields: tuple[str, ...] = ()
    mode: str = "all"

    def check(self, node: Node) -> bool:
        used = fields_used(node)
        hits = [f in used for f in self.fields]
        if self.mode == "all":
            return all(hits)
        if self.mode == "any":
            return any(hits)
        if self.mode == "none":
            return not any(hits)
        raise ValueError(f"UsesFields.mode must be all, any or none, not {self.mode!r}")


@dataclass(frozen=True)
class DistinctFields(Constraint):
    """At least `min_fields` different market fields appear."""

    kind: ClassVar[str] = "distinct_fields"
    min_fields: int = 2

    def check(self, node: Node) -> bool:
        return len(fields_used(node)) >= self.min_fields


@dataclass(frozen=True)
class WindowInRange(Constraint):
    """At least one time-series window d satisfies lo <= d <= hi ("windows roughly N days")."""

    kind: ClassVar[str] = "window_in_range"
    lo: int = 1
    hi: int = 252

    def check(self, node: Node) -> bool:
        return any(self.lo <= d <= self.hi for d in windows(node))


@dataclass(frozen=True)
class MaxWindow(Constraint):
    """Every time-series window is at most `hi` sessions (true for a formula with no windows)."""

    kind: ClassVar[str] = "max_window"
    hi: int = 252

    def check(self, node: Node) -> bool:
        return all(d <= self.hi for d in windows(node))


@dataclass(frozen=True)
class ForbidOpOnFields(Constraint):
    """No node calling one of `ops` with window >= `min_window` over an argument built only from `fields`.

    "do NOT lean on long-horizon price sums" -> ops = ts_sum/ts_mean/ts_decay_linear/ts_ema,
    fields = the price fields, min_window = 63: `ts_mean(close, 126)` and
    `ts_sum(returns, 63)` break it; `ts_mean(volume / close, 126)` and `ts_mean(close, 21)` do not.
    """

    kind: ClassVar[str] = "forbid_op_on_fields"
    ops: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()
    min_window: int = 1

    def check(self, node: Node) -> bool:
        ops, allowed = set(self.ops), set(self.fields)
        for n in walk(node):
            if isinstance(n, Op) and n.name in ops and (n.window or 0) >= self.min_window:
                leaves = set().union(*(_leaf_fields(a) for a in n.args)) if n.args else set()
                if leaves and leaves <= allowed:
                    return False
        return True


@dataclass(frozen=True)
class Wraps(Constraint):
    """Some node calling one of `outer` has a strict descendant calling one of `inner`.

    With `every_arg=True` each of its arguments must contain such a descendant
    (a ratio of two rolling statistics: outer = ("div",), inner = the time-series operators).
    """

    kind: ClassVar[str] = "wraps"
    outer: tuple[str, ...] = ()
    inner: tuple[str, ...] = ()
    every_arg: bool = False

    def check(self, node: Node) -> bool:
        outer = set(self.outer)
        for n in walk(node):
            if isinstance(n, Op) and n.name in outer and n.args:
                hits = [_contains(a, self.inner, strict=False) for a in n.args]
                if all(hits) if self.every_arg else any(hits):
                    return True
        return False


@dataclass(frozen=True)
class RootOp(Constraint):
    """The outermost operation (after peeling negation and multiplication by a constant) is one of `ops`."""

    kind: ClassVar[str] = "root_op"
    ops: tuple[str, ...] = ("rank",)

    def check(self, node: Node) -> bool:
        n = node
        while isinstance(n, Op):
            if n.name == "neg":
                n = n.args[0]
            elif n.name == "mul" and any(isinstance(a, Num) for a in n.args):
                n = next(a for a in n.args if not isinstance(a, Num))
            else:
                break
        return isinstance(n, Op) and n.name in set(self.ops)


@dataclass(frozen=True)
class WindowContrast(Constraint):
    """Two calls of the same time-series operator whose windows differ by at least `factor` times."""

    kind: ClassVar[str] = "window_contrast"
    factor: float = 2.0

    def check(self, node: Node) -> bool:
        by_op: dict[str, list[int]] = {}
        for n in walk(node):
            if isinstance(n, Op) and n.window is not None:
                by_op.setdefault(n.name, []).append(n.window)
        return any(len(ws) > 1 and max(ws) >= self.factor * min(ws) for ws in by_op.values())


@dataclass(frozen=True)
class WindowSpread(Constraint):
    """Two calls of `ops` whose windows differ by at least `factor` times ("short versus long realised
    volatility" -> ops = ("ts_std",): `ts_std(returns, 5) / ts_std(returns, 63)` meets it, `ts_std(returns, 20) -
    ts_std(returns, 21)` does not)."""

    kind: ClassVar[str] = "window_spread"
    ops: tuple[str, ...] = ()
    factor: float = 2.0

    def check(self, node: Node) -> bool:
        ws = [n.window for n in walk(node) if isinstance(n, Op) and n.name in set(self.ops) and n.window is not None]
        return len(ws) > 1 and max(ws) >= self.factor * min(ws)


@dataclass(frozen=True)
class MaxNodes(Constraint):
    """The formula has at most `max_nodes` expression nodes (fields, constants and operators)."""

    kind: ClassVar[str] = "max_nodes"
    max_nodes: int = 16

    def check(self, node: Node) -> bool:
        return size(node) <= self.max_nodes


@dataclass(frozen=True)
class OpOnFields(Constraint):
    """Some node calling one of `ops` reads, in its arguments, at least one field of every group in `fields`.

    "rolling max or min of a price-volume composite" -> ops = ts_max/ts_min, fields = (("volume",), PRICE_FIELDS):
    `ts_max(close * volume, 20)` meets it, `ts_max(volume, 20)` does not. adv{d} reads volume.
    """

    kind: ClassVar[str] = "op_on_fields"
    ops: tuple[str, ...] = ()
    fields: tuple[tuple[str, ...], ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "fields", tuple(tuple(g) for g in self.fields))  # JSON lists -> tuples

    def check(self, node: Node) -> bool:
        ops = set(self.ops)
        return any(isinstance(n, Op) and n.name in ops and _reads_each(n, self.fields) for n in walk(node))


def _reads_each(node: Node, groups) -> bool:
    used = fields_used(node)
    return all(used & set(g) for g in groups)


def _side(node: Node, ops: tuple[str, ...], fields: tuple[str, ...]) -> bool:
    """`node` reads one of `fields` (ops empty), or holds a call of one of `ops` that reads one of them."""
    if not ops:
        return bool(fields_used(node) & set(fields))
    return any(isinstance(n, Op) and n.name in set(ops) and fields_used(n) & set(fields) for n in walk(node))


@dataclass(frozen=True)
class Compares(Constraint):
    """Some node calling one of `ops` (a difference or ratio by default) sets one side against another:
    one argument reads `a_fields` (through a call of `a_ops` when given), another reads `b_fields` (through
    `b_ops` when given), in either order.

    "abnormal volume relative to its recent average" -> a_fields = volume, b_ops = the rolling averages,
    b_fields = volume: `volume / ts_mean(volume, 20)` meets it, `ts_std(volume, 20)` does not.
    """

    kind: ClassVar[str] = "compares"
    ops: tuple[str, ...] = ("sub", "div")
    a_ops: tuple[str, ...] = ()
    a_fields: tuple[str, ...] = ()
    b_ops: tuple[str, ...] = ()
    b_fields: tuple[str, ...] = ()

    def check(self, node: Node) -> bool:
        ops = set(self.ops)
        for n in walk(node):
            if isinstance(n, Op) and n.name in ops and len(n.args) >= 2:
                a = [_side(x, self.a_ops, self.a_fields) for x in n.args]
                b = [_side(x, self.b_ops, self.b_fields) for x in n.args]
                if any(a[i] and b[j] for i in range(len(n.args)) for j in range(len(n.args)) if i != j):
                    return True
        return False


@dataclass(frozen=True)
class OuterOp(Constraint):
    """The outermost operation, after peeling `peel` operations and multiplication by a constant, is one of
    `ops` ("smooth the final signal" -> ops = ts_decay_linear/ts_ema, peel = rank/scale/neg)."""

    kind: ClassVar[str] = "outer_op"
    ops: tuple[str, ...] = ()
    peel: tuple[str, ...] = ("rank", "scale", "neg")

    def check(self, node: Node) -> bool:
        n, peel, ops = node, set(self.peel) - set(self.ops), set(self.ops)
        while isinstance(n, Op) and n.name not in ops:
            if n.name in peel:
                n = n.args[0]
            elif n.name == "mul" and any(isinstance(a, Num) for a in n.args):
                n = next(a for a in n.args if not isinstance(a, Num))
            else:
                break
        return isinstance(n, Op) and n.name in ops


@dataclass(frozen=True)
class AnyOf(Constraint):
    """At least one of `options` is met ("a price change": uses returns, or a delay/ts_delta of a price)."""

    kind: ClassVar[str] = "any_of"
    options: tuple[Constraint, ...] = ()

    def check(self, node: Node) -> bool:
        return any(c.check(node) for c in self.options)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "description": self.description, "part": self.part,
                "options": [c.to_dict() for c in self.options]}


CONSTRAINT_TYPES: dict[str, type[Constraint]] = {
    c.kind: c for c in (OpCount, UsesFields, DistinctFields, WindowInRange, MaxWindow, ForbidOpOnFields, Wraps,
                        RootOp, WindowContrast, MaxNodes, OpOnFields, Compares, OuterOp, AnyOf, WindowSpread)
}


def constraint_from_dict(d: Mapping[str, Any]) -> Constraint:
    """Rebuild a constraint from `Constraint.to_dict()` output."""
    d = dict(d)
    kind = d.pop("kind", None)
    cls = CONSTRAINT_TYPES.get(kind)
    if cls is None:
        raise ValueError(f"unknown constraint kind {kind!r}; known: {sorted(CONSTRAINT_TYPES)}")
    names = {f.name for f in fields(cls)}
    unknown = set(d) - names
    if unknown:
        raise ValueError(f"constraint {kind!r} has unknown keys {sorted(unknown)}")
    if cls is AnyOf:
        d["options"] = [constraint_from_dict(o) for o in d.get("options", ())]
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


# --------------------------------------------------------------------------- extended checks
#: Dispersion operators (the variability of a series).
DISPERSION_OPS: tuple[str, ...] = ("ts_std", "ts_max", "ts_min", "ts_kurt", "ts_skew")
_PRICE_LEVELS = ("open", "high", "low", "close", "vwap")
_PRICE_CHANGE = AnyOf(description="measures a price change (returns, or a delay, ts_delta or ts_slope of a price)",
                      options=(UsesFields(description="uses returns", fields=("returns",)),
                               OpOnFields(description="a delay, ts_delta or ts_slope of a price",
                                          ops=("delay", "ts_delta", "ts_slope"), fields=(PRICE_FIELDS,))))
_VOLUME_VS_AVERAGE = Compares(description="sets volume against its rolling average", a_fields=("volume",),
                              b_ops=AVERAGING_OPS + ("adv",), b_fields=("volume",))
_PRICE_WITH_VOLUME = Compares(description="correlates a price field with volume", ops=("ts_corr", "ts_cov"),
                              a_fields=PRICE_FIELDS, b_fields=("volume",))

#: What a vocabulary entry (by id, as `Brief.parts` names it) states beyond its own constraints.
EXTRA_CHECKS: dict[str, tuple[Constraint, ...]] = {
    "m_reversal": (_PRICE_CHANGE,),
    "m_momentum": (_PRICE_CHANGE,),
    "m_rel_strength": (_PRICE_CHANGE,),
    "m_reversal_gap": (Compares(description="sets a price against a rolling average of a price",
                                a_fields=PRICE_FIELDS, b_ops=AVERAGING_OPS, b_fields=PRICE_FIELDS),),
    "m_volume_surprise": (_VOLUME_VS_AVERAGE,),
    "m_volume_drought": (_VOLUME_VS_AVERAGE,),
    "m_volume_var": (Compares(description="divides a dispersion of volume by a volume level", ops=("div",),
                              a_ops=DISPERSION_OPS, a_fields=("volume",), b_fields=("volume",)),),
    "m_pv_corr": (_PRICE_WITH_VOLUME,),
    "m_pv_comove": (_PRICE_WITH_VOLUME,),
    "m_extremes": (OpOnFields(description="a rolling max or min over a composite of volume and a price",
                              ops=("ts_max", "ts_min"), fields=(("volume",), PRICE_FIELDS)),),
    "m_low_vol": (OpOnFields(description="a rolling standard deviation of a price field", ops=("ts_std",),
                             fields=(PRICE_FIELDS,)),),
    "m_vol_change": (OpOnFields(description="a rolling standard deviation of a price field", ops=("ts_std",),
                                fields=(PRICE_FIELDS,)),
                     OpCount(description="calls ts_std at least twice (a short and a long one)", ops=("ts_std",),
                             lo=2),
                     WindowSpread(description="a short and a long ts_std: windows at least 2x apart", ops=("ts_std",),
                                  factor=2.0)),
    "m_close_in_range": (Compares(description="sets the close against the high-low range", ops=("div",),
                                  a_fields=("close",), b_ops=("sub",), b_fields=("high", "low")),),
    "m_vwap_gap": (Compares(description="sets the close against the vwap", a_fields=("close",),
                            b_fields=("vwap",)),),
    "m_vwap_trend": (Compares(description="sets a price against the vwap", a_fields=("open", "high", "low", "close"),
                              b_fields=("vwap",)),),
    "m_overnight": (Compares(description="sets the open against the previous close", a_fields=("open",),
                             b_ops=("delay",), b_fields=("close",)),),
    "m_slope": (OpOnFields(description="a ts_slope or ts_delta of a price", ops=("ts_slope", "ts_delta"),
                           fields=(PRICE_FIELDS,)),),
    "m_skew": (OpOnFields(description="the skew or kurtosis of a price field", ops=("ts_skew", "ts_kurt"),
                          fields=(PRICE_FIELDS,)),),
    "m_liquidity": (AnyOf(description="dollar volume: adv, or a price times volume",
                          options=(OpCount(description="calls adv", ops=("adv",), lo=1),
                                   Compares(description="a price times volume", ops=("mul",),
                                            a_fields=_PRICE_LEVELS, b_fields=("volume",)))),),
    "m_range_vol": (Compares(description="sets the high against the low", a_fields=("high",), b_fields=("low",)),),
    "m_extreme_timing": (OpOnFields(description="the timing of a price's rolling extreme",
                                    ops=("ts_argmax", "ts_argmin"), fields=(PRICE_FIELDS,)),),
    "m_pv_divergence": (Compares(description="sets a price move against a volume move",
                                 ops=("sub", "div", "ts_corr", "ts_cov"), a_fields=PRICE_FIELDS,
                                 b_fields=("volume",)),),
    "m_decayed": (AnyOf(description="a decayed average of moves: ts_decay_linear or ts_ema over returns, a delay "
                                    "or a ts_delta",
                        options=(OpOnFields(description="ts_decay_linear or ts_ema of returns",
                                            ops=("ts_decay_linear", "ts_ema"), fields=(("returns",),)),
                                 Wraps(description="ts_decay_linear or ts_ema over a delay or ts_delta",
                                       outer=("ts_decay_linear", "ts_ema"), inner=("delay", "ts_delta")))),),
    "m_intraday": (Compares(description="sets the close against the open", a_fields=("close",),
                            b_fields=("open",)),),
    "st_sign": (OuterOp(description="sign is the outermost operation", ops=("sign",)),),
    "st_smooth": (OuterOp(description="the final signal is smoothed (ts_decay_linear or ts_ema outermost)",
                          ops=("ts_decay_linear", "ts_ema")),),
}


def _with_part(c: Constraint, part: str) -> Constraint:
    return type(c)(**{**{f.name: getattr(c, f.name) for f in fields(c)}, "part": part})


def extended_constraints(brief) -> tuple[Constraint, ...]:
    """The brief's constraints, then the horizon band's top and the `EXTRA_CHECKS` of its parts (module docstring).

    Derived from `brief.constraints` and `brief.parts` only, so a brief loaded from JSONL gets the same checks."""
    own = tuple(getattr(brief, "constraints", ()) or ())
    extra = [MaxWindow(description=f"no window longer than {c.hi} sessions (the top of the horizon band)",
                     hi=c.hi, part="horizon")
             for c in own if c.part == "horizon" and isinstance(c, WindowInRange)]
    for name, part in (getattr(brief, "parts", None) or {}).items():
        extra += [_with_part(c, name) for c in EXTRA_CHECKS.get(part.get("id", ""), ())]
    return own + tuple(extra)


# --------------------------------------------------------------------------- checking
def _as_node(node_or_formula) -> Node:
    if isinstance(node_or_formula, str):
        from alpha_gym.language import parse
        return parse(node_or_formula)
    return node_or_formula


def check_names(constraints: Iterable[Constraint]) -> list[str]:
    """Each constraint's name in a report: its part (or kind), suffixed _2, _3 if repeated."""
    out: list[str] = []
    for c in constraints:
        key, k = c.name, 2
        while key in out:
            key, k = f"{c.name}_{k}", k + 1
        out.append(key)
    return out


def check_constraints(constraints: Iterable[Constraint], node_or_formula) -> dict[str, bool]:
    """name -> met, for each constraint (names: `check_names`)."""
    node = _as_node(node_or_formula)
    constraints = tuple(constraints)
    return {key: bool(c.check(node)) for key, c in zip(check_names(constraints), constraints)}


def check_compliance(brief, node_or_formula, extended: bool = False) -> dict[str, bool]:
    """`brief`: anything with `.constraints` (a `Brief`). Each of the brief's machine-checkable constraints -> met or not, for a parsed formula (or its text).

    extended: also the checks `extended_constraints` adds (their names continue the part's: "horizon_2", ...).
    Raises FormulaError when given text that does not parse.
    """
    constraints = extended_constraints(brief) if extended else getattr(brief, "constraints", ()) or ()
    return check_constraints(constraints, node_or_formula)


def compliance_share(checks: Mapping[str, bool]) -> float:
    """The share of constraints met; 1.0 when there are none."""
    return float(sum(bool(v) for v in checks.values()) / len(checks)) if checks else 1.0


def brief_compliance(brief, node_or_formula, extended: bool = False) -> dict[str, Any]:
    """The verifier's `brief_compliance` diagnostic: {"checks": {name: bool}, "share": float, "n": int}."""
    checks = check_compliance(brief, node_or_formula, extended)
    return {"checks": checks, "share": compliance_share(checks), "n": len(checks)}


def compliance_record(brief, node_or_formula, valid: bool = True) -> dict[str, Any] | None:
    """One answer's compliance as reports show it: {"id", "share", "met_all", "n"} over the extended checks (what R13
    pays). An invalid answer (`valid` False, or no formula) meets nothing: share 0, as R13 pays it. None without a
    brief; a brief with nothing to check has n = 0 and met_all False (nothing was asked that it could meet)."""
    if brief is None:
        return None
    if not valid or node_or_formula is None:
        n = len(extended_constraints(brief))
        return {"id": brief.id, "share": 0.0, "met_all": False, "n": n}
    got = brief_compliance(brief, node_or_formula, extended=True)
    return {"id": brief.id, "share": got["share"] if got["n"] else 0.0,
            "met_all": bool(got["n"]) and all(got["checks"].values()), "n": got["n"]}


def compliance_report(brief, formula, valid: bool = True) -> dict[str, Any] | None:
    """What R13 checked of the brief (`compliance_record`, extended checks) with each check: {"id", "share",
    "met_all", "n", "checks"}; an invalid answer meets nothing (share 0, as R13 pays; no checks). None without one."""
    record = compliance_record(brief, formula, valid)
    if record is None:
        return None
    return {**record, "checks": check_compliance(brief, formula, extended=True) if valid else {}}


def described_checks(brief, formula, valid: bool = True) -> list[dict[str, Any]]:
    """Each extended check of the brief (what R13 pays) in words, for a person: [{"name", "description", "met"}] in
    `check_compliance`'s order and names. An invalid answer (or none) meets none of them."""
    constraints = extended_constraints(brief)
    met = check_constraints(constraints, formula) if valid and formula is not None else {}
    return [{"name": name, "description": c.description, "met": bool(met.get(name, False))}
            for name, c in zip(check_names(constraints), constraints)]


def compliance_summary(records: Iterable[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """Over the answers that had a brief: {"brief_share": mean share, "brief_met_all": how many met every check,
    "n_briefs": how many had a brief}; None when none had one."""
    got = [r for r in records if r is not None]
    if not got:
        return None
    return {"brief_share": float(sum(r["share"] for r in got) / len(got)),
            "brief_met_all": int(sum(bool(r["met_all"]) for r in got)), "n_briefs": len(got)}
