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
class MaxNodes(Constraint):
    """The formula has at most `max_nodes` expression nodes (fields, constants and operators)."""

    kind: ClassVar[str] = "max_nodes"
    max_nodes: int = 16

    def check(self, node: Node) -> bool:
        return size(node) <= self.max_nodes


CONSTRAINT_TYPES: dict[str, type[Constraint]] = {
    c.kind: c for c in (OpCount, UsesFields, DistinctFields, WindowInRange, MaxWindow, ForbidOpOnFields, Wraps,
                        RootOp, WindowContrast, MaxNodes)
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
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


# --------------------------------------------------------------------------- checking
def _as_node(node_or_formula) -> Node:
    if isinstance(node_or_formula, str):
        from alpha_gym.language import parse
        return parse(node_or_formula)
    return node_or_formula


def check_constraints(constraints: Iterable[Constraint], node_or_formula) -> dict[str, bool]:
    """name -> met, for each constraint. Names are the constraint's part (or kind), suffixed _2, _3 if repeated."""
    node = _as_node(node_or_formula)
    out: dict[str, bool] = {}
    for c in constraints:
        key, k = c.name, 2
        while key in out:
            key, k = f"{c.name}_{k}", k + 1
        out[key] = bool(c.check(node))
    return out


def check_compliance(brief, node_or_formula) -> dict[str, bool]:
    """`brief`: anything with `.constraints` (a `Brief`). Each of the brief's machine-checkable constraints -> met or not, for a parsed formula (or its text).

    Raises FormulaError when given text that does not parse.
    """
    return check_constraints(getattr(brief, "constraints", ()) or (), node_or_formula)


def compliance_share(checks: Mapping[str, bool]) -> float:
    """The share of constraints met; 1.0 when there are none."""
    return float(sum(bool(v) for v in checks.values()) / len(checks)) if checks else 1.0


def brief_compliance(brief, node_or_formula) -> dict[str, Any]:
    """The verifier's `brief_compliance` diagnostic: {"checks": {name: bool}, "share": float, "n": int}."""
    checks = check_compliance(brief, node_or_formula)
    return {"checks": checks, "share": compliance_share(checks), "n": len(checks)}
