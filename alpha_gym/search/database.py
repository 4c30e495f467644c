"""The program database of an evolution run: islands of scored formulas, and parents drawn from them by score.

A formula the verifier scored valid becomes a `Program`: its text, canonical form, family (the canonical
form with its windows erased: the idea whatever its horizon), horizon (its nested lookback snapped to the
R9 window buckets), reward, core (R1) and raw CPCV, turnover, IC, max |corr| with the book (the verifier's
`max_pnl_corr`: the archive and its own group), family, parent ids, offspring count and the call that
scored it. The database holds every program; each of its `n_islands` islands holds the ids of some:

    joining     a new program joins the island its parents came from (a seed: the islands in turn). With
                `cells`, an island keeps at most `cell_capacity` programs per (family, horizon) cell, the
                best by reward, so one idea at one horizon cannot fill an island (MAP-Elites); an island
                keeps at most `island_capacity` programs, the best by reward
    parents     a prompt takes `parents_per_prompt` distinct programs of one island (the islands in
                turn), drawn one after another with weights
                    w_i  proportional to  exp(z_i / temperature) / (1 + offspring_i) ** offspring_penalty
                where z_i is the reward standardised within the island by its median and median absolute
                deviation; temperature 0 takes the best (highest reward, then lowest id). With
                `selection="tournament"` each draw is instead the best of `tournament` programs drawn
                uniformly with replacement (the genetic-programming rule, `GP_SEARCH`). Each draw counts
                one offspring for the program drawn. Parents are returned best first
    refresh     every `refresh_interval` verifier calls: "reset" empties the weakest `reset_share` of the
                islands (by their best reward) and refounds each with the best program of a surviving
                island drawn at random; "migrate" copies each island's best `migration_share` to its two
                neighbours on a ring; "none" does nothing
    novelty     a canonical form already scored (valid or not) is a duplicate: `is_new` says so before a
                proposal spends a call, and `add` refuses it

Deterministic given the `numpy.random.Generator` passed to `sample` and `refresh` (ties are broken by
program id, never by dict or set order); `to_dict` / `from_dict` give a JSON-ready state that restores
the database exactly, so a run resumes where it stopped. A state read back is a file anyone may have edited:
`from_dict` checks every field's type and range, parses each program's text again under the Limits given
(the parser every answer goes through: no free text reaches a prompt as a parent) and checks that it is the
formula its canonical form names, so anything else is one DatabaseError naming the program and field.

Sources (ideas, not code):
- FunSearch (Romera-Paredes et al., Nature 2024; google-deepmind/funsearch, implementation/
  programs_database.py): islands evolved apart; the programs of a prompt drawn from one island by a
  softmax of their scores with a temperature; two programs per prompt, best last in the prompt; the
  worse half of the islands periodically reset, each refounded with the best program of a surviving
  island chosen at random.
- OpenEvolve (codelion/openevolve, openevolve/database.py): MAP-Elites feature cells beside the islands,
  where a cell keeps its best program only; islands visited in turn; migration of an island's best share
  to its neighbours on a ring.
- ShinkaEvolve (Lange et al. 2025, SakanaAI/ShinkaEvolve, shinka/database/parents.py): weighted parent
  sampling, scores scaled robustly by the median and the median absolute deviation, times a novelty
  factor 1 / (1 + offspring count), so a program that already had many children is drawn less; rejection
  of a proposal the database already holds before it is evaluated.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from typing import Any, Mapping, Sequence

import numpy as np

from alpha_gym.errors import InputError
from alpha_gym.jsonable import finite_or_none
from alpha_gym.language import (DEFAULT_LIMITS, FormulaError, Limits, Node, Op, canonical, lookback, normalize, parse,
                                to_text)
from alpha_gym.language.operators import OPERATORS
from alpha_gym.language.printer import bucket_window
from alpha_gym.ranges import SettingError, Range, check_fields, check_value, closed, ints, shown

DATABASE_FORMAT = "alpha-gym/program-database/v1"
REFRESH_MODES = ("reset", "migrate", "none")
#: How a prompt's parents are drawn from an island (see the module docstring's "parents").
SELECTIONS = ("softmax", "tournament")
#: The largest |reward| (and |CPCV|) a program read back may carry: far above any a run writes (the default
#: reward lies within about +-25), so only an edit reaches it, and every sum of rewards stays finite.
REWARD_BOUND = 1e9
#: A correlation or turnover computed at its bound lands a few ulps past it (a max |corr| of 1.0000000000000004).
_SLACK = 1e-6


class DatabaseError(InputError):
    """A database state that cannot be restored (another format, a program the islands do not agree on)."""


@dataclass(frozen=True)
class DatabaseConfig:
    """The database's sizes and rates (see the module docstring for what each does)."""

    n_islands: int = 5                # FunSearch uses 10 for runs of millions of programs
    parents_per_prompt: int = 2       # k: FunSearch's functions_per_prompt
    temperature: float = 1.0          # on rewards standardised by the island's median absolute deviation
    offspring_penalty: float = 1.0    # exponent of 1 / (1 + offspring); 0: offspring do not matter
    island_capacity: int = 64
    cells: bool = True
    cell_capacity: int = 2            # programs per (family, horizon) cell of an island
    refresh: str = "reset"            # reset | migrate | none
    refresh_interval: int = 400       # verifier calls between refreshes
    reset_share: float = 0.5          # islands reset at a refresh (FunSearch: the worse half)
    migration_share: float = 0.1      # of an island's programs copied to each neighbour at a refresh
    selection: str = "softmax"        # softmax | tournament
    tournament: int = 3               # programs in a tournament (selection="tournament")

    def __post_init__(self):
        check_fields(self, DATABASE_RANGES)
        if self.refresh not in REFRESH_MODES:
            raise SettingError("DatabaseConfig", "refresh", self.refresh, f"one of {', '.join(REFRESH_MODES)}")
        if self.selection not in SELECTIONS:
            raise SettingError("DatabaseConfig", "selection", self.selection, f"one of {', '.join(SELECTIONS)}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.selection == "softmax":  # the rule every run used before there was a choice: a folder made then
            del d["selection"], d["tournament"]  # names neither, and resumes with the same settings
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "DatabaseConfig":
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise SettingError("DatabaseConfig", sorted(unknown)[0], d[sorted(unknown)[0]], "a known setting")
        return cls(**d)


DATABASE_RANGES = {
    "n_islands": ints(1, 256),
    "parents_per_prompt": ints(1, 16),
    "temperature": closed(0.0, 1e3),
    "offspring_penalty": closed(0.0, 10.0),
    "island_capacity": ints(1, 100_000),
    "cell_capacity": ints(1, 100_000),
    "refresh_interval": ints(1, 10**9),
    "reset_share": Range(0.0, 1.0, hi_open=True),
    "migration_share": Range(0.0, 1.0, lo_open=True),
    "tournament": ints(1, 10_000),
}

#: The model-free genetic-programming search (the comparison's `search` arm) as a database: one island holding the
#: best 32 programs by reward (mu, truncation survival), no cells, no refresh, two parents a prompt, each the best of
#: a tournament of 3; with the tree mutator, a (mu + group_size) search whose survivors are chosen after every group.
GP_SEARCH = DatabaseConfig(n_islands=1, parents_per_prompt=2, island_capacity=32, cells=False, refresh="none",
                           selection="tournament", tournament=3)


# ------------------------------------------------------------------------------------------ programs
def family(node: Node) -> str:
    """The canonical form with every window erased (`ts_max(ts_std(volume))`): the idea, whatever its horizon.
    adv{d} keeps its window (adv20 and adv60 are different fields)."""
    def erase(n: Node) -> Node:
        if not isinstance(n, Op):
            return n
        keep = n.window is None or OPERATORS[n.name].form == "window_name"
        return Op(n.name, tuple(erase(a) for a in n.args), n.window if keep else None, n.const)
    return to_text(normalize(erase(node)))


def horizon(node: Node) -> int:
    """The formula's nested lookback (`alpha_gym.language.lookback`) snapped to the R9 window buckets."""
    return bucket_window(max(1, lookback(node)))


@dataclass
class Program:
    """One valid scored formula. The database owns it: only `offspring` changes after it is added."""

    id: int
    text: str
    form: str                       # canonical form (exact duplicates share it)
    family: str
    horizon: int
    reward: float
    core: float                     # the R1 channel (train CPCV, clipped)
    cpcv: float | None              # the raw train-window CPCV
    turnover: float | None
    ic: float | None
    max_corr: float | None          # max |corr| of its P&L with the book it was scored against
    parents: tuple[int, ...] = ()
    call: int = 0                   # the verifier call that scored it (1-based)
    island: int = 0                 # the island it was born on
    origin: str = ""                # the mutator that proposed it ("seed" for a seed)
    offspring: int = 0              # proposals it was a parent of

    @property
    def cell(self) -> tuple[str, int]:
        return (self.family, self.horizon)

    def tree(self, limits: Limits = DEFAULT_LIMITS) -> Node:
        """The parsed formula (parsed again from its text: the database stores text only)."""
        return parse(self.text, limits)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["parents"] = list(self.parents)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], limits: Limits | None = None) -> "Program":
        """The program `to_dict` wrote; DatabaseError for a field of the wrong type or out of `PROGRAM_RANGES`,
        and (limits given) for a text that does not parse under them or is not the formula of its form."""
        if not isinstance(d, Mapping):
            raise DatabaseError(f"a program is a JSON object, not {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown, missing = sorted(set(d) - known), sorted(k for k in ("id", "text", "form", "family", "horizon",
                                                                    "reward", "core", "cpcv", "turnover", "ic",
                                                                    "max_corr") if k not in d)
        if unknown or missing:
            raise DatabaseError(f"program {shown(d.get('id'))}: " + (f"unknown field {unknown[0]!r}" if unknown
                                                                     else f"no {missing[0]!r}"))
        parents = d.get("parents", ())
        if not isinstance(parents, list | tuple) or any(type(p) is not int for p in parents):
            raise DatabaseError(f"program {shown(d.get('id'))}: parents = {shown(parents)}: must be a list of "
                                "program ids")
        try:
            program = cls(**{**d, "parents": tuple(parents)})
            check_fields(program, PROGRAM_RANGES)
        except SettingError as err:
            raise DatabaseError(f"program {shown(d.get('id'))}: {err}") from None
        if limits is not None:
            program._check_text(limits)
        return program

    def _check_text(self, limits: Limits) -> None:
        try:
            form = _form_of(self.text, limits)
        except (FormulaError, RecursionError) as err:
            raise DatabaseError(f"program {self.id}: its text {shown(self.text)} is not a formula under the "
                                f"run's limits ({type(err).__name__}: {err})") from None
        if form != self.form:
            raise DatabaseError(f"program {self.id}: its text {shown(self.text)} is not the formula its form "
                                f"{shown(self.form)} names: the database was edited")


@lru_cache(maxsize=1 << 16)
def _form_of(text: str, limits: Limits) -> str:
    """The canonical form of a formula text parsed under `limits`. Cached: parsing costs milliseconds a formula,
    and a run's state is read back more than once in a process (a resume, then the kept files at its end)."""
    return canonical(parse(text, limits))


#: The range of each number of a program read back (its type comes from the dataclass).
PROGRAM_RANGES = {
    "id": ints(0), "horizon": ints(1, 10**6), "call": ints(0), "island": ints(0, 255), "offspring": ints(0),
    "reward": closed(-REWARD_BOUND, REWARD_BOUND), "core": closed(-REWARD_BOUND, REWARD_BOUND),
    "cpcv": closed(-REWARD_BOUND, REWARD_BOUND),
    "turnover": closed(0.0, 2.0 + _SLACK),               # a book's daily turnover is at most 2
    "ic": closed(-1.0 - _SLACK, 1.0 + _SLACK),          # a correlation
    "max_corr": closed(0.0, 1.0 + _SLACK),              # an absolute correlation
}


def _rank_key(p: Program):
    return (-p.reward, p.id)  # best reward first; the older program wins a tie


# ------------------------------------------------------------------------------------------ database
@dataclass
class ProgramDatabase:
    """Every valid program scored, the islands' program ids, and the forms already scored (see module doc)."""

    config: DatabaseConfig = field(default_factory=DatabaseConfig)
    programs: list[Program] = field(default_factory=list)
    islands: list[list[int]] = field(default_factory=list)
    scored_forms: set[str] = field(default_factory=set)
    next_island: int = 0            # the island the next prompt draws from
    next_seed_island: int = 0       # the island the next seed joins
    last_refresh: int = 0           # verifier calls at the last refresh
    refreshes: int = 0

    def __post_init__(self):
        if not self.islands:
            self.islands = [[] for _ in range(self.config.n_islands)]
        if len(self.islands) != self.config.n_islands:
            raise DatabaseError(f"{len(self.islands)} islands for a config of {self.config.n_islands}")

    # ------------------------------------------------------------------ queries
    def __len__(self) -> int:
        return len(self.programs)

    def is_new(self, form: str) -> bool:
        """Whether no answer of this canonical form was scored yet (a duplicate would spend a call for nothing)."""
        return form not in self.scored_forms

    def best(self) -> Program | None:
        return min(self.programs, key=_rank_key) if self.programs else None

    def island_programs(self, island: int) -> list[Program]:
        """The programs of one island, best first."""
        return sorted((self.programs[i] for i in self.islands[island]), key=_rank_key)

    def island_best(self, island: int) -> Program | None:
        members = self.islands[island]
        return min((self.programs[i] for i in members), key=_rank_key) if members else None

    def cells(self, island: int) -> dict[tuple[str, int], int]:
        """(family, horizon) -> how many of the island's programs sit in that cell."""
        out: dict[tuple[str, int], int] = {}
        for i in self.islands[island]:
            out[self.programs[i].cell] = out.get(self.programs[i].cell, 0) + 1
        return out

    # ------------------------------------------------------------------ adding
    def note_scored(self, form: str) -> None:
        """Record a form the verifier scored invalid: it is a duplicate from now on, and joins no island."""
        self.scored_forms.add(form)

    def add(self, text: str, node: Node, reward: float, core: float, cpcv=None, turnover=None, ic=None,
            max_corr=None, parents: Sequence[int] = (), call: int = 0, island: int | None = None,
            origin: str = "") -> Program:
        """Record a valid scored formula and place it on `island` (None: the next island in turn, as a seed).

        Raises DatabaseError for a form already scored (the caller checks `is_new` before spending a call)."""
        form = canonical(node)
        if form in self.scored_forms:
            raise DatabaseError(f"{form!r} was scored before: a duplicate is rejected before its call")
        if island is None:
            island = self.next_seed_island
            self.next_seed_island = (self.next_seed_island + 1) % self.config.n_islands
        if not 0 <= island < self.config.n_islands:
            raise DatabaseError(f"island {island} is not one of the {self.config.n_islands}")
        for p in parents:
            if not 0 <= p < len(self.programs):
                raise DatabaseError(f"parent {p} is not a program of the database")
        numbers = {k: finite_or_none(v) for k, v in (("cpcv", cpcv), ("turnover", turnover), ("ic", ic),
                                                      ("max_corr", max_corr))}
        program = Program(id=len(self.programs), text=text, form=form, family=family(node), horizon=horizon(node),
                          reward=float(reward), core=float(core), parents=tuple(int(p) for p in parents),
                          call=int(call), island=island, origin=origin, **numbers)
        self.programs.append(program)
        self.scored_forms.add(form)
        self._place(island, program.id)
        return program

    def _place(self, island: int, pid: int) -> bool:
        """Put a program on an island under the cell and island caps; returns whether it stayed."""
        members = self.islands[island]
        if pid in members:
            return True
        new = self.programs[pid]
        if self.config.cells:
            same = [i for i in members if self.programs[i].cell == new.cell]
            if len(same) >= self.config.cell_capacity:
                worst = max(same, key=lambda i: _rank_key(self.programs[i]))
                if _rank_key(new) > _rank_key(self.programs[worst]):
                    return False          # the cell's programs are all better
                members.remove(worst)
        members.append(pid)
        if len(members) > self.config.island_capacity:
            members.remove(max(members, key=lambda i: _rank_key(self.programs[i])))
        return pid in members

    # ------------------------------------------------------------------ parents
    def weights(self, island: int) -> tuple[list[int], np.ndarray]:
        """The island's program ids and their draw probabilities (the module docstring's w_i, normalised)."""
        ids = sorted(self.islands[island])
        if not ids:
            return [], np.zeros(0)
        rewards = np.array([self.programs[i].reward for i in ids])
        if self.config.temperature == 0.0:
            p = np.zeros(len(ids))
            p[min(range(len(ids)), key=lambda j: _rank_key(self.programs[ids[j]]))] = 1.0
            return ids, p
        median = float(np.median(rewards))
        spread = max(float(np.median(np.abs(rewards - median))), 1e-6)
        offspring = np.array([self.programs[i].offspring for i in ids], dtype=np.float64)
        logits = (rewards - median) / spread / self.config.temperature
        logits = logits - self.config.offspring_penalty * np.log1p(offspring)
        logits -= logits.max()
        w = np.exp(logits)
        return ids, w / w.sum()

    def sample(self, n_prompts: int, rng: np.random.Generator) -> list[tuple[int, list[Program]]]:
        """(island, parents best first) for each of `n_prompts` prompts; islands in turn, empty islands skipped.

        Each prompt draws min(parents_per_prompt, island size) distinct programs; each draw counts one offspring.
        An empty database gives empty parent lists (the mutator then writes from nothing)."""
        out = []
        for _ in range(n_prompts):
            island = self._next_nonempty_island()
            chosen: list[int] = []
            if island is not None:
                for _ in range(min(self.config.parents_per_prompt, len(self.islands[island]))):
                    if self.config.selection == "tournament":
                        pid = self._tournament(island, chosen, rng)
                        chosen.append(pid)
                        self.programs[pid].offspring += 1
                        continue
                    ids, p = self.weights(island)
                    keep = [j for j, i in enumerate(ids) if i not in chosen]
                    q = p[keep]
                    if q.sum() <= 0:         # temperature 0: the best is taken, go on with the next best
                        q = np.zeros(len(keep))
                        q[min(range(len(keep)), key=lambda j: _rank_key(self.programs[ids[keep[j]]]))] = 1.0
                    j = keep[int(rng.choice(len(keep), p=q / q.sum()))]
                    chosen.append(ids[j])
                    self.programs[ids[j]].offspring += 1
            else:
                island = self.next_island
                self.next_island = (self.next_island + 1) % self.config.n_islands
            out.append((island, sorted((self.programs[i] for i in chosen), key=_rank_key)))
        return out

    def _tournament(self, island: int, chosen: list[int], rng: np.random.Generator) -> int:
        """The best of `tournament` programs drawn uniformly with replacement from the island's not yet chosen."""
        ranked = [i for i in sorted(self.islands[island], key=lambda i: _rank_key(self.programs[i]))
                  if i not in chosen]
        return ranked[int(rng.integers(len(ranked), size=self.config.tournament).min())]

    def _next_nonempty_island(self) -> int | None:
        for _ in range(self.config.n_islands):
            island = self.next_island
            self.next_island = (self.next_island + 1) % self.config.n_islands
            if self.islands[island]:
                return island
        return None

    # ------------------------------------------------------------------ refresh
    def tick(self, calls: int, rng: np.random.Generator) -> str | None:
        """Refresh the islands when `refresh_interval` calls have passed since the last refresh; returns
        what was done ("reset", "migrate") or None."""
        if self.config.refresh == "none" or calls - self.last_refresh < self.config.refresh_interval:
            return None
        self.last_refresh = calls
        self.refresh(rng)
        return self.config.refresh

    def refresh(self, rng: np.random.Generator) -> list[int]:
        """Reset or migrate now (the config's `refresh`); returns the islands that changed."""
        self.refreshes += 1
        if self.config.refresh == "reset":
            return self.reset_weakest(rng)
        if self.config.refresh == "migrate":
            return self.migrate()
        return []

    def reset_weakest(self, rng: np.random.Generator) -> list[int]:
        """Empty the weakest floor(n_islands * reset_share) islands (by best reward; an empty island is
        weakest, ties go to the higher index) and refound each with the best program of a surviving island
        drawn at random (FunSearch). Returns the reset islands."""
        n = len(self.islands)
        def strength(i: int):
            best = self.island_best(i)
            return (-math.inf if best is None else best.reward, -i)
        order = sorted(range(n), key=strength)
        n_reset = min(int(n * self.config.reset_share), n - 1)
        reset, keep = order[:n_reset], [i for i in order[n_reset:] if self.islands[i]]
        if not keep:
            return []
        for i in sorted(reset):
            founder = self.island_best(keep[int(rng.integers(len(keep)))])
            self.islands[i] = []
            self._place(i, founder.id)
        return sorted(reset)

    def migrate(self) -> list[int]:
        """Copy each island's best ceil(migration_share * size) programs to its two ring neighbours (OpenEvolve);
        the islands' contents before the migration decide who moves. Returns the islands that received any."""
        n = len(self.islands)
        if n < 2:
            return []
        share = self.config.migration_share
        movers = [[p.id for p in self.island_programs(i)[:math.ceil(share * len(self.islands[i]))]] for i in range(n)]
        changed = set()
        for i in range(n):
            for target in sorted({(i + 1) % n, (i - 1) % n} - {i}):
                for pid in movers[i]:
                    if pid not in self.islands[target] and self._place(target, pid):
                        changed.add(target)
        return sorted(changed)

    # ------------------------------------------------------------------ state
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready state: `from_dict(to_dict())` restores the database exactly."""
        return {"format": DATABASE_FORMAT, "config": self.config.to_dict(),
                "programs": [p.to_dict() for p in self.programs], "islands": [list(i) for i in self.islands],
                "scored_forms": sorted(self.scored_forms), "next_island": self.next_island,
                "next_seed_island": self.next_seed_island, "last_refresh": self.last_refresh,
                "refreshes": self.refreshes}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], limits: Limits = DEFAULT_LIMITS) -> "ProgramDatabase":
        """The database `to_dict` wrote, every field checked (see the module docstring); each program's text is
        parsed under `limits` (the run's). DatabaseError (an InputError) for anything else."""
        if not isinstance(d, Mapping) or d.get("format") != DATABASE_FORMAT:
            got = d.get("format") if isinstance(d, Mapping) else type(d).__name__
            raise DatabaseError(f"not a program database state (format {shown(got)}, expected {DATABASE_FORMAT!r})")
        keys = {"format", "config", "programs", "islands", "scored_forms", "next_island", "next_seed_island",
                "last_refresh", "refreshes"}
        if set(d) != keys:
            odd = sorted(set(d) ^ keys)[0]
            raise DatabaseError(f"the database {'has no' if odd in keys else 'has an unknown field'} {odd!r}")
        if not isinstance(d["config"], Mapping):
            raise DatabaseError(f"the database's config is {type(d['config']).__name__}, not an object")
        try:
            config = DatabaseConfig.from_dict(d["config"])
        except SettingError as err:
            raise DatabaseError(f"the database's config: {err}") from None
        programs = [Program.from_dict(p, limits) for p in _listed(d, "programs")]
        forms: set[str] = set()
        for k, p in enumerate(programs):
            if p.id != k:
                raise DatabaseError(f"program ids must be 0, 1, 2, ... in order (the program at {k} has id {p.id})")
            if any(not 0 <= q < k for q in p.parents):
                raise DatabaseError(f"program {k} names parents {list(p.parents)}, not earlier programs of the run")
            if p.island >= config.n_islands:
                raise DatabaseError(f"program {k} was born on island {p.island}, not one of the {config.n_islands}")
            if p.form in forms:
                raise DatabaseError(f"program {k} repeats the form of an earlier program ({shown(p.form)})")
            forms.add(p.form)
        islands = _listed(d, "islands")
        if len(islands) != config.n_islands or any(
                not isinstance(isl, list) or any(type(i) is not int or not 0 <= i < len(programs) for i in isl)
                or len(set(isl)) != len(isl) for isl in islands):
            raise DatabaseError(f"the islands must be {config.n_islands} lists of distinct program ids")
        scored = _listed(d, "scored_forms")
        if any(not isinstance(f, str) for f in scored) or not forms <= set(scored):
            raise DatabaseError("scored_forms must list the forms scored, every program's among them")
        numbers = {}
        for key, rng in (("next_island", ints(0, config.n_islands - 1)),
                         ("next_seed_island", ints(0, config.n_islands - 1)),
                         ("last_refresh", ints(0)), ("refreshes", ints(0))):
            try:
                check_value("database", key, d[key], rng)
            except SettingError as err:
                raise DatabaseError(str(err)) from None
            numbers[key] = d[key]
        return cls(config=config, programs=programs, islands=[list(isl) for isl in islands],
                   scored_forms=set(scored), **numbers)


def _listed(d: Mapping[str, Any], key: str) -> list:
    if not isinstance(d[key], list):
        raise DatabaseError(f"the database's {key} is {type(d[key]).__name__}, not a list")
    return d[key]
