"""The verifier: a raw model answer -> a validity verdict, reward channels and diagnostics.

    answer --extract--> formula --parse--> tree --evaluate--> values
           --book--> weights, P&L after costs --CPCV, channels--> Score

Deterministic: the same answer and panel give bit-identical scores in any process.
Nothing a model writes can raise out of `score`: every failure becomes an
invalid `Score` with a reason.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from alpha_gym.book import metrics
from alpha_gym.book.book import Book, build_book, open_to_open_returns
from alpha_gym.book.costs import training_cost
from alpha_gym.language import (AnswerError, FormulaError, Node, canonical, extract, lookback, parse, size,
                                to_text)
from alpha_gym.language.evaluate import evaluate
from alpha_gym.market.panel import DataError, Panel
from alpha_gym.scoring import cpcv
from alpha_gym.scoring.config import CHANNELS, VerifierConfig

log = logging.getLogger("alpha_gym")


@dataclass(frozen=True)
class Score:
    """The verdict on one answer.

    valid: the answer is a tradable formula; reason: "ok" or why not; reward:
    the scalar reward (sum of priority x channel for valid answers, a fixed
    penalty for invalid ones); channels: raw channel values, before priorities;
    diagnostics: everything else worth reading (slices, turnover, IC, Sharpe...).
    """

    valid: bool
    reason: str
    reward: float
    channels: dict[str, float]
    diagnostics: dict[str, Any] = field(default_factory=dict)
    formula: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"valid": self.valid, "reason": self.reason, "reward": self.reward, "channels": dict(self.channels),
                "diagnostics": _jsonable(self.diagnostics), "formula": self.formula}


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


@dataclass(frozen=True, eq=False)
class Evaluated:
    """A formula that parsed and traded: its tree and book, with the statistics channels need."""

    node: Node
    text: str
    book: Book
    test_sharpes: np.ndarray
    train_sharpes: np.ndarray
    cpcv: float
    turnover: float
    ic: float
    sharpe: float


class Verifier:
    """Scores formulas on one panel (the training window: it must not reach the holdout).

    >>> v = Verifier(synthetic_panel())
    >>> v.score("<alpha>rank(-ts_delta(close, 5))</alpha>").reward
    """

    def __init__(self, panel: Panel, config: VerifierConfig | None = None):
        if not isinstance(panel, Panel):
            raise TypeError(f"Verifier needs a Panel, got {type(panel).__name__}")
        self.config = config or VerifierConfig()
        min_days = max(60, self.config.cpcv.n_blocks * 10)
        if panel.n_days < min_days:
            raise DataError(f"the panel has {panel.n_days} sessions; scoring needs at least {min_days}")
        if panel.n_stocks < self.config.min_valid_stocks:
            raise DataError(f"the panel has {panel.n_stocks} stocks; the book needs at least "
                            f"{self.config.min_valid_stocks} (config.min_valid_stocks)")
        self.panel = panel
        self._returns = open_to_open_returns(panel.field("open"))[:-2]
        self._returns.setflags(write=False)
        self.market = metrics.equal_weight_market(self._returns)

    # ------------------------------------------------------------ pipeline
    def _cost(self, weights: np.ndarray, turnover: np.ndarray) -> np.ndarray:
        return training_cost(turnover, self.config.costs)

    def book(self, node: Node) -> Book:
        """The daily book of a parsed formula on this panel."""
        signal = evaluate(node, self.panel)
        return build_book(signal, self.panel.field("open"), self.panel.dates, self._cost,
                          self.config.min_valid_stocks, returns=self._returns)

    def evaluate(self, formula: str) -> Evaluated:
        """Parse and trade a formula. Raises FormulaError for bad formulas."""
        node = parse(formula, self.config.limits)
        book = self.book(node)
        net = book.net
        test, train = cpcv.slice_sharpes(net, self.config.cpcv)
        return Evaluated(node=node, text=to_text(node), book=book, test_sharpes=test, train_sharpes=train,
                         cpcv=cpcv.cpcv_score(test, self.config.cpcv.std_penalty),
                         turnover=float(book.turnover.mean()),
                         ic=metrics.information_coefficient(book.weights, book.returns),
                         sharpe=metrics.sharpe(net))

    # -------------------------------------------------------------- verdicts
    def _invalid(self, reason: str, reward: float, formula: str | None = None, **diagnostics) -> Score:
        channels = {name: 0.0 for name in CHANNELS}
        channels["cpcv"] = reward
        return Score(valid=False, reason=reason, reward=float(reward), channels=channels,
                     diagnostics=diagnostics, formula=formula)

    def score(self, answer: str) -> Score:
        """Score a raw model answer (the formula inside `<alpha>...</alpha>`)."""
        try:
            parsed = extract(answer)
        except AnswerError as err:
            return self._invalid(str(err), self.config.reward_missing_tag, error="answer")
        result = self.score_formula(parsed.formula)
        result.diagnostics["has_reasoning"] = parsed.has_reasoning
        return result

    def score_formula(self, formula: str) -> Score:
        """Score a bare formula."""
        try:
            ev = self.evaluate(formula)
        except FormulaError as err:
            return self._invalid(str(err), self.config.reward_unparseable,
                                 formula=formula if isinstance(formula, str) else None, error=err.kind)
        except (FloatingPointError, MemoryError, ValueError) as err:  # defensive: never crash on model input
            log.warning("evaluation of %r failed: %r", formula, err)
            return self._invalid(f"evaluation failed: {type(err).__name__}: {err}", self.config.reward_unparseable,
                                 formula=formula, error="evaluation")
        return self._verdict(ev)

    def _diagnostics(self, ev: Evaluated) -> dict[str, Any]:
        beta, corr = metrics.beta_and_correlation(ev.book.net, self.market)
        return {
            "cpcv_slices": ev.test_sharpes.tolist(),
            "cpcv_in_sample": ev.train_sharpes.tolist(),
            "turnover": ev.turnover,
            "ic": ev.ic,
            "sharpe": ev.sharpe,
            "sharpe_gross": metrics.sharpe(ev.book.gross),
            "total_return": metrics.total_return(ev.book.net),
            "max_drawdown": metrics.max_drawdown(ev.book.net),
            "beta": beta,
            "market_correlation": corr,
            "traded_days": int((np.abs(ev.book.weights).sum(axis=1) > 0).sum()),
            "nodes": size(ev.node),
            "lookback": lookback(ev.node),
            "canonical": canonical(ev.node),
        }

    def _verdict(self, ev: Evaluated) -> Score:
        diag = self._diagnostics(ev)
        if ev.turnover < self.config.min_turnover_invalid:
            return self._invalid(f"turnover {ev.turnover:.2%} a day is below the {self.config.min_turnover_invalid:.0%}"
                                 " floor (a static or empty book)", self.config.reward_invalid_book,
                                 formula=ev.text, error="turnover", **diag)
        channels = {name: 0.0 for name in CHANNELS}
        channels["cpcv"] = ev.cpcv
        reward = sum(self.config.priorities[k] * v for k, v in channels.items())
        return Score(valid=True, reason="ok", reward=float(reward), channels=channels, diagnostics=diag,
                     formula=ev.text)
