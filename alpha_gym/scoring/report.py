"""A readable text report of a `Score`."""

from __future__ import annotations

from typing import Mapping


def _fmt(x, spec=".3f") -> str:
    return "n/a" if x is None else format(x, spec)


def format_score(score, priorities: Mapping[str, float], alpha_tests: Mapping | None = None) -> str:
    """Channels with priority and weighted contribution, the CPCV slices and the main diagnostics;
    with `alpha_tests` (`evaluation.alpha_tests.score_alpha_tests`), the industry's tests below them."""
    d = score.diagnostics
    lines = [f"formula : {score.formula if score.formula is not None else '(none)'}",
             f"valid   : {'yes' if score.valid else 'NO'}  ({score.reason})",
             f"reward  : {score.reward:+.4f}"]
    if score.valid:
        lines.append("")
        lines.append(f"  {'channel':<18}{'value':>9}{'priority':>10}{'weighted':>10}")
        for name, value in score.channels.items():
            p = priorities.get(name, 0.0)
            state = d.get("channel_state", {}).get(name, "")
            lines.append(f"  {name:<18}{value:>+9.4f}{p:>10.2f}{p * value:>+10.4f}  {state}".rstrip())
    if "cpcv_slices" in d:
        slices = " ".join(f"{s:+.2f}" for s in d["cpcv_slices"])
        lines += ["", f"CPCV slices (annualised net Sharpe, 15 test slices): {slices}"]
        lines.append(f"turnover {d['turnover']:.2%}/day   IC {_fmt(d.get('ic'), '+.4f')}   "
                     f"Sharpe {_fmt(d.get('sharpe'), '+.2f')} net ({_fmt(d.get('sharpe_gross'), '+.2f')} gross)   "
                     f"return {_fmt(d.get('total_return'), '+.1%')}   max DD {_fmt(d.get('max_drawdown'), '.1%')}   "
                     f"beta {_fmt(d.get('beta'), '+.2f')}")
    if alpha_tests:
        lines += ["", format_alpha_tests(alpha_tests)]
    return "\n".join(lines)


def format_alpha_tests(tests: Mapping) -> str:
    """One line per test: value, threshold, pass/FAIL (or why it did not run), and the rule."""
    from alpha_gym.evaluation.alpha_tests import SOURCE, TESTS
    lines = [f"Alpha tests (WorldQuant BRAIN's submission tests; diagnostics, not rewards; {SOURCE}):"]
    for name in TESTS:
        t = tests[name]
        verdict = {True: "pass", False: "FAIL", None: "n/a"}[t["pass"]]
        extra = t.get("note") if t["pass"] is None else t.get("most_correlated")
        lines.append(f"  {name:<18}{_fmt(t['value'], '+.4f'):>9}  {t['threshold']:<16}{verdict:<6}{t['rule']}"
                     + (f"  [{extra}]" if extra else ""))
    lines.append(f"  all that ran: {'pass' if tests['passed'] else 'FAIL'}")
    return "\n".join(lines)
