"""The industry's alpha tests: WorldQuant BRAIN's submission checks, as diagnostics beside the rewards.

Five tests, each a small pure function below with the rule it follows (the sources and how alpha-gym's
book maps onto BRAIN's are in docs/alpha_tests.md):

    fitness        Sharpe * sqrt(|annual return| / max(turnover, 0.125))      pass: >= 1.0
    sub-universe   the formula re-traded on the more liquid half of the stocks  pass: its Sharpe >=
                   0.75 * sqrt(sub size / full size) * the full Sharpe
    self-corr      max |corr| of the daily P&L with the novelty archive's books  pass: < 0.7
    weight         the largest single-stock |weight| on any day (gross 1)        pass: < 10%
    turnover       mean daily turnover                                            pass: 1% < turnover < 70%

They are reported, never rewarded: no channel reads them, so the 14 channels and the scalar reward are
unchanged. The sub-universe test trades the formula a second time, so they are computed only where a
report is written (`alpha-gym score`, the holdout report), not in the training reward.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from alpha_gym.book import metrics
from alpha_gym.market.calendar import TRADING_DAYS

SOURCE = "docs/alpha_tests.md"
TESTS = ("fitness", "sub_universe", "self_correlation", "max_weight", "turnover")


@dataclass(frozen=True)
class AlphaTestRules:
    """The thresholds of BRAIN's submission tests for a delay-1 alpha (docs/alpha_tests.md)."""

    fitness_min: float = 1.0           # "Fitness > 1 for Delay-1"
    fitness_turnover_floor: float = 0.125  # the max(turnover, 0.125) inside fitness
    sub_universe_factor: float = 0.75  # sub Sharpe >= 0.75 * sqrt(sub / full size) * Sharpe
    self_corr_max: float = 0.7         # P&L correlation with one's own alphas below 0.7
    max_weight: float = 0.10           # no stock above 10% of the book
    turnover_min: float = 0.01         # 1% < turnover < 70%
    turnover_max: float = 0.70


RULES = AlphaTestRules()


# ------------------------------------------------------------------------------ the computations
def annual_return(net: np.ndarray, periods: int = TRADING_DAYS) -> float:
    """Mean daily net P&L times 252, on a book of gross 1 (BRAIN's "Returns": annualised P&L over book size).

    Simple, not compounded (a dollar-neutral book's P&L is not reinvested). Reference: empyrical's
    `annual_return` compounds; BRAIN's Returns do not.
    """
    r = np.asarray(net, dtype=np.float64)
    return float(r.mean() * periods) if r.size else 0.0


def fitness(sharpe: float, annual_return: float, turnover: float, turnover_floor: float = 0.125) -> float:
    """BRAIN's fitness: Sharpe * sqrt(|annual return| / max(turnover, floor)). Turnover and returns as fractions.

    Reference: WorldQuant BRAIN, "Clear these tests before submitting an Alpha" (docs/alpha_tests.md).
    """
    return float(sharpe * np.sqrt(abs(annual_return) / max(turnover, turnover_floor)))


def sub_universe_cutoff(full_sharpe: float, n_sub: int, n_full: int, factor: float = 0.75) -> float:
    """The least Sharpe the sub-universe book must reach: factor * sqrt(n_sub / n_full) * full Sharpe."""
    return float(factor * np.sqrt(n_sub / n_full) * full_sharpe)


def liquid_half(dollar_volume: np.ndarray) -> np.ndarray:
    """Column indices (ascending) of the more liquid half of the stocks, by mean dollar volume over the rows.

    n // 2 stocks (at least 1); NaN days are skipped; ties keep the earlier column (a stable sort).
    """
    dv = np.asarray(dollar_volume, dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a column of NaN has no mean: it ranks last
        mean = np.nanmean(dv, axis=0)
    mean = np.where(np.isfinite(mean), mean, -np.inf)
    k = max(1, dv.shape[1] // 2)
    return np.sort(np.argsort(-mean, kind="stable")[:k])


def max_abs_weight(weights: np.ndarray) -> float:
    """The largest |w_{t,i}| over every day and stock (0 for an empty book)."""
    w = np.asarray(weights, dtype=np.float64)
    return float(np.nanmax(np.abs(w))) if w.size else 0.0


def self_correlation(pnl: np.ndarray, archive) -> tuple[float, int | None]:
    """(max |corr| of the daily P&L with the archive's books, the index of that book); (0, None) when empty.

    The same correlation R8 reads (`Archive.max_abs_corrs`), against the archive alone (not the group).
    """
    corrs = archive.abs_corrs(pnl)
    if not corrs.size:
        return 0.0, None
    k = int(np.argmax(corrs))
    return float(corrs[k]), k


# ------------------------------------------------------------------------------ the verdicts
def _row(value, threshold: str, passed, rule: str, **more) -> dict[str, Any]:
    return {"value": None if value is None else float(value), "threshold": threshold,
            "pass": None if passed is None else bool(passed), "rule": rule, "source": SOURCE, **more}


def alpha_tests(sharpe: float, net: np.ndarray, turnover: float, max_weight: float,
                sub_sharpe: float | None = None, n_sub: int = 0, n_full: int = 0,
                self_corr: float | None = None, self_corr_with: str | None = None,
                rules: AlphaTestRules = RULES, note: dict[str, str] | None = None) -> dict[str, Any]:
    """The five tests of one book: {test: {value, threshold, pass, rule, source, ...}, "passed", "failed"}.

    `sub_sharpe` None (no sub-universe book) or `self_corr` None (no archive) leaves that test's pass
    None (not run, `note` says why); "passed" is True when every test that ran passed.
    """
    note = note or {}
    ret = annual_return(net)
    fit = fitness(sharpe, ret, turnover, rules.fitness_turnover_floor)
    out = {"fitness": _row(fit, f">= {rules.fitness_min:g}", fit >= rules.fitness_min,
                           "Sharpe * sqrt(|annual return| / max(turnover, 0.125))",
                           sharpe=float(sharpe), annual_return=ret, turnover=float(turnover))}
    if sub_sharpe is None:
        out["sub_universe"] = _row(None, "n/a", None, "the formula on the more liquid half of the stocks",
                                   note=note.get("sub_universe", "not run"))
    else:
        cut = sub_universe_cutoff(sharpe, n_sub, n_full, rules.sub_universe_factor)
        out["sub_universe"] = _row(sub_sharpe, f">= {cut:+.3f}", sub_sharpe >= cut,
                                   f"Sharpe on the more liquid half >= {rules.sub_universe_factor:g} * "
                                   "sqrt(sub / full size) * full Sharpe", cutoff=cut, n_sub=n_sub, n_full=n_full)
    if self_corr is None:
        out["self_correlation"] = _row(None, "n/a", None, "max |corr| of daily P&L with the archive",
                                       note=note.get("self_correlation", "no archive"))
    else:
        out["self_correlation"] = _row(self_corr, f"< {rules.self_corr_max:g}", self_corr < rules.self_corr_max,
                                       "max |corr| of daily P&L with the archive", most_correlated=self_corr_with)
    out["max_weight"] = _row(max_weight, f"< {rules.max_weight:.0%}", max_weight < rules.max_weight,
                             "largest single-stock |weight| (book gross 1)")
    out["turnover"] = _row(turnover, f"{rules.turnover_min:.0%} .. {rules.turnover_max:.0%}",
                           rules.turnover_min < turnover < rules.turnover_max, "mean daily turnover")
    ran = [out[t]["pass"] for t in TESTS if out[t]["pass"] is not None]
    out["passed"] = all(ran)
    out["failed"] = [t for t in TESTS if out[t]["pass"] is False]
    return out


# ------------------------------------------------------------------------------ on a verifier's window
def score_alpha_tests(verifier, formula: str, rules: AlphaTestRules = RULES) -> dict[str, Any]:
    """The five tests of a formula on a training verifier's panel and costs (its archive for self-correlation).

    Trades the formula twice: on the full panel and on its more liquid half (a verifier on the sub-panel,
    without archive or world model). Raises FormulaError as `Verifier.evaluate` does.
    """
    from alpha_gym.language import parse
    from alpha_gym.scoring.verifier import Verifier
    node = parse(formula, verifier.config.limits)
    book = verifier.book(node)
    net, sharpe = book.net, metrics.sharpe(book.net)
    panel = verifier.panel
    idx = liquid_half(panel.field("dollar_volume"))
    sub_sharpe, note = None, {}
    if len(idx) >= verifier.config.min_valid_stocks:
        sub = Verifier(panel.select([panel.tickers[i] for i in idx]),
                       verifier.config.with_(stress_checkpoint=None, archive_seed=False))
        sub_sharpe = metrics.sharpe(sub.book(node).net)
    else:
        note["sub_universe"] = (f"the liquid half has {len(idx)} stocks, under the book's "
                                f"{verifier.config.min_valid_stocks} (min_valid_stocks)")
    corr, k = self_correlation(net, verifier.archive)
    return alpha_tests(sharpe, net, float(book.turnover.mean()), max_abs_weight(book.weights), sub_sharpe,
                       len(idx), panel.n_stocks, corr, None if k is None else verifier.archive.texts[k], rules, note)


def summary_line(tests: dict[str, Any] | None) -> str:
    """"4/5 (failed: fitness)" style: how many of the tests that ran passed, and which failed."""
    if not tests:
        return "n/a"
    ran = [t for t in TESTS if tests[t]["pass"] is not None]
    passed = sum(bool(tests[t]["pass"]) for t in ran)
    failed = tests.get("failed") or []
    return f"{passed}/{len(ran)}" + (f" (failed: {', '.join(failed)})" if failed else "")


def format_alpha_tests(tests: dict[str, Any]) -> str:
    """The readable block of `alpha-gym score`: one line per test with value, threshold, pass/FAIL
    (or n/a and why it did not run) and the rule."""
    def num(x):
        return "n/a" if x is None else f"{x:+.4f}"
    lines = [f"Alpha tests (WorldQuant BRAIN's submission tests; diagnostics, not rewards; {SOURCE}):"]
    for name in TESTS:
        t = tests[name]
        verdict = {True: "pass", False: "FAIL", None: "n/a"}[t["pass"]]
        extra = t.get("note") if t["pass"] is None else t.get("most_correlated")
        lines.append(f"  {name:<18}{num(t['value']):>9}  {t['threshold']:<16}{verdict:<6}{t['rule']}"
                     + (f"  [{extra}]" if extra else ""))
    lines.append(f"  all that ran: {'pass' if tests['passed'] else 'FAIL'}")
    return "\n".join(lines)
