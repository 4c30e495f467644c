"""AlphaFormula-v0: one brief in, one formula out, one deterministic score back."""

from __future__ import annotations

import string
from functools import lru_cache
from typing import Any, Sequence

import gymnasium as gym
from gymnasium import spaces

from alpha_gym.book.costs import TrainingCosts
from alpha_gym.language.answer import MAX_ANSWER_CHARS
from alpha_gym.market import Panel, load_panel, synthetic_panel
from alpha_gym.scoring.config import VerifierConfig
from alpha_gym.scoring.report import format_score
from alpha_gym.scoring.verifier import Score, Verifier
from alpha_gym.tasks.briefs import FIXED_BRIEFS, Brief

#: Characters of observations and actions: printable ASCII (letters, digits, punctuation, whitespace).
CHARSET = string.printable
MAX_PROMPT_CHARS = 4096


@lru_cache(maxsize=2)
def brief_set(name: str) -> tuple[Brief, ...]:
    """Named brief sets: `train` and `probe` (the seeded 500 briefs split by template family), `fixed`."""
    if name == "fixed":
        return FIXED_BRIEFS
    from alpha_gym.tasks.generator import generate_briefs, split_briefs
    split = split_briefs(generate_briefs(500, seed=0), n_probe=50)
    if name == "train":
        return tuple(split.train)
    if name == "probe":
        return tuple(split.probe)
    raise ValueError(f"unknown brief set {name!r}; use 'train', 'probe', 'fixed' or a sequence of Brief")


@lru_cache(maxsize=4)
def default_panel(n_stocks: int = 46, n_days: int = 3304, seed: int = 0) -> Panel:
    """The embedded synthetic market, built once per process."""
    return synthetic_panel(n_stocks=n_stocks, n_days=n_days, seed=seed)


def resolve_panel(panel: Panel | None = None, data: str | None = None, universe=None,
                  train_start=None, train_end=None) -> Panel:
    """The training panel from the env's options: an explicit panel, a data file, or the synthetic default.

    `train_end` cuts the panel: sessions after it are not reachable from the result.
    """
    if panel is not None and data is not None:
        raise ValueError("pass either panel= or data=, not both")
    if data is not None:
        return load_panel(data, universe=universe, start=train_start, end=train_end)
    base = panel if panel is not None else default_panel()
    if universe is not None:
        from alpha_gym.market import load_universe
        base = base.select(load_universe(universe))
    if train_start is not None or train_end is not None:
        base = base.window(train_start, train_end)
    return base


class AlphaFormulaEnv(gym.Env):
    """A language model writes one trading formula for a design brief; the verifier scores it.

    Observation: the brief's prompt text (`spaces.Text`, printable ASCII, at
    most 4096 characters): the request, the answer contract and a compact DSL reference.

    Action: the model's raw answer text (`spaces.Text`, at most 32,768
    characters). The formula must sit in exactly one `<alpha>...</alpha>` block.

    Reward: the verifier's scalar reward: the priority-weighted sum of the
    reward channels for a valid formula; -1.0 without an `<alpha>` block, -0.8
    for a formula that does not parse or breaks a limit, -0.6 for a book that
    trades less than 2% a day.

    Termination: every episode is one step (`terminated=True`); there is no truncation.

    Info (after `step`): `valid`, `reason`, `channels` (raw values before
    priorities), `diagnostics` (the 15 CPCV slices, turnover, IC, Sharpe, ...),
    `formula`, `brief_id`.

    Options (keyword arguments of `gym.make`): `panel` (a Panel) or `data` (a
    CSV/Parquet path in the long format), `universe` (list or ticker file),
    `train_start`/`train_end` (dates; nothing after `train_end` is reachable),
    `cost_model` (a `TrainingCosts`), `config` (a `VerifierConfig`), `briefs` ("train" (default):
    the training split of the 500 seeded briefs; "probe": the 50 held-out probe briefs; "fixed";
    or a sequence of `Brief`).
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, panel: Panel | None = None, data: str | None = None, universe=None,
                 train_start=None, train_end=None, cost_model: TrainingCosts | None = None,
                 config: VerifierConfig | None = None, briefs: str | Sequence[Brief] = "train",
                 verifier: Verifier | None = None, render_mode: str | None = None):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.render_mode = render_mode
        if verifier is None:
            config = config or VerifierConfig()
            if cost_model is not None:
                config = config.with_(costs=cost_model)
            verifier = Verifier(resolve_panel(panel, data, universe, train_start, train_end), config)
        self.verifier = verifier
        self.briefs = brief_set(briefs) if isinstance(briefs, str) else tuple(briefs)
        if not self.briefs:
            raise ValueError("the environment needs at least one brief")
        for b in self.briefs:
            bad = set(b.prompt()) - set(CHARSET)
            if bad or len(b.prompt()) > MAX_PROMPT_CHARS:
                raise ValueError(f"brief {b.id} has characters outside printable ASCII ({sorted(bad)[:5]}) "
                                 f"or is longer than {MAX_PROMPT_CHARS}")
        self.observation_space = spaces.Text(max_length=MAX_PROMPT_CHARS, min_length=1, charset=CHARSET)
        self.action_space = spaces.Text(max_length=MAX_ANSWER_CHARS, min_length=0, charset=CHARSET)
        self._brief: Brief | None = None
        self._last: Score | None = None

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
        return self._brief.prompt(), {"brief_id": self._brief.id, "family": self._brief.family}

    def step(self, action: str):
        if self._brief is None:
            raise RuntimeError("call reset() before step()")
        score = self.verifier.score(action, brief=self._brief)
        self._last = score
        info = {"valid": score.valid, "reason": score.reason, "channels": dict(score.channels),
                "diagnostics": score.diagnostics, "formula": score.formula, "brief_id": self._brief.id}
        return self._brief.prompt(), float(score.reward), True, False, info

    def render(self):
        if self.render_mode == "ansi":
            if self._last is None:
                return "(no answer scored yet)"
            return format_score(self._last, self.verifier.config.priorities)
        return None
