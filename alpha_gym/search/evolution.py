"""`evolve`: evolution of formulas from a program database by mutation operators, under an exact call budget.

The loop of FunSearch, OpenEvolve and ShinkaEvolve, on this project's verifier (`alpha_gym.search.database`
holds the programs, `alpha_gym.search.bandit` shares the proposals among the mutators):

    seeds       the seed formulas (default: the Alpha101 set that needs no sector labels or market cap),
                each parsed under the verifier's Limits; unparseable ones and exact duplicates are dropped
                without a call. They are scored first, in groups, and dealt to the islands in turn
    group       `group_size` proposals scored together: for each, the database draws a parent set from one
                island (`ProgramDatabase.sample`), the bandit names a mutator, and the mutator writes one
                answer per parent set. An answer that does not parse under the Limits (or lacks its
                `<alpha>` block when it has tags) and one whose canonical form was scored before are
                rejected without a call, and new parent sets are drawn for the missing places, up to
                `max_rounds` rounds; after that random formulas (`alpha_gym.language.sample.random_node`,
                origin "random") fill the group, so every proposal group but the budget's last is full
                (the last group of seeds may be short)
    scoring     `verifier.score_group(answers)` (a plain formula is sent as `<alpha>formula</alpha>`, an
                answer with tags as written), then `verifier.update_archive(group)`, as a training step
                scores its groups
    recording   each valid answer joins the database on its parents' island; each arm is paid its
                proposal's improvement over the best parent (0 when invalid or rejected); the islands are
                refreshed on schedule (`ProgramDatabase.tick`)
    budget      every scored answer counts, valid or not; a rejected proposal counts nothing. The run makes
                exactly `budget` calls (fewer only when the seeds and mutators cannot reach a new formula)
    checkpoint  after a group, `out_dir/state.json` (the database, the bandit, the Generator's state, the
                calls, the history) and the verifier's archive (two slots written in turn: each checkpoint
                writes the slot the state on disk does not name, then the state naming it, then removes the
                other slot, so the folder keeps one; each file is written atomically), so a run
                killed at any point resumes from its last checkpoint to the same result as an uninterrupted
                one; `proposals.jsonl` logs every proposal (scored or rejected) and is cut back on resume.
                Written after every group while that is cheap, and otherwise once the time since the last
                one is CHECKPOINT_RATIO times what the last one took (the state grows with the run: 11 MB
                of JSON at 10,000 calls on us46, a third of the run's time when written every group), so
                writing costs at most about 1/CHECKPOINT_RATIO of the run and a kill loses as little;
                `checkpoint_every=N` writes after every N-th group instead, and always after the last.
                A run holds its folder for as long as it goes (a second process is refused), and the
                checkpoint read back is checked field by field, its programs parsed again, before the run
                goes on (`alpha_gym.search.run_state`)
    progress    one line per group: calls, best reward, members and effective bets of the run's book; the
                history row of the group adds the book's train-window CPCV (`book_cpcv`). Between them (`say`):
                a line after a round that leaves the group short, at most every NOTE_EVERY_S seconds (answers
                asked, new, duplicates, unparseable: a model that writes no formula does not look hung), one
                whenever random formulas fill a group, and one when a run resumes (at how many calls)
    outputs     with each checkpoint, `archive.jsonl`: the formulas the verifier's novelty archive admitted
                (the run's archive, in `trainers.run_book`'s line format: step is the group), and `book.json`:
                their correlation-capped book (`alpha_gym.evaluation.selection.select_correlation_capped`, seed
                section 8: greedy by train CPCV, |corr| < 0.5 with every member, turnover >= 2% a day), as
                `trainers.run_book.build_run_book` builds a training run's book, with the calls and groups it
                is of; a stopped run has them as its checkpoint stood

A mutator is anything with a `name` and `propose(parent_sets, rng) -> list[str]`: one answer per parent set
(a list of `Program`s, best first; empty when the database is), in the `<alpha>...</alpha>` contract or a
plain formula, drawing any randomness it needs from `rng`. `TreeMutator` here is the model-free one: the
search's tree operators (`alpha_gym.search.tree`) on the parents.

A mutator may also learn from the run (`trainers.evolve_rl.TrainedMutator`, issue 40.3) through optional
members the others lack:

    answers_per_set  k > 1: each parent set the database draws is asked k times in a row (a group of k
                     answers to one prompt, GRPO's group); such a mutator must be the run's only one
    observe(outcomes) after each scored group: one (reward, valid) per answer it proposed for that group, in
                     the order proposed. An unparseable answer gets the reward the verifier's config gives it
                     (`VerifierConfig.invalid_reward`: missing tag or unparseable), a duplicate None: both without
                     a call. The other rewards are the ones the run already paid for: no extra call.
                     It may return a dict (an update it took), kept in the group's history row ("updates")
    save_state(path), load_state(path)   its state (a policy, its optimizer), written at each checkpoint in
                     the archive's turn of slots and named by state.json, so a resumed run continues the
                     learner with the database
    settings()       joins the run's settings (a resume with other ones is refused)

The mutators that a language model drives
plug in through the improve task (issue 40): a local HF model folder and an OpenAI-compatible endpoint (the
`alpha-gym eval` client) each become a mutator whose `propose` renders one improve-task prompt per parent
set (the brief when given, and each parent's formula with its train-window CPCV, turnover, IC and max |corr|
with the book, all on `Program`), generates the answers of the whole group in one batch, and returns them
unparsed; the verifier's reward of the answer is then the improve task's reward, and the improvement over the
best parent is what the bandit pays.

Deterministic for a seed (one `numpy.random.Generator` drives the database, the bandit, the tree mutator and
the fill), given the verifier's state and deterministic mutators.
"""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from alpha_gym.book.answer import holds_alpha_tag
from alpha_gym.errors import InputError
from alpha_gym.evaluation.selection import BookSelection, Candidate, GrowingCappedBook
from alpha_gym.jsonable import finite_or_none, json_dumps, jsonable
from alpha_gym.language import (DEFAULT_LIMITS, AnswerError, FormulaError, Limits, Node, canonical, extract, parse,
                                to_text)
from alpha_gym.language.sample import random_node
from alpha_gym.ranges import check_fields, closed, ints, shown
from alpha_gym.search.bandit import Bandit, BanditConfig
from alpha_gym.search.database import DatabaseConfig, Program, ProgramDatabase
from alpha_gym.search.run_state import (ARCHIVE_SLOTS, PROPOSALS_LOG, STATE_FILE, STATE_FORMAT, RunState,
                                        archive_slot, check_folder, check_state, learner_file, load_state_json,
                                        locked, read_log)
from alpha_gym.pool import score_groups
from alpha_gym.search.tree import MUTATIONS, checked, crossover

#: A checkpoint is due once the time since the last one is this many times what the last one took.
CHECKPOINT_RATIO = 20
#: A group still waiting for new formulas after a round is said at most this often (a model on a CPU takes tens of
#: seconds a round, so each of its rounds is said; the tree mutator's take milliseconds and stay quiet).
NOTE_EVERY_S = 5.0
ARCHIVE_LOG = "archive.jsonl"      # the line format of trainers.run_book (the run's own archive)
BOOK_FILE = "book.json"


class EvolutionError(InputError):
    """Bad settings for an evolution run, a mutator that breaks its contract, or an out_dir of another run."""


class Mutator(Protocol):
    """A mutation operator: one answer (an `<alpha>` answer or a plain formula) per parent set."""

    name: str

    def propose(self, parent_sets: list[list[Program]], rng: np.random.Generator) -> list[str]: ...


@dataclass(frozen=True)
class TreeMutator:
    """The model-free mutator: the search's tree operators applied to the parents (`alpha_gym.search.tree`).

    With two or more parents, subtree crossover of two of them drawn at random (`crossover_rate`); else one
    point mutation (operator, field, window or constant; a whole subtree at `subtree_rate`) of a parent drawn
    at random; with no parents, a random tree. A child that breaks the Limits is drawn again, up to
    `max_tries` times (then the first parent is returned as it is: the run rejects it as a duplicate)."""

    limits: Limits = DEFAULT_LIMITS
    crossover_rate: float = 0.3
    subtree_rate: float = 0.1
    max_tries: int = 20
    name: str = "tree"

    def __post_init__(self):
        check_fields(self, {"crossover_rate": closed(0.0, 1.0), "subtree_rate": closed(0.0, 1.0),
                            "max_tries": ints(1, 10_000)})

    def propose(self, parent_sets: list[list[Program]], rng: np.random.Generator) -> list[str]:
        return [self._child([p.tree(self.limits) for p in parents], rng) for parents in parent_sets]

    def _child(self, trees: list[Node], rng: np.random.Generator) -> str:
        points = ("operator", "field", "number")
        for _ in range(self.max_tries):
            if not trees:
                node = random_node(rng, 4)
            elif len(trees) >= 2 and rng.random() < self.crossover_rate:
                a, b = rng.choice(len(trees), size=2, replace=False)
                node = crossover(trees[int(a)], trees[int(b)], rng)
            else:
                kind = "subtree" if rng.random() < self.subtree_rate else points[int(rng.integers(len(points)))]
                node = MUTATIONS[kind](trees[int(rng.integers(len(trees)))], rng)
            ok = checked(node, self.limits) if node is not None else None
            if ok is not None:
                return ok[0]
        return to_text(trees[0]) if trees else ""


@dataclass(frozen=True)
class Proposal:
    """One answer a mutator (or the seeds, or the fill) offered, read under the Limits."""

    answer: str                     # what the verifier is sent
    text: str                       # the parsed formula printed (`to_text`)
    node: Node = field(repr=False)
    form: str                       # canonical form
    origin: str                     # the mutator's name, "seed" or "random"
    island: int | None              # where a valid child goes (None: the islands in turn)
    parents: tuple[Program, ...] = ()
    slot: int | None = None         # its place among its mutator's answers of the group (an observing mutator)


@dataclass
class EvolutionResult:
    """The database at the end, the run's book and archive, the counts and the per-group history."""

    database: ProgramDatabase
    bandit: Bandit
    book: BookSelection
    admitted: list[dict]            # the run's archive: archive.jsonl's lines
    calls: int
    budget: int
    groups: int
    rejected: int
    history: list[dict]

    @property
    def best(self) -> Program | None:
        return self.database.best()


def read_answer(answer: Any, limits: Limits) -> tuple[str, str, Node] | str:
    """(answer to send, formula text, tree) when the answer parses under `limits`, else why not (no call)."""
    if not isinstance(answer, str):
        return f"not a string ({type(answer).__name__})"
    tagged = holds_alpha_tag(answer)
    try:
        formula = extract(answer).formula if tagged else answer.strip()
        node = parse(formula, limits)
    except (AnswerError, FormulaError, RecursionError) as err:
        return f"{type(err).__name__}: {err}"
    return (answer if tagged else f"<alpha>{formula}</alpha>"), to_text(node), node


def print_progress(row: dict) -> None:
    """The default progress line, on stderr."""
    best = row["best_reward"]
    print(f"evolve: group {row['group']}  calls {row['calls']}/{row['budget']}  best reward "
          f"{'-' if best is None else f'{best:+.3f}'}  book {row['book_members']} members "
          f"({row['effective_bets']:.1f} bets)  rejected {row['rejected']}", file=sys.stderr, flush=True)


def print_note(text: str) -> None:
    """The default for the lines between the groups' rows (a group filling, the random fill, a resume), on stderr."""
    print(text, file=sys.stderr, flush=True)


def book_cpcv(book: BookSelection, config) -> float | None:
    """The CPCV score of the book's equal-weight daily net P&L on the train window (`alpha_gym.scoring.cpcv`,
    the verifier's `config.cpcv`), as R1 scores one formula's; None for an empty book."""
    if not book.n:
        return None
    from alpha_gym.scoring.cpcv import cpcv_score, slice_sharpes
    return finite_or_none(cpcv_score(slice_sharpes(book.returns, config)[0], config.std_penalty))


# ------------------------------------------------------------------------------------------ the run
class _Run:
    """The state a checkpoint holds, and the steps of the loop."""

    def __init__(self, verifier, mutators: dict[str, Mutator], database: ProgramDatabase, bandit: Bandit,
                 rng: np.random.Generator, settings: dict, budget: int, out: Path | None, workers: int | None = None,
                 say: Callable[[str], None] | None = None, note_every_s: float = NOTE_EVERY_S):
        self.verifier, self.mutators, self.db, self.bandit, self.rng = verifier, mutators, database, bandit, rng
        self.settings, self.budget, self.out = settings, budget, out
        self.workers = workers                       # scoring processes (not a setting: the run is the same)
        self.say, self.note_every_s = say, note_every_s  # the lines between the groups' rows (not settings either)
        self.limits = verifier.config.limits
        self.calls = self.groups = self.seeded = self.rejected = 0
        self.turn: int | None = None                 # the archive slot the state on disk names (None: no state)
        self.history: list[dict] = []
        self.admitted: dict[int, dict] = {}          # program id -> its archive.jsonl line
        self.candidates: dict[int, Candidate] = {}   # program id -> its train-window P&L, for the book
        self._book: GrowingCappedBook | None = None
        # the observing mutators' outcomes of the group: one (reward, valid) per answer, None until scored
        self.outcomes: dict[str, list] = {n: [] for n, m in mutators.items() if hasattr(m, "observe")}
        self.repeat = max(int(getattr(m, "answers_per_set", 1)) for m in mutators.values())
        if self.repeat > 1 and len(mutators) > 1:
            raise EvolutionError(f"a mutator asking {self.repeat} answers per parent set must be the run's only one")

    # ------------------------------------------------------------------ proposals
    def seed_batch(self, seeds: list[Proposal], n: int, log: list) -> list[Proposal]:
        batch = []
        while len(batch) < n and self.seeded < len(seeds):
            p = seeds[self.seeded]
            self.seeded += 1
            if self.db.is_new(p.form) and p.form not in {q.form for q in batch}:
                batch.append(p)
            else:
                log.append(_rejection(self.groups + 1, p, "duplicate"))
        return batch

    def proposal_batch(self, n: int, max_rounds: int, log: list) -> list[Proposal]:
        batch: list[Proposal] = []
        forms: set[str] = set()
        tally = _FillTally(self.groups + 1, n, max_rounds, self.note_every_s)
        for round_no in range(1, max_rounds + 1):
            want = n - len(batch)
            if want <= 0:
                break
            if self.repeat > 1:          # each parent set asked `repeat` times in a row: one group per prompt
                sets = [s for s in self.db.sample(-(-want // self.repeat), self.rng) for _ in range(self.repeat)]
                sets = sets[:want]
            else:
                sets = self.db.sample(want, self.rng)
            arms = self.bandit.choose(want, self.rng)
            for arm in self.bandit.arms:                          # the arms in a fixed order
                idx = [j for j, a in enumerate(arms) if a == arm]
                if not idx:
                    continue
                answers = self.mutators[arm].propose([list(sets[j][1]) for j in idx], self.rng)
                if not isinstance(answers, list) or len(answers) != len(idx):
                    raise EvolutionError(f"mutator {arm!r} returned {type(answers).__name__} of "
                                         f"{len(answers) if isinstance(answers, list) else '?'} answers for "
                                         f"{len(idx)} parent sets: propose must return one answer per set")
                slots = self.outcomes.get(arm)
                base = None if slots is None else len(slots)
                if slots is not None:
                    slots += [None] * len(answers)
                for k, (j, answer) in enumerate(zip(idx, answers)):
                    island, parents = sets[j]
                    slot = None if base is None else base + k
                    read = read_answer(answer, self.limits)
                    if isinstance(read, str):
                        text = answer if isinstance(answer, str) else repr(answer)
                        p = Proposal(text, "", None, "", arm, island, tuple(parents), slot)
                        reason = f"unparseable: {read}"
                    else:
                        p = Proposal(read[0], read[1], read[2], canonical(read[2]), arm, island, tuple(parents),
                                     slot)
                        reason = None if self.db.is_new(p.form) and p.form not in forms else "duplicate"
                    tally.count(arm, reason)
                    if reason is None:
                        batch.append(p)
                        forms.add(p.form)
                    else:
                        if slot is not None and isinstance(read, str):   # the verifier's reward for it, no call
                            tagged = isinstance(answer, str) and holds_alpha_tag(answer)
                            kind = "unparseable" if tagged else "missing_tag"
                            slots[slot] = (self.verifier.config.invalid_reward(kind), False)
                        self.rejected += 1
                        self.bandit.update(arm, 0.0)
                        log.append(_rejection(self.groups + 1, p, reason))
            if len(batch) < n and self.say is not None and tally.due():
                self.say(tally.filling_line(round_no, n - len(batch)))
        if len(batch) < n and self.say is not None:       # said whenever it happens: the model is not being used
            self.say(tally.fallback_line(n - len(batch)))
        while len(batch) < n:                                     # the mutators are stuck: random formulas
            batch.append(self._random(forms))
            forms.add(batch[-1].form)
        return batch[:n]

    def _random(self, taken: set[str]) -> Proposal:
        for _ in range(10_000):
            ok = checked(random_node(self.rng, 4), self.limits)
            if ok is not None and self.db.is_new(canonical(ok[1])) and canonical(ok[1]) not in taken:
                return Proposal(f"<alpha>{ok[0]}</alpha>", ok[0], ok[1], canonical(ok[1]), "random", None)
        raise EvolutionError("no new formula could be drawn: the run has exhausted what it can reach")

    # ------------------------------------------------------------------ scoring
    def score(self, batch: list[Proposal], log: list) -> None:
        group_no = self.groups + 1
        archive = self.verifier.archive
        before = set(zip(archive.forms, archive.added))
        # prepared on the scoring pool, scored here: the serial loop's scores bit for bit (alpha_gym.pool)
        group = score_groups(self.verifier, [[p.answer for p in batch]], workers=self.workers)[0]
        new = {archive.texts[i]: i for i in range(len(archive))             # the entries this group added
               if not archive.seed[i] and (archive.forms[i], archive.added[i]) not in before}
        for k, (p, s, ev) in enumerate(zip(batch, group.scores, group.evaluated)):
            call = self.calls + k + 1
            improvement = None
            if s.valid:
                d = s.diagnostics
                prog = self.db.add(p.text, p.node, s.reward, s.channels["cpcv"], d.get("cpcv"), d.get("turnover"),
                                   d.get("ic"), d.get("max_pnl_corr"), [q.id for q in p.parents], call, p.island,
                                   p.origin)
                if ev is not None and ev.text in new:
                    i = new[ev.text]
                    self.admitted[prog.id] = {"step": group_no, "formula": ev.text, "form": archive.forms[i],
                                              "train_cpcv": finite_or_none(archive.cpcv[i]),
                                              "turnover": finite_or_none(ev.turnover), "added": int(archive.added[i])}
                    self.candidates[prog.id] = Candidate.from_evaluated(ev)
            else:
                self.db.note_scored(p.form)
            if p.slot is not None:
                self.outcomes[p.origin][p.slot] = (float(s.reward), bool(s.valid))
            if p.origin in self.bandit.arms:
                baseline = p.parents[0].reward if p.parents else 0.0
                improvement = max(0.0, s.reward - baseline) if s.valid else 0.0
                self.bandit.update(p.origin, improvement)
            log.append({"group": group_no, "call": call, "origin": p.origin, "island": p.island,
                        "parents": [q.id for q in p.parents], "answer": p.answer, "formula": p.text,
                        "status": "scored", "valid": bool(s.valid), "reason": s.reason,
                        "reward": finite_or_none(s.reward), "improvement": improvement})
        self.calls += len(batch)
        self.groups = group_no

    def observe(self) -> dict:
        """Hand each observing mutator its outcomes of the group; the updates they report, by mutator."""
        updates = {}
        for name, outcomes in self.outcomes.items():
            done = self.mutators[name].observe(list(outcomes))
            outcomes.clear()
            if done is not None:
                updates[name] = done
        return updates

    def book(self) -> BookSelection:
        if self._book is None:       # select_correlation_capped's book, kept from one group to the next
            cfg = self.settings["book"]
            self._book = GrowingCappedBook(cfg["max_corr"], cfg["min_turnover"])
        return self._book.select(self.candidates.values())

    def row(self, book: BookSelection, refreshed: str | None, updates: dict | None = None) -> dict:
        best = self.db.best()
        extra = {} if not self.outcomes else {"updates": updates or {}}   # only a run with a learning mutator
        return {**extra, "group": self.groups, "calls": self.calls, "budget": self.budget,
                "best_reward": None if best is None else best.reward, "best": None if best is None else best.text,
                "programs": len(self.db), "book_members": book.n, "effective_bets": book.effective_bets,
                "book_cpcv": book_cpcv(book, self.verifier.config.cpcv),
                "admitted": len(self.admitted), "rejected": self.rejected, "refresh": refreshed,
                "arms": self.bandit.shares()}

    # ------------------------------------------------------------------ checkpoints
    def state(self, archive_file: str, learners: dict | None = None) -> dict:
        return {"format": STATE_FORMAT, "settings": self.settings, "budget": self.budget, "calls": self.calls,
                "groups": self.groups, "seeded": self.seeded, "rejected": self.rejected,
                "rng": self.rng.bit_generator.state, "database": self.db.to_dict(), "bandit": self.bandit.to_dict(),
                "admitted": {str(k): v for k, v in sorted(self.admitted.items())}, "history": self.history,
                "archive": archive_file, **({"learners": learners} if learners else {})}

    def checkpoint(self, log: list, book: BookSelection) -> None:
        """Append the group's log lines, write the archive and the state that names it (atomically), then remove
        the other slot's files (a resume needs only the ones this state names) and write the run's archive lines
        and book as they stand."""
        if self.out is None:
            return
        with open(self.out / PROPOSALS_LOG, "a", encoding="utf-8") as fh:
            fh.write("".join(json_dumps(row) + "\n" for row in log))
        turn = 0 if self.turn is None else 1 - self.turn  # the slot the state on disk does not name
        archive_file = archive_slot(turn)
        self.verifier.save_archive(self.out / archive_file)
        learners = {}                                    # a learning mutator's state, in the same slot
        for name, m in self.mutators.items():
            if hasattr(m, "save_state"):
                learners[name] = learner_file(name, turn)
                m.save_state(self.out / learners[name])
        _write_atomic(self.out / STATE_FILE, json_dumps(self.state(archive_file, learners)))
        self.turn = turn
        # the other slot: the last state's files, or ones a kill left before their state was written
        (self.out / archive_slot(1 - turn)).unlink(missing_ok=True)
        for name in learners:
            (self.out / learner_file(name, 1 - turn)).unlink(missing_ok=True)
        self.write_outputs(book)

    def write_outputs(self, book: BookSelection) -> None:
        """archive.jsonl and book.json as the run stands (book.json names the calls and groups it is of)."""
        lines = [self.admitted[k] for k in sorted(self.admitted)]
        _write_atomic(self.out / ARCHIVE_LOG, "".join(json_dumps(line) + "\n" for line in lines))
        _write_atomic(self.out / BOOK_FILE, json_dumps({"calls": self.calls, "groups": self.groups,
                                                        "n_admitted": len(lines), "n_members": book.n,
                                                        "effective_bets": book.effective_bets,
                                                        "members": list(book.members), "selection": book.to_dict()},
                                                       indent=1))

    def restore(self, checked: RunState, log: list[str]) -> None:
        """Go on from a checkpoint read back (`run_state.check_state`) and its log's lines up to it."""
        d = checked.state
        learning = sorted(n for n, m in self.mutators.items() if hasattr(m, "load_state"))
        if sorted(d.get("learners", {})) != learning:
            raise EvolutionError(f"{self.out / STATE_FILE} names the learners {sorted(d.get('learners', {}))}, "
                                 f"not the run's learning mutators {learning}: edited, or not this run's")
        self.db, self.bandit = checked.database, checked.bandit
        self.calls, self.groups, self.seeded, self.rejected = d["calls"], d["groups"], d["seeded"], d["rejected"]
        self.rng.bit_generator.state = d["rng"]
        self.history = list(d["history"])
        self.admitted = {int(k): v for k, v in d["admitted"].items()}
        self.verifier.load_archive(self.out / d["archive"])
        self.turn = ARCHIVE_SLOTS.index(d["archive"])
        for name, file in d.get("learners", {}).items():
            self.mutators[name].load_state(self.out / file)
        for pid, line in sorted(self.admitted.items()):      # the book's P&L is traded again (not a scored call)
            self.candidates[pid] = Candidate.from_evaluated(self.verifier.evaluate(line["formula"]))
        _write_atomic(self.out / PROPOSALS_LOG, "".join(line + "\n" for line in log))


def evolve(verifier, mutators: Mutator | Sequence[Mutator], database_config: DatabaseConfig = DatabaseConfig(),
           budget: int = 1600, seed: int = 0, out_dir=None, *, seed_formulas: Sequence[str] | None = None,
           group_size: int = 8, bandit_config: BanditConfig = BanditConfig(), max_rounds: int = 20,
           book_max_corr: float = 0.5, book_min_turnover: float = 0.02,
           progress: Callable[[dict], None] | None = print_progress, workers: int | None = None,
           checkpoint_every: int | None = None, say: Callable[[str], None] | None = print_note,
           note_every_s: float = NOTE_EVERY_S,
           checkpointed: Callable[[list[dict]], None] | None = None) -> EvolutionResult:
    """Evolve formulas for exactly `budget` verifier calls; see the module docstring for every rule.

    verifier: the `Verifier` whose reward drives the run; its archive grows as in training, and a resumed run
    replaces it with the checkpoint's (pass a `fork()` to leave the caller's alone). mutators: one or more
    `Mutator`s with distinct names (more than one: the bandit shares the proposals). out_dir: where the
    checkpoint, the logs, archive.jsonl and book.json go; a folder holding a run's state.json is resumed
    (with the same settings; the budget may grow). None: nothing is written and nothing resumes.
    seed_formulas: None for the Alpha101 set. progress: called with each group's row (None: silent).
    workers: scoring processes (`alpha_gym.pool`: each group's answers prepared on them, its channels scored
    here against the archive; None: every usable core, 1: this process); the run is the same on any number.
    checkpoint_every: write the checkpoint after every N-th group (None: by time, see the module docstring);
    the run is the same either way, only what a kill loses differs. say: called with the lines between the
    groups' rows (a group still filling, at most every `note_every_s` seconds; the random fill; a resume); None:
    silent. checkpointed: called with the history after each checkpoint is written (the caller's own files).
    """
    mutators = [mutators] if hasattr(mutators, "propose") else list(mutators)
    names = [getattr(m, "name", None) for m in mutators]
    if not mutators or not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise EvolutionError(f"evolve needs one or more mutators with distinct names, got {names!r}")
    for key, v, lo in (("budget", budget, 0), ("group_size", group_size, 1), ("max_rounds", max_rounds, 1),
                       ("seed", seed, 0), ("checkpoint_every", 1 if checkpoint_every is None else checkpoint_every, 1)):
        if not isinstance(v, int) or isinstance(v, bool) or v < lo:
            raise EvolutionError(f"{key} must be an integer >= {lo}, got {v!r}")
    if not isinstance(note_every_s, (int, float)) or isinstance(note_every_s, bool) or not note_every_s >= 0:
        raise EvolutionError(f"note_every_s must be a number of seconds >= 0, got {note_every_s!r}")
    if seed_formulas is None:
        from alpha_gym.alpha101 import formulas as paper
        seed_formulas = list(paper(industry_free=True).values())
    seeds = _seeds(seed_formulas, verifier.config.limits)
    settings = jsonable({"seed": seed, "group_size": group_size, "max_rounds": max_rounds, "mutators": names,
                         "database": database_config.to_dict(), "bandit": bandit_config.to_dict(),
                         "book": {"max_corr": book_max_corr, "min_turnover": book_min_turnover},
                         "seed_formulas": [p.text for p in seeds], "panel": verifier.panel.fingerprint(),
                         "verifier": asdict(verifier.config)})
    learning = {n: m.settings() for n, m in zip(names, mutators) if hasattr(m, "settings")}
    if learning:                                  # absent for the other mutators: their old folders still resume
        settings["learners"] = jsonable(learning)
    out = None if out_dir is None else check_folder(out_dir)
    run = _Run(verifier, dict(zip(names, mutators)), ProgramDatabase(database_config), Bandit(names, bandit_config),
               np.random.default_rng(seed), settings, budget, out, workers, say, note_every_s)
    with nullcontext() if out is None else locked(out):     # one run in a folder at a time
        return _evolve(run, seeds, budget, group_size, max_rounds, progress, checkpoint_every, checkpointed)


def _evolve(run: _Run, seeds: list[Proposal], budget: int, group_size: int, max_rounds: int,
            progress: Callable[[dict], None] | None, checkpoint_every: int | None,
            checkpointed: Callable[[list[dict]], None] | None) -> EvolutionResult:
    """`evolve`'s loop, in its folder (held) when it has one."""
    out = run.out
    if out is not None:
        loaded = _load_state(out, run.settings)
        if loaded is not None:
            checked, lines = loaded
            if checked.state["calls"] > budget:
                raise EvolutionError(f"{out} holds a run that made {checked.state['calls']} calls, more than budget "
                                     f"{budget}")
            run.restore(checked, lines)
            if run.say is not None:
                run.say(f"evolve: resuming at {run.calls} calls (group {run.groups}) of {budget} from {out}"
                        if run.calls < budget else f"evolve: the run in {out} has made its {budget} calls")
        elif (out / PROPOSALS_LOG).exists():
            _write_atomic(out / PROPOSALS_LOG, "")   # a fresh run: no line of another is kept
    log: list = []                   # the proposals since the last checkpoint (written with it)
    due = _CheckpointClock(checkpoint_every)
    written = False
    while run.calls < budget:
        n = min(group_size, budget - run.calls)
        batch = run.seed_batch(seeds, n, log) if run.seeded < len(seeds) else []
        if not batch:
            batch = run.proposal_batch(n, max_rounds, log)
        run.score(batch, log)
        updates = run.observe()
        refreshed = run.db.tick(run.calls, run.rng)
        book = run.book()
        run.history.append(run.row(book, refreshed, updates))
        if run.calls >= budget or due.now(run.groups):
            with due.timing():
                run.checkpoint(log, book)
            log, written = [], True
            if checkpointed is not None:
                checkpointed(run.history)
        if progress is not None:
            progress(run.history[-1])
    book = run.book()
    if out is not None and not written:     # a rerun of a finished run: its files as the state holds them
        run.write_outputs(book)
    lines = [run.admitted[k] for k in sorted(run.admitted)]
    return EvolutionResult(run.db, run.bandit, book, lines, run.calls, budget, run.groups, run.rejected, run.history)


# ------------------------------------------------------------------------------------------ helpers
def _seeds(formulas: Sequence[str], limits: Limits) -> list[Proposal]:
    """The distinct seed formulas that parse under `limits`, in the order given."""
    out, seen = [], set()
    for f in formulas:
        read = read_answer(f, limits)
        if isinstance(read, str):
            continue
        form = canonical(read[2])
        if form not in seen:
            seen.add(form)
            out.append(Proposal(read[0], read[1], read[2], form, "seed", None))
    return out


def _rejection(group: int, p: Proposal, reason: str) -> dict:
    return {"group": group, "call": None, "origin": p.origin, "island": p.island,
            "parents": [q.id for q in p.parents], "answer": p.answer, "formula": p.text or None,
            "status": "rejected", "reason": reason}


class _FillTally:
    """What the mutators wrote for one group's places, per mutator: answers asked, new formulas, duplicates and
    unparseable answers (the last one's reason kept), for the lines said while the group fills."""

    def __init__(self, group: int, places: int, max_rounds: int, every_s: float):
        self.group, self.places, self.max_rounds, self.every_s = group, places, max_rounds, every_s
        self.arms: dict[str, dict[str, int]] = {}
        self.last_refusal: str | None = None
        self.t0 = self.said = time.perf_counter()

    def count(self, arm: str, reason: str | None) -> None:
        c = self.arms.setdefault(arm, {"asked": 0, "new": 0, "duplicates": 0, "unparseable": 0})
        c["asked"] += 1
        c["new" if reason is None else "duplicates" if reason == "duplicate" else "unparseable"] += 1
        if reason is not None and reason != "duplicate":
            self.last_refusal = reason

    def due(self) -> bool:
        """Whether a filling line is due (every_s since the group began or the last line); marks it said."""
        now = time.perf_counter()
        if now - self.said < self.every_s:
            return False
        self.said = now
        return True

    def counts(self) -> str:
        total = {k: sum(c[k] for c in self.arms.values()) for k in ("asked", "new", "duplicates", "unparseable")}
        text = (f"{total['asked']} answers asked: {total['new']} new, {total['duplicates']} duplicates, "
                f"{total['unparseable']} unparseable")
        if len(self.arms) > 1:
            text += " (" + "; ".join(f"{a}: {c['asked']} asked, {c['new']} new" for a, c in self.arms.items()) + ")"
        return text

    def filling_line(self, round_no: int, open_places: int) -> str:
        return (f"evolve: filling group {self.group}, round {round_no} of {self.max_rounds}: {self.counts()}; "
                f"{open_places} of {self.places} places open after {time.perf_counter() - self.t0:.0f} s")

    def fallback_line(self, open_places: int) -> str:
        last = f"; the last refused: {shown(self.last_refusal)}" if self.last_refusal else ""
        return (f"evolve: falling back to random formulas for {open_places} of {self.places} places of group "
                f"{self.group}: in {self.max_rounds} rounds {', '.join(self.arms)} wrote too few new formulas "
                f"({self.counts()}{last})")


class _CheckpointClock:
    """When the loop writes its checkpoint: after every `every`-th group, or (every=None) once the time since
    the last checkpoint ended is CHECKPOINT_RATIO times what that checkpoint took (the first group: at once)."""

    def __init__(self, every: int | None):
        self.every = every
        self.ended, self.took = time.perf_counter(), 0.0

    def now(self, group: int) -> bool:
        if self.every is not None:
            return group % self.every == 0
        return time.perf_counter() - self.ended >= CHECKPOINT_RATIO * self.took

    @contextmanager
    def timing(self):
        t0 = time.perf_counter()
        yield
        self.ended = time.perf_counter()
        self.took = self.ended - t0


def _load_state(out: Path, settings: dict) -> tuple[RunState, list[str]] | None:
    """The checkpoint in `out` (None: a fresh run) and its log's lines up to it, once its settings are this
    run's and every field checks out (`alpha_gym.search.run_state`)."""
    path = out / STATE_FILE
    if not path.exists():
        return None
    state = load_state_json(path)
    kept = state.get("settings")
    if kept != json.loads(json_dumps(settings)):
        if not isinstance(kept, dict):
            raise EvolutionError(f"{path} holds no settings object: damaged or edited")
        differ = sorted(k for k in set(settings) | set(kept)
                        if json.loads(json_dumps(settings.get(k))) != kept.get(k))
        raise EvolutionError(f"{out} holds a run with other settings ({', '.join(differ)}): resume it with the "
                             f"same settings or choose another out_dir")
    checked = check_state(state, out, path)
    lines = read_log(out / PROPOSALS_LOG, state["groups"], state["calls"])
    return checked, [line for line, _row in lines]


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)
