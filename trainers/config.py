"""Every training setting in one dataclass, and the named recipes of the reference runs.

Option names follow TRL's `GRPOConfig` wherever the meaning is the same (learning_rate, beta,
num_generations, temperature, max_completion_length, num_iterations, steps_per_generation, epsilon, epsilon_high,
loss_type, top_entropy_quantile, max_grad_norm, weight_decay, lr_scheduler_type, seed,
save_steps, logging_steps, log_completions). The rest are ours; `trainers/trl_adapter.py` maps
them onto TRL where TRL has an equivalent.

Reference settings (Multi-Reward RL, Part 3, section 2): rank-32 adapter (alpha 64), 4 prompts per
step with 12 answers each, temperature 1.0, learning rate 1e-5, KL beta 0.08, GDPO, seed 42, answers
of at most 128 tokens. The REPO-R rows also switch on full-token loss (top_entropy_quantile 1.0
instead of 0.2) and two optimizer passes per rollout batch (num_iterations 2) (section 5).
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from alpha_gym.ranges import INF, Range, SettingError, above, check_choice, check_fields, closed, ints
from alpha_gym.tasks.prompts import check_task


@dataclass(frozen=True)
class Clip:
    """What a kind of clip logs (TRL's metric names, `trainers.losses.policy_loss`), and which of its metrics the
    run log's clip_ratio (`share`: TRL's clip share) and clipped_share (`acted`: every token it acted on) read."""

    metrics: tuple[str, ...]
    share: str
    acted: str


#: "band": clip(r, 1 - epsilon, 1 + epsilon_high) in a surrogate (low: r under the band with A < 0, high: over it
#: with A > 0); "cap": a stop-gradient weight min(r, 1 + epsilon_high) (TRL counts r > cap with A > 0 only;
#: "capped" counts any sign, as the cap acts on both).
CLIPS = {"band": Clip(("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"),
                      share="clip_ratio/region_mean", acted="clip_ratio/region_mean"),
         "cap": Clip(("cispo_clip_ratio", "clip_ratio/capped"), share="cispo_clip_ratio", acted="clip_ratio/capped")}
AVERAGING = ("sequence", "token")


@dataclass(frozen=True)
class LossRow:
    """One policy loss, whole: what the update (`trainers.update`) hands its formula, how it averages, its clip.

    formula: its function in trainers/losses.py, f(logp, old_logp, adv, mask, *, beta, ref_logp, ...options);
    options: the TrainConfig fields handed to it beside beta (epsilon_high as the update resolves it: the
    config's, the row's default, or ADAPO's); epsilon_high: the default when a config leaves it None (None: epsilon,
    a symmetric band); averaging: "sequence" (mean over each answer's tokens, then over answers: the update
    weighs every group alike) or "token" (every completion token of the mini-batch weighs the same); clip: a key
    of `CLIPS` (ADAPO steers a "band" only).
    """

    formula: str
    options: tuple[str, ...]
    epsilon_high: float | None
    averaging: str
    clip: str

    def __post_init__(self):
        check_choice("LossRow", "averaging", self.averaging, AVERAGING)
        check_choice("LossRow", "clip", self.clip, tuple(CLIPS))

    @property
    def metrics(self) -> tuple[str, ...]:
        """The metrics `policy_loss` returns for this loss (and "kl", "entropy" when given those)."""
        return ("ratio/mean", *CLIPS[self.clip].metrics)

    @property
    def clip_metric(self) -> str:
        return CLIPS[self.clip].share

    @property
    def clipped_metric(self) -> str:
        return CLIPS[self.clip].acted


#: The losses, one row each (TRL 1.16's `loss_type` names); LOSS_TYPES, EPSILON_HIGH and the logged metrics follow
#: from it. A new loss is one row here (its formula in trainers/losses.py) plus its line in the TRL option map
#: (trainers/trl_adapter.py).
LOSS_TABLE: dict[str, LossRow] = {
    # GRPO: clipped surrogate, symmetric band unless epsilon_high is set; short answers weigh more per token
    "grpo": LossRow("grpo_loss", ("epsilon", "epsilon_high"), None, "sequence", "band"),
    # DAPO: clip-higher band 0.8 / 1.28, token-level averaging
    "dapo": LossRow("dapo_loss", ("epsilon", "epsilon_high"), 0.28, "token", "band"),
    # CISPO: importance weight capped at 1.2 (a margin above 1, as DAPO's band), every token keeps its gradient
    "cispo": LossRow("cispo_loss", ("epsilon_high",), 0.2, "token", "cap"),
}
LOSS_TYPES = tuple(LOSS_TABLE)
#: epsilon_high when a config leaves it None: DAPO's clip-higher band 1.28 and CISPO's weight cap 1.2 (both
#: as margins above 1; grpo uses epsilon, a symmetric band). The losses and ADAPO take their defaults here.
EPSILON_HIGH = {name: row.epsilon_high for name, row in LOSS_TABLE.items() if row.epsilon_high is not None}

#: Fields that change only what a run writes, never what it learns: a resume may change them.
OUTPUT_ONLY = ("log_completions", "logging_steps")

#: Former switches to slower reference paths (sampling one prompt at a time, transformers' generate for every
#: row, a recomputed old-log-prob pass, prompt + answer per row, every answer padded). The fast path is the
#: only one now; the references are the tests' oracles (tests/oracles.py). A settings file, `--set` or a
#: kept run that names them still loads: a true value is what the loop does; a false one asks for a path
#: that has left the product, so it is dropped with a warning (they never changed the losses, only how a
#: step was computed and, for sampling, which random numbers it drew). Runs recorded with them resume.
RETIRED = ("share_prompt_cache", "batch_generation", "sampler_logps", "trim_padding", "drop_finished")

ADVANTAGE_MODES = ("gdpo", "grpo")
LR_SCHEDULES = ("linear", "constant")


@dataclass(frozen=True)
class TrainConfig:
    """One training run. `TrainConfig()` is the default recipe, `cispo_repo_r` (the reference's best held-out
    run: CISPO, REPO-R, full-token loss, two passes, the advantage floor at 0); `RECIPES` holds the named
    variants, each built from `RECIPE_BASE`."""

    # --- optimisation (TRL GRPOConfig names and meanings)
    learning_rate: float = 1e-5
    beta: float = 0.08                  # KL(pi || pi_ref) coefficient, k3 estimator; 0 skips the reference pass
    num_generations: int = 12           # answers per prompt (a "group")
    prompts_per_step: int = 4           # groups per optimizer step (TRL: generation_batch_size / num_generations)
    temperature: float = 1.0
    max_completion_length: int = 128
    num_iterations: int = 2             # optimizer passes over each rollout batch (TRL's mu)
    # Optimizer steps per rollout batch (TRL's name and meaning): every group's answers are split into this
    # many slices, and slice k of all groups makes mini-batch k, one optimizer step each, all scored against the log-probs of the policy that SAMPLED
    # them. From the second mini-batch on the policy has moved, so importance ratios leave 1 and DAPO's clip
    # and CISPO's cap act: the reference's "answer sampled by a slightly older copy of the policy" (Part 3 s.4).
    steps_per_generation: int = 2
    epsilon: float = 0.2                # lower clip of the ratio (grpo, dapo)
    # Upper clip margin (grpo, dapo: clip(r, 1 - epsilon, 1 + epsilon_high)) or the CISPO weight cap margin
    # (cispo: min(r, 1 + epsilon_high)). None = the loss's default: grpo epsilon, dapo 0.28, cispo 0.2.
    # TRL differs for cispo: there epsilon_high is the absolute cap (ours 0.2 = TRL's 1.2).
    epsilon_high: float | None = 0.2
    loss_type: str = "cispo"            # a row of LOSS_TABLE: "grpo" | "dapo" | "cispo"
    top_entropy_quantile: float = 1.0   # share of completion tokens (highest entropy) kept in the policy term
    max_grad_norm: float | None = 1.0   # 0 or None: no clipping
    weight_decay: float = 0.0
    lr_scheduler_type: str = "linear"   # "linear" (to 0 over the run, TRL's default) | "constant"
    seed: int = 42

    # --- adapters
    lora_r: int = 32
    lora_alpha: int = 64
    lora_dropout: float = 0.0           # 0: sampling, old and new log-probs come from one deterministic function
    use_dora: bool = False
    load_in_4bit: bool | None = None    # None = auto: NF4 only when CUDA is available (see trainers/models.py)
    # CPU: hold the frozen base's linear layers in bfloat16 (adapters, norms, attention, LM head and losses stay
    # fp32): faster GEMMs on a CPU with AMX or AVX512_BF16, slower on one without. Off: the fp32 base is the
    # reference; what bf16 costs in fidelity and gains in speed is measured in BENCHMARKS.md ("A bf16 base").
    bf16_base: bool = False

    # --- advantages
    advantage_mode: str = "gdpo"        # "gdpo": standardise each channel per group, then add with priorities
    advantage_floor: float | None = 0.0   # None = off; answers with core score <= floor never get A > 0
                                          # (the Environment A recipes use 0, as the reference ran them)
    # None = off (every recipe). A number below advantage_floor: an answer that meets every check of its brief
    # (R13 = 1), valid and not R10-guarded, may win when its core score is above this instead of above the floor
    # (`alpha_gym.scoring.advantage_rule.answers_may_win`); the floor otherwise bars a compliant answer whatever
    # R13's priority (benchmarks/notes/compliant-warm-start.md measures both)
    brief_floor: float | None = None

    # --- entropy control
    repo_r: bool = True                 # REPO-R token shaping with the entropy thermostat (zeta)
    adapo: bool = False                 # ADAPO: entropy feedback on epsilon_high (grpo, dapo only)

    # --- dynamic sampling
    refill_rounds: int = 0              # DAPO-refill: resample zero-variance groups up to this many rounds
    # Collapse refill (trainers/refill.py): a group with fewer than this many distinct canonical forms gets its
    # duplicates swapped for fresh answers of new forms, in the same refill_rounds. 0 = off.
    min_distinct_forms: int = 0
    # The run's verifier calls, refills included, at most this many (0 = no cap). Refill buys its answers with
    # training steps: a round that would pass the cap is not run, and the run stops after the last step whose
    # first scoring still fits, so a refill rung spends what a control does (the comparison sets it to its budget).
    max_verifier_calls: int = 0

    # --- the task whose prompts the policy answers (`alpha_gym.tasks.task.TASKS`): "write" (AlphaFormula-v0's
    # prompts) or "improve" (AlphaFormulaEvolve-v0's: parents drawn per prompt from the Alpha101 formulas scored
    # by the run's verifier); every prompt states the verifier's limits
    task: str = "write"

    # --- bookkeeping
    save_steps: int = 50                # checkpoint every N steps (and at the last step); 0 = only the last
    logging_steps: int = 1              # JSONL line every N steps (and at the last step)
    log_completions: bool = True        # also write every answer and its score to completions.jsonl

    def __post_init__(self):
        check_fields(self, TRAIN_RANGES)
        check_task("TrainConfig", self.task)
        check_choice("TrainConfig", "loss_type", self.loss_type, tuple(LOSS_TABLE))  # the table now, rows added too
        check_choice("TrainConfig", "lr_scheduler_type", self.lr_scheduler_type, LR_SCHEDULES)
        check_choice("TrainConfig", "advantage_mode", self.advantage_mode, ADVANTAGE_MODES)
        if self.steps_per_generation > self.num_generations:
            raise SettingError("TrainConfig", "steps_per_generation", self.steps_per_generation,
                               f"<= num_generations ({self.num_generations}): each optimizer step takes a slice "
                               "of every group's answers")
        if self.min_distinct_forms > self.num_generations:
            raise SettingError("TrainConfig", "min_distinct_forms", self.min_distinct_forms,
                               f"<= num_generations ({self.num_generations}): a group cannot hold more forms "
                               "than answers")
        if self.min_distinct_forms and not self.refill_rounds:
            raise SettingError("TrainConfig", "min_distinct_forms", self.min_distinct_forms,
                               "0 while refill_rounds is 0: the collapse refill runs in the refill rounds; set "
                               "refill_rounds >= 1 (e.g. 2, as dapo_refill)")
        if self.max_verifier_calls and self.max_verifier_calls < self.prompts_per_step * self.num_generations:
            raise SettingError("TrainConfig", "max_verifier_calls", self.max_verifier_calls,
                               f"0 (no cap) or >= prompts_per_step x num_generations "
                               f"({self.prompts_per_step * self.num_generations}): one step's answers must fit")
        if self.brief_floor is not None and self.advantage_floor is None:
            raise SettingError("TrainConfig", "brief_floor", self.brief_floor,
                               "None while advantage_floor is None: it exempts answers that meet their brief from "
                               "the floor, and without a floor it changes nothing")
        if self.brief_floor is not None and self.brief_floor >= self.advantage_floor:
            raise SettingError("TrainConfig", "brief_floor", self.brief_floor,
                               f"below advantage_floor ({self.advantage_floor:g}) or None: at or above the floor "
                               "it would bar compliant answers the floor lets win")
        if self.adapo and LOSS_TABLE[self.loss_type].clip != "band":
            bands = "/".join(name for name, row in LOSS_TABLE.items() if row.clip == "band")
            raise SettingError("TrainConfig", "adapo", self.adapo,
                               f"false with loss_type={self.loss_type!r}: adapo steers the clip band of {bands}; with "
                               f"{self.loss_type} epsilon_high is a weight cap, not a band: use repo_r for entropy "
                               "control, or loss_type 'dapo'")

    @property
    def resolved_epsilon_high(self) -> float:
        """epsilon_high as the loss uses it (None -> the loss's own default, see the field comment)."""
        if self.epsilon_high is not None:
            return self.epsilon_high
        default = LOSS_TABLE[self.loss_type].epsilon_high
        return self.epsilon if default is None else default

    def with_(self, **changes: Any) -> "TrainConfig":
        """A validated copy with some fields changed; unknown names raise ValueError."""
        bad = set(changes) - {f.name for f in fields(self)}
        if bad:
            raise ValueError(f"unknown TrainConfig fields {sorted(bad)}")
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: The allowed range of every numeric field (`alpha_gym.ranges`, as the verifier's settings declare theirs);
#: check_fields also checks every field's type (a bool is not an integer, a number not a bool). None passes
#: where a field is optional (epsilon_high, max_grad_norm, advantage_floor, brief_floor, load_in_4bit).
TRAIN_RANGES = {
    "learning_rate": Range(0.0, INF, lo_open=True),
    "beta": Range(0.0),
    # upper bounds: a step holds prompts_per_step x num_generations answers of max_completion_length tokens
    # in memory at once; past these no machine this runs on finishes a step (the GPU preset uses far less)
    "num_generations": ints(2, 1024),           # a group of one has no baseline
    "prompts_per_step": ints(1, 1024),
    "temperature": Range(0.0, INF, lo_open=True),
    "max_completion_length": ints(1, 32768),
    "num_iterations": ints(1),
    "steps_per_generation": ints(1),
    "epsilon": above(0.0, 1.0),
    "epsilon_high": Range(0.0),
    "top_entropy_quantile": closed(0.0, 1.0),
    "max_grad_norm": Range(0.0),
    "weight_decay": Range(0.0),
    "seed": ints(0),
    "lora_r": ints(1),
    "lora_alpha": Range(0.0, INF, lo_open=True),
    "lora_dropout": closed(0.0, 1.0),
    "advantage_floor": Range(),                 # any finite floor
    "brief_floor": Range(),                     # any finite core score (below advantage_floor: __post_init__)
    "refill_rounds": ints(0),
    "min_distinct_forms": ints(0),
    "max_verifier_calls": ints(0),
    "save_steps": ints(0),
    "logging_steps": ints(1),
}


#: What every recipe starts from: the shared reference settings with no loss-specific choice made (DAPO's
#: loss and its default band, one pass, no REPO-R, no floor), which was `TrainConfig()` until the default
#: became the default recipe. Checkpoints of that time record their config against it (`trainers.loop`).
RECIPE_BASE = TrainConfig(loss_type="dapo", epsilon_high=None, num_iterations=1, repo_r=False, advantage_floor=None)

#: The reference ladder (Part 3 section 6) plus the Part 2 arms (plain GRPO, DAPO-refill). All use GDPO but
#: "grpo". Each choice follows a line of the reference (../shared/seed, the alpha gym and Part 3):
#:  * advantage_floor=0 on the ladder: Environment A "keeps ... answers whose core score is at or below a
#:    floor (0) from receiving positive advantage" (Part 3 s.7); the Part 2 arms ran without it.
#:  * refill only in "dapo_refill": Part 2 ran DAPO-refill as its own arm next to DAPO.
#:  * steps_per_generation=2: answers "sampled by a slightly older copy of the policy" (Part 3 s.4); with one
#:    optimizer step per rollout every ratio is exactly 1, and DAPO and CISPO would take identical steps.
#:  * without REPO-R the policy term keeps the 20% highest-entropy tokens and makes one pass per batch; the
#:    REPO-R rows keep every token and make two passes (Part 3 s.5: measured as a bundle).
#:  * R12 (format) is a verifier setting and off by default ("always 0 in this run").
_LADDER = RECIPE_BASE.with_(advantage_floor=0.0)
RECIPES: dict[str, TrainConfig] = {
    # DAPO: clip-higher band 0.8 / 1.28, token-level averaging.
    "dapo": _LADDER.with_(loss_type="dapo", epsilon=0.2, epsilon_high=EPSILON_HIGH["dapo"],
                          top_entropy_quantile=0.2),
    # CISPO: importance weight capped at 1.2, every token keeps its gradient.
    "cispo": _LADDER.with_(loss_type="cispo", epsilon_high=EPSILON_HIGH["cispo"], top_entropy_quantile=0.2),
    # The best held-out run: CISPO + REPO-R (w5 thermostat), full-token loss, two passes.
    "cispo_repo_r": _LADDER.with_(loss_type="cispo", epsilon_high=EPSILON_HIGH["cispo"], repo_r=True,
                                  top_entropy_quantile=1.0, num_iterations=2),
    "cispo_repo_r_dora": _LADDER.with_(loss_type="cispo", epsilon_high=EPSILON_HIGH["cispo"], repo_r=True,
                                       top_entropy_quantile=1.0, num_iterations=2, use_dora=True),
    "dapo_repo_r_dora": _LADDER.with_(loss_type="dapo", epsilon=0.2, epsilon_high=EPSILON_HIGH["dapo"], repo_r=True,
                                      top_entropy_quantile=1.0, num_iterations=2, use_dora=True),
    # Part 2's arms: DAPO with dynamic sampling (resample groups whose rewards are all equal), no floor.
    "dapo_refill": RECIPE_BASE.with_(loss_type="dapo", epsilon=0.2, epsilon_high=EPSILON_HIGH["dapo"],
                                     top_entropy_quantile=0.2, refill_rounds=2),
    # CISPO with both refill rules (issue 39.3): a group with zero reward variance is resampled, and one whose
    # 12 answers hold fewer than 4 canonical forms gets fresh forms for its duplicates (BENCHMARKS.md, "Signal
    # in collapsed groups": 4, not 2, moved the non-zero-advantage share).
    "cispo_distinct_forms": _LADDER.with_(loss_type="cispo", epsilon_high=EPSILON_HIGH["cispo"],
                                          top_entropy_quantile=0.2, refill_rounds=2, min_distinct_forms=4),
    # Plain GRPO (Part 2's baseline row): joint reward normalised per group, symmetric clip, sequence-level
    # averaging, no dynamic sampling, no floor.
    "grpo": RECIPE_BASE.with_(loss_type="grpo", epsilon=0.2, epsilon_high=None, advantage_mode="grpo",
                              top_entropy_quantile=1.0),
}


#: The brief-following run (benchmarks/notes/compliant-warm-start.md, "R13's exemption from the floor"), as settings
#: tables (`alpha_gym.settings`: `dumps(BRIEF_FOLLOW)` is a file `--config` reads): R13 at 3 and R14 at 3 (the
#: "brief_book" reward with R13 tripled: on the kept runs' groups R13 is then 46% of the advantage's size, R1 still
#: the larger part, and past 3-4 the most compliant answer wins no more often with the floor on), trained with the
#: collapse-refill CISPO rung's recipe, the floor at 0 and an answer that meets every check of its brief let win above
#: a train CPCV of -0.1 (not at any CPCV: once exempt, a valid compliant answer beside invalid ones wins at almost
#: any CPCV, measured). A pairing of existing recipes, not a row of RECIPES or REWARD_RECIPES: no recipe changes.
#:     alpha-gym train --recipe cispo_distinct_forms --set train.brief_floor=-0.1 \
#:         --set verifier.priorities.brief=3 --set verifier.priorities.book=3
BRIEF_FOLLOW: dict[str, dict[str, Any]] = {
    "verifier": {"priorities": {"brief": 3.0, "book": 3.0}},
    "train": {"recipe": "cispo_distinct_forms", "brief_floor": -0.1},
}


def recipe(name: str, **overrides: Any) -> TrainConfig:
    """A named recipe, optionally with some fields changed. Unknown names raise ValueError."""
    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; choose from {sorted(RECIPES)}")
    return RECIPES[name].with_(**overrides) if overrides else RECIPES[name]


# ------------------------------------------------------------------------------ the [train] settings table
DEFAULT_RECIPE = "cispo_repo_r"  # the reference's best held-out run


def train_config_from_table(table) -> tuple[str, TrainConfig]:
    """(recipe name, TrainConfig) of a [train] table: the recipe's settings with the table's keys changed."""
    from alpha_gym.settings import from_dict
    from alpha_gym.scoring.config import ConfigError
    table = dict(table)
    name = table.pop("recipe", DEFAULT_RECIPE)
    if name not in RECIPES:
        raise ConfigError(f"train.recipe: unknown recipe {name!r}; choose from {sorted(RECIPES)}")
    for key in RETIRED:
        if key in table:
            drop_retired(key, table.pop(key), "train")
    return name, from_dict(TrainConfig, table, base=RECIPES[name], where="train")


def drop_retired(key: str, value, where: str = "train") -> None:
    """Accept a RETIRED switch as a settings file or kept run records it: true is what the loop does, false asks
    for a reference path that is now a test oracle (a warning says so); anything else is a ConfigError."""
    from alpha_gym.scoring.config import ConfigError
    if not isinstance(value, bool):
        raise ConfigError(f"{where}.{key}: expected true or false, got {value!r} (a retired setting: the fast "
                          "path is the only one)")
    if not value:
        warnings.warn(f"{where}.{key} = false is retired and ignored: the loop always runs the fast path; the slower "
                      "reference it named is a test oracle (tests/oracles.py)", stacklevel=3)


@dataclass(frozen=True)
class TrainSettings:
    """The [train] table built: the recipe's name and the effective TrainConfig."""

    recipe: str
    config: TrainConfig

    def to_settings(self) -> dict[str, Any]:
        from alpha_gym.settings import to_dict
        return {"recipe": self.recipe, **to_dict(self.config)}


def _train_section():
    from alpha_gym.settings import Section, to_dict
    return Section("train", lambda: {"recipe": DEFAULT_RECIPE, **to_dict(RECIPES[DEFAULT_RECIPE])},
                   lambda table, built: TrainSettings(*train_config_from_table(table)))


def register_train_table() -> None:
    """Teach the settings file its [train] table (idempotent). The trainers' entry points call it.

    Explicit, not a side effect of importing this module: which tables `alpha_gym.settings` checks does
    not depend on what happened to be imported first. Before the call a [train] table loads as given,
    unchecked (the environment never imports the trainers), and `settings["train"]` raises
    `UnregisteredTableError` naming the table.
    """
    from alpha_gym.settings import register_section
    register_section("train", _train_section)
