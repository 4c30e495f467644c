"""verl: a `compute_score` for verl's reward managers, the briefs as a verl dataset, and an invalid-answer guard.

Reward function (verl config):

    reward.custom_reward_function.path=<site-packages>/alpha_gym/integrations/verl.py
    reward.custom_reward_function.name=compute_score
    +reward.custom_reward_function.reward_kwargs.data=/path/us_daily_train.csv.gz   # optional, like --data
    +reward.custom_reward_function.reward_kwargs.universe=/path/universe_us46.txt    # optional
    +reward.custom_reward_function.reward_kwargs.config=/path/run.toml               # optional settings file
    "+reward.custom_reward_function.reward_kwargs.settings=[verifier.priorities.cpcv=1]"   # optional --set items

`compute_score` returns {"score": reward, "valid": bool, <the 14 channels>}: verl puts every key in
`reward_extra_info`, so its GDPO estimator can normalise each channel on its own:

    algorithm.adv_estimator=gdpo
    algorithm.gdpo_reward_keys=[cpcv,pbo,...]        (GDPO_KEYS)
    algorithm.gdpo_reward_weights=[3.0,1.0,...]      (gdpo_weights(config=, settings=): the priorities)

verl has no rule that keeps an invalid answer (no <alpha> block, no parse, a static book)
from a positive advantage: GDPO normalises each channel within the group and then whitens
the batch, so an invalid answer can land above the mean. `guard_advantages` applies the rule every
trainer here applies (`alpha_gym.scoring.advantage_rule`: an answer that may not win gets
min(advantage, 0), and each group's advantages still sum to zero); `install_guard()` wraps verl's registered
"gdpo" estimator with it. verl computes advantages inside a Ray actor, so install it in every
verl process with verl's own hook: `VERL_USE_EXTERNAL_MODULES=alpha_gym.integrations.verl_guard`.

The verifier is shared per process (`cache.shared_verifier`): the seed archive is built once,
not per call. Every score equals `Verifier.score(solution_str)` for the same data.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from alpha_gym.scoring.advantage_rule import project_advantages
from alpha_gym.scoring.config import CHANNELS, DEFAULT_PRIORITIES

DATA_SOURCE = "alpha_gym"
#: The keys of `compute_score`'s result that GDPO should normalise: the 14 reward channels.
GDPO_KEYS = list(CHANNELS)


def gdpo_weights(priorities=None, config=None, settings=()) -> list[float]:
    """The GDPO weights for GDPO_KEYS: the verifier's priorities (its defaults, or those of the `config`
    and `settings` that `compute_score` is given; `priorities` overrides some)."""
    from alpha_gym.pool import resolve_config
    base = resolve_config(config, settings).priorities if (config is not None or settings) else DEFAULT_PRIORITIES
    prios = dict(base, **(priorities or {}))
    return [float(prios[k]) for k in GDPO_KEYS]


def compute_score(data_source: str = DATA_SOURCE, solution_str: str = "", ground_truth: Any = None,
                  extra_info: dict | None = None, *, data: str | None = None, universe=None, start=None,
                  end=None, config=None, settings=(), **_: Any) -> dict:
    """verl's reward function: score one decoded response with the process's shared verifier.

    `ground_truth` is unused (the verifier needs no reference answer); `data`, `universe`, `start`,
    `end` (from `reward_kwargs`) choose the market as `alpha-gym score --data ...` does; `config` (a settings
    TOML's path, or a mapping of its tables) and `settings` (--set items) choose the settings as
    `--config` and `--set` do (`cache.resolve_config`).
    `extra_info["brief_id"]` (`dataset_rows` writes it) names the brief the answer is scored with, where it is a
    seeded or fixed brief (rows of other briefs score without one, as before). Never raises for model output: an
    invalid answer gets the verifier's invalid-answer reward.
    """
    from alpha_gym.pool import shared_verifier
    from alpha_gym.tasks.sets import brief_by_id
    verifier = shared_verifier(data=data, universe=universe, start=start, end=end, config=config, settings=settings)
    brief = brief_by_id(extra_info.get("brief_id")) if isinstance(extra_info, dict) else None
    score = verifier.score(solution_str if isinstance(solution_str, str) else str(solution_str), brief=brief)
    guarded = score.valid and score.channels["motif_guard"] < 0  # R10 fired (GroupScore.guarded)
    return {"score": float(score.reward), "valid": bool(score.valid),
            **{k: float(v) for k, v in score.channels.items()}, "may_win": bool(score.valid and not guarded)}


def dataset_rows(briefs: Iterable | str = "train", task: str = "write", seed: int = 0, *, data: str | None = None,
                 universe=None, start=None, end=None, config=None, settings=()) -> list[dict]:
    """verl's RL dataset rows for the briefs (a brief set name or Brief objects): prompt, data_source, ...

    The prompts are `task`'s under the limits of the verifier `compute_score` gets from the same `config` and
    `settings` (and, for the improve task, `data`...: its parents are scored there); row i's is the Gym env's
    after `reset(seed=prompt_seed(seed, i))`.
    Write them with pandas: `pd.DataFrame(dataset_rows("train")).to_parquet("train.parquet")`.
    """
    from alpha_gym.integrations.prompts import integration_prompts
    from alpha_gym.tasks.sets import brief_set
    prompts = integration_prompts(task, "verl.dataset_rows", data=data, universe=universe, start=start, end=end,
                                  config=config, settings=settings)
    items = brief_set(briefs) if isinstance(briefs, str) else list(briefs)
    texts = prompts.prompts(items, seed)
    return [{"data_source": DATA_SOURCE, "prompt": [{"role": "user", "content": text}], "ability": "alpha",
             "reward_model": {"style": "rule", "ground_truth": ""},
             "extra_info": {"index": i, "brief_id": b.id, "family": b.family}} for i, (b, text) in enumerate(zip(items, texts))]


def guard_advantages(advantages, may_win, index=None, response_mask=None):
    """Advantages under the one advantage rule (`alpha_gym.scoring.advantage_rule.project_advantages`, the one our
    loop and the TRL adapter apply): an answer that may not win (invalid, or R10-guarded) gets no positive
    advantage, and the advantages of each group still sum to zero (the answers that may win absorb the change).

    A torch tensor or numpy array, rows = answers, one value per answer (verl's outcome estimators, GDPO's
    included, spread it over the response's tokens); `may_win` is compute_score's key of that name; `index`
    verl's group ids (`uid`; None: the rows are one group); `response_mask` verl's (None: every token counts).
    An answer with no response tokens is held at 0, so what is trained on still sums to zero.
    """
    is_torch = type(advantages).__module__.startswith("torch")
    a = advantages.detach().cpu().float().numpy() if is_torch else np.asarray(advantages, dtype=float)
    rows = a.reshape(a.shape[0], -1)
    mask = np.ones(rows.shape, dtype=bool) if response_mask is None else \
        np.asarray(response_mask.detach().cpu() if hasattr(response_mask, "detach") else response_mask,
                   dtype=bool).reshape(rows.shape)
    has_tokens = mask.any(axis=1)
    value = rows[np.arange(rows.shape[0]), mask.argmax(axis=1)] * has_tokens  # each answer's one value
    free = np.asarray(may_win, dtype=bool).reshape(-1) & has_tokens
    projected = project_advantages(value, free, None if index is None else np.asarray(index).reshape(-1))
    out = np.where(mask, projected[:, None], 0.0).astype(rows.dtype).reshape(a.shape)
    if is_torch:
        import torch
        return torch.as_tensor(out, device=advantages.device, dtype=advantages.dtype)
    return out


def install_guard() -> bool:
    """Wrap verl's registered "gdpo" estimator with `guard_advantages`; True if it was installed now.

    The wrapped estimator reads `non_tensor_batch["may_win"]` (from `compute_score`: valid and not
    R10-guarded), or `"valid"` from batches scored before that key existed; without either it raises
    instead of silently training on invalid answers. Idempotent.
    """
    from verl.trainer.ppo import core_algos
    original = core_algos.ADV_ESTIMATOR_REGISTRY["gdpo"]
    if getattr(original, "alpha_gym_guard", False):
        return False

    def guarded_gdpo(*args, non_tensor_batch=None, **kwargs):
        advantages, _ = original(*args, non_tensor_batch=non_tensor_batch, **kwargs)
        key = next((k for k in ("may_win", "valid") if non_tensor_batch is not None and k in non_tensor_batch), None)
        if key is None:
            raise KeyError("alpha-gym's GDPO guard needs the 'may_win' (or 'valid') key of compute_score in the "
                           "batch (use alpha_gym.integrations.verl.compute_score as the reward function)")
        index = kwargs.get("index", args[2] if len(args) > 2 else None)
        mask = kwargs.get("response_mask", args[1] if len(args) > 1 else None)
        advantages = guard_advantages(advantages, non_tensor_batch[key], index, mask)
        return advantages, advantages

    guarded_gdpo.alpha_gym_guard = True
    guarded_gdpo.__wrapped__ = original
    core_algos.ADV_ESTIMATOR_REGISTRY["gdpo"] = guarded_gdpo  # the registry refuses a re-registration by name
    return True
