"""Holdout evaluation: formulas scored on a window the training never saw, after realistic costs.

Holdout score of one formula (the exact definition)
----------------------------------------------------
1. History. The formula needs up to 252 past sessions for its lookback. It is
   evaluated on the concatenation of the LAST `context` (default 252) sessions
   of the training panel and the holdout panel; only the training panel's
   tail is read, and the training panel must end strictly before the holdout's
   first session (otherwise `HoldoutOverlapError`).
2. Book. Values -> dollar-neutral weights with gross 1 (`weights_from_signal`,
   flat on days with fewer than 5 valid stocks), decided at the close of day t,
   filled at open(t+1), earning open(t+1) -> open(t+2).
3. Days kept. Only HOLDOUT decision days whose return is realised inside the
   holdout: holdout sessions 0 .. n_h - 3 (n_h - 2 days). The book is taken as
   already running: the first holdout day's turnover is measured against the
   weights of the last training session (a real trade, so a real cost).
4. Costs. `realistic_cost` (square-root impact on a $1M book, fees, half
   spread, capacity penalty, borrow) with trailing liquidity known at the close
   of t: V = mean dollar volume ((h + l + c) / 3 * volume, or the data's vwap)
   over the last `costs.liquidity_window` sessions including t, sigma =
   population std of close-to-close returns over the same sessions.
       net_t = sum_i w_{t,i} r_{t,i} - cost_t
5. CPCV. The holdout net series is cut into 6 contiguous blocks
   (np.linspace edges, as in training); each of the C(6, 2) = 15 pairs of
   blocks is a test slice with annualised Sharpe
       SR_s = mean(net_s) / std(net_s, ddof=1) * sqrt(252)      (0 if std < 1e-12)
       cpcv = mean(SR_1..SR_15) - 0.5 * std(SR_1..SR_15, ddof=0)
6. Score, with turnover = mean daily sum_i |w_{t,i} - w_{t-1,i}| on the kept days:
       score = clip(cpcv - 2 * max(0, turnover - 0.5), -5, 5)

A formula is valid on the holdout when it parses under `config.limits` (the training verifier's, through
`HoldoutConfig.from_verifier`; `alpha_gym.book.answer.answer_to_book` is the path both share), its
lookback fits in the context, its book trades on at least one kept day (and turnover >= `min_turnover`,
0 by default), and, in `evaluate_holdout`, the training window's verdict finds it valid too (one validity
on every window): an answer the training verifier refuses under any of its rules (the 2% turnover floor,
rounding noise, the price-level floor) is invalid here as well, with the training window's reason, and
never scores. `evaluate_holdout` takes that verdict from a `train_verifier`, or from `train_valid` (the
verdicts kept beside the answers); with neither, `summary()["validity"]` says the holdout judged alone.

Equal-weight book of all valid answers: each day, the plain average of the
valid formulas' weight vectors (not re-normalised, so its gross is <= 1 where
formulas disagree), traded and charged as one book with the same realistic
costs; the market is the equal-weight open-to-open return of the same stocks
on the same days.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from alpha_gym.book import metrics
from alpha_gym.book.answer import InvalidVerdict, answer_to_book
from alpha_gym.book.book import daily_turnover, gross_pnl, open_to_open_returns, weights_from_signal
from alpha_gym.book.costs import RealisticCosts, realistic_cost
from alpha_gym.errors import InputError
from alpha_gym.jsonable import finite_or_none, json_dumps, jsonable
from alpha_gym.language import canonical
from alpha_gym.market.panel import BASE_FIELDS, DataError, Panel
from alpha_gym.scoring import cpcv as cpcv_mod
from alpha_gym.scoring.holdout_config import HoldoutConfig

HOLDOUT_FORMAT = "alpha-gym/holdout/v1"

SCORE_DEFINITION = (
    "Holdout daily net P&L (realistic costs, decisions on holdout days only, lookback history from the last "
    "{context} training sessions); 6 blocks, 15 block-pair test slices; cpcv = mean - 0.5 * std(ddof=0) of the "
    "slice Sharpes (annualised, ddof=1); score = clip(cpcv - 2 * max(0, mean turnover - 0.5), -5, 5).")


class HoldoutError(DataError):
    """The holdout window cannot be evaluated as asked."""


class HoldoutOverlapError(HoldoutError):
    """The holdout window overlaps (or precedes) the training window."""


def holdout_formula_score(cpcv: float, turnover: float, config: HoldoutConfig = HoldoutConfig()) -> float:
    """clip(cpcv - penalty * max(0, turnover - cap), -clip, clip)."""
    raw = cpcv - config.turnover_penalty * max(0.0, turnover - config.turnover_cap)
    return float(np.clip(raw, -config.clip, config.clip))


def check_disjoint(train_panel: Panel, holdout_panel: Panel) -> None:
    """Raise HoldoutOverlapError unless every holdout session comes after the last training session."""
    if holdout_panel.n_days == 0 or train_panel.n_days == 0:
        raise HoldoutError("empty panel")
    first, last_train = holdout_panel.dates[0], train_panel.dates[-1]
    if first <= last_train:
        raise HoldoutOverlapError(
            f"the holdout window {first}..{holdout_panel.dates[-1]} overlaps the training window "
            f"{train_panel.dates[0]}..{last_train}: the holdout must start after the last training session "
            f"(cut the training panel with panel.window(end=<day before {first}>))")


def _trailing(x: np.ndarray, window: int, fn) -> np.ndarray:
    """fn over the last `window` rows including today; NaN until the window is full."""
    out = np.full(x.shape, np.nan)
    if x.shape[0] >= window:
        view = np.lib.stride_tricks.sliding_window_view(x, window, axis=0)  # (n - w + 1, N, w)
        out[window - 1:] = fn(view, axis=-1)
    return out


def liquidity_inputs(panel: Panel, window: int) -> tuple[np.ndarray, np.ndarray]:
    """(trailing mean dollar volume, trailing population std of close-to-close returns), known at each close."""
    dv = _trailing(np.asarray(panel.field("dollar_volume")), window, np.mean)
    sigma = _trailing(np.asarray(panel.field("returns")), window, np.std)
    return dv, sigma


# ----------------------------------------------------------------------------------- results
@dataclass(frozen=True, eq=False)
class FormulaHoldout:
    """One formula on the holdout. Arrays (`net`, `weights`) stay in memory; `to_dict` drops them."""

    formula: str
    valid: bool
    reason: str
    score: float | None = None
    cpcv: float | None = None
    slice_sharpes: tuple[float, ...] = ()
    sharpe: float | None = None
    total_return: float | None = None
    turnover: float | None = None
    mean_cost: float | None = None      # mean daily cost, fraction of the book
    max_drawdown: float | None = None
    beta: float | None = None
    market_correlation: float | None = None
    form: str | None = None              # canonical form with windows bucketed (the formula family)
    n_days: int = 0
    train_cpcv: float | None = None      # the same formula on the training window (None if not scored)
    train_turnover: float | None = None
    train_valid: bool | None = None      # the training window's verdict under every rule (None: not known)
    alpha_tests: dict | None = None      # `alpha_tests.alpha_tests` of the holdout book (a diagnostic)
    brief: dict | None = None            # `compliance_record` of its brief's checks (None: scored without a brief)
    net: np.ndarray | None = field(default=None, repr=False)
    weights: np.ndarray | None = field(default=None, repr=False)  # on the context + holdout days

    def to_dict(self) -> dict[str, Any]:
        numbers = ("score", "cpcv", "sharpe", "total_return", "turnover", "mean_cost", "max_drawdown", "beta",
                   "market_correlation")
        return {"formula": self.formula, "valid": self.valid, "reason": self.reason,
                **{k: finite_or_none(getattr(self, k)) for k in numbers[:2]},
                "slice_sharpes": [finite_or_none(s) for s in self.slice_sharpes],
                **{k: finite_or_none(getattr(self, k)) for k in numbers[2:]},
                "form": self.form, "n_days": self.n_days,
                "train_cpcv": finite_or_none(self.train_cpcv), "train_turnover": finite_or_none(self.train_turnover),
                **({} if self.train_valid is None else {"train_valid": self.train_valid}),
                **({} if self.alpha_tests is None else {"alpha_tests": jsonable(self.alpha_tests)}),
                **({} if self.brief is None else {"brief": dict(self.brief)})}


@dataclass(frozen=True)
class BookStats:
    """The equal-weight book of the valid answers over the holdout (all returns after realistic costs)."""

    n_members: int
    total_return: float          # compounded over the holdout window (a 1-year return for a 1-year holdout)
    annual_return: float
    sharpe: float
    beta: float                  # OLS slope on the equal-weight market
    market_correlation: float
    max_drawdown: float
    down_day_return: float | None  # mean daily book return on days the market fell more than 1.5%
    n_down_days: int
    turnover: float
    mean_cost: float
    market_total_return: float

    def to_dict(self) -> dict[str, Any]:
        return {k: (finite_or_none(v) if isinstance(v, float) else v) for k, v in asdict(self).items()}


# ----------------------------------------------------------------------------------- evaluator
class HoldoutEvaluator:
    """Scores formulas on one (train tail + holdout) window; builds the shared arrays once.

    Only `train_panel`'s last `config.context` sessions are read. The training
    verifier is never involved here and never sees `holdout_panel`.
    """

    def __init__(self, train_panel: Panel, holdout_panel: Panel, costs: RealisticCosts = RealisticCosts(),
                 config: HoldoutConfig = HoldoutConfig()):
        if not isinstance(train_panel, Panel) or not isinstance(holdout_panel, Panel):
            raise TypeError("train_panel and holdout_panel must be Panels")
        check_disjoint(train_panel, holdout_panel)
        if train_panel.n_days < config.context:
            raise HoldoutError(f"the training panel has {train_panel.n_days} sessions; the holdout needs the last "
                               f"{config.context} of them as lookback history (config.context)")
        if holdout_panel.tickers != train_panel.tickers:
            missing = sorted(set(train_panel.tickers) - set(holdout_panel.tickers))
            if missing:
                raise HoldoutError(f"{len(missing)} training tickers are not in the holdout panel: {missing[:10]}")
            holdout_panel = holdout_panel.select(train_panel.tickers)
        min_days = config.cpcv.n_blocks * 2 + 2
        if holdout_panel.n_days < min_days:
            raise HoldoutError(f"the holdout has {holdout_panel.n_days} sessions; scoring needs at least {min_days}")
        self.costs, self.config = costs, config
        self.train_end = train_panel.dates[-1]
        self.holdout_dates = holdout_panel.dates
        names = [k for k in train_panel.data if k in holdout_panel.data]
        missing = [f for f in BASE_FIELDS if f not in names]
        if missing:
            raise HoldoutError(f"fields {missing} are missing from one of the panels")
        ctx = config.context
        data = {k: np.concatenate([train_panel.data[k][-ctx:], holdout_panel.data[k]]) for k in names}
        self.panel = Panel(data, np.concatenate([train_panel.dates[-ctx:], holdout_panel.dates]),
                           train_panel.tickers, source=f"{train_panel.source}[-{ctx}:]+holdout",
                           sectors=train_panel.sectors)
        self.n_context = ctx
        self.rows = np.arange(ctx, self.panel.n_days - 2)   # holdout decision days with a realised return
        self.returns_all = open_to_open_returns(self.panel.field("open"))
        self.returns = self.returns_all[self.rows]
        self.dates = self.panel.dates[self.rows]
        self.market = metrics.equal_weight_market(self.returns)
        self._dv, self._sigma = liquidity_inputs(self.panel, costs.liquidity_window)

    @property
    def n_days(self) -> int:
        return len(self.rows)

    def _pnl(self, weights_all: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(net, turnover, cost) on the kept holdout days for weights over all context + holdout days."""
        cost = realistic_cost(weights_all, self._dv, self._sigma, self.costs)[self.rows]
        turnover = daily_turnover(weights_all)[self.rows]
        gross = gross_pnl(weights_all[self.rows], self.returns)
        return gross - cost, turnover, cost

    def _trade(self, node, signal: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The holdout's trade rule: (weights on every context + holdout day, net, turnover, cost on the kept days)."""
        w_all = weights_from_signal(signal, self.config.min_valid_stocks)
        return (w_all, *self._pnl(w_all))

    def score(self, formula: str | None, cache=None) -> FormulaHoldout:
        """The holdout score of one formula (or raw answer holding `<alpha>...</alpha>`). Never raises on bad input."""
        if formula is None or not isinstance(formula, str) or not formula.strip():
            return FormulaHoldout(formula=str(formula or ""), valid=False, reason="no formula")
        out = answer_to_book(formula, self.config.limits, self.panel, self._trade, source="auto", cache=cache,
                             max_lookback=self.n_context)
        if isinstance(out, InvalidVerdict):
            if out.kind == "missing_tag":
                return FormulaHoldout(formula=formula, valid=False, reason=out.reason)
            if out.node is None:
                return FormulaHoldout(formula=out.formula, valid=False, reason=out.reason)
            return FormulaHoldout(formula=out.text, valid=False, form=canonical(out.node, bucket=True),
                                  reason=out.reason)
        text, form = out.text, canonical(out.node, bucket=True)
        w_all, net, turnover, cost = out.book
        traded = int((np.abs(w_all[self.rows]).sum(axis=1) > 0).sum())
        to = float(turnover.mean())
        if traded == 0:
            return FormulaHoldout(formula=text, valid=False, form=form, reason="the book never trades on the holdout")
        if to < self.config.min_turnover:
            return FormulaHoldout(formula=text, valid=False, form=form, turnover=to,
                                  reason=f"turnover {to:.2%} below the {self.config.min_turnover:.0%} floor")
        test, _ = cpcv_mod.slice_sharpes(net, self.config.cpcv)
        cp = cpcv_mod.cpcv_score(test, self.config.cpcv.std_penalty)
        beta, corr = metrics.beta_and_correlation(net, self.market)
        return FormulaHoldout(
            formula=text, valid=True, reason="ok", score=holdout_formula_score(cp, to, self.config), cpcv=cp,
            slice_sharpes=tuple(float(s) for s in test), sharpe=metrics.sharpe(net),
            total_return=metrics.total_return(net), turnover=to, mean_cost=float(cost.mean()),
            max_drawdown=metrics.max_drawdown(net), beta=beta, market_correlation=corr, form=form,
            n_days=self.n_days, net=net, weights=w_all)

    def subset(self, columns: np.ndarray) -> "HoldoutEvaluator":
        """The same window and costs on some of the stocks (the arrays' columns, the market of those stocks)."""
        sub = copy.copy(self)
        cols = np.asarray(columns)
        sub.panel = self.panel.select([self.panel.tickers[i] for i in cols])
        sub.returns_all, sub.returns = self.returns_all[:, cols], self.returns[:, cols]
        sub.market = metrics.equal_weight_market(sub.returns)
        sub._dv, sub._sigma = self._dv[:, cols], self._sigma[:, cols]
        return sub

    def alpha_tests(self, result: FormulaHoldout, archive=None, train_net: np.ndarray | None = None) -> dict | None:
        """The industry's tests of a valid result's holdout book (None for an invalid one).

        Sub-universe: the formula re-scored on the more liquid half by mean dollar volume over the holdout
        days. Self-correlation: the formula's TRAINING-window P&L (`train_net`) against the training
        verifier's `archive`, when both are given (the archive holds training-window books only).
        """
        from alpha_gym.evaluation import alpha_tests as T
        if not result.valid or result.net is None or result.weights is None:
            return None
        idx = T.liquid_half(np.asarray(self.panel.field("dollar_volume"))[self.rows])
        sub_sharpe, note = None, {}
        if len(idx) >= self.config.min_valid_stocks:
            sub = self.subset(idx).score(result.formula)
            sub_sharpe = sub.sharpe if sub.valid else 0.0  # a half that never trades earns nothing
        else:
            note["sub_universe"] = f"the liquid half has {len(idx)} stocks, under min_valid_stocks"
        corr, with_ = None, None
        if archive is not None and train_net is not None:
            corr, k = T.self_correlation(train_net, archive)
            with_ = None if k is None else archive.texts[k]
        else:
            note["self_correlation"] = "no training verifier given: the archive is on the training window"
        return T.alpha_tests(result.sharpe, result.net, result.turnover, T.max_abs_weight(result.weights[self.rows]),
                             sub_sharpe, len(idx), self.panel.n_stocks, corr, with_, note=note)

    def book(self, results: Sequence[FormulaHoldout]) -> tuple[BookStats, np.ndarray]:
        """The equal-weight book of the valid results: (stats, daily net returns on the kept days)."""
        members = [r for r in results if r.valid and r.weights is not None]
        total = np.zeros((self.panel.n_days, self.panel.n_stocks))
        for r in members:
            total += r.weights
        return self.book_from_weights(total / max(1, len(members)), len(members))

    def book_from_weights(self, w: np.ndarray, n_members: int) -> tuple[BookStats, np.ndarray]:
        """Book statistics for weights over all context + holdout days (e.g. the members' average)."""
        net, turnover, cost = self._pnl(w)
        beta, corr = metrics.beta_and_correlation(net, self.market)
        down = self.market < self.config.crash_threshold
        stats = BookStats(
            n_members=n_members, total_return=metrics.total_return(net), annual_return=metrics.annual_return(net),
            sharpe=metrics.sharpe(net), beta=beta, market_correlation=corr, max_drawdown=metrics.max_drawdown(net),
            down_day_return=float(net[down].mean()) if down.any() else None, n_down_days=int(down.sum()),
            turnover=float(turnover.mean()), mean_cost=float(cost.mean()),
            market_total_return=metrics.total_return(self.market))
        return stats, net


#: The start of the holdout's reason for an answer the training window refused (its training reason follows).
TRAIN_REFUSED = "invalid on the training window"
#: `summary()["validity"]`: whose verdict made an answer valid.
VALIDITY_BOTH = "train and holdout"      # the training window's verdict, then the holdout book must trade
VALIDITY_HOLDOUT = "holdout only"        # no training verdict was given: the holdout judged alone


@dataclass(frozen=True, eq=False)
class TrainVerdict:
    """One formula on the training window under every validity rule of the training verifier."""

    valid: bool
    reason: str
    cpcv: float | None = None       # the book's CPCV there (None where it never traded)
    turnover: float | None = None
    net: np.ndarray | None = field(default=None, repr=False)  # a valid book's daily net P&L (self-correlation)


def train_verdict(train_verifier, formula: str) -> TrainVerdict:
    """`Verifier.admit` on the training window: every rule a training score applies (the turnover floor, rounding
    noise, the price-level floor). A refused book keeps its CPCV (from the slice Sharpes its verdict reports) and
    turnover, so the holdout table shows what training measured beside why it refused."""
    from alpha_gym.scoring.verifier import Score
    out = train_verifier.admit(formula)
    if not isinstance(out, Score):
        return TrainVerdict(True, "ok", float(out.cpcv), float(out.turnover), out.net)
    slices, turnover = out.diagnostics.get("cpcv_slices"), out.diagnostics.get("turnover")
    cpcv = (None if slices is None else
            cpcv_mod.cpcv_score(np.asarray(slices, dtype=np.float64), train_verifier.config.cpcv.std_penalty))
    return TrainVerdict(False, out.reason, cpcv, None if turnover is None else float(turnover))


def refused_on_train(result: FormulaHoldout, reason: str) -> FormulaHoldout:
    """A holdout result made invalid by the training window's verdict: no score, its reason the training one."""
    return FormulaHoldout(formula=result.formula, valid=False, reason=f"{TRAIN_REFUSED}: {reason}", form=result.form,
                          train_cpcv=result.train_cpcv, train_turnover=result.train_turnover,
                          train_valid=False, brief=result.brief)


def holdout_score(formula: str, train_panel: Panel, holdout_panel: Panel, costs: RealisticCosts = RealisticCosts(),
                  config: HoldoutConfig = HoldoutConfig()) -> FormulaHoldout:
    """Score one formula on the holdout window (definition: this module's docstring).

    `result.score` is the holdout score (None when the formula is invalid; `result.reason` says why).
    Raises HoldoutOverlapError when the holdout does not start after the training panel's last session.
    """
    return HoldoutEvaluator(train_panel, holdout_panel, costs, config).score(formula)


# ----------------------------------------------------------------------------------- report
@dataclass(frozen=True, eq=False)
class HoldoutReport:
    """Every answer on the holdout, the summary the reference reports, and the equal-weight book.

    `save(run_dir)` writes `holdout.json` (format `alpha-gym/holdout/v1`), which `write_report` reads.
    """

    answers: tuple[FormulaHoldout, ...]
    book: BookStats
    dates: np.ndarray
    book_returns: np.ndarray
    market_returns: np.ndarray
    train_end: str
    holdout_start: str
    holdout_end: str
    costs: RealisticCosts
    config: HoldoutConfig
    label: str = ""
    step: int | None = None
    baselines: tuple[dict, ...] = ()   # `baselines.score_baselines` rows on the same window and costs
    universe: dict | None = None       # what was scored: name, size, tickers_sha256 (holdout-formulas, holdout)
    validity: str = VALIDITY_HOLDOUT   # whose verdicts make an answer valid (VALIDITY_BOTH or VALIDITY_HOLDOUT)

    @property
    def valid(self) -> list[FormulaHoldout]:
        return [a for a in self.answers if a.valid]

    def summary(self) -> dict[str, Any]:
        """mean holdout score (over valid answers) with its bootstrap interval, counts, distinct formula families."""
        from alpha_gym.evaluation.baselines import mean_interval
        valid = self.valid
        scores = [a.score for a in valid]
        interval = mean_interval(scores)
        from alpha_gym.tasks.compliance import compliance_summary
        briefs = compliance_summary(a.brief for a in self.answers)   # only where answers had briefs
        return {"n_answers": len(self.answers), "n_valid": len(valid), "validity": self.validity,
                "n_refused_on_train": sum(a.reason.startswith(TRAIN_REFUSED) for a in self.answers),
                "mean_score": float(np.mean(scores)) if scores else None,
                "mean_score_lo": interval[0] if interval else None,
                "mean_score_hi": interval[1] if interval else None,
                "n_positive": int(sum(s > 0 for s in scores)),
                "n_families": len({a.form for a in valid}),
                "mean_train_cpcv": (float(np.mean([a.train_cpcv for a in valid if a.train_cpcv is not None]))
                                    if any(a.train_cpcv is not None for a in valid) else None),
                **(briefs or {})}

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": HOLDOUT_FORMAT,
            "label": self.label,
            "step": self.step,
            "train_end": self.train_end,
            "holdout_start": self.holdout_start,
            "holdout_end": self.holdout_end,
            "n_days": int(len(self.dates)),
            "definition": SCORE_DEFINITION.format(context=self.config.context),
            "costs": asdict(self.costs),
            "config": {k: (asdict(v) if hasattr(v, "__dataclass_fields__") else v)
                       for k, v in asdict(self.config).items()},
            "summary": self.summary(),
            "book": self.book.to_dict(),
            "series": {"dates": [str(d) for d in self.dates],
                       "book": [finite_or_none(x) for x in self.book_returns],
                       "market": [finite_or_none(x) for x in self.market_returns]},
            "answers": [a.to_dict() for a in self.answers],
            "baselines": list(self.baselines),
            **({"universe": dict(self.universe)} if self.universe is not None else {}),
        }

    def save(self, run_dir, name: str = "holdout.json") -> Path:
        """Write `run_dir/holdout.json` (atomic replace). Returns its path."""
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / name
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json_dumps(self.to_dict(), indent=1), encoding="utf-8")
        tmp.replace(path)
        return path


def load_holdout(path) -> dict[str, Any]:
    """Read a holdout.json (a file or a run directory holding one) and check its format tag."""
    path = Path(path)
    if path.is_dir():
        path = path / "holdout.json"
    d = json.loads(path.read_text(encoding="utf-8"))
    if d.get("format") != HOLDOUT_FORMAT:
        raise InputError(f"{path} is not a {HOLDOUT_FORMAT} file (format={d.get('format')!r})")
    return d


def evaluate_holdout(formulas: Iterable[str | None], train_panel: Panel, holdout_panel: Panel,
                     costs: RealisticCosts = RealisticCosts(), config: HoldoutConfig | None = None,
                     train_verifier=None, label: str = "", step: int | None = None,
                     baselines: bool = False, alpha_tests: bool = True, briefs=None,
                     train_valid: Sequence[bool] | None = None) -> HoldoutReport:
    """Score every formula on the holdout and build the equal-weight book of the valid ones.

    `formulas`: formula texts or raw answers (None for a missing answer: invalid).
    `train_verifier`: optional `Verifier` on the TRAINING panel; when given, each parsed formula's
    training verdict (`train_verdict`: every rule of a training score) decides its validity here too, and
    its train-window CPCV and turnover are recorded beside its holdout numbers. It must end before the
    holdout (HoldoutOverlapError); it only ever evaluates on its own panel. `train_valid`: instead of a
    verifier, the training verdict of each formula as kept beside it (a comparison's rows), one bool each.
    With neither the holdout judges alone (`summary()["validity"]` says so). `config` None: the training
    verifier's rules (`HoldoutConfig.from_verifier`), or the defaults without one. `baselines`: also score the
    model-free baselines of `alpha_gym.evaluation.baselines` on the same window and costs. `alpha_tests`:
    each valid answer's industry tests (`HoldoutEvaluator.alpha_tests`; the sub-universe test scores it again).
    `briefs`: the brief of each formula (a `Brief` or None each, as many as formulas): each answer then carries
    its compliance (`compliance_record`, extended checks; an invalid answer meets none) and the
    summary the share met and how many met every check. Without briefs the report is as before, key for key.
    """
    from alpha_gym.tasks.compliance import compliance_record
    formulas = list(formulas)
    if briefs is not None:
        briefs = list(briefs)
        if len(briefs) != len(formulas):
            raise InputError(f"{len(briefs)} briefs for {len(formulas)} formulas: give one brief (or None) each")
    if train_valid is not None:
        if train_verifier is not None:
            raise InputError("give a train_verifier or the kept train_valid verdicts, not both")
        train_valid = [bool(v) for v in train_valid]
        if len(train_valid) != len(formulas):
            raise InputError(f"{len(train_valid)} train_valid verdicts for {len(formulas)} formulas: give one each")
    if config is None:
        config = HoldoutConfig.from_verifier(train_verifier.config) if train_verifier is not None else HoldoutConfig()
    ev = HoldoutEvaluator(train_panel, holdout_panel, costs, config)
    if train_verifier is not None:
        check_disjoint(train_verifier.panel, holdout_panel)
    cache: dict = {}
    results = []
    total = np.zeros((ev.panel.n_days, ev.panel.n_stocks))
    n_members = 0
    for k, f in enumerate(formulas):
        r = ev.score(f, cache)
        train_net, refused = None, None
        if train_verifier is not None and r.form is not None:   # parsed: its verdict on the training window too
            tr = train_verdict(train_verifier, r.formula)
            r = replace(r, train_cpcv=tr.cpcv, train_turnover=tr.turnover, train_valid=tr.valid)
            train_net, refused = tr.net, (None if tr.valid else tr.reason)
        elif train_valid is not None:
            r = replace(r, train_valid=train_valid[k])
            refused = None if train_valid[k] else "refused by the training verifier (its kept verdict)"
        if r.valid and refused is not None:   # one validity: the training window's refusal holds here too
            r = refused_on_train(r, refused)
        if briefs is not None and briefs[k] is not None:
            r = replace(r, brief=compliance_record(briefs[k], r.formula, r.valid))
        if alpha_tests and r.valid:
            archive = train_verifier.archive if train_verifier is not None else None
            r = replace(r, alpha_tests=ev.alpha_tests(r, archive, train_net))
        if r.valid:
            total += r.weights
            n_members += 1
        results.append(replace(r, weights=None))   # keep memory flat: only the running sum of weights
    stats, book_net = ev.book_from_weights(total / max(1, n_members), n_members)
    rows = ()
    if baselines:
        from alpha_gym.evaluation.baselines import score_baselines
        rows = tuple(score_baselines(ev))
    validity = VALIDITY_BOTH if train_verifier is not None or train_valid is not None else VALIDITY_HOLDOUT
    return HoldoutReport(answers=tuple(results), book=stats, dates=ev.dates, book_returns=book_net,
                         market_returns=ev.market, train_end=str(ev.train_end),
                         holdout_start=str(ev.holdout_dates[0]), holdout_end=str(ev.holdout_dates[-1]),
                         costs=costs, config=config, label=label, step=step, baselines=rows, validity=validity)
