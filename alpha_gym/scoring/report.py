"""A readable text report of a `Score`."""

from __future__ import annotations

from typing import Mapping


def _fmt(x, spec=".3f") -> str:
    return "n/a" if x is None else format(x, spec)


def format_score(score, priorities: Mapping[str, float], compliance: Mapping | None = None) -> str:
    """Channels with priority and weighted contribution, the CPCV slices and the main diagnostics; with
    `compliance` ({"id", "share", "met_all", "n", "checks"}: `alpha_gym.tasks.compliance.compliance_report`), the brief's
    checks."""
    d = score.diagnostics
    lines = [f"formula : {score.formula if score.formula is not None else '(none)'}",
             f"valid   : {'yes' if score.valid else 'NO'}  ({score.reason})",
             f"reward  : {score.reward:+.4f}",
             f"R3 model: {score.world_model}"]
    if compliance is not None:
        n = compliance["n"]
        lines.append(f"brief   : {compliance['id']}  share {compliance['share']:.2f} of {n} checks met, all met: "
                     f"{'yes' if compliance['met_all'] else 'no'}" + ("" if compliance["checks"] or not n
                                                                     else " (an invalid answer meets none)"))
        missed = [k for k, ok in compliance["checks"].items() if not ok]
        if missed:
            lines.append(f"          missed: {', '.join(missed)}")
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
    return "\n".join(lines)
