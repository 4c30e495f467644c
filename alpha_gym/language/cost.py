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
from alpha_gym.language.operators import OPERATORS

# Each operator's units are declared with it (`operators.SPECS`, field `cost`): element-wise passes about 4,
# comparisons 6, log 10, a three-way select 14; rolling kernels base + d * slope; rank 50.
#: The constant exponents `ops._pow` special-cases (x*x, sqrt, 1/x, ...): a pass or two, not libm's pow
#: per cell (35-80 ns), which a general exponent costs.
FAST_EXPONENTS = frozenset({0.0, 0.5, 1.0, 2.0, 3.0, 4.0, -0.5, -1.0, -2.0})


def node_work(node: Node) -> float:
    """Work units per cell of one node on its own (its arguments not included)."""
    if isinstance(node, (Num, Field)):
        return 0.0  # constants stay scalar; fields are read from the panel, derived ones once per panel
    units = OPERATORS[node.name].cost
    if units.general_exponent is not None:
        exponent = node.args[1]
        fast = isinstance(exponent, Num) and exponent.value in FAST_EXPONENTS
        return units.base if fast else units.general_exponent
    return units.base + units.per_window * (node.window or 0)


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
