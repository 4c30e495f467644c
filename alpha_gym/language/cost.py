"""Parse-time estimate of a formula's evaluation work, so the worst case of a reward is bounded.

The cost is in *work units per cell*: every operator node reads and writes (days x stocks)
arrays, so its time is (cells) x (work per cell), and the work per cell depends only on the
operator and its window. A unit is at least a nanosecond per cell on either development machine
(an AVX-512 box and an AVX2 box, where element-wise passes and rolling kernels take about twice
as long and `rank` half as long), measured with `benchmarks/kernel_costs.py` on 46 and 496 stocks
x 3,304 sessions (figures in BENCHMARKS.md): the limit must bound the worst formula against the
median one on both, and the kernels' relative costs differ between them. Units do not depend on the panel, so a
formula is valid or not whatever the data: the same verdict on us46 and on 496 stocks.

Most kernels are O(1) per cell whatever the window (block decomposition), with a mild growth
in `d`; `ts_rank` compares today with each of the `d - 1` past rows and is O(d) per cell.
Shared subexpressions are evaluated once (the evaluator memoises them), so they count once.
"""

from __future__ import annotations

from functools import lru_cache

from alpha_gym.language.nodes import Field, Node, Num, Op

#: Element-wise operators that cost more than one plain pass (a three-way select, libm calls, bool results).
_HEAVY_ELEM = {"where": 14.0, "log": 10.0, **{name: 6.0 for name in ("lt", "gt", "le", "ge", "eq", "ne", "or", "and",
                                                                    "sign")}}
#: Any other element-wise operator: one pass in, one out.
_ELEM = 4.0
#: A power with a general exponent calls libm's pow per cell (35-80 ns); the constant exponents
#: `ops._pow` special-cases (x*x, sqrt, 1/x, ...) cost a pass or two.
_POW_GENERAL, _POW_FAST = 90.0, 8.0
_FAST_EXPONENTS = frozenset({0.0, 0.5, 1.0, 2.0, 3.0, 4.0, -0.5, -1.0, -2.0})
#: Per-cell work of rolling kernels: base + d * slope (cache effects grow with the window; ts_rank is O(d)).
_ROLLING = {name: (12.0, 1 / 40) for name in ("ts_sum", "ts_mean", "ts_max", "ts_min", "ts_product", "adv")}
_ROLLING.update({"ts_ema": (20.0, 1 / 40)})
_ROLLING.update({name: (24.0, 1 / 14) for name in ("ts_argmax", "ts_argmin", "ts_slope")})
_ROLLING.update({name: (24.0, 1 / 8) for name in ("ts_std", "ts_decay_linear")})
_ROLLING.update({"ts_cov": (40.0, 1 / 6), "ts_corr": (45.0, 1 / 3)})
_ROLLING.update({name: (45.0, 1 / 8) for name in ("ts_skew", "ts_kurt")})
_ROLLING.update({"delay": (3.0, 0.0), "ts_delta": (4.0, 0.0), "ts_rank": (10.0, 0.8)})
_CROSS = {"rank": 50.0, "scale": 10.0, "ind_neutralize": 10.0}


def node_work(node: Node) -> float:
    """Work units per cell of one node on its own (its arguments not included)."""
    if isinstance(node, (Num, Field)):
        return 0.0  # constants stay scalar; fields are read from the panel, derived ones once per panel
    if node.name in _ROLLING:
        base, slope = _ROLLING[node.name]
        return base + slope * (node.window or 0)
    if node.name in _CROSS:
        return _CROSS[node.name]
    if node.name in ("power", "signed_power"):
        exponent = node.args[1]
        fast = isinstance(exponent, Num) and exponent.value in _FAST_EXPONENTS
        return (_POW_FAST if fast else _POW_GENERAL) + (2.0 if node.name == "signed_power" else 0.0)
    return _HEAVY_ELEM.get(node.name, _ELEM)


@lru_cache(maxsize=65536)
def cost(node: Node) -> float:
    """Work units per cell of the whole formula: the sum over its distinct subexpressions."""
    seen: set = set()
    total = 0.0
    stack = [node]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        total += node_work(n)
        if isinstance(n, Op):
            stack.extend(n.args)
    return total
