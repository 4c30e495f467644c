"""A readable text report of a `Score`."""

from __future__ import annotations

from typing import Mapping


def _fmt(x, spec=".3f") -> str:
    return "n/a" if x is None else format(x, spec)


#: Columns of the brief's text in the score report (indented under "brief   :").
TEXT_WIDTH = 100
_INDENT = " " * 10


def brief_object(brief, formula: str | None, valid: bool) -> dict | None:
    """The brief as `alpha-gym score --json` and the scoring service return it: `compliance_report`'s
    {"id", "share", "met_all", "n", "checks"} with the brief's "family" and "text" and each check in words
    ("described": `described_checks`, met or missed). None without a brief."""
    from alpha_gym.tasks.compliance import compliance_report, described_checks
    report = compliance_report(brief, formula, valid)
    if report is None:
        return None
    return {**report, "family": brief.family, "text": brief.request,
            "described": described_checks(brief, formula, valid)}


def brief_lines(c: Mapping) -> list[str]:
    """The brief part of the score report: its id and text, then each check in words, met or missed; a brief
    without checks says so. `c`: `brief_object` (a bare `compliance_report` shows the checks by name)."""
    import textwrap
    described = c.get("described") or [{"name": k, "description": "", "met": v} for k, v in c["checks"].items()]
    head = f"brief   : {c['id']}" + (f" ({c['family']})" if c.get("family") else "")
    if not c["n"]:
        lines = [f"{head}: this brief has no checks (nothing it asks is checked by machine)"]
    else:
        met = sum(bool(d["met"]) for d in described)
        lines = [f"{head}: {met} of {c['n']} checks met (share {c['share']:.2f}), all met: "
                 f"{'yes' if c['met_all'] else 'no'}" + ("" if c["checks"] else "; an invalid answer meets none")]
    if c.get("text"):
        lines += textwrap.wrap(c["text"], TEXT_WIDTH, initial_indent=_INDENT, subsequent_indent=_INDENT,
                               break_on_hyphens=False, break_long_words=False)  # words as written
    width = max((len(d["name"]) for d in described), default=0)
    lines += [f"  {'met' if d['met'] else 'missed':<7} {d['name']:<{width}}  {d['description']}".rstrip()
              for d in described]
    return lines


def format_score(score, priorities: Mapping[str, float], compliance: Mapping | None = None) -> str:
    """Channels with priority and weighted contribution, the CPCV slices and the main diagnostics; with
    `compliance` (`brief_object`), the brief's text and each of its checks, met or missed (`brief_lines`)."""
    d = score.diagnostics
    lines = [f"formula : {score.formula if score.formula is not None else '(none)'}",
             f"valid   : {'yes' if score.valid else 'NO'}  ({score.reason})",
             f"reward  : {score.reward:+.4f}",
             f"R3 model: {score.world_model}"]
    if compliance is not None:
        lines += brief_lines(compliance)
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
