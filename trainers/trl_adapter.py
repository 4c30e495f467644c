"""Train with TRL's `GRPOTrainer` on the alpha-gym verifier: reward functions, weights and a small subclass.

    from trl import GRPOConfig
    from trainers.trl_adapter import AlphaGRPOTrainer, reward_funcs, reward_weights

    v = Verifier(panel)
    args = GRPOConfig(reward_weights=reward_weights(v), multi_objective_aggregation="normalize_then_sum",
                      loss_type="cispo", epsilon_high=1.2, beta=0.08, learning_rate=1e-5, num_generations=12,
                      per_device_train_batch_size=48, temperature=1.0, max_completion_length=128,
                      bf16=False, ...)                      # bf16=False on CPU: TRL turns bf16 on by default
    trainer = AlphaGRPOTrainer(model, v, args=args, train_dataset=dataset, processing_class=tokenizer)

`reward_funcs(v)` gives one function per reward channel (R1..R14, named after the channel) and
`reward_weights(v)` the verifier's priorities in the same order: their weighted sum is the verifier's
scalar reward for every answer, valid or not. The functions score each prompt's answers together as one
group (`GroupScorer`), as `Verifier.score_group` and our loop do, and grow the novelty archive after
each batch. With
`multi_objective_aggregation="normalize_then_sum"` TRL standardises each channel inside its group and
adds them with the weights: GDPO. (TRL then standardises the summed advantage over the whole batch,
which our loop does not; the per-group ranking is the same.) A plain `GRPOTrainer` works with these
functions too; `AlphaGRPOTrainer` adds what TRL lacks:

  * the validity projection: an invalid or motif-guarded (R10) answer never gets a positive advantage
    and each group's advantages still sum to zero (`trainers.advantages.enforce_validity`); with
    `advantage_floor` (and `brief_floor`) it holds the loop's floor too: who may win is `answers_may_win`,
    the rule `trainers.advantages.compute_advantages` reads;
  * the novelty archive saved with every checkpoint and restored by `train(resume_from_checkpoint=...)`;
  * optional REPO-R token shaping with its entropy thermostat (`repo_r=True`).

Hook: `_generate_and_score_completions` returns the batch dict with `advantages`; we post-process
that tensor. `_calculate_rewards` is wrapped to record which answers were valid, in TRL's order.
Single process is what the tests cover; the code gathers across processes like TRL does.

Option mapping (our `TrainConfig` -> TRL 1.16 `GRPOConfig` / `GRPOTrainer`):

    TrainConfig              TRL                                   notes
    -----------------------  ------------------------------------  ----------------------------------------
    learning_rate            learning_rate                         TRL default 1e-6 (ours 1e-5)
    beta                     beta                                  TRL default 0.0 = no KL, no reference pass
    num_generations          num_generations                       TRL default 8
    prompts_per_step         generation_batch_size / num_generations  per_device_train_batch_size x
                                                                   gradient_accumulation_steps x processes;
                                                                   one optimizer step per generation batch
                                                                   needs gradient_accumulation_steps ==
                                                                   steps_per_generation (the default)
    temperature              temperature (+ top_k=0, top_p=1.0)    same; both score log-probs at temperature
    max_completion_length    max_completion_length                 TRL default 512
    num_iterations           num_iterations                        same (TRL's mu)
    steps_per_generation     steps_per_generation                  same: optimizer steps per rollout batch
                                                                   (TRL needs gradient_accumulation_steps
                                                                   to divide it; ours split each group)
    epsilon                  epsilon                               same
    epsilon_high (grpo/dapo) epsilon_high                          same band 1 + eps_high; unset: TRL uses
                                                                   epsilon, ours dapo 0.28
    epsilon_high (cispo)     epsilon_high = 1 + ours               TRAP: TRL's cispo cap is ABSOLUTE,
                                                                   clamp(r, max=epsilon_high); ours 0.2 =
                                                                   TRL 1.2. Unset, TRL caps at epsilon =
                                                                   0.2: every token's weight ~1 -> 0.2
    loss_type                loss_type ("grpo"|"dapo"|"cispo")     TRL default "dapo". A new row of
                                                                   trainers.config.LOSS_TABLE adds its line
                                                                   here: TRL's name, its options' meanings
    top_entropy_quantile     top_entropy_quantile                  TRL: threshold per micro-batch from the
                                                                   current forward; ours: whole step batch,
                                                                   sampling policy's entropies
    max_grad_norm            max_grad_norm                         same (1.0)
    weight_decay             weight_decay                          same (0.0)
    lr_scheduler_type        lr_scheduler_type                     same ("linear" default)
    seed                     seed                                  same
    lora_r/alpha/dropout     peft_config=LoraConfig(r, lora_alpha, lora_dropout, use_dora,
      use_dora                 target_modules="all-linear")
    load_in_4bit             GRPOTrainer(quantization_config=BitsAndBytesConfig(...)) (model id only)
    advantage_mode "gdpo"    multi_objective_aggregation="normalize_then_sum" + reward_weights
    advantage_mode "grpo"    multi_objective_aggregation="sum_then_normalize", scale_rewards="group"
    advantage_floor          AlphaGRPOTrainer(advantage_floor=...)  no TRL option; default None (validity +
                                                                   R10 only), as before
    brief_floor              AlphaGRPOTrainer(brief_floor=...)     no TRL option; the loop's exemption
    repo_r                   AlphaGRPOTrainer(repo_r=True)         no TRL option
    adapo                    (none)                                TRL's use_adaptive_entropy is an entropy
                                                                   BONUS coefficient, a different mechanism
    refill_rounds            (none)                                TRL 1.16 has no dynamic sampling; it logs
                                                                   frac_reward_zero_std
    min_distinct_forms       (none)                                no TRL option (the loop's collapse refill)
    save_steps               save_steps                            same
    logging_steps            logging_steps                         TRL default 10
    log_completions          log_completions                       ours on by default (completions.jsonl);
                                                                   TRL's off (parquet + console table)
    (CPU fp32)               bf16=False                            TRL sets bf16=True when fp16 is unset
    (fp32 master adapters)   -                                     TRL casts adapters to bf16 when the base
                                                                   model is quantized (not the DoRA magnitude)

Other TRL 1.16 behaviours worth knowing (read from grpo_trainer.py):
  * With `beta > 0` and a model that is ALREADY a PeftModel, TRL adds a "ref" adapter copied from
    "default" and uses it as the reference; pass a base model + `peft_config` (or accept the copy).
  * `GRPOTrainer.__init__` patches `model.forward` in place (a fused LM head at TRL's temperature);
    do not reuse that model object in our loop afterwards.
  * `gradient_checkpointing` defaults to True (slower on a small CPU model; set False).
  * With `num_iterations == 1` TRL skips the old-log-prob pass and uses logp.detach() (ratio exactly 1).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from alpha_gym.scoring.advantage_rule import answers_may_win
from alpha_gym.scoring.config import CHANNELS
from trainers.advantages import enforce_validity
from trainers.repo_r import EntropyThermostat, shape_advantages

__all__ = ["completion_text", "GroupScorer", "reward_funcs", "reward_weights", "may_win_of", "AlphaGRPOTrainer"]


def completion_text(completion: Any) -> str:
    """The answer text of a TRL completion: a plain string, or a conversation (list of message dicts)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, (list, tuple)):
        parts = []
        for msg in completion:
            if not isinstance(msg, dict) or msg.get("role", "assistant") != "assistant":
                continue
            content = msg.get("content", "")
            if isinstance(content, list):  # content blocks: [{"type": "text", "text": ...}, ...]
                content = "".join(b.get("text", "") for b in content if isinstance(b, dict))
            parts.append(content if isinstance(content, str) else str(content))
        return "".join(parts)
    return "" if completion is None else str(completion)


class GroupScorer:
    """Scores a TRL batch the way the verifier and our loop do: each prompt's answers as ONE group.

    TRL calls every reward function with the same batch, the `num_generations` answers of a prompt next to
    each other. The batch is split into groups (`group_size` answers each when set, otherwise runs of
    equal prompts), each scored with `Verifier.score_group` (in-group duplicates, PBO ranks), and the
    result kept for the next caller, so the 12 channel functions cost one scoring. After a new batch is
    scored its valid answers above the threshold join the novelty archive (`grow=False` freezes it).
    Each group is scored with its brief: the dataset's `brief_id` column (TRL passes it to reward functions),
    looked up in `briefs` (an id not among them is an error) or, by default, among the seeded and fixed briefs
    (`alpha_gym.tasks.sets.brief_by_id`; a group of another brief scores without one, as before).
    """

    def __init__(self, verifier, group_size: int | None = None, grow: bool = True, briefs=None):
        self.verifier = verifier
        self.group_size = group_size
        self.grow = grow
        self.briefs = None if briefs is None else {b.id: b for b in briefs}
        self.calls = 0          # Verifier.score_group calls, for tests
        self.groups: list = []  # the GroupScores of the last batch
        self._key = None
        self._scores: list = []

    def _split(self, prompts, n: int) -> list[range]:
        if self.group_size:
            if n % self.group_size:
                raise ValueError(f"a batch of {n} completions does not split into groups of {self.group_size}")
            return [range(i, i + self.group_size) for i in range(0, n, self.group_size)]
        if prompts is None or len(prompts) != n:
            return [range(n)]
        bounds = [0] + [i for i in range(1, n) if prompts[i] != prompts[i - 1]] + [n]
        return [range(a, b) for a, b in zip(bounds, bounds[1:])]

    def _brief(self, brief_ids, idx: range):
        """The brief of one group's answers (None without a `brief_id` column); mixed ids are an error."""
        if brief_ids is None:
            return None
        ids = {brief_ids[i] for i in idx}
        if len(ids) != 1:
            raise ValueError(f"one group of answers carries several brief ids {sorted(map(str, ids))}")
        (brief_id,) = ids
        if brief_id is None:
            return None
        if self.briefs is None:
            from alpha_gym.tasks.sets import brief_by_id
            return brief_by_id(brief_id)
        if brief_id not in self.briefs:
            raise ValueError(f"brief_id {str(brief_id)[:80]!r} is not one of the briefs given to reward_funcs")
        return self.briefs[brief_id]

    def scores(self, completions, prompts=None, brief_ids=None) -> list:
        """The Score of every completion, in order; one scoring per distinct batch."""
        texts = [completion_text(c) for c in completions]
        if brief_ids is not None and all(b is None for b in brief_ids):
            brief_ids = None  # a dataset without the column: TRL passes no list, our trainer a list of None
        key = (repr(prompts), tuple(texts), None if brief_ids is None else tuple(brief_ids))
        if key == self._key:
            return self._scores
        if brief_ids is not None and len(brief_ids) != len(texts):
            raise ValueError(f"{len(brief_ids)} brief ids for {len(texts)} completions")
        self.groups = []
        for idx in self._split(prompts, len(texts)):
            self.calls += 1
            self.groups.append(self.verifier.score_group([texts[i] for i in idx], brief=self._brief(brief_ids, idx)))
        if self.grow:
            for group in self.groups:
                self.verifier.update_archive(group)
        self._key, self._scores = key, [s for g in self.groups for s in g.scores]
        return self._scores


def reward_funcs(verifier, group_size: int | None = None, briefs=None) -> list[Callable[..., list[float]]]:
    """One TRL reward function per channel, in `CHANNELS` order, sharing one `GroupScorer`.

    Each has TRL's signature f(prompts, completions, **kwargs) -> list[float] and is named after its
    channel (TRL logs rewards/<name>/mean). `f.scorer` is the shared scorer. Set `group_size` to TRL's
    `num_generations` (AlphaGRPOTrainer does) unless every group has its own prompt text.
    With `reward_weights(verifier)` the weighted sum of the 12 values is the verifier's scalar reward.
    A dataset's `brief_id` column reaches the scoring (`GroupScorer`; `briefs`: where to look ids up).
    """
    scorer = GroupScorer(verifier, group_size, briefs=briefs)

    def make(channel: str):
        def reward(prompts=None, completions=None, brief_id=None, **kwargs) -> list[float]:
            return [float(s.channels[channel]) for s in scorer.scores(completions, prompts, brief_id)]
        reward.__name__ = reward.__qualname__ = channel
        reward.scorer = scorer
        return reward

    return [make(c) for c in CHANNELS]


def reward_weights(verifier) -> list[float]:
    """The verifier's priorities, in the order of `reward_funcs`."""
    return [float(verifier.config.priorities[c]) for c in CHANNELS]


_reward_funcs = reward_funcs


def may_win_of(scores, advantage_floor: float | None = None, brief_floor: float | None = None) -> torch.Tensor:
    """(B,) bool: which of the scored answers may get a positive advantage, by the loop's rule (`answers_may_win`):
    valid, not caught by R10's guard, and with a floor, above it or meeting every check of its brief (R13 = 1,
    `GroupScore.meets_brief`) above `brief_floor`. Without a floor: valid and not guarded, as this adapter always did.
    """
    valid = [s.valid for s in scores]
    return torch.from_numpy(answers_may_win(
        valid, [s.valid and s.channels["motif_guard"] < 0 for s in scores], [s.channels["cpcv"] for s in scores],
        [s.valid and s.channels["brief"] == 1.0 for s in scores], floor=advantage_floor, brief_floor=brief_floor))


def _trainer_base():
    from trl import GRPOTrainer
    return GRPOTrainer


class AlphaGRPOTrainer(_trainer_base()):
    """TRL's GRPOTrainer with the validity projection and optional REPO-R shaping.

    verifier: builds `reward_funcs`/`reward_weights` when they are not given (reward_weights is filled
    into `args` when left None). repo_r: shape advantages per token with `thermostat` (default: the w5
    `EntropyThermostat`), once per generation batch, from the sampling policy's log-probs and entropy.
    advantage_floor, brief_floor: `TrainConfig`'s fields of those names, checked by it (None, the default: no
    floor, so validity and R10 only); the projection then bars who the loop's would (`may_win_of`).
    """

    def __init__(self, model, verifier=None, *, reward_funcs=None, args=None, repo_r: bool = False,
                 thermostat: EntropyThermostat | None = None, advantage_floor: float | None = None,
                 brief_floor: float | None = None, **kwargs):
        from trainers.config import TrainConfig
        # the loop's checks of the two values (range, an exemption needs a floor above it), before TRL loads anything
        TrainConfig(advantage_floor=advantage_floor, brief_floor=brief_floor)
        self.advantage_floor, self.brief_floor = advantage_floor, brief_floor
        if reward_funcs is None:
            if verifier is None:
                raise ValueError("AlphaGRPOTrainer needs a verifier or reward_funcs=reward_funcs(verifier)")
            reward_funcs = _reward_funcs(verifier)
        funcs = reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]
        self.scorer = next((f.scorer for f in funcs if hasattr(f, "scorer")), None)
        if self.scorer is None:
            raise ValueError("AlphaGRPOTrainer reads validity from the scores of trainers.trl_adapter.reward_funcs; "
                             "pass those functions (or a verifier)")
        if args is not None and args.reward_weights is None and verifier is not None and len(funcs) == len(CHANNELS):
            args.reward_weights = reward_weights(verifier)
        super().__init__(model, reward_funcs=funcs, args=args, **kwargs)
        if self.scorer.group_size is None:
            self.scorer.group_size = self.num_generations
        self.thermostat = (thermostat or EntropyThermostat()) if repo_r else None
        self._valid = None

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        from accelerate.utils import gather
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        brief_ids = [x.get("brief_id") if isinstance(x, dict) else None for x in inputs]  # as TRL's reward kwargs
        scores = self.scorer.scores(completions, prompts, brief_ids)
        # may win: valid, not caught by the motif guard (R10) and clear of the floor, as in our loop
        valid = may_win_of(scores, self.advantage_floor, self.brief_floor).to(device=rewards.device, dtype=torch.int32)
        self._valid = gather(valid).bool()  # every process, in the order of the gathered rewards
        return rewards

    def _save_checkpoint(self, model, trial):
        """TRL's checkpoint, plus the verifier's novelty archive (archive.npz), restored by `train(resume_...)`."""
        super()._save_checkpoint(model, trial)
        if self.is_world_process_zero():
            import os
            from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
            folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
            self.scorer.verifier.save_archive(os.path.join(folder, "archive.npz"))

    def train(self, resume_from_checkpoint=None, **kwargs):
        if resume_from_checkpoint:
            import os
            from transformers.trainer_utils import get_last_checkpoint

            from trainers.checkpoints import check_folder
            folder = get_last_checkpoint(self.args.output_dir) if resume_from_checkpoint is True \
                else str(resume_from_checkpoint)
            if folder and os.path.isdir(folder):
                check_folder(folder)  # a damaged file is a CheckpointError naming it, before the Trainer reads it
            if folder and os.path.exists(os.path.join(folder, "archive.npz")):
                self.scorer.verifier.load_archive(os.path.join(folder, "archive.npz"))
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)

    def _generate_and_score_completions(self, inputs):
        self.scorer.grow = self.model.training  # evaluation batches do not enter the archive
        out = super()._generate_and_score_completions(inputs)
        G = self.num_generations if self.model.training else self.num_generations_eval
        local = out["advantages"]
        n, rank = local.shape[0], self.accelerator.process_index
        adv = self.accelerator.gather(local)  # the projection needs whole groups
        adv = enforce_validity(adv.view(-1, G), self._valid.view(-1, G).to(adv.device)).view(-1)
        adv = adv[rank * n:(rank + 1) * n]
        if self.thermostat is not None and self.model.training:
            adv = self._shape(out, adv)
        out["advantages"] = adv
        return out

    @torch.no_grad()
    def _shape(self, out: dict, adv: torch.Tensor) -> torch.Tensor:
        """REPO-R: zeta from the batch's mean token entropy, then A -> A * f(log p) per token (B, T)."""
        completion_ids = out["completion_ids"]
        ids = torch.cat([out["prompt_ids"], completion_ids], dim=1)
        attention = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        logps, entropy, _ = self._get_per_token_logps_and_entropies(self.model, ids, attention, completion_ids.size(1),
                                                                    compute_entropy=True)
        mask = out["completion_mask"] if "tool_mask" not in out else out["completion_mask"] * out["tool_mask"]
        mask = mask.float()
        totals = self.accelerator.reduce(torch.stack([(entropy * mask).sum(), mask.sum()]), reduction="sum")
        zeta = self.thermostat.update((totals[0] / totals[1].clamp(min=1.0)).item())
        self._metrics["train"]["repo_r/zeta"].append(zeta)
        return shape_advantages(adv, logps, zeta) * mask
