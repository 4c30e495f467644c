"""RL on the mutation operator (issue 40.3): EvoTune's loop with this project's losses.

    mutator = TrainedMutator(None, recipe="cispo", answers_per_set=4, train_every=2)   # None: the start model
    evolve(verifier, mutator, budget=400, out_dir="runs/evolve-rl")
    alpha-gym evolve --mutator rl:recipe=cispo,group=4,every=2 --budget 400 --out runs/evolve-rl

The start model with fresh LoRA adapters (`trainers.models.load_policy`, as the loop makes its policy) is the
mutator of an `evolve` run. Each step, top to bottom:

    1. propose  evolve draws a parent set and asks it `answers_per_set` (G) times in a row; the set's
                improve-task prompt (`alpha_gym.search.mutators.improve_prompts`, through the task seam) gets
                G answers from the loop's sampler (`trainers.rollout.sample_groups`, with the sampling
                policy's log-probs and entropies): one group per prompt, as a training step's
    2. score    evolve reads, rejects or scores the answers as for any mutator: each scored answer is one
                verifier call of its exact budget; training makes no call of its own
    3. observe  after each scored evolve group, evolve hands back one (reward, valid) per answer: the
                verifier's for a scored one, the verifier config's invalid reward for an unparseable one
                (rejected without a call), None for a formula the run scored before (rejected without a
                call), which counts as invalid at the update's lowest reward: a duplicate earns nothing new
    4. update   after every `train_every` observed evolve groups, one AdamW step on the groups gathered:
                advantages per group with `trainers.advantages.compute_advantages` (mode "grpo" on the one
                scalar reward the run already holds, the validity projection: no positive advantage for an
                invalid answer, each group sums to 0), the reference log-probs with the adapters off when the
                recipe's beta != 0, the recipe's top-entropy token mask, and the recipe's loss (its row of
                `trainers.config.LOSS_TABLE`, + beta * KL): `trainers.update.policy_update`, the loop's update,
                with one pass and one mini-batch. The learning rate is the recipe's, constant (the number of
                updates depends on what is rejected)
    5. log      the update's record (loss, KL, mean scored reward, share of non-zero advantages, answers,
                rejected) goes into the evolve group's history row ("updates"), so state.json keeps it
    6. resume   `save_state` writes the adapters, the optimizer and the answers awaiting their update in one
                file beside each checkpoint (evolve names it in state.json); `load_state` puts them back.
                Each propose seeds torch from the run's generator and an update draws nothing, so a resumed
                run repeats the uninterrupted one (same machine, same thread count)

Left out (said, not hidden): a group size of one prompt's answers only (a parent set asked once more after
a rejection is a group of its own), the recipes' REPO-R/ADAPO controllers and advantage floor (refused or
not applied: a floor reads the verifier's core score, which evolve does not keep), several passes per batch.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from alpha_gym.errors import InputError
from alpha_gym.language import DEFAULT_LIMITS, Limits
from alpha_gym.search.database import Program
from alpha_gym.tasks.parents import improve_prompts
from trainers.advantages import compute_advantages, nonzero_share
from trainers.config import RECIPES, TrainConfig
from trainers.models import add_adapters, adapter_state, load_policy
from trainers.rollout import end_token_ids, prompt_ids, sample_groups
from trainers.update import Batch, policy_update

STATE_FORMAT = "alpha-gym/evolve-rl/v1"


class EvolveRLError(InputError):
    """A bad setting of the trained mutator (recipe, train_every, group size) or a state file of another run."""


@dataclass(frozen=True)
class _Sampling:
    """What `sample_groups` reads: `num_generations` answers per prompt."""

    num_generations: int
    temperature: float
    max_completion_length: int


def _positive_int(key: str, v: Any, lo: int = 1) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < lo:
        raise EvolveRLError(f"{key} must be an integer >= {lo}, got {v!r}")
    return v


class TrainedMutator:
    """A LoRA policy on the start model (or `model`) that proposes improve-task answers and learns from them.

    recipe: a name of `trainers.config.RECIPES` (its loss, beta, learning rate, clip band, top-entropy mask,
    LoRA shape); answers_per_set: G >= 2, the group; train_every: evolve groups per update (>= 1);
    max_new_tokens: each answer's bound; loaded: an already loaded (model, tokenizer) (a plain model gets
    fresh adapters; it is edited in place). `stats` counts prompts, answers, updates and seconds.
    """

    def __init__(self, model: str | os.PathLike | None = None, limits: Limits = DEFAULT_LIMITS, brief: Any = None,
                 *, recipe: str = "cispo", answers_per_set: int = 4, train_every: int = 1, max_new_tokens: int = 128,
                 name: str = "rl", loaded=None, **overrides: Any):
        if recipe not in RECIPES:
            raise EvolveRLError(f"unknown recipe {recipe!r}; choose from {sorted(RECIPES)}")
        self.answers_per_set = _positive_int("answers_per_set", answers_per_set, 2)   # a group of one has no baseline
        self.train_every = _positive_int("train_every", train_every)
        _positive_int("max_new_tokens", max_new_tokens)
        base = RECIPES[recipe]
        if base.repo_r or base.adapo:
            plain = sorted(k for k, c in RECIPES.items() if not c.repo_r and not c.adapo)
            raise EvolveRLError(f"recipe {recipe!r} uses REPO-R or ADAPO, whose controllers this mutator does not "
                                f"run; choose one of {plain}")
        try:
            self.config: TrainConfig = base.with_(num_generations=answers_per_set,
                                                  max_completion_length=max_new_tokens, **overrides)
        except (TypeError, ValueError, InputError) as err:
            raise EvolveRLError(f"a bad setting of the trained mutator: {err}") from None
        self.recipe, self.limits, self.brief, self.name = recipe, limits, brief, name
        if loaded is not None:
            policy, self.tokenizer = loaded
            self.policy = policy if hasattr(policy, "disable_adapter") else add_adapters(policy, self.config)
        else:
            self.policy, self.tokenizer = load_policy(model, self.config)
        self.policy.eval()   # no dropout: sampling and the update's log-probs come from one deterministic function
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.params = [p for p in self.policy.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=self.config.learning_rate,
                                           weight_decay=self.config.weight_decay)
        self.eos = end_token_ids(self.policy, self.tokenizer)
        self.sampled: list[dict] = []     # groups proposed since the last observe (awaiting their rewards)
        self.ready: list[dict] = []       # groups with rewards, awaiting the next update
        self.observed = self.updates = 0  # evolve groups observed, updates taken
        self.stats = {"prompts": 0, "answers": 0, "updates": 0, "seconds": 0.0, "update_seconds": 0.0}

    def settings(self) -> dict:
        """What a resume must repeat (evolve refuses a run folder written with others)."""
        return {"recipe": self.recipe, "answers_per_set": self.answers_per_set, "train_every": self.train_every,
                "max_new_tokens": self.config.max_completion_length, "learning_rate": self.config.learning_rate,
                "beta": self.config.beta, "lora_r": self.config.lora_r, "seed": self.config.seed}

    # ------------------------------------------------------------------ 1. propose
    def propose(self, parent_sets: list[list[Program]], rng: np.random.Generator) -> list[str]:
        seed = int(rng.integers(0, 2**62))   # drawn whatever the group's size: the run's draws stay in step
        if not parent_sets:
            return []
        t0 = time.perf_counter()
        runs: list[list] = []                # [parent set, how many times in a row] (evolve repeats each set)
        for parents in parent_sets:
            key = [p.id for p in parents]
            if runs and runs[-1][2] == key:
                runs[-1][1] += 1
            else:
                runs.append([parents, 1, key])
        prompts = improve_prompts([r[0] for r in runs], self.limits, self.brief)
        device = next(self.policy.parameters()).device
        ids = [prompt_ids(self.tokenizer, p, device) for p in prompts]
        sampling = _Sampling(max(r[1] for r in runs), self.config.temperature, self.config.max_completion_length)
        torch.manual_seed(seed)
        with torch.no_grad():
            groups = sample_groups(self.policy, self.tokenizer, ids, sampling, self.eos, with_logps=True)
        answers: list[str] = []
        for (_, n, _), pid, (completion, mask, texts, logp, entropy) in zip(runs, ids, groups):
            self.sampled.append({"prompt_ids": pid, "completion_ids": completion[:n], "mask": mask[:n],
                                 "old_logp": logp[:n], "entropy": entropy[:n]})
            answers += texts[:n]
        self.stats["prompts"] += len(prompts)
        self.stats["answers"] += len(answers)
        self.stats["seconds"] += time.perf_counter() - t0
        return answers

    # ------------------------------------------------------------------ 3. observe, 4. update
    def observe(self, outcomes: list) -> dict | None:
        """The group's outcomes (one (reward, valid) or None per answer proposed since the last call, in order);
        an update's record after every `train_every` groups that held answers of ours, else None."""
        n = sum(g["mask"].shape[0] for g in self.sampled)
        if len(outcomes) != n:
            raise EvolveRLError(f"observe got {len(outcomes)} outcomes for the {n} answers proposed")
        if not n:                            # a group of seeds or random fills: nothing of ours to learn from
            return None
        at = 0
        for g in self.sampled:
            k = g["mask"].shape[0]
            self.ready.append({**g, "outcomes": [None if o is None else (float(o[0]), bool(o[1]))
                                                 for o in outcomes[at:at + k]]})
            at += k
        self.sampled = []
        self.observed += 1
        if self.observed % self.train_every:
            return None
        return self._update()

    def _update(self) -> dict:
        t0 = time.perf_counter()
        groups, self.ready = self.ready, []
        scored = [o[0] for g in groups for o in g["outcomes"] if o is not None]
        low = min(scored) if scored else 0.0   # a duplicate: invalid, at the update's lowest reward
        advs = []
        for g in groups:
            reward = torch.tensor([low if o is None else o[0] for o in g["outcomes"]], dtype=torch.float64)
            valid = torch.tensor([o is not None and o[1] for o in g["outcomes"]])
            advs.append(compute_advantages(reward[None, :, None], [1.0], valid[None], reward[None],
                                           mode="grpo").float()[0])
        # one batch of the update's answers, one AdamW step with the recipe's loss (trainers/update.py, as the loop)
        adv = torch.cat(advs)
        batch = Batch.of([SimpleNamespace(**g) for g in groups], self.tokenizer.pad_token_id)
        stats = policy_update(self.policy, self.optimizer, self.params, self.config, batch, adv,
                              epsilon_high=self.config.resolved_epsilon_high)
        self.updates += 1
        self.stats["updates"] += 1
        self.stats["update_seconds"] += time.perf_counter() - t0
        n_valid = sum(o is not None and o[1] for g in groups for o in g["outcomes"])
        return {"update": self.updates, "groups": len(groups), "answers": int(adv.numel()),
                "duplicates": int(adv.numel()) - len(scored), "valid": int(n_valid),
                "mean_reward": float(np.mean(scored)) if scored else None, "nonzero_adv": nonzero_share(adv),
                "loss": stats["loss"], "kl": stats["kl"]}   # no timing here: a resumed run's rows must match

    # ------------------------------------------------------------------ 6. resume
    def save_state(self, path) -> None:
        """The adapters, the optimizer and the answers awaiting an update, in one file (written atomically)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        torch.save({"format": STATE_FORMAT, "settings": self.settings(), "adapters": adapter_state(self.policy),
                    "optimizer": self.optimizer.state_dict(), "sampled": self.sampled, "ready": self.ready,
                    "observed": self.observed, "updates": self.updates}, tmp)
        tmp.replace(path)

    def load_state(self, path) -> None:
        try:
            state = torch.load(Path(path), map_location="cpu", weights_only=True)
        except (OSError, RuntimeError, ValueError) as err:
            raise EvolveRLError(f"{path}: not a trained mutator's state this version wrote ({err})") from None
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT or state["settings"] != self.settings():
            raise EvolveRLError(f"{path} holds the state of another trained mutator: resume with its settings")
        weights = dict(self.policy.named_parameters())
        with torch.no_grad():
            for name, value in state["adapters"].items():
                weights[name].copy_(value)
        self.optimizer.load_state_dict(state["optimizer"])
        self.sampled, self.ready = state["sampled"], state["ready"]
        self.observed, self.updates = int(state["observed"]), int(state["updates"])


# ------------------------------------------------------------------------------------------ the spec
SPEC_KEYS = {"recipe": str, "group": int, "every": int, "tokens": int, "model": str}


def parse_rl_spec(arg: str) -> dict:
    """"recipe=cispo,group=4,every=2,tokens=128,model=PATH" (any subset, "" for the defaults) -> its settings."""
    out: dict = {}
    for item in filter(None, arg.split(",")):
        key, eq, value = item.partition("=")
        if not eq or key not in SPEC_KEYS:
            raise EvolveRLError(f"the rl mutator reads {', '.join(f'{k}=' for k in SPEC_KEYS)} items, got {item!r}")
        try:
            out[key] = SPEC_KEYS[key](value)
        except ValueError:
            raise EvolveRLError(f"rl mutator: {key} must be an integer, got {value!r}") from None
    return out


def from_spec(arg: str, *, verifier, limits: Limits, brief=None, seed: int = 0) -> TrainedMutator:
    """The "rl" row of `alpha_gym.search.mutators.MUTATORS`: "rl" or "rl:recipe=NAME,group=G,every=N,..."."""
    s = parse_rl_spec(arg)
    return TrainedMutator(s.get("model"), limits=limits, brief=brief, recipe=s.get("recipe", "cispo"),
                          answers_per_set=s.get("group", 4), train_every=s.get("every", 1),
                          max_new_tokens=s.get("tokens", 128))
