"""skyrl-gym: a text env class that shares one Verifier per process.

skyrl-train builds one env per trajectory (`skyrl_gym.make(env_class, env_config=..., extras=row)`).
Building a Verifier in each (and seeding its archive) took 7-9 s per trajectory; `AlphaSkyRLEnv`
takes the process's shared one (`cache.shared_verifier`), so a new env costs microseconds.

    from alpha_gym.integrations.skyrl import register_env, dataset_rows
    register_env()                                   # registers env_class "alpha_gym"
    env = skyrl_gym.make("alpha_gym", env_config={"data": None}, extras=dataset_rows("train")[0])
    prompt, _ = env.init(row["prompt"])
    out = env.step("<alpha>rank(-ts_delta(close, 5))</alpha>")   # reward = Verifier.score(...).reward

`env_config` may hold `data`, `universe`, `start`, `end` (as `--data`), `config` (a settings TOML's path,
or a mapping of its tables) and `settings` (--set items), as `alpha-gym score --config F --set K=V`; one answer per episode
(done after the step); `metadata` carries valid, reason, formula and the 14 channels.
"""

from __future__ import annotations

from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

ENV_CLASS = "alpha_gym"


def _get(config: Any, key: str):
    """A key of a dict or DictConfig (skyrl-train passes OmegaConf), or an attribute; None if absent."""
    if config is None:
        return None
    getter = getattr(config, "get", None)
    return getter(key) if callable(getter) else getattr(config, key, None)


class AlphaSkyRLEnv(BaseTextEnv):
    """One brief, one answer, one verifier verdict; the verifier is the process's shared one."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__()
        from alpha_gym.pool import shared_verifier
        from alpha_gym.tasks.sets import brief_by_id
        self.verifier = shared_verifier(data=_get(env_config, "data"), universe=_get(env_config, "universe"),
                                        start=_get(env_config, "start"), end=_get(env_config, "end"),
                                        config=_get(env_config, "config"), settings=_get(env_config, "settings") or ())
        self.extras = dict(extras or {})
        brief_id = self.extras.get("brief_id") or (self.extras.get("extra_info") or {}).get("brief_id")
        self.brief = None if brief_id is None else brief_by_id(brief_id)

    def init(self, prompt):
        return prompt, {"brief_id": None if self.brief is None else self.brief.id}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        score = self.verifier.score(action if isinstance(action, str) else str(action), brief=self.brief)
        metadata = {"valid": score.valid, "reason": score.reason, "formula": score.formula,
                    "channels": dict(score.channels)}
        return BaseTextEnvStepOutput(observations=[], reward=float(score.reward), done=True, metadata=metadata)


def register_env(env_id: str = ENV_CLASS) -> str:
    """Register `AlphaSkyRLEnv` with skyrl-gym under `env_id` (idempotent); returns the id."""
    from skyrl_gym.envs.registration import register, registry
    if env_id not in registry:
        register(id=env_id, entry_point="alpha_gym.integrations.skyrl:AlphaSkyRLEnv")
    return env_id


def dataset_rows(briefs="train", task: str = "write", seed: int = 0, *, data=None, universe=None, start=None,
                 end=None, config=None, settings=()) -> list[dict]:
    """skyrl-train dataset rows for the briefs: prompt, env_class, reward_spec, extra_info (with brief_id).

    The prompts are `task`'s under the limits of the verifier the env gets from the same `config` and `settings`
    (its `env_config`); row i's is the Gym env's after `reset(seed=prompt_seed(seed, i))`."""
    from alpha_gym.integrations.prompts import integration_prompts
    from alpha_gym.tasks.sets import brief_set
    prompts = integration_prompts(task, "skyrl.dataset_rows", data=data, universe=universe, start=start, end=end,
                                  config=config, settings=settings)
    items = brief_set(briefs) if isinstance(briefs, str) else list(briefs)
    texts = prompts.prompts(items, seed)
    return [{"data_source": "alpha_gym", "prompt": [{"role": "user", "content": text}],
             "env_class": ENV_CLASS,
             "reward_spec": {"method": "rule", "ground_truth": None}, "brief_id": b.id,
             "extra_info": {"brief_id": b.id, "family": b.family, "index": i}}
            for i, (b, text) in enumerate(zip(items, texts))]
