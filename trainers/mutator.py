"""A local Hugging Face model as a mutation operator of `evolve` (`alpha_gym.search.mutators`, row "model").

    mutator = ModelMutator("/path/to/model")          # or None: the built-in start model (SmolLM2-135M-Instruct)
    evolve(verifier, mutator, budget=1600)

Each `propose` renders one improve-task prompt per parent set (`alpha_gym.tasks.parents.improve_prompts`,
through `render_prompt`), templates them with the loop's chat template (`trainers.rollout.prompt_ids`) and
samples one answer each with the loop's sampler (`trainers.rollout.sample_groups`: the prompts as one
left-padded batch, an answer leaving the batch at its EOS), `batch_size` prompts per batch. The torch seed
of a batch is drawn from the run's generator, so a run repeats its answers on the same machine.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from alpha_gym.errors import InputError
from alpha_gym.language import DEFAULT_LIMITS, Limits
from alpha_gym.search.database import Program
from alpha_gym.tasks.parents import improve_prompts
from trainers.models import load_base
from trainers.rollout import end_token_ids, prompt_ids, sample_groups


@dataclass(frozen=True)
class _Sampling:
    """What `sample_groups` reads: one answer per prompt at the mutator's temperature and length."""

    num_generations: int
    temperature: float
    max_completion_length: int


class ModelMutator:
    """A causal LM (a local model folder, a Hub id, or None for the start model) proposing improve-task answers.

    temperature must be > 0 (the loop's sampler samples); max_new_tokens bounds each answer; `loaded` passes
    an already loaded (model, tokenizer) instead of a path. `stats` counts prompts, batches and seconds.
    """

    def __init__(self, model: str | os.PathLike | None = None, limits: Limits = DEFAULT_LIMITS, brief: Any = None,
                 *, temperature: float = 1.0, max_new_tokens: int = 128, batch_size: int = 16,
                 name: str = "model", loaded=None):
        if not (isinstance(temperature, (int, float)) and 0 < temperature <= 10):
            raise InputError(f"the model mutator samples: temperature must be in (0, 10], got {temperature!r}")
        for key, v in (("max_new_tokens", max_new_tokens), ("batch_size", batch_size)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InputError(f"{key} must be an integer >= 1, got {v!r}")
        self.model, self.tokenizer = loaded if loaded is not None else load_base(model)
        self.model.eval()
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.limits, self.brief, self.name, self.batch_size = limits, brief, name, batch_size
        self.sampling = _Sampling(1, float(temperature), max_new_tokens)
        self.eos = end_token_ids(self.model, self.tokenizer)
        self.stats = {"prompts": 0, "batches": 0, "seconds": 0.0}

    def propose(self, parent_sets: list[list[Program]], rng: np.random.Generator) -> list[str]:
        prompts = improve_prompts(parent_sets, self.limits, self.brief)
        seed = int(rng.integers(0, 2**62))   # drawn whatever the group's size: the run's draws stay in step
        if not prompts:
            return []
        t0 = time.perf_counter()
        device = next(self.model.parameters()).device
        ids = [prompt_ids(self.tokenizer, p, device) for p in prompts]
        torch.manual_seed(seed)
        answers: list[str] = []
        for start in range(0, len(ids), self.batch_size):
            groups = sample_groups(self.model, self.tokenizer, ids[start:start + self.batch_size], self.sampling,
                                   self.eos)
            answers += [texts[0] for _, _, texts in groups]
            self.stats["batches"] += 1
        self.stats["prompts"] += len(prompts)
        self.stats["seconds"] += time.perf_counter() - t0
        return answers


def from_spec(arg: str, *, verifier, limits: Limits, brief=None, seed: int = 0) -> ModelMutator:
    """The "model" row of `trainers.mutators.MUTATORS`: "model:PATH", or "model" for the start model.
    (`seed` is not read: every batch's seed is drawn from the run's generator.)"""
    return ModelMutator(arg or None, limits=limits, brief=brief)
