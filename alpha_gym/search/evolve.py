"""A model-free evolutionary search over formula trees, driven by the verifier's reward and archive.

The genetic-programming control of the trainer comparison: what the same number of verifier calls buys
with no model at all. A (mu + lambda) search:

    seeds       the step-0 answers (the start model's greedy probe answers), then the Alpha101 set
                (`alpha_gym.alpha101.formulas()`, the 82 that need no sector labels or market cap), each parsed
                under the verifier's Limits; the ones that do not parse, and exact duplicates, are dropped
                without a call. At most `seed_share` of the budget is spent scoring seeds (step-0 answers first).
    population  the best `population` formulas scored so far (mu, by reward; truncation survival), seeded
                with the best seeds
    generation  `groups_per_generation` x `group_size` children (lambda), scored as that many groups of
                `group_size`, the verifier's archive updated after each group: exactly how a training step
                scores its `prompts_per_step` groups of `num_generations` answers, so the novelty channels
                and the archive behave as in training. A rung-sized search therefore runs `steps` generations
                after its seeds (fewer: the seeds are paid from the same budget)
    parents     tournament selection of size `tournament` from the population
    children    subtree crossover (`crossover_rate`), else one point mutation: an operator, a field, a
                window or constant, or (`subtree_rate`) a whole subtree (`alpha_gym.search.tree`)
    budget      every answer the verifier scores counts: seeds and children, valid or not. A child whose
                printed text does not parse under the Limits, or whose canonical form was already scored (an
                exact duplicate: it would score the same up to the archive's novelty), is redrawn before it
                is submitted, so it spends no call (`SearchResult.redrawn` counts them). The search never
                makes more than `budget` calls.

Deterministic for a seed (one `numpy.random.Generator`), given the verifier's state. Nothing a seed formula
says is executed: formulas are parsed into trees, trees are varied and printed, and only the verifier
evaluates them, through its own parser.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np

from alpha_gym.errors import InputError
from alpha_gym.ranges import SettingError, check_fields, closed, ints
from alpha_gym.language import FormulaError, Node, canonical, parse, to_text
from alpha_gym.language.sample import random_node
from alpha_gym.search.tree import MUTATIONS, checked, crossover


class SearchError(InputError):
    """Bad settings for a search (a negative budget, an empty population, a share outside [0, 1])."""


class SearchSettingError(SettingError, SearchError):
    """A SearchConfig field out of its declared range (`SEARCH_RANGES`, checked as the verifier's settings are)."""


#: The allowed range of every numeric field of SearchConfig (`alpha_gym.ranges`); counts are loose but finite.
SEARCH_RANGES = {
    "population": ints(1, 10**6), "group_size": ints(1, 10**6), "groups_per_generation": ints(1, 10**6),
    "tournament": ints(1, 10**6), "max_tries": ints(1, 10**6),
    "crossover_rate": closed(0.0, 1.0), "subtree_rate": closed(0.0, 1.0), "seed_share": closed(0.0, 1.0),
}


@dataclass(frozen=True)
class SearchConfig:
    """The search's sizes and rates (see the module docstring for what each does)."""

    population: int = 32            # mu: formulas kept after each generation
    group_size: int = 8             # answers scored together (a rung: num_generations)
    groups_per_generation: int = 2  # lambda = groups_per_generation x group_size (a rung: prompts_per_step)
    tournament: int = 3
    crossover_rate: float = 0.3
    subtree_rate: float = 0.1       # share of mutations that replace a whole subtree
    seed_share: float = 0.5         # most of the budget the seeds may spend
    alpha101: bool = True           # seed with the Alpha101 set (after the given formulas)
    max_tries: int = 50             # draws for one new, parseable child before a random tree is taken

    def __post_init__(self):
        try:
            check_fields(self, SEARCH_RANGES)
        except SettingError as err:  # a SearchError too, as every bad search setting was
            raise SearchSettingError(err.owner, err.key, err.value, err.allowed) from None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Candidate:
    """One scored formula: its text, when and how it was made, and its verdict when scored."""

    text: str
    node: Node = field(repr=False, compare=False)
    generation: int                 # 0: a seed
    origin: str                     # step0 alpha101 crossover operator field number subtree random
    valid: bool
    reward: float
    cpcv: float | None              # the R1 channel (train-window CPCV, clipped) when valid
    reason: str

    def to_dict(self) -> dict:
        return {"text": self.text, "generation": self.generation, "origin": self.origin, "valid": self.valid,
                "reward": self.reward, "cpcv": self.cpcv, "reason": self.reason}


@dataclass
class SearchResult:
    """Every scored formula in scoring order, the final population (best first), and the run's counts."""

    candidates: list[Candidate]
    population: list[Candidate]
    calls: int
    budget: int
    generations: int
    redrawn: int
    history: list[dict]             # per generation (0: the seeds): calls so far, best and mean population reward

    @property
    def seeds(self) -> list[Candidate]:
        return [c for c in self.candidates if c.generation == 0]


def rung_budget(steps: int, prompts_per_step: int, num_generations: int) -> int:
    """The verifier calls of a rung's training: steps x prompts_per_step x num_generations."""
    for name, v in (("steps", steps), ("prompts_per_step", prompts_per_step), ("num_generations", num_generations)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise SearchError(f"{name} must be a positive integer, got {v!r}")
    return steps * prompts_per_step * num_generations


def _rank_key(c: Candidate):
    return (-c.reward, c.text)  # best reward first; the text breaks ties, so the order never depends on input order


def _seed_nodes(formulas: Sequence[str | None], limits, alpha101: bool) -> list[tuple[str, Node, str]]:
    """(canonical form, tree, origin) of each distinct seed that parses under `limits`, step-0 answers first."""
    items = [(f, "step0") for f in formulas if isinstance(f, str)]
    if alpha101:
        from alpha_gym.alpha101 import formulas as paper
        items += [(f, "alpha101") for f in paper(industry_free=True).values()]
    out, seen = [], set()
    for text, origin in items:
        try:
            node = parse(text, limits)
        except (FormulaError, RecursionError):
            continue
        form = canonical(node)
        if form not in seen:
            seen.add(form)
            out.append((form, node, origin))
    return out


class _Scorer:
    """Scores formulas as training groups, counts calls, and updates the verifier's archive after each group.

    A generation's answers are prepared together on the scoring pool (`alpha_gym.pool.score_groups`: `workers`
    processes, None for the process default), then scored group by group with the archive updated between
    groups: the serial loop's scores, bit for bit, on every core.
    """

    def __init__(self, verifier, group_size: int, workers: int | None = None):
        self.verifier, self.group_size, self.workers, self.calls = verifier, group_size, workers, 0

    def score(self, batch: list[tuple[str, Node, str]], generation: int) -> list[Candidate]:
        from alpha_gym.pool import score_groups
        chunks = [batch[start:start + self.group_size] for start in range(0, len(batch), self.group_size)]
        groups = score_groups(self.verifier, [[f"<alpha>{text}</alpha>" for text, _, _ in c] for c in chunks],
                              workers=self.workers)
        out = []
        for chunk, group in zip(chunks, groups):
            self.calls += len(chunk)
            for (text, node, origin), s in zip(chunk, group.scores):
                out.append(Candidate(text, node, generation, origin, bool(s.valid), float(s.reward),
                                     float(s.channels["cpcv"]) if s.valid else None, s.reason))
        return out


def _child(population: list[Candidate], rng: np.random.Generator, config: SearchConfig, limits,
           seen: set) -> tuple[tuple[str, Node, str], int]:
    """A new, parseable child not scored before, and how many draws were redrawn to find it."""
    def parent() -> Candidate:  # the population is sorted best first: the lowest index drawn wins
        return population[int(rng.integers(len(population), size=config.tournament).min())]

    kinds = ["operator", "field", "number"]
    for tries in range(config.max_tries):
        if not population:
            origin, node = "random", random_node(rng, 4)
        elif len(population) >= 2 and rng.random() < config.crossover_rate:
            origin, node = "crossover", crossover(parent().node, parent().node, rng)
        else:
            origin = "subtree" if rng.random() < config.subtree_rate else kinds[int(rng.integers(len(kinds)))]
            node = MUTATIONS[origin](parent().node, rng)
        ok = checked(node, limits) if node is not None else None
        if ok is not None and canonical(ok[1]) not in seen:
            return (ok[0], ok[1], origin), tries
    for tries in range(config.max_tries, 100 * config.max_tries):  # stuck (a tiny population of one idea)
        ok = checked(random_node(rng, 4), limits)
        if ok is not None and canonical(ok[1]) not in seen:
            return (ok[0], ok[1], "random"), tries
    raise SearchError("no new formula could be drawn: the search has exhausted what it can reach")


def search(verifier, seed_formulas: Sequence[str | None], budget: int, config: SearchConfig = SearchConfig(),
           seed: int = 0, workers: int | None = None) -> SearchResult:
    """Evolve formulas for at most `budget` verifier calls; see the module docstring for every rule.

    verifier: the `Verifier` whose reward drives the search; its archive is updated as in training (pass a
    `fork()` to leave the caller's archive alone). seed_formulas: the step-0 answers' formulas (None entries
    and unparseable ones are skipped). workers: scoring processes (`alpha_gym.pool`; None: every usable core,
    or `$ALPHA_GYM_SCORING_WORKERS`); the result does not depend on it. Returns every scored formula and the
    final population.
    """
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
        raise SearchError(f"budget must be a non-negative integer, got {budget!r}")
    rng = np.random.default_rng(seed)
    limits = verifier.config.limits
    scorer = _Scorer(verifier, config.group_size, workers)
    seeds = _seed_nodes(seed_formulas, limits, config.alpha101)[: int(budget * config.seed_share)]
    candidates = scorer.score([(to_text(n), n, origin) for _, n, origin in seeds], generation=0)
    seen = {form for form, _, _ in seeds}
    population = sorted(candidates, key=_rank_key)[: config.population]
    history = [_history_row(0, scorer.calls, population)]
    redrawn, generation = 0, 0
    per_generation = config.group_size * config.groups_per_generation
    while scorer.calls < budget:
        generation += 1
        batch = []
        for _ in range(min(per_generation, budget - scorer.calls)):
            child, tries = _child(population, rng, config, limits, seen)
            redrawn += tries
            seen.add(canonical(child[1]))
            batch.append(child)
        children = scorer.score(batch, generation)
        candidates += children
        population = sorted(population + children, key=_rank_key)[: config.population]
        history.append(_history_row(generation, scorer.calls, population))
    return SearchResult(candidates, population, scorer.calls, budget, generation, redrawn, history)


def _history_row(generation: int, calls: int, population: list[Candidate]) -> dict:
    rewards = [c.reward for c in population]
    return {"generation": generation, "calls": calls,
            "best_reward": max(rewards) if rewards else None,
            "mean_reward": float(np.mean(rewards)) if rewards else None,
            "valid_share": float(np.mean([c.valid for c in population])) if population else None}


def pick_answers(result: SearchResult, briefs: Sequence,
                 pool: str = "population") -> list[tuple[Candidate | None, bool]]:
    """(formula, complies) per brief: the best formula of `pool` that meets all of the brief's constraints
    (`alpha_gym.tasks.compliance`), else the best of `pool` overall with complies False.

    pool: "population" (the final population: the formulas that survived selection) or "scored" (every
    formula the search scored). Valid formulas rank before invalid ones, then by reward. A brief without
    constraints complies with anything. (None, False) when nothing was scored.
    """
    from alpha_gym.tasks.compliance import check_compliance
    if pool not in ("population", "scored"):
        raise SearchError(f"pool must be 'population' or 'scored', not {pool!r}")
    ranked = sorted(result.population if pool == "population" else result.candidates,
                    key=lambda c: (not c.valid, *_rank_key(c)))
    out = []
    for brief in briefs:
        hit = next((c for c in ranked if all(check_compliance(brief, c.node).values())), None)
        out.append((hit, True) if hit is not None else (ranked[0] if ranked else None, False))
    return out
