"""The verifier: a raw model answer -> a validity verdict, reward channels and diagnostics.

    answer --extract--> formula --parse--> tree --evaluate--> values
           --book--> weights, P&L after costs --CPCV, channels--> Score

Deterministic: the same answer, panel and config give bit-identical scores in any process, given the
archive's state and the world model R3 uses, which every score names (`Score.world_model`).
Nothing a model writes can raise out of `score`: every failure becomes an
invalid `Score` with a reason.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from alpha_gym.book import metrics
from alpha_gym.book.answer import InvalidVerdict, answer_to_book
from alpha_gym.book.book import Book, ForwardReturns, build_book, open_to_open_returns
from alpha_gym.book.costs import training_cost
from alpha_gym.jsonable import jsonable
from alpha_gym.language import Node, Op, canonical, lookback, size, to_text
from alpha_gym.language.bounds import NOISE_SHARE, ORDER_SHARE, noise_days, rounding_runs
from alpha_gym.language.evaluate import evaluate
from alpha_gym.market.panel import DataError, Panel
from alpha_gym.scoring import channels, cpcv
from alpha_gym.scoring.archive import Archive, ArchiveError, standardise
from alpha_gym.scoring.book_gain import BookGain, Candidate, Gain
from alpha_gym.scoring.channel_table import GroupMeasures, Measures
from alpha_gym.scoring.config import CHANNELS, VerifierConfig, weighted_sum
from alpha_gym.scoring.factors import factor_returns, residual_sharpe
from alpha_gym.scoring.live_terms import live_tree
from alpha_gym.scoring.price_level import price_level_correlation, price_level_reason
from alpha_gym.scoring.seed_cache import seed_books
from alpha_gym.scoring.seeds import SEED_FORMULAS
from alpha_gym.tasks.compliance import brief_compliance

log = logging.getLogger("alpha_gym")


@dataclass(frozen=True)
class Score:
    """The verdict on one answer.

    valid: the answer is a tradable formula; reason: "ok" or why not; reward:
    the scalar reward, for EVERY answer exactly `weighted_sum(channels, priorities)`
    (an invalid answer's penalty sits in R1, R10's clamp in R10, so a library that
    weights the channels reproduces it); channels: the channel values (R1..R14), before
    priorities; diagnostics: everything else worth reading (slices, turnover, IC, Sharpe...);
    world_model: the world model R3 used (its content hash, or "off"), so a reward names what it depends on.
    """

    valid: bool
    reason: str
    reward: float
    channels: dict[str, float]
    diagnostics: dict[str, Any] = field(default_factory=dict)
    formula: str | None = None
    world_model: str = "off"

    def to_dict(self) -> dict[str, Any]:
        return {"valid": self.valid, "reason": self.reason, "reward": self.reward, "channels": dict(self.channels),
                "diagnostics": jsonable(self.diagnostics), "formula": self.formula, "world_model": self.world_model}


@dataclass(frozen=True, eq=False)
class Evaluated:
    """A formula that parsed and traded: its tree and book, with the statistics channels need."""

    node: Node
    text: str
    form: str               # canonical form of `live` with windows bucketed (R9)
    live: Node              # the formula without its dead terms (`live_terms.live_tree`): R9 and R13 read it
    book: Book
    net: np.ndarray
    test_sharpes: np.ndarray
    train_sharpes: np.ndarray
    cpcv: float
    turnover: float
    ic: float
    sharpe: float
    has_reasoning: bool = False
    noise_share: float = 0.0  # share of the traded days whose cross-section is constant up to rounding (bounds.py)
    price_level: float = 0.0  # mean |daily rank correlation with the close| (the price-level floor)
    recent_turnover: float = float("inf")  # mean daily turnover over the last CPCV block (the recent floor)


@dataclass(frozen=True, eq=False)
class GroupScore:
    """The scores of the answers to one prompt, and the (answers x channels) matrix for GDPO."""

    scores: list[Score]
    channels: tuple[str, ...]
    matrix: np.ndarray      # (G, K) raw channel values, K = len(channels)
    valid: np.ndarray       # (G,) bool
    rewards: np.ndarray     # (G,) scalar rewards
    core: np.ndarray        # (G,) R1 (cpcv) values
    evaluated: list = field(default_factory=list, repr=False)  # Evaluated or None per answer
    guarded: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # (G,) R10 fired

    @property
    def may_win(self) -> np.ndarray:
        """(G,) answers that may get a positive advantage: valid and not caught by the motif guard (R10)."""
        return self.valid & ~self.guarded

    @property
    def meets_brief(self) -> np.ndarray:
        """(G,) valid answers that meet every check of their brief: R13 (the extended checks, read on the live tree)
        is exactly 1. What `TrainConfig.brief_floor` exempts from the advantage floor."""
        return self.valid & (self.matrix[:, list(self.channels).index("brief")] == 1.0)

    @classmethod
    def from_scores(cls, scores: list[Score], channels=CHANNELS, evaluated=None) -> "GroupScore":
        matrix = np.array([[s.channels[c] for c in channels] for s in scores],
                          dtype=np.float64).reshape(-1, len(channels))
        return cls(scores=scores, channels=tuple(channels), matrix=matrix,
                   valid=np.array([s.valid for s in scores], dtype=bool),
                   rewards=np.array([s.reward for s in scores], dtype=np.float64),
                   core=matrix[:, list(channels).index("cpcv")].copy(),
                   evaluated=list(evaluated) if evaluated is not None else [None] * len(scores),
                   guarded=np.array([s.valid and s.channels["motif_guard"] < 0 for s in scores], dtype=bool))


class Verifier:
    """Scores formulas on one panel (the training window: it must not reach the holdout).

    `score_group(answers)` scores the answers to one prompt together, so channels
    that compare answers (stability, duplicates) see each other; `score(answer)` is
    a group of one (`score(a) == score_group([a]).scores[0]`). Both are pure given
    the archive's state: the archive changes only through `update_archive` (which
    the training loop, the TRL adapter and the env call after each step) or `load_archive`.
    """

    def __init__(self, panel: Panel, config: VerifierConfig | None = None, archive: Archive | None = None):
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
        self._forward = ForwardReturns.of(self._returns)  # what every book computes of the returns, once
        self.market = metrics.equal_weight_market(self._returns)
        self._factors: np.ndarray | None = None
        self._archive = archive
        self._book_entries: dict[str, Candidate | None] = {}  # R14: an archive entry's text -> its train-window book
        self._book_rule: tuple[tuple, BookGain] | None = None  # R14: the run's book, for one state of the archive
        if archive is not None and archive.fingerprint != panel.fingerprint():
            raise ArchiveError("the archive was computed on other data than this verifier's panel")
        self.stress = None  # R3 provider; see alpha_gym.stress (off until a fitted world model is configured)
        self._stress_off = "off: no world model configured (contributes 0)"
        if self.config.stress_checkpoint == "auto":  # resolved once: this verifier's config names the model it uses
            from alpha_gym.stress.registry import NOT_FITTED, resolve
            self.config = self.config.with_(stress_checkpoint=resolve("auto", panel))
            if self.config.stress_checkpoint is None:
                self._stress_off = f"off: {NOT_FITTED} (contributes 0)"
        if self.config.stress_checkpoint is not None:
            from alpha_gym.stress.provider import StressProvider  # the world verifiers it builds have no checkpoint
            self.stress = StressProvider.from_checkpoint(self.config.stress_checkpoint, self)

    @property
    def world_model(self) -> str:
        """The identity of the world model R3 uses (`StressProvider.identity`: a content hash), or "off"."""
        return "off" if self.stress is None else self.stress.identity

    # ------------------------------------------------------------ lazy state
    @property
    def factors(self) -> np.ndarray:
        """(days, 5) returns of the five known factors (R4), built once."""
        if self._factors is None:
            self._factors = factor_returns(self.panel, self._returns, self.config.min_valid_stocks)
        return self._factors

    @property
    def archive(self) -> Archive:
        """The novelty archive; seeded with Alpha101-style books on first use (config.archive_seed)."""
        if self._archive is None:
            self._archive = Archive(self.panel.fingerprint(), len(self._returns), self.config.archive_capacity,
                                    self.config.archive_admit_corr)
            if self.config.archive_seed:  # cached on disk by panel, config and code (seed_cache.py)
                for b in seed_books(self, SEED_FORMULAS):
                    self._archive.add(b.form, b.text, b.net, b.cpcv, b.train_sharpes, b.test_sharpes, seed=True)
        return self._archive

    def update_archive(self, group: "GroupScore") -> int:
        """Offer a scored group's valid books whose core score (R1 before its clip) is above
        `config.archive_min_core` to the archive, in canonical order; returns how many joined."""
        offered = sorted((ev for ev, s in zip(group.evaluated, group.scores)
                          if ev is not None and s.valid and ev.cpcv > self.config.archive_min_core),
                         key=lambda ev: (ev.form, ev.text))
        if self.config.priorities["book"]:  # R14 reads the P&L of the entries; the archive keeps them standardised
            for ev in offered:
                self._book_entries.setdefault(ev.text, Candidate.from_evaluated(ev))
        if self.config.self_corr_gate is None:
            return sum(self.archive.add(ev.form, ev.text, ev.net, ev.cpcv, ev.train_sharpes, ev.test_sharpes)
                       for ev in offered)
        # the diversity gate: best CPCV first, so of two near-copies the better one enters and refuses the other
        joined = 0
        for ev in sorted(offered, key=lambda ev: -ev.cpcv):  # stable: ties keep the canonical order
            if self._gate(self.archive.abs_corrs(ev.net), ev.cpcv) is None:
                joined += self.archive.add(ev.form, ev.text, ev.net, ev.cpcv, ev.train_sharpes, ev.test_sharpes)
        return joined

    def _gate(self, abs_corrs: np.ndarray, cpcv: float) -> int | None:
        """The archive entry that refuses a book under the diversity gate (`channels.diversity_gate`), or None."""
        return channels.diversity_gate(abs_corrs, self.archive.cpcv, cpcv, self.config.self_corr_gate,
                                       self.config.self_corr_margin)

    def fork(self) -> "Verifier":
        """A verifier on the same panel and config (sharing its data and factors) with its own copy of the
        archive: runs that must not see each other's answers (the rungs of a comparison) each take one."""
        twin = copy.copy(self)
        twin._archive = self.archive.copy()
        twin._book_entries, twin._book_rule = dict(self._book_entries), None
        return twin

    def save_archive(self, path, merge: bool = False) -> None:
        """Save the archive (see `Archive.save`; merge=True unions a file another process wrote)."""
        self.archive.save(path, merge=merge)

    def load_archive(self, path) -> Archive:
        """Replace the archive with one saved on this panel (raises ArchiveError otherwise)."""
        archive = Archive.load(path, self.panel.fingerprint())
        if archive.n_days != len(self._returns):
            raise ArchiveError(f"{path} holds books of {archive.n_days} days; this panel trades {len(self._returns)}")
        self._archive = archive
        return archive

    # ------------------------------------------------------------ pipeline
    def _cost(self, weights: np.ndarray, turnover: np.ndarray) -> np.ndarray:
        return training_cost(turnover, self.config.costs)

    def book(self, node: Node, cache=None) -> Book:
        """The daily book of a parsed formula on this panel: the book `score` trades (the orders that rounding
        decides held tied, `bounds.rounding_runs`). `cache` is unused: the bounds are computed afresh."""
        signal, error = evaluate(node, self.panel, bound=True)
        return self._tied_book(node, signal, error) or self._book_of(node, signal)

    def _tied_book(self, node: Node, signal: np.ndarray, error) -> Book | None:
        """The book with the orders that rounding decides inside a day held tied, or None where it decides none."""
        ranks = rounding_runs(signal, error, signal if self._ranked(node) else None)
        if ranks is None:
            return None
        return build_book(ranks, self.panel.field("open"), self.panel.dates, self._cost,
                          self.config.min_valid_stocks, returns=self._forward, ranked=True)

    @staticmethod
    def _ranked(node: Node) -> bool:
        return isinstance(node, Op) and node.name == "rank"  # rank(rank(x)) == rank(x)

    def _book_of(self, node: Node, signal: np.ndarray) -> Book:
        return build_book(signal, self.panel.field("open"), self.panel.dates, self._cost,
                          self.config.min_valid_stocks, returns=self._forward, ranked=self._ranked(node))

    def _evaluated(self, node: Node, signal: np.ndarray, error=0.0) -> Evaluated:
        """The book of a formula's values with the statistics the channels need (the verifier's trade rule);
        `error`: the values' rounding-error bound (`alpha_gym.language.bounds`), read for `noise_share`."""
        book = self._book_of(node, signal)
        live = live_tree(node, self.panel, self.config.min_valid_stocks)
        traded = book.traded if book.traded is not None else np.abs(book.weights).sum(axis=1) > 0
        n = len(traded)
        noise = noise_days(signal[:n], error[:n] if isinstance(error, np.ndarray) else error) & traded
        tied = self._tied_book(node, signal, error)
        if tied is not None:  # rounding decides an order inside some days: the book holds those stocks tied,
            # and a day where that moves a material part of the book counts as a rounding day (rule 5)
            noise |= traded & (np.abs(book.weights - tied.weights).sum(axis=1) > ORDER_SHARE)
            book = tied
        noise_share = float(noise.sum() / traded.sum()) if traded.any() else 0.0
        net = book.net
        test, train = cpcv.slice_sharpes(net, self.config.cpcv)
        return Evaluated(node=node, text=to_text(node), form=canonical(live, bucket=self.config.syntax_window_buckets),
                         live=live,
                         book=book.light(), net=net,  # light: a group keeps no (days x stocks) weights
                         test_sharpes=test, train_sharpes=train,
                         cpcv=cpcv.cpcv_score(test, self.config.cpcv.std_penalty),
                         turnover=float(book.turnover.mean()),
                         recent_turnover=cpcv.last_block_mean(book.turnover, self.config.cpcv.n_blocks),
                         ic=book.information_coefficient(),  # = metrics.information_coefficient
                         sharpe=metrics.sharpe(net), noise_share=noise_share,
                         price_level=price_level_correlation(book.weights, book.traded, signal, self.panel))

    def trade(self, answer, cache=None, source: str = "formula", has_reasoning: bool = False
              ) -> Evaluated | InvalidVerdict:
        """An answer or formula through the one answer-to-book path (`alpha_gym.book.answer.answer_to_book`)
        under `config.limits` on this panel: its `Evaluated`, or the `InvalidVerdict` saying why not.
        source: "formula" (bare), "answer" (needs an `<alpha>` block) or "auto". Never raises on bad input."""
        out = answer_to_book(answer, self.config.limits, self.panel, self._evaluated, source=source, cache=cache,
                             has_reasoning=has_reasoning, bound=True)
        if isinstance(out, InvalidVerdict):
            return out
        return replace(out.book, has_reasoning=True) if out.has_reasoning else out.book

    def evaluate(self, formula: str, cache=None, has_reasoning: bool = False) -> Evaluated:
        """Parse and trade a formula. Raises the model's error: FormulaError for bad formulas (any error in
        `alpha_gym.language.errors.MODEL_FAULTS`); `trade` returns it as a verdict instead."""
        out = self.trade(formula, cache, has_reasoning=has_reasoning)
        if isinstance(out, InvalidVerdict):
            out.raise_()
        return out

    # -------------------------------------------------------------- verdicts
    def _invalid(self, reason: str, kind: str, formula: str | None = None, **diagnostics) -> Score:
        """kind: "missing_tag" | "unparseable" | "invalid_book"; the penalty sits in R1 (config.invalid_cpcv)."""
        channels = {name: 0.0 for name in CHANNELS}
        channels["cpcv"] = self.config.invalid_cpcv(kind)
        return Score(valid=False, reason=reason, reward=weighted_sum(channels, self.config.priorities),
                     channels=channels, diagnostics=diagnostics, formula=formula, world_model=self.world_model)

    def _prepare_answer(self, answer: str, cache=None) -> Score | Evaluated:
        """A raw answer through `trade`, then `_verdict`: an invalid Score without an `<alpha>` block."""
        return self._verdict(self.trade(answer, cache, source="answer"))

    def admit(self, formula: str, cache=None, has_reasoning: bool = False) -> Score | Evaluated:
        """A bare formula through `trade`, then every validity rule (`_verdict`: the turnover floor, rounding
        noise, the price-level floor): its `Evaluated` when it would score valid, else the invalid `Score`.
        Pools of valid books (seed books, SFT pairs) read it through `valid_book`, so no rule is left out there."""
        return self._verdict(self.trade(formula, cache, has_reasoning=has_reasoning))

    def valid_book(self, formula: str, cache=None) -> Evaluated | None:
        """A bare formula's `Evaluated` when it would score valid under every rule (`admit`), else None."""
        out = self.admit(formula, cache)
        return None if isinstance(out, Score) else out

    def _verdict(self, out: Evaluated | InvalidVerdict) -> Score | Evaluated:
        """An invalid Score for an invalid verdict or a book under the turnover floor; else the Evaluated."""
        if isinstance(out, InvalidVerdict):
            if out.error == "evaluation":  # defensive: never crash on model input, but say so
                log.warning("evaluation of %r failed: %r", out.formula, out.exception)
            return self._invalid(out.reason, out.kind, formula=out.formula, error=out.error)
        ev = out
        # rule 5 first: a book of rounding noise, held tied, is also static, and rounding is the reason
        if ev.noise_share >= NOISE_SHARE:
            return self._invalid(f"the signal is constant up to rounding, or rounding decides much of its order, on "
                                 f"{ev.noise_share:.0%} of the traded days (at least {NOISE_SHARE:.0%}): the "
                                 "cross-section lies within its rounding-error bound, so the book trades float noise "
                                 "(docs/operators.md, rule 5)",
                                 "invalid_book", formula=ev.text, error="rounding", noise_share=ev.noise_share,
                                 **self._diagnostics(ev))
        if ev.turnover < self.config.min_turnover_invalid:
            return self._invalid(f"turnover {ev.turnover:.2%} a day is below the "
                                 f"{self.config.min_turnover_invalid:.0%} floor (a static or empty book)",
                                 "invalid_book", formula=ev.text, error="turnover",
                                 **self._diagnostics(ev))
        if ev.recent_turnover < self.config.min_recent_turnover:
            return self._invalid(f"turnover {ev.recent_turnover:.2%} a day over the window's last CPCV block (its "
                                 f"last 1/{self.config.cpcv.n_blocks}) is below the "
                                 f"{self.config.min_recent_turnover:.0%} floor: the book has stopped trading "
                                 "(static now, whatever it did before)",
                                 "invalid_book", formula=ev.text, error="recent_turnover",
                                 **self._diagnostics(ev))
        tilt = price_level_reason(ev.price_level, self.config.max_price_level_corr)
        if tilt is not None:
            return self._invalid(tilt, "invalid_book", formula=ev.text, error="price_level", **self._diagnostics(ev))
        return ev

    def score(self, answer: str, brief=None) -> Score:
        """Score a raw model answer (the formula inside `<alpha>...</alpha>`): a group of one.

        With a `brief`, its checkable constraints are reported as `diagnostics["brief_compliance"]`.
        """
        return self.score_group([answer], brief=brief).scores[0]

    def score_formula(self, formula: str, brief=None) -> Score:
        """Score a bare formula (no `<alpha>` block needed): a group of one."""
        return self._score_items([self.admit(formula)], brief).scores[0]

    def score_group(self, answers: list[str], brief=None) -> GroupScore:
        """Score the answers to one prompt together (12 by default in training).

        `brief`: the brief the prompt was rendered from (`alpha_gym.tasks.task.render_prompt`); every channel sees
        it as `Measures.brief`, and its checkable constraints are reported as `diagnostics["brief_compliance"]`.
        No default channel reads it: the reward is the same with and without it.
        Deterministic and independent of the answers' order (up to the same permutation of the result).
        A bare string is refused (TypeError): iterating it would score each character as an answer.
        """
        if isinstance(answers, (str, bytes)):
            raise TypeError("score_group takes a list of answers, not one string: use score(answer) or "
                            "score_group([answer])")
        cache = None  # no cache shared across answers: one answer's arrays are freed before the next
        return self._score_items([self._prepare_answer(a, cache) for a in answers], brief)

    def _score_items(self, items: list, brief=None) -> GroupScore:
        """Channel scores for the prepared items (an Evaluated or an invalid Score each), as one group."""
        live = [i for i, it in enumerate(items) if isinstance(it, Evaluated)]
        scores: list = list(items)
        if live:
            for i, sc in zip(live, self._channel_scores([items[i] for i in live], brief)):
                if brief is not None and getattr(brief, "constraints", ()):
                    sc.diagnostics["brief_compliance"] = brief_compliance(brief, items[i].live)
                scores[i] = sc
        evaluated = [it if isinstance(it, Evaluated) else None for it in items]
        return GroupScore.from_scores(scores, evaluated=evaluated)

    # -------------------------------------------------------------- channels
    def _channel_scores(self, evs: list[Evaluated], brief=None) -> list[Score]:
        """The 14 channels of the tradable answers of one group (invalid ones are already scored): this measures
        each answer once, and the channel table (`channel_table.CHANNEL_TABLE`) turns measures into channels."""
        cfg = self.config
        gains = self._book_gains(evs) if cfg.priorities["book"] else None  # R14: nothing to compute while it is 0
        group = self._measures(evs, brief, gains)
        values, notes = channels.channel_values(group, cfg)
        out = []
        for k, (ev, m, ch, fired) in enumerate(zip(evs, group.answers, values, notes)):
            diag = self._diagnostics(ev)
            state = {"jepa_stress": m.stress_state, **fired}
            if m.gate is not None and m.gate["refused"]:
                state["novelty_pnl"] = (f"duplicate (diversity gate): |corr| {m.gate['corr']:.2f} >= "
                                        f"{cfg.self_corr_gate} with {m.gate['entry']!r} and CPCV "
                                        f"{ev.cpcv:.3f} < {m.gate['needed_cpcv']:.3f}")
            diag.update(cpcv=ev.cpcv, residual_sharpe=m.residual_sharpe, max_pnl_corr=m.max_corr,
                        form_duplicates=m.form_duplicates, channel_state=state, has_reasoning=ev.has_reasoning)
            if m.gate is not None:  # only with the gate on: the default diagnostics do not change
                diag["diversity_gate"] = m.gate
            if gains is not None:  # only with R14 on: the book before and after the answer was offered
                g = gains[k]
                state["book"] = self._book_state(g, ev.cpcv)
                diag["book_gain"] = {"gain": g.gain, "before": g.before, "after": g.after, "admitted": g.admitted,
                                     "members": len(g.members), "left": list(g.left), "joined": list(g.joined)}
            out.append(Score(valid=True, reason="ok", reward=weighted_sum(ch, cfg.priorities), channels=ch,
                             diagnostics=diag, formula=ev.text, world_model=self.world_model))
        return out

    def _measures(self, evs: list[Evaluated], brief=None, gains: list[Gain] | None = None) -> GroupMeasures:
        """What the channels read of a group's tradable answers: each against the archive and the others, the
        brief they answer (`Measures.brief`) and, with R14 on, what each adds to the run's book (`gains`)."""
        archive = self.archive
        # R2: rank stability within the group; with fewer than two tradable answers there is nothing to rank
        # against inside the group, so the answer is ranked among the archive's books instead
        ref_in, ref_out = archive.sharpe_rows() if len(evs) < 2 else (None, None)
        # R8/R9: correlation and form duplicates against the archive and each other
        z = np.array([standardise(ev.net) for ev in evs])
        archive_corr = archive.max_abs_corrs(z)
        group_corr = np.abs(z @ z.T) / z.shape[1]
        np.fill_diagonal(group_corr, 0.0)
        forms = [ev.form for ev in evs]
        # the diversity gate (off by default): |corr| with each archive entry, for the verdict
        gate_corrs = archive.abs_corr_matrix(z) if self.config.self_corr_gate is not None else None
        answers = []
        for k, ev in enumerate(evs):
            stress, stress_state = 0.0, self._stress_off
            if self.stress is not None:
                stress, stress_state = self.stress.channel(ev.text, ev.cpcv)
            answers.append(Measures(
                node=ev.node, live=ev.live, cpcv=ev.cpcv, sharpe=ev.sharpe,
                residual_sharpe=residual_sharpe(ev.net, self.factors),
                turnover=ev.turnover, ic=ev.ic,
                max_corr=max(float(archive_corr[k]), float(group_corr[k].max(initial=0.0))),
                form_duplicates=archive.count_form(ev.form) + forms.count(ev.form) - 1, nodes=size(ev.node),
                has_reasoning=ev.has_reasoning, stress=stress, stress_state=stress_state,
                gate=self._gate_verdict(gate_corrs[:, k], ev.cpcv) if gate_corrs is not None else None, brief=brief,
                book_gain=gains[k].gain if gains is not None else 0.0))
        return GroupMeasures(answers=tuple(answers), train_sharpes=np.array([ev.train_sharpes for ev in evs]),
                             test_sharpes=np.array([ev.test_sharpes for ev in evs]),
                             reference_train_sharpes=ref_in, reference_test_sharpes=ref_out)

    # ------------------------------------------------------------------ R14
    def _book_gains(self, evs: list[Evaluated]) -> list[Gain]:
        """What each answer adds to the run's book (R14; `alpha_gym.scoring.book_gain`), each offered ALONE.

        The candidates are the archive's learned entries as they stand now (the seeds are the known library, not
        the run's book: `trainers/run_book.py` builds the run's book from the same entries), so group-mates do not
        count: a group's answers are scored against the same book and the result does not depend on their order.
        An answer whose CPCV is not above `archive_min_core` would not join the archive, so it cannot join the run's
        book: it adds 0 (R1 already charges a losing answer; R14 does not charge it twice).
        The archive changes only in `update_archive`, after scoring, so deterministic given the archive (and, where
        groups are scored one after another with updates between them, the group order). The book is built once
        per archive state and reused by every group scored against it.
        """
        rule = self._book_of_archive()
        floor = self.config.archive_min_core  # below it an answer never joins the archive, so never the run's book
        unchanged = Gain(gain=0.0, before=rule.before, after=rule.before, admitted=False, members=rule.member_names)
        return [rule.gain(Candidate.from_evaluated(ev)) if ev.cpcv > floor else unchanged for ev in evs]

    def _book_state(self, g: Gain, cpcv: float) -> str:
        """R14's line in the score report: what the answer did to the run's book."""
        book = f"the run's book ({len(g.members) - len(g.joined) + len(g.left)} members, train CPCV {g.before:.3f})"
        if cpcv <= self.config.archive_min_core:
            return f"0: CPCV {cpcv:.3f} <= {self.config.archive_min_core:g}, never joins {book}"
        if not g.admitted:
            return f"0: refused by {book}: a better member's P&L correlates >= 0.5 with it, or it trades < 2% a day"
        swap = f", replacing {', '.join(g.left)}" if g.left else ""
        return f"joins {book}{swap}: CPCV -> {g.after:.3f}"

    def _book_of_archive(self) -> BookGain:
        """The `BookGain` of the archive's learned entries (cached for one archive state). An entry's P&L is the
        book of its formula: kept when `update_archive` offered it, else traded again from its text (an archive
        loaded from a file keeps standardised books only); an entry that no longer trades valid here is left out."""
        archive = self.archive
        learned = [i for i in range(len(archive)) if not archive.seed[i]]
        key = tuple((archive.forms[i], archive.added[i]) for i in learned)
        if self._book_rule is not None and self._book_rule[0] == key:
            return self._book_rule[1]
        for i in learned:
            text = archive.texts[i]
            if text not in self._book_entries:
                out = self.admit(text)
                self._book_entries[text] = None if isinstance(out, Score) else Candidate.from_evaluated(out)
        texts = {archive.texts[i] for i in learned}
        self._book_entries = {t: c for t, c in self._book_entries.items() if t in texts}  # evicted entries go
        rule = BookGain([c for c in (self._book_entries[archive.texts[i]] for i in learned) if c is not None],
                        cpcv_config=self.config.cpcv)
        self._book_rule = (key, rule)
        return rule

    def _gate_verdict(self, abs_corrs: np.ndarray, cpcv: float) -> dict[str, Any]:
        """The diversity gate's verdict on one book, for the diagnostics: refused, and by which entry."""
        j = self._gate(abs_corrs, cpcv)
        if j is None:
            return {"refused": False, "gate": self.config.self_corr_gate, "margin": self.config.self_corr_margin}
        entry_cpcv = self.archive.cpcv[j]
        return {"refused": True, "gate": self.config.self_corr_gate, "margin": self.config.self_corr_margin,
                "entry": self.archive.texts[j], "corr": float(abs_corrs[j]), "entry_cpcv": entry_cpcv,
                "needed_cpcv": entry_cpcv + self.config.self_corr_margin * abs(entry_cpcv)}

    def _diagnostics(self, ev: Evaluated) -> dict[str, Any]:
        beta, corr = metrics.beta_and_correlation(ev.net, self.market)
        return {
            "cpcv_slices": ev.test_sharpes.tolist(),
            "cpcv_in_sample": ev.train_sharpes.tolist(),
            "turnover": ev.turnover,
            "recent_turnover": ev.recent_turnover,
            "price_level": ev.price_level,
            "ic": ev.ic,
            "sharpe": ev.sharpe,
            "sharpe_gross": metrics.sharpe(ev.book.gross),
            "total_return": metrics.total_return(ev.net),
            "max_drawdown": metrics.max_drawdown(ev.net),
            "beta": beta,
            "market_correlation": corr,
            "traded_days": ev.book.traded_days,
            "nodes": size(ev.node),
            "lookback": lookback(ev.node),
            "canonical": canonical(ev.node),
            "canonical_bucketed": ev.form,
            **({"live_formula": to_text(ev.live)} if ev.live != ev.node else {}),  # what R9 and R13 read
        }
