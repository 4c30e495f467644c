"""What a comparison runs at each size: the scales (`SCALES`), a rung's verifier-call budget (`scale_budget`) and
the pseudo-holdout cut (`panels`). The arms themselves, with their recipes, prompts, verifier settings and
pairings, are rows of `trainers.compare.arms.table.ARMS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from alpha_gym.errors import InputError


@dataclass(frozen=True)
class Scale:
    """The comparison's own sizes; `train` holds the TrainConfig fields every rung's recipe gets changed."""

    steps: int
    eval_every: int
    probe: int                 # probe briefs answered at each checkpoint
    train_briefs: int          # 0 = all training briefs
    filter_briefs: int         # briefs the difficulty filter looks at
    filter_tries: int
    pseudo_holdout: int        # sessions at the end of the train window held out of training
    train: dict = field(default_factory=dict)  # TrainConfig fields (sampling settings also used by the filter)
    seeds: tuple = (42,)       # training seeds per rung (the probe answers are greedy: step 0 needs one)

    def train_config(self, recipe: str, **more):
        """The recipe with this scale's training fields (and `more`) changed."""
        from trainers.config import RECIPES
        fields = {**self.train, **more}
        base = RECIPES[recipe]
        groups = fields.get("num_generations", base.num_generations)
        if base.min_distinct_forms > groups:  # a scale's smaller groups hold at most that many forms
            fields.setdefault("min_distinct_forms", groups)
        return base.with_(**fields)


SCALES = {
    "smoke": Scale(steps=2, eval_every=1, probe=2, train_briefs=8, filter_briefs=4, filter_tries=2,
                   pseudo_holdout=120,
                   train=dict(prompts_per_step=1, num_generations=2, max_completion_length=16, learning_rate=1e-5)),
    # sized so the five rungs, the filter and 16 probe evaluations fit in one sitting (81 min on 2 cores)
    "cpu": Scale(steps=30, eval_every=10, probe=50, train_briefs=0, filter_briefs=48, filter_tries=4,
                 pseudo_holdout=252, seeds=(42, 43, 44),
                 # the warm-started 135M model writes valid answers at T=1.0 only 3% of the time (0.7: 36%, 0.5: 58%)
                 train=dict(prompts_per_step=2, num_generations=8, max_completion_length=64, learning_rate=5e-5,
                            temperature=0.5)),
    "gpu": Scale(steps=600, eval_every=100, probe=50, train_briefs=0, filter_briefs=500, filter_tries=8,
                 pseudo_holdout=252,
                 train=dict(prompts_per_step=4, num_generations=12, max_completion_length=128, learning_rate=1e-5)),
}


def scale_budget(scale) -> int:
    """A comparison scale's verifier calls per rung: steps x prompts_per_step x num_generations.

    `scale`: the comparison's `Scale` (anything with `.steps` and a `.train` dict holding prompts_per_step and
    num_generations, every preset does). At `--scale cpu`: 30 x 2 x 8 = 480.
    """
    train = getattr(scale, "train", None) or {}
    missing = [k for k in ("prompts_per_step", "num_generations") if k not in train]
    if missing:
        raise InputError(f"the scale's train settings lack {', '.join(missing)}: the budget needs them")
    sizes = (("steps", scale.steps), ("prompts_per_step", train["prompts_per_step"]),
             ("num_generations", train["num_generations"]))
    for name, v in sizes:
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise InputError(f"{name} must be a positive integer, got {v!r}")
    return sizes[0][1] * sizes[1][1] * sizes[2][1]


def full_panel(scale_name: str, data=None, universe=None):
    """The whole market a scale's comparison reads: `data` (with `universe`), else the synthetic market (a small
    one for the smoke scale)."""
    from alpha_gym.market import synthetic_panel
    from alpha_gym.market.resolve import resolve_panel
    if data:
        return resolve_panel(data=data, universe=universe)
    return synthetic_panel(n_stocks=20, n_days=800, seed=0) if scale_name == "smoke" else synthetic_panel()


def panels(scale_name: str, data=None, universe=None, full=None):
    """(train panel, pseudo-holdout panel) of a scale: the last `pseudo_holdout` sessions are cut off before
    training. `full`: the market already read (`full_panel`), else read here."""
    scale = SCALES[scale_name]
    if full is None:
        full = full_panel(scale_name, data, universe)
    cut = full.n_days - scale.pseudo_holdout
    return full.window(end=full.dates[cut - 1]), full.window(start=full.dates[cut])
