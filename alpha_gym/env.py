"""AlphaFormula-v0: one brief in, one formula out, one deterministic score back. AlphaFormulaEvolve-v0: the same
with k parent formulas and their numbers in the prompt (the improve task)."""

from __future__ import annotations

import logging
import os
import string
from typing import Any, Sequence

import gymnasium as gym
from gymnasium import spaces
from gymnasium.error import ResetNeeded
from gymnasium.vector import AutoresetMode

from alpha_gym.book.costs import TrainingCosts
from alpha_gym.language.answer import MAX_ANSWER_CHARS
from alpha_gym.market import Panel
from alpha_gym.evaluation.validation import ValidationScorer
from alpha_gym.market.folds import Fold, FoldPlan, cut_fold, fold_number, make_fold
from alpha_gym.market.resolve import resolve_panel
from alpha_gym.scoring.config import VerifierConfig
from alpha_gym.scoring.report import format_score
from alpha_gym.scoring.verifier import Score, Verifier
from alpha_gym.search.database import DatabaseConfig, Program, ProgramDatabase
from alpha_gym.tasks.parents import parents_context
from alpha_gym.search.task_prompts import draw_parents, program_database
from alpha_gym.tasks.briefs import Brief
from alpha_gym.tasks.improve import improvement
from alpha_gym.tasks.sets import brief_set
from alpha_gym.tasks.task import render_prompt

log = logging.getLogger("alpha_gym")
_ANNOUNCED: set[tuple[str, str | None]] = set()  # world models already logged by this process

class EpisodeOverError(ResetNeeded, RuntimeError):
    """`step()` with no episode running: before the first `reset()`, or after the episode terminated."""


#: Characters of observations and actions: printable ASCII (letters, digits, punctuation, whitespace).
CHARSET = string.printable
MAX_PROMPT_CHARS = 4096


class AlphaFormulaEnv(gym.Env):
    """A language model writes one trading formula for a design brief; the verifier scores it.

    Observation: the brief's prompt text (`spaces.Text`, printable ASCII, at
    most 4096 characters): the request, the answer contract and a compact DSL reference, rendered by the
    write task (`alpha_gym.tasks.task.render_prompt`) under the verifier's limits; the brief goes to the
    scoring with the answer (`score_group([answer], brief=)`).

    Action: the model's raw answer text (`spaces.Text`, at most 32,768
    characters). The formula must sit in exactly one `<alpha>...</alpha>` block.

    Reward: the verifier's scalar reward, `score_group([answer])`'s: the
    priority-weighted sum of the 14 reward channels, for every answer. Invalid
    answers (no `<alpha>` block, a formula that does not parse or breaks a
    limit, a book that trades less than 2% a day, in that order) score below
    every valid answer (`VerifierConfig.invalid_rewards`).

    Termination: every episode is one step (`terminated=True`); there is no truncation. A step
    before the first `reset()`, or after the episode has terminated, raises `EpisodeOverError`
    (Gymnasium's `ResetNeeded`, also a RuntimeError) instead of scoring again; vector envs
    reset their sub-environments as they terminate, so they never see it.

    Info (after `step`): `valid`, `reason`, `channels` (raw values before
    priorities), `diagnostics` (the 15 CPCV slices, turnover, IC, Sharpe, ...),
    `formula`, `brief_id`, `archive_size`.

    Novelty archive (R8/R9): a valid answer whose core score is above
    `config.archive_min_core` joins the archive after its step, so a formula
    repeated across episodes loses its novelty bonus, as in training.
    `archive="frozen"` keeps the archive as it is (seeded with Alpha101 books).

    Vectorised: declares `autoreset_mode=SAME_STEP` (every step is a whole
    episode, so next-step autoreset would discard every second batch of
    answers). `gym.make_vec("AlphaFormula-v0", num_envs=N)` builds a
    `SyncVectorEnv` in that mode (`vectorization_mode="async"` an
    `AsyncVectorEnv`, its prompts sent by pipe: Gymnasium's shared memory garbles Text observations);
    building `SyncVectorEnv` or `AsyncVectorEnv` by hand, pass
    `autoreset_mode=AlphaFormulaEnv.metadata["autoreset_mode"]` (and `shared_memory=False` to the async one).

    Options (keyword arguments of `gym.make`): `panel` (a Panel) or `data` (a
    CSV/Parquet path in the long format), `universe` (list or ticker file),
    `train_start`/`train_end` (dates; nothing after `train_end` is reachable),
    `cost_model` (a `TrainingCosts`), `config` (a `VerifierConfig`, or a settings TOML file: its
    `[verifier]`), `briefs` ("train" (default): the training split of the 500 seeded briefs; "probe":
    the 50 held-out probe briefs; "fixed"; or a sequence of `Brief`), `archive` ("grow" (default) or
    "frozen"), `fold` (a walk-forward fold: its number under the default plan, or a `Fold`; the verifier
    sees that fold's search window only, `alpha_gym.market.folds`) and `validation_score` (with `fold`;
    default False): `info["validation"]` then holds the answer's score on the fold's validation window
    (`alpha_gym.evaluation.validation`), a reading for early stopping and choosing that never enters the
    reward.
    """

    # render_fps: the text render has no frame rate, but Gymnasium's checker asks for one
    metadata = {"render_modes": ["ansi"], "render_fps": 1, "autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, panel: Panel | None = None, data: str | None = None, universe=None,
                 train_start=None, train_end=None, cost_model: TrainingCosts | None = None,
                 config: VerifierConfig | str | None = None, briefs: str | Sequence[Brief] = "train",
                 verifier: Verifier | None = None, render_mode: str | None = None, archive: str = "grow",
                 fold: "int | Fold | None" = None, validation_score: bool = False):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        if archive not in ("grow", "frozen"):
            raise ValueError(f"archive must be 'grow' or 'frozen', got {archive!r}")
        self.render_mode = render_mode
        self.grow_archive = archive == "grow"
        if isinstance(config, (str, os.PathLike)):  # a settings file: its [verifier] table
            from alpha_gym.settings import load
            config = load(config).verifier
        auto = verifier is None and (config or VerifierConfig()).stress_checkpoint == "auto"
        if validation_score is not False and validation_score is not True:
            raise ValueError(f"validation_score must be True or False, got {validation_score!r}")
        if validation_score and fold is None:
            raise ValueError("validation_score=True needs fold=K: the validation window is a walk-forward fold's")
        if fold is not None and verifier is not None:
            raise ValueError("pass fold= or verifier=, not both: the fold decides the window the verifier sees")
        fold_panels = None
        if verifier is None:
            config = config or VerifierConfig()
            if cost_model is not None:
                config = config.with_(costs=cost_model)
            market = resolve_panel(panel, data, universe, train_start, train_end)
            if fold is not None:   # a Fold (any plan) or a fold number of the default plan
                chosen = (fold if isinstance(fold, Fold) else
                          make_fold(market.dates, fold_number(fold, FoldPlan().n_folds)))
                fold_panels = cut_fold(market, chosen)
                market = fold_panels.search
            verifier = Verifier(market, config)
        self.verifier = verifier
        self.fold = None if fold_panels is None else fold_panels.fold
        self.validation = ValidationScorer(fold_panels, verifier) if validation_score else None
        announce_world_model(verifier, auto)
        self.briefs = brief_set(briefs) if isinstance(briefs, str) else tuple(briefs)
        if not self.briefs:
            raise ValueError("the environment needs at least one brief")
        for b in self.briefs:
            prompt = render_prompt(b, verifier.config.limits)  # the prompt states the limits this verifier applies
            bad = set(prompt) - set(CHARSET)
            if bad or len(prompt) > MAX_PROMPT_CHARS:
                raise ValueError(f"brief {b.id} has characters outside printable ASCII ({sorted(bad)[:5]}) "
                                 f"or is longer than {MAX_PROMPT_CHARS}")
        self.observation_space = spaces.Text(max_length=MAX_PROMPT_CHARS, min_length=1, charset=CHARSET)
        self.action_space = spaces.Text(max_length=MAX_ANSWER_CHARS, min_length=0, charset=CHARSET)
        self._brief: Brief | None = None
        self._prompt = ""
        self._last: Score | None = None
        self._over = True  # no episode until reset()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._brief = self._draw_brief(options or {})
        self._last = None
        self._over = False
        self._prompt = render_prompt(self._brief, self.verifier.config.limits)
        return self._prompt, {"brief_id": self._brief.id, "family": self._brief.family}

    def _draw_brief(self, options: dict[str, Any]):
        """The brief `options` names (`brief_id`, `brief_index`), else one drawn with the env's generator."""
        if "brief_id" in options:
            matches = [b for b in self.briefs if b is not None and b.id == options["brief_id"]]
            if not matches:
                raise ValueError(f"no brief with id {options['brief_id']!r}")
            return matches[0]
        if "brief_index" in options:
            return self.briefs[int(options["brief_index"]) % len(self.briefs)]
        return self.briefs[int(self.np_random.integers(len(self.briefs)))]

    def step(self, action: str):
        if self._over:
            raise EpisodeOverError("call reset() before step()" if not self._prompt else
                                   "the episode is over (terminated=True after its one answer): call reset() "
                                   "before the next step")
        group = self.verifier.score_group([action], brief=self._brief)
        score = group.scores[0]
        self._over = True
        if self.grow_archive:
            self.verifier.update_archive(group)
        self._last = score
        info = {"valid": score.valid, "reason": score.reason, "channels": dict(score.channels),
                "diagnostics": score.diagnostics, "formula": score.formula,
                "brief_id": None if self._brief is None else self._brief.id,
                "archive_size": len(self.verifier.archive), "world_model": score.world_model}
        if self.validation is not None:
            info["validation"] = self.validation.reading(score.formula, score.valid, score.reason)
        return self._prompt, float(score.reward), True, False, info

    def render(self):
        if self.render_mode == "ansi":
            if self._last is None:
                return "(no answer scored yet)"
            return format_score(self._last, self.verifier.config.priorities)
        return None


class AlphaFormulaEvolveEnv(AlphaFormulaEnv):
    """The improve task: a language model writes one formula better than k earlier ones; the verifier scores it.

    Observation: the improve task's prompt (`spaces.Text`, printable ASCII, at most 4096 + k x
    (limits.max_chars + 200) characters): the brief's request (or a generic one with `briefs=None`), k parent
    formulas, each with its train-window reward, CPCV, daily turnover, IC and max |corr| with the book, the
    instruction, the answer contract and the DSL reference, rendered by `render_prompt(..., task="improve")`.

    Action: the model's raw answer text, as in `AlphaFormula-v0`: one `<alpha>...</alpha>` block.

    Reward: the verifier's scalar reward of the answer, exactly as `AlphaFormula-v0` gives it
    (`score_group([answer], brief=)`'s: the priority-weighted sum of the reward channels; invalid answers
    below every valid one). The parents change the prompt, never the scoring.

    Termination: every episode is one step (`terminated=True`); no truncation; a step before `reset()` or
    after the episode raises `EpisodeOverError`.

    Info: at reset, `brief_id` (None without a brief), `family`, `parent_ids`, `parents` (their formulas),
    `parent_rewards`, `island`; after `step`, those of `AlphaFormula-v0` plus `improvement` (the reward less
    the best parent's reward, also in `diagnostics`), `best_parent_reward` and `parent_ids`.

    Parents: each reset draws an island of the program database (uniformly among the non-empty ones) and
    `parents_per_prompt` distinct programs of it with the database's weights (`ProgramDatabase.weights`:
    softmax of the standardised reward, fewer for programs with many offspring), best first, with the env's
    generator; the database is read, never changed, so a seed gives the same episode. `database`: None (the
    Alpha101 formulas that need no sector labels or market cap, scored by this env's verifier), a
    `ProgramDatabase`, a sequence of formulas (scored), an `evolve` run folder or its state.json (the run's
    database: the checkpoint checked field by field, each program's text parsed again and its numbers
    range-checked, an InputError otherwise), or a JSONL file whose lines hold a `formula` (a run's
    archive.jsonl: scored). Formulas that do not parse or score invalid are left out; an empty database is
    refused. The verifier's archive grows
    with the answers as in `AlphaFormula-v0` (`archive=`); the database does not.

    Options of reset: those of `AlphaFormula-v0` (`brief_id`, `brief_index`) and `parents` (a sequence of
    `Program`s or formulas, which are scored: these parents instead of a draw). Keyword arguments: those of
    `AlphaFormula-v0`, `briefs=None` (no brief), `database` and `parents_per_prompt` (k, 1..16, default 2).

    Vectorised as `AlphaFormula-v0` (SAME_STEP autoreset): `gym.make_vec("AlphaFormulaEvolve-v0", num_envs=N)`
    builds the database once and gives it to every sub-environment.
    """

    def __init__(self, panel: Panel | None = None, data: str | None = None, universe=None,
                 train_start=None, train_end=None, cost_model: TrainingCosts | None = None,
                 config: VerifierConfig | str | None = None, briefs: str | Sequence[Brief] | None = "train",
                 verifier: Verifier | None = None, render_mode: str | None = None, archive: str = "grow",
                 database=None, parents_per_prompt: int = 2, fold: "int | Fold | None" = None,
                 validation_score: bool = False):
        if not isinstance(parents_per_prompt, int) or isinstance(parents_per_prompt, bool) \
                or not 1 <= parents_per_prompt <= 16:
            raise ValueError(f"parents_per_prompt must be an integer in 1..16, got {parents_per_prompt!r}")
        super().__init__(panel, data, universe, train_start, train_end, cost_model, config,
                         "fixed" if briefs is None else briefs, verifier, render_mode, archive, fold=fold,
                         validation_score=validation_score)
        if briefs is None:
            self.briefs = (None,)
        self.parents_per_prompt = parents_per_prompt
        self.database = program_database(database, self.verifier, DatabaseConfig(parents_per_prompt=parents_per_prompt))
        if not self.database.programs:
            raise ValueError("the program database holds no valid formula: the improve task needs parents")
        self.max_prompt_chars = MAX_PROMPT_CHARS + parents_per_prompt * (self.verifier.config.limits.max_chars + 200)
        self.observation_space = spaces.Text(max_length=self.max_prompt_chars, min_length=1, charset=CHARSET)
        self._parents: tuple[Program, ...] = ()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        gym.Env.reset(self, seed=seed)
        options = options or {}
        self._brief = self._draw_brief(options)
        if "parents" in options:
            self._parents = tuple(sorted(_programs(options["parents"], self.verifier), key=lambda p: (-p.reward, p.id)))
            island = None
        else:
            island, self._parents = self._draw_parents()
        self._last = None
        self._over = False
        self._prompt = render_prompt(self._brief, self.verifier.config.limits,
                                     {"parents": parents_context(self._parents)}, task="improve")
        if len(self._prompt) > self.max_prompt_chars or set(self._prompt) - set(CHARSET):
            raise ValueError(f"the improve prompt is longer than {self.max_prompt_chars} characters or holds "
                             "characters outside printable ASCII: its parents' formulas are too long")
        return self._prompt, {"brief_id": None if self._brief is None else self._brief.id,
                              "family": None if self._brief is None else self._brief.family,
                              "parent_ids": [p.id for p in self._parents], "parents": [p.text for p in self._parents],
                              "parent_rewards": [p.reward for p in self._parents], "island": island}

    def _draw_parents(self) -> tuple[int, tuple[Program, ...]]:
        return draw_parents(self.database, self.parents_per_prompt, self.np_random)

    def step(self, action: str):
        obs, reward, terminated, truncated, info = super().step(action)
        rewards = [p.reward for p in self._parents]
        gain = improvement(reward, rewards)
        info.update(improvement=gain, best_parent_reward=max(rewards) if rewards else None,
                    parent_ids=[p.id for p in self._parents], diagnostics={**info["diagnostics"], "improvement": gain})
        return obs, reward, terminated, truncated, info


def _programs(formulas, verifier: Verifier, config: DatabaseConfig = DatabaseConfig()) -> list[Program]:
    """Programs as given, and formulas scored as one group (the archive untouched); ValueError for a formula
    that does not parse or scores invalid."""
    given = list(formulas)
    texts = [f for f in given if isinstance(f, str)]
    db = program_database(texts, verifier, config, strict=True) if texts else None
    out, k = [], 0
    for f in given:
        if isinstance(f, Program):
            out.append(f)
        elif isinstance(f, str):
            out.append(db.programs[k])
            k += 1
        else:
            raise ValueError(f"a parent is a Program or a formula string, got {type(f).__name__}")
    return out


def announce_world_model(verifier: Verifier, auto: bool = False) -> str:
    """Log, once per process and model, which world model R3 uses (the rewards depend on it); returns the line.

    WARNING when "auto" found a model in this machine's registry (`alpha-gym stress fit` put it there: the
    same answer scores differently on a machine without it), INFO otherwise (R3 off, or a model the settings name).
    """
    stress = verifier.stress
    where = None if stress is None or not stress.on else stress.directory
    if stress is not None and stress.on:
        line = (f"alpha-gym: R3 world model {verifier.world_model} at {where}"
                + (" (found by stress_checkpoint='auto' in this machine's registry; rewards depend on it: "
                   "set stress_checkpoint to none to turn it off)" if auto else ""))
    else:
        why = stress.reason if stress is not None else verifier._stress_off.removeprefix("off: ").removesuffix(" (contributes 0)")
        line = f"alpha-gym: R3 world model off ({why})"
    key = (verifier.world_model, where)
    if key not in _ANNOUNCED:
        _ANNOUNCED.add(key)
        log.log(logging.WARNING if auto and where is not None else logging.INFO, "%s", line)
    return line


def make_vector_env(num_envs: int = 1, vectorization_mode: str = "sync", **kwargs) -> gym.vector.VectorEnv:
    """`gym.make_vec("AlphaFormula-v0", num_envs=N, ...)`: N environments stepping in SAME_STEP autoreset mode.

    vectorization_mode: "sync" (`SyncVectorEnv`, default) or "async" (`AsyncVectorEnv`, one process each).
    The other keywords go to every `AlphaFormulaEnv`. A synchronous vector shares one panel build.
    """
    return _vector_env(AlphaFormulaEnv, num_envs, vectorization_mode, kwargs)


def make_evolve_vector_env(num_envs: int = 1, vectorization_mode: str = "sync", **kwargs) -> gym.vector.VectorEnv:
    """`gym.make_vec("AlphaFormulaEvolve-v0", num_envs=N, ...)`: as `make_vector_env`, the program database
    built once (by the first sub-environment) and given to every other."""
    return _vector_env(AlphaFormulaEvolveEnv, num_envs, vectorization_mode, kwargs)


def _vector_env(cls, num_envs: int, vectorization_mode: str, kwargs: dict) -> gym.vector.VectorEnv:
    if vectorization_mode not in ("sync", "async"):
        raise ValueError(f"vectorization_mode must be 'sync' or 'async', got {vectorization_mode!r}")
    kwargs.pop("max_episode_steps", None)  # Gymnasium passes the spec's value; every episode is one step anyway
    if vectorization_mode == "sync" and kwargs.get("verifier") is None:  # load the data once, not once per env
        kwargs["panel"] = resolve_panel(*(kwargs.pop(k, None) for k in ("panel", "data", "universe", "train_start",
                                                                        "train_end")))
    first = None
    if cls is AlphaFormulaEvolveEnv and not isinstance(kwargs.get("database"), ProgramDatabase):
        first = cls(**kwargs)                       # scores the database's formulas once
        kwargs["database"] = first.database

    def one():
        return cls(**kwargs)

    fns = [one] * int(num_envs)
    if first is not None and vectorization_mode == "sync" and fns:
        fns[0] = lambda: first
    if vectorization_mode == "sync":
        return gym.vector.SyncVectorEnv(fns, autoreset_mode=cls.metadata["autoreset_mode"])
    # Gymnasium's shared memory reads a Text observation back as a run of "0"s (1.4.0): the prompts go by pipe
    return gym.vector.AsyncVectorEnv(fns, autoreset_mode=cls.metadata["autoreset_mode"], shared_memory=False)
