"""AlphaFormula-v0: one brief in, one formula out, one deterministic score back."""

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
from alpha_gym.market.resolve import resolve_panel
from alpha_gym.scoring.config import VerifierConfig
from alpha_gym.scoring.report import format_score
from alpha_gym.scoring.verifier import Score, Verifier
from alpha_gym.tasks.briefs import Brief
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
    `AsyncVectorEnv`); building `SyncVectorEnv` or `AsyncVectorEnv` by hand, pass
    `autoreset_mode=AlphaFormulaEnv.metadata["autoreset_mode"]`.

    Options (keyword arguments of `gym.make`): `panel` (a Panel) or `data` (a
    CSV/Parquet path in the long format), `universe` (list or ticker file),
    `train_start`/`train_end` (dates; nothing after `train_end` is reachable),
    `cost_model` (a `TrainingCosts`), `config` (a `VerifierConfig`, or a settings TOML file: its
    `[verifier]`), `briefs` ("train" (default): the training split of the 500 seeded briefs; "probe":
    the 50 held-out probe briefs; "fixed"; or a sequence of `Brief`), `archive` ("grow" (default) or
    "frozen").
    """

    # render_fps: the text render has no frame rate, but Gymnasium's checker asks for one
    metadata = {"render_modes": ["ansi"], "render_fps": 1, "autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, panel: Panel | None = None, data: str | None = None, universe=None,
                 train_start=None, train_end=None, cost_model: TrainingCosts | None = None,
                 config: VerifierConfig | str | None = None, briefs: str | Sequence[Brief] = "train",
                 verifier: Verifier | None = None, render_mode: str | None = None, archive: str = "grow"):
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
        if verifier is None:
            config = config or VerifierConfig()
            if cost_model is not None:
                config = config.with_(costs=cost_model)
            verifier = Verifier(resolve_panel(panel, data, universe, train_start, train_end), config)
        self.verifier = verifier
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
        self._last: Score | None = None
        self._over = True  # no episode until reset()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "brief_id" in options:
            matches = [b for b in self.briefs if b.id == options["brief_id"]]
            if not matches:
                raise ValueError(f"no brief with id {options['brief_id']!r}")
            self._brief = matches[0]
        elif "brief_index" in options:
            self._brief = self.briefs[int(options["brief_index"]) % len(self.briefs)]
        else:
            self._brief = self.briefs[int(self.np_random.integers(len(self.briefs)))]
        self._last = None
        self._over = False
        prompt = render_prompt(self._brief, self.verifier.config.limits)
        return prompt, {"brief_id": self._brief.id, "family": self._brief.family}

    def step(self, action: str):
        if self._over:
            raise EpisodeOverError("call reset() before step()" if self._brief is None else
                                   "the episode is over (terminated=True after its one answer): call reset() "
                                   "before the next step")
        group = self.verifier.score_group([action], brief=self._brief)
        score = group.scores[0]
        self._over = True
        if self.grow_archive:
            self.verifier.update_archive(group)
        self._last = score
        info = {"valid": score.valid, "reason": score.reason, "channels": dict(score.channels),
                "diagnostics": score.diagnostics, "formula": score.formula, "brief_id": self._brief.id,
                "archive_size": len(self.verifier.archive), "world_model": score.world_model}
        return render_prompt(self._brief, self.verifier.config.limits), float(score.reward), True, False, info

    def render(self):
        if self.render_mode == "ansi":
            if self._last is None:
                return "(no answer scored yet)"
            return format_score(self._last, self.verifier.config.priorities)
        return None


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
    if vectorization_mode not in ("sync", "async"):
        raise ValueError(f"vectorization_mode must be 'sync' or 'async', got {vectorization_mode!r}")
    kwargs.pop("max_episode_steps", None)  # Gymnasium passes the spec's value; every episode is one step anyway
    if vectorization_mode == "sync" and kwargs.get("verifier") is None:  # load the data once, not once per env
        kwargs["panel"] = resolve_panel(*(kwargs.pop(k, None) for k in ("panel", "data", "universe", "train_start",
                                                                        "train_end")))

    def one():
        return AlphaFormulaEnv(**kwargs)

    cls = gym.vector.SyncVectorEnv if vectorization_mode == "sync" else gym.vector.AsyncVectorEnv
    return cls([one] * int(num_envs), autoreset_mode=AlphaFormulaEnv.metadata["autoreset_mode"])
