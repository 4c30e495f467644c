"""Policy losses: hand-computed values, stop-gradient checks, and equality with TRL 1.16's GRPOTrainer.

TRL equivalence (last section): a real tiny model (LlamaConfig, hidden 16, 2 layers, vocab 64, random
init, seed 0) and a real `GRPOTrainer` built on it (CPU, one process, no gradient accumulation). For
each case we hand TRL's `_compute_loss` a constructed batch (prompt/completion ids and masks, padded
completions, mixed-sign advantages, old and reference log-probs that differ from the current ones so
ratios leave the clip band). On our side, the per-token log-probs and entropies come from TRL's own
`_get_per_token_logps_and_entropies` on the same model, so the comparison isolates the loss formula;
we then compare the loss value and the gradient of every model parameter (atol 1e-6, float32).
"""

from __future__ import annotations

import math

import pytest
import torch

from trainers.losses import (cispo_loss, dapo_loss, grpo_loss, kl_penalty, policy_loss, top_entropy_mask)

# Batch by hand: 2 sequences, 2 tokens, the second token of sequence 1 is padding.
LOGP = [[-0.5, -1.0], [-2.0, -0.3]]
RATIO = [[1.5, 0.9], [0.5, 1.1]]
ADV = [1.0, -2.0]
MASK = [[1.0, 1.0], [1.0, 0.0]]


def _batch(requires_grad=False):
    logp = torch.tensor(LOGP, dtype=torch.float64, requires_grad=requires_grad)
    old = (logp - torch.tensor(RATIO, dtype=torch.float64).log()).detach()
    return logp, old, torch.tensor(ADV, dtype=torch.float64), torch.tensor(MASK, dtype=torch.float64)


# ---------------------------------------------------------------- hand-computed values

def test_grpo_loss_by_hand():
    # seq 0 (A = 1):  r 1.5 -> min(1.5, 1.2) = 1.2 -> -1.2;  r 0.9 -> -0.9;     mean -1.05
    # seq 1 (A = -2): r 0.5 -> min(-1.0, 0.8 * -2 = -1.6) = -1.6 -> +1.6;       mean  1.6
    # mean over sequences: (-1.05 + 1.6) / 2
    assert grpo_loss(*_batch()).item() == pytest.approx((-1.05 + 1.6) / 2, abs=1e-12)


def test_dapo_loss_by_hand():
    # clip band (0.8, 1.28): seq 0 tokens -1.28, -0.9; seq 1 token +1.6; 3 tokens in the batch
    assert dapo_loss(*_batch()).item() == pytest.approx((-1.28 - 0.9 + 1.6) / 3, abs=1e-12)


def test_cispo_loss_by_hand():
    # w = min(r, 1.2) = (1.2, 0.9), (0.5, -);  l = -w A logp
    # seq 0: -1.2*1*(-0.5) = 0.6, -0.9*1*(-1.0) = 0.9;  seq 1: -0.5*(-2)*(-2.0) = -2.0;  mean over 3 tokens
    assert cispo_loss(*_batch()).item() == pytest.approx((0.6 + 0.9 - 2.0) / 3, abs=1e-12)
    # cap 5.0 (TRL/ScaleRL default style): w = r everywhere here: 1.5*0.5 + 0.9*1.0 - 0.5*2*2.0
    assert cispo_loss(*_batch(), epsilon_high=4.0).item() == pytest.approx((0.75 + 0.9 - 2.0) / 3, abs=1e-12)


def test_kl_penalty_by_hand_and_beta():
    logp, old, adv, mask = _batch()
    ref = logp.detach() - 0.2  # ref - logp = -0.2 on every token
    k3 = math.exp(-0.2) + 0.2 - 1
    torch.testing.assert_close(kl_penalty(logp, ref), torch.full((2, 2), k3, dtype=torch.float64))
    assert kl_penalty(logp, logp).abs().max().item() == 0.0
    # beta * KL is averaged like the policy term: per sequence for grpo, per token for dapo / cispo
    plain = dict(beta=0.1, ref_logp=ref, use_bias_correction_kl=False)
    assert grpo_loss(logp, old, adv, mask, **plain).item() == pytest.approx((-1.05 + 1.6) / 2 + 0.1 * k3, abs=1e-12)
    assert cispo_loss(logp, old, adv, mask, **plain).item() == pytest.approx((0.6 + 0.9 - 2.0) / 3 + 0.1 * k3,
                                                                             abs=1e-12)
    # TRL's default use_bias_correction_kl=True weighs each token's KL by its ratio r
    # grpo: seq 0 mean of k3 * (1.5, 0.9) = 1.2 k3, seq 1: 0.5 k3;  cispo: (1.5 + 0.9 + 0.5) k3 / 3
    assert grpo_loss(logp, old, adv, mask, beta=0.1, ref_logp=ref).item() == pytest.approx(
        (-1.05 + 1.6) / 2 + 0.1 * k3 * (1.2 + 0.5) / 2, abs=1e-12)
    assert cispo_loss(logp, old, adv, mask, beta=0.1, ref_logp=ref).item() == pytest.approx(
        (0.6 + 0.9 - 2.0) / 3 + 0.1 * k3 * (1.5 + 0.9 + 0.5) / 3, abs=1e-12)
    with pytest.raises(ValueError):
        dapo_loss(logp, old, adv, mask, beta=0.1)


def test_dapo_num_items_in_batch_splits_into_micro_batches():
    logp, old, adv, mask = _batch()
    full = dapo_loss(logp, old, adv, mask)
    n = mask.sum()
    parts = sum(dapo_loss(logp[i:i + 1], old[i:i + 1], adv[i:i + 1], mask[i:i + 1], num_items_in_batch=n)
                for i in range(2))
    assert parts.item() == pytest.approx(full.item(), abs=1e-12)


def test_token_level_advantages_broadcast_like_sequence_level():
    logp, old, adv, mask = _batch()
    per_token_adv = adv[:, None].expand(2, 2)
    for fn in (grpo_loss, dapo_loss, cispo_loss):
        assert fn(logp, old, per_token_adv, mask).item() == pytest.approx(fn(logp, old, adv, mask).item())


def test_bool_mask_equals_float_mask():
    logp, old, adv, mask = _batch()
    for fn in (grpo_loss, dapo_loss, cispo_loss):
        assert fn(logp, old, adv, mask.bool()).item() == fn(logp, old, adv, mask).item()


# ---------------------------------------------------------------- gradients

def test_cispo_gradient_flows_only_through_logp():
    logp, old, adv, mask = _batch(requires_grad=True)
    old.requires_grad_(True)
    adv.requires_grad_(True)
    cispo_loss(logp, old, adv, mask).backward()
    assert old.grad is None  # the importance weight is stop-gradient
    # dL/dlogp = -w A m / N with N = 3 tokens; the padded token gets 0
    expected = torch.tensor([[-1.2, -0.9], [1.0, 0.0]], dtype=torch.float64) / 3
    torch.testing.assert_close(logp.grad, expected, rtol=0, atol=1e-12)


def test_clipped_losses_switch_clipped_tokens_off_cispo_does_not():
    logp, old, adv, mask = _batch(requires_grad=True)
    dapo_loss(logp, old, adv, mask).backward()
    # seq 0 token 0 (r 1.5 > 1.28, A > 0) and seq 1 token 0 (r 0.5 < 0.8, A < 0) are clipped: zero gradient
    assert logp.grad[0, 0] == 0 and logp.grad[1, 0] == 0
    assert logp.grad[0, 1] == pytest.approx(-0.9 / 3)  # d(-r A)/dlogp = -r A
    logp.grad = None
    cispo_loss(logp, old, adv, mask).backward()
    assert (logp.grad[mask.bool()] != 0).all()



def test_dapo_and_cispo_share_their_gradient_on_policy():
    """With one optimizer pass per batch every ratio is exactly 1: no clip is active, the weight is 1,
    and DAPO and CISPO take the same step. They part only from the second pass on (num_iterations > 1)."""
    logp, _, adv, mask = _batch()
    grads = []
    for loss in (dapo_loss, cispo_loss):
        x = logp.clone().requires_grad_(True)
        loss(x, x.detach(), adv, mask, beta=0.08, ref_logp=x.detach() - 0.1).backward()
        grads.append(x.grad)
    assert torch.equal(grads[0], grads[1])
    logp, old, adv, mask = _batch()  # off-policy ratios: the clipped tokens make them differ
    grads = []
    for loss in (dapo_loss, cispo_loss):
        x = logp.clone().requires_grad_(True)
        loss(x, old, adv, mask).backward()
        grads.append(x.grad)
    assert not torch.equal(grads[0], grads[1])

# ---------------------------------------------------------------- top-entropy mask

def test_top_entropy_mask_by_hand():
    entropy = torch.tensor([[0.1, 0.5, 0.9], [0.3, 0.7, 2.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    # completion entropies sorted: 0.1 0.3 0.5 0.7 0.9; quantile(., 0.6) = 0.5 + 0.4 * 0.2 = 0.58
    keep = top_entropy_mask(entropy, mask, 0.4)
    assert keep.tolist() == [[False, False, True], [False, True, False]]  # top 40 %: 0.9 and 0.7
    assert torch.equal(top_entropy_mask(entropy, mask, 1.0), mask.bool())
    assert top_entropy_mask(entropy, mask, 0.0).tolist() == [[False, False, True], [False, False, False]]
    assert not top_entropy_mask(entropy, torch.zeros_like(mask), 0.2).any()


def test_entropy_mask_applies_to_policy_term_not_kl_and_keeps_normaliser():
    logp, old, adv, mask = _batch()
    entropy = torch.tensor([[0.9, 0.1], [0.2, 5.0]], dtype=torch.float64)  # padding entropy is ignored
    # quantile 1/3 of the 3 completion entropies (0.1 0.2 0.9) keeps only seq 0 token 0
    loss = dapo_loss(logp, old, adv, mask, entropy=entropy, top_entropy_quantile=1 / 3)
    assert loss.item() == pytest.approx(-1.28 / 3, abs=1e-12)  # still divided by all 3 tokens (as TRL)
    ref = logp.detach() - 0.2
    k3 = math.exp(-0.2) + 0.2 - 1
    with_kl = dapo_loss(logp, old, adv, mask, entropy=entropy, top_entropy_quantile=1 / 3, beta=0.1, ref_logp=ref,
                        use_bias_correction_kl=False)
    assert with_kl.item() == pytest.approx(-1.28 / 3 + 0.1 * k3, abs=1e-12)
    with pytest.raises(ValueError):
        dapo_loss(logp, old, adv, mask, top_entropy_quantile=0.2)


# ---------------------------------------------------------------- dispatcher

def test_policy_loss_dispatch_and_metrics():
    logp, old, adv, mask = _batch()
    loss, m = policy_loss("dapo", logp, old, adv, mask, entropy=torch.ones(2, 2))
    assert loss.item() == dapo_loss(logp, old, adv, mask).item()
    assert m["ratio/mean"] == pytest.approx((1.5 + 0.9 + 0.5) / 3)
    assert m["clip_ratio/high_mean"] == pytest.approx(1 / 3)    # r 1.5 > 1.28 with A > 0
    assert m["clip_ratio/low_mean"] == pytest.approx(1 / 3)     # r 0.5 < 0.8 with A < 0
    assert m["clip_ratio/region_mean"] == pytest.approx(2 / 3)
    assert m["entropy"] == pytest.approx(1.0)
    _, m = policy_loss("grpo", logp, old, adv, mask, epsilon=0.6)  # band (0.4, 1.6): nothing clipped
    assert m["clip_ratio/region_mean"] == 0.0
    loss, m = policy_loss("cispo", logp, old, adv, mask, epsilon_high=0.2, ref_logp=logp.detach() - 0.2)
    assert loss.item() == cispo_loss(logp, old, adv, mask).item()
    assert m["cispo_clip_ratio"] == pytest.approx(1 / 3)  # r 1.5 > 1.2 with A > 0
    assert m["kl"] == pytest.approx((math.exp(-0.2) + 0.2 - 1) * (1.5 + 0.9 + 0.5) / 3)  # ratio-weighted
    with pytest.raises(ValueError):
        policy_loss("ppo", logp, old, adv, mask)


# ---------------------------------------------------------------- equality with TRL 1.16

V, P_LEN, T_LEN, B = 64, 3, 6, 4


@pytest.fixture(scope="module")
def trl_env(tmp_path_factory):
    pytest.importorskip("trl")
    pytest.importorskip("datasets")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from transformers import LlamaConfig, LlamaForCausalLM

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(V)}, unk_token="t2"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="t0", eos_token="t1", unk_token="t2")
    # saved to disk, because with beta > 0 GRPOTrainer loads its reference model from the model's path
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32,
                                         pad_token_id=0, eos_token_id=1, bos_token_id=3))
    path = tmp_path_factory.mktemp("tiny_llama")
    model.save_pretrained(path)
    return tokenizer, str(path)


def _trl_trainer(env, tmp_path, **config):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    tokenizer, model = env
    args = GRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, bf16=False,
                      gradient_checkpointing=False, per_device_train_batch_size=B, num_generations=B,
                      max_completion_length=T_LEN, **config)
    trainer = GRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions), args=args,
                          train_dataset=Dataset.from_dict({"prompt": ["t5 t6 t7"] * B}), processing_class=tokenizer)
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's training loop; one micro-batch here
    trainer.model.train()
    return trainer


def _trl_inputs(token_advantages):
    g = torch.Generator().manual_seed(1)
    completion_mask = torch.ones(B, T_LEN, dtype=torch.long)
    completion_mask[1, 4:] = 0  # padded completions of different lengths
    completion_mask[3, 2:] = 0
    adv = torch.tensor([1.3, -0.7, 0.4, -1.0])
    if token_advantages:  # REPO-R style (B, T) advantages
        adv = adv[:, None] * (1 + 0.3 * torch.rand(B, T_LEN, generator=g))
    return {
        "prompt_ids": torch.randint(4, V, (B, P_LEN), generator=g),
        "prompt_mask": torch.ones(B, P_LEN, dtype=torch.long),
        "completion_ids": torch.randint(4, V, (B, T_LEN), generator=g),
        "completion_mask": completion_mask,
        "advantages": adv,
        "num_items_in_batch": completion_mask.sum(),
    }


def _grads(model):
    return [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]


CASES = [  # (our loss, our options, TRL GRPOConfig options, (B, T) advantages)
    ("grpo", dict(epsilon=0.2), dict(loss_type="grpo", epsilon=0.2), False),
    ("grpo", dict(epsilon=0.2, epsilon_high=0.28, beta=0.08),
     dict(loss_type="grpo", epsilon=0.2, epsilon_high=0.28, beta=0.08), False),
    ("grpo", dict(epsilon=0.2, top_entropy_quantile=0.5),
     dict(loss_type="grpo", epsilon=0.2, top_entropy_quantile=0.5), False),
    ("dapo", dict(epsilon=0.2, epsilon_high=0.28), dict(loss_type="dapo", epsilon=0.2, epsilon_high=0.28), False),
    ("dapo", dict(epsilon=0.2, epsilon_high=0.28, beta=0.08, top_entropy_quantile=0.2),
     dict(loss_type="dapo", epsilon=0.2, epsilon_high=0.28, beta=0.08, top_entropy_quantile=0.2), False),
    ("dapo", dict(epsilon=0.2, epsilon_high=0.28), dict(loss_type="dapo", epsilon=0.2, epsilon_high=0.28), True),
    ("dapo", dict(beta=0.08, use_bias_correction_kl=False),
     dict(loss_type="dapo", epsilon_high=0.28, beta=0.08, use_bias_correction_kl=False), False),
    # the mapping: our cap margin 0.2 (cap 1.2) is TRL's absolute epsilon_high = 1.2
    ("cispo", dict(epsilon_high=0.2), dict(loss_type="cispo", epsilon_high=1.2), False),
    ("cispo", dict(epsilon_high=0.2, beta=0.08), dict(loss_type="cispo", epsilon_high=1.2, beta=0.08), True),
    ("cispo", dict(epsilon_high=4.0), dict(loss_type="cispo", epsilon_high=5.0), False),
    # TRL's trap: epsilon_high unset -> epsilon (0.2) -> absolute cap 0.2, i.e. our margin -0.8
    ("cispo", dict(epsilon_high=-0.8), dict(loss_type="cispo"), False),
]


@pytest.mark.parametrize("name, ours, theirs, token_adv", CASES)
def test_matches_trl_grpo_trainer(trl_env, tmp_path, name, ours, theirs, token_adv):
    trainer = _trl_trainer(trl_env, tmp_path, **theirs)
    model = trainer.model
    inputs = _trl_inputs(token_adv)
    input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    with torch.no_grad():
        logp0, _, _ = trainer._get_per_token_logps_and_entropies(model, input_ids, attention_mask, T_LEN)
    g = torch.Generator().manual_seed(2)
    inputs["old_per_token_logps"] = logp0 + 0.4 * torch.randn(B, T_LEN, generator=g)  # ratios ~ e^(+-0.4)
    inputs["ref_per_token_logps"] = logp0 + 0.3 * torch.randn(B, T_LEN, generator=g)

    model.zero_grad()
    trl_loss = trainer._compute_loss(model, inputs)
    trl_loss.backward()
    trl_grads = _grads(model)

    model.zero_grad()
    logp, entropy, _ = trainer._get_per_token_logps_and_entropies(model, input_ids, attention_mask, T_LEN,
                                                                  compute_entropy=True)
    loss, metrics = policy_loss(name, logp, inputs["old_per_token_logps"], inputs["advantages"],
                                inputs["completion_mask"], ref_logp=inputs["ref_per_token_logps"],
                                entropy=entropy, **ours)
    loss.backward()
    our_grads = _grads(model)

    torch.testing.assert_close(loss, trl_loss, rtol=0, atol=1e-6)
    assert len(our_grads) == len(trl_grads) > 0
    for ours_g, trl_g in zip(our_grads, trl_grads):
        torch.testing.assert_close(ours_g, trl_g, rtol=0, atol=1e-6)
    # the clip metrics agree too (TRL's last logged value)
    key = "cispo_clip_ratio" if name == "cispo" else "clip_ratio/region_mean"
    assert metrics[key] == pytest.approx(trainer._metrics["train"][key][-1], abs=1e-6)
    assert 0.0 < metrics["ratio/mean"]


def test_trl_logps_equal_plain_log_softmax(trl_env, tmp_path):
    """TRL's fused head gives the same per-token log-probs as log_softmax over the full logits."""
    trainer = _trl_trainer(trl_env, tmp_path, loss_type="dapo")
    inputs = _trl_inputs(False)
    input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    with torch.no_grad():
        logp, entropy, _ = trainer._get_per_token_logps_and_entropies(trainer.model, input_ids, attention_mask,
                                                                      T_LEN, compute_entropy=True)
        logits = trainer.model(input_ids=input_ids, attention_mask=attention_mask).logits[:, P_LEN - 1:-1]
    logprobs = logits.log_softmax(-1)
    ours = logprobs.gather(-1, inputs["completion_ids"][..., None]).squeeze(-1)
    ours_entropy = -(logprobs.exp() * logprobs).sum(-1)
    m = inputs["completion_mask"].bool()
    torch.testing.assert_close(ours[m], logp[m], rtol=0, atol=1e-5)
    torch.testing.assert_close(ours_entropy[m], entropy[m], rtol=0, atol=1e-5)


def test_trl_cispo_epsilon_high_is_an_absolute_cap(trl_env, tmp_path):
    """Negative control: passing our margin 0.2 as TRL's epsilon_high gives a different loss (cap 0.2, not 1.2)."""
    inputs = _trl_inputs(False)
    input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    losses = {}
    for cap in (0.2, 1.2):
        trainer = _trl_trainer(trl_env, tmp_path, loss_type="cispo", epsilon_high=cap)
        with torch.no_grad():
            logp, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, input_ids, attention_mask, T_LEN)
            inputs["old_per_token_logps"] = logp - 0.1  # every ratio is e^0.1 = 1.105
            losses[cap] = trainer._compute_loss(trainer.model, inputs)
        ours = cispo_loss(logp, inputs["old_per_token_logps"], inputs["advantages"], inputs["completion_mask"],
                          epsilon_high=0.2)
        if cap == 1.2:
            torch.testing.assert_close(ours, losses[cap], rtol=0, atol=1e-6)
    # r = 1.105 is under the 1.2 cap but over 0.2: TRL's unset/misread value shrinks every weight to 0.2
    torch.testing.assert_close(losses[0.2], losses[1.2] * 0.2 / math.exp(0.1), rtol=1e-5, atol=1e-7)
