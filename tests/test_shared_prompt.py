"""The shared-prompt computation gives the unshared numbers: log-probs, entropies and adapter gradients.

`trainers.loop.group_logps` runs a group's prompt once and shares its key/value cache across the group's
answers (`share_prompt_cache=True`, the default); `share_prompt=False` runs prompt + answer for every
answer. Both must give the same log-probs and the same LoRA/DoRA gradients, through every loss the loop
can run (grpo, dapo, cispo, each with and without REPO-R shaping, with the KL term on), to float
rounding. Real SmolLM2-135M on CPU, tiny inputs (a short prompt, 3 answers of 6 tokens, one padded),
in float64 (Llama's RMSNorm still computes in float32, so gradients agree to ~1e-6 of their largest
element, not 1e-12), so that a real difference (a gradient lost through the shared prompt, a position
off by one: 1e-2 or more) cannot hide inside the tolerance; in float32 the two agree to ~1e-4 relative.
The adapters are perturbed first: fresh LoRA has B = 0, which would make every A gradient zero.

Batched sampling (`batch_generation`) is checked against per-prompt sampling at a near-zero temperature,
where sampling is the argmax and the two must pick the same tokens; at temperature 1 they draw other
random numbers (the same distribution, other answers), so runs are not bit-identical across the switch.
"""

from __future__ import annotations

import copy

import pytest
import torch

from alpha_gym.threads import torch_threads
from trainers.config import LOSS_TYPES, TrainConfig

TOKENS = 6


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def smollm():
    from trainers.models import load_base
    return load_base(None)


def _policy(smollm, use_dora: bool):
    """A float64 deep copy of the base model with adapters whose every weight is random (none at its zero init)."""
    from trainers.models import add_adapters
    base, tokenizer = smollm
    policy = add_adapters(copy.deepcopy(base), TrainConfig(lora_r=4, lora_alpha=8, use_dora=use_dora))
    policy.to(torch.float64).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if p.requires_grad and "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    return policy, tokenizer


def _inputs(tokenizer):
    """A chat-templated prompt (1, L) and 3 right-padded answers (3, T) with their mask."""
    from trainers.loop import _prompt_ids
    prompt = _prompt_ids(tokenizer, "Write one trading formula.", "cpu")
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(100, 20000, (3, TOKENS), generator=gen)
    mask = torch.ones(3, TOKENS)
    ids[2, 4:] = tokenizer.pad_token_id  # answer 2 ends after 4 tokens
    mask[2, 4:] = 0.0
    return prompt, ids, mask


def _grads(policy) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in policy.named_parameters() if p.requires_grad}


def _loss_and_grads(policy, prompt, ids, mask, old_logp, ref, adv, loss_type, repo_r, share, lengths=None):
    """One loop-style loss (KL to `ref` on): log-probs by one path, backward, the adapters' gradients."""
    from trainers.loop import group_logps
    from trainers.losses import policy_loss
    from trainers.repo_r import shape_advantages
    policy.zero_grad(set_to_none=True)
    logp, _ = group_logps(policy, prompt, ids, 1.0, share_prompt=share, lengths=lengths)
    a = shape_advantages(adv, logp.detach(), 0.3) if repo_r else adv
    kw = {"beta": 0.08, "epsilon_high": 0.28 if loss_type != "cispo" else 0.2}
    if loss_type != "cispo":
        kw["epsilon"] = 0.2
    loss, _ = policy_loss(loss_type, logp, old_logp, a, mask, ref_logp=ref, **kw)
    loss.backward()
    return loss.detach(), logp.detach(), _grads(policy)


@pytest.mark.slow
@pytest.mark.parametrize("use_dora", [False, True], ids=["lora", "dora"])
def test_shared_prompt_gives_the_unshared_logps_and_gradients(smollm, use_dora):
    from trainers.loop import group_logps
    policy, tokenizer = _policy(smollm, use_dora)
    prompt, ids, mask = _inputs(tokenizer)

    with torch.no_grad():
        shared, ent_shared = group_logps(policy, prompt, ids, 0.7, with_entropy=True)
        unshared, ent_unshared = group_logps(policy, prompt, ids, 0.7, with_entropy=True, share_prompt=False)
    assert shared.shape == (3, TOKENS) and torch.isfinite(shared).all()
    torch.testing.assert_close(shared, unshared, rtol=0, atol=1e-5)
    torch.testing.assert_close(ent_shared, ent_unshared, rtol=0, atol=1e-5)
    # answer 2's first 4 log-probs do not depend on its padding: the same as the 4-token answer alone
    with torch.no_grad():
        short, _ = group_logps(policy, prompt, ids[2:, :4], 0.7)
    torch.testing.assert_close(shared[2:, :4], short, rtol=0, atol=1e-5)
    # the reference (adapters off), by each path
    with torch.no_grad(), policy.disable_adapter():
        ref = {share: group_logps(policy, prompt, ids, 1.0, share_prompt=share)[0] for share in (True, False)}
    torch.testing.assert_close(ref[True], ref[False], rtol=0, atol=1e-5)
    assert (ref[True] - group_logps(policy, prompt, ids, 1.0)[0].detach()).abs().max() > 1e-3  # adapters matter

    # an older policy's log-probs a little off the current ones: ratios leave 1, so clip and cap act
    gen = torch.Generator().manual_seed(2)
    old_logp = (shared.detach() + 0.3 * torch.randn(shared.shape, generator=gen))
    adv = torch.tensor([[1.0], [-0.5], [-0.5]]).expand(3, TOKENS).clone()
    for loss_type in LOSS_TYPES:
        for repo_r in (False, True):
            loss_s, _, g_s = _loss_and_grads(policy, prompt, ids, mask, old_logp, ref[True], adv, loss_type, repo_r,
                                             True)
            loss_u, _, g_u = _loss_and_grads(policy, prompt, ids, mask, old_logp, ref[False], adv, loss_type, repo_r,
                                             False)
            where = f"{loss_type} repo_r={repo_r}"
            torch.testing.assert_close(loss_s, loss_u, rtol=1e-6, atol=1e-8, msg=where)
            _assert_same_grads(g_s, g_u, where)


def _assert_same_grads(g_s, g_u, where):
    assert g_s.keys() == g_u.keys()
    flat_s = torch.cat([g.flatten() for g in g_s.values()])
    flat_u = torch.cat([g.flatten() for g in g_u.values()])
    assert flat_s.norm() > 0, where
    # every adapter matrix learns, A and B alike, in the prompt's layers too
    assert all(g.abs().max() > 0 for n, g in g_s.items() if "lora_A" in n or "lora_B" in n), where
    assert (flat_s - flat_u).norm() <= 1e-5 * flat_s.norm(), where
    for n in g_s:
        torch.testing.assert_close(g_s[n], g_u[n], rtol=1e-4, atol=2e-5 * g_s[n].abs().max().item() + 1e-12,
                                   msg=lambda m: f"{where} {n}: {m}")


def _ragged_inputs(tokenizer):
    """A prompt and 5 answers of 1, 2, 4, 4 and 7 tokens, right-padded to 7, rows not in length order."""
    from trainers.loop import _prompt_ids
    prompt = _prompt_ids(tokenizer, "Write one trading formula.", "cpu")
    lengths = [4, 1, 7, 2, 4]
    ids = torch.randint(100, 20000, (5, 7), generator=torch.Generator().manual_seed(4))
    mask = (torch.arange(7)[None] < torch.tensor(lengths)[:, None]).double()
    ids[mask == 0] = tokenizer.pad_token_id
    return prompt, ids, mask, lengths


@pytest.mark.slow
@pytest.mark.parametrize("call_cost", [0, 1000], ids=["a-batch-per-length", "one-batch"])
def test_trimmed_answers_give_the_padded_logps_and_gradients(smollm, call_cost, monkeypatch):
    """trim_padding: each answer computed only up to its own end, in batches of similar length that each
    continue a copy of the shared prompt's cache, gives the unshared log-probs, entropies, losses and
    adapter gradients on every answer token, for every loss (4 batches here, or 1); 0 after each end."""
    from trainers import loop
    monkeypatch.setattr(loop, "CALL_COST_TOKENS", call_cost)
    assert len(loop.length_chunks([4, 1, 7, 2, 4])) == (4 if call_cost == 0 else 1)
    policy, tokenizer = _policy(smollm, False)
    prompt, ids, mask, lengths = _ragged_inputs(tokenizer)
    on = mask.bool()
    with torch.no_grad():
        trimmed, ent_t = loop.group_logps(policy, prompt, ids, 0.7, with_entropy=True, lengths=lengths)
        unshared, ent_u = loop.group_logps(policy, prompt, ids, 0.7, with_entropy=True, share_prompt=False)
        with policy.disable_adapter():
            ref_t = loop.group_logps(policy, prompt, ids, 1.0, lengths=lengths)[0]
            ref_u = loop.group_logps(policy, prompt, ids, 1.0, share_prompt=False)[0]
    assert trimmed.shape == ids.shape and (trimmed[~on] == 0).all() and (ent_t[~on] == 0).all()
    for a, b in ((trimmed, unshared), (ent_t, ent_u), (ref_t, ref_u)):
        torch.testing.assert_close(a[on], b[on], rtol=0, atol=1e-5)
    old_logp = (unshared + 0.3 * torch.randn(ids.shape, generator=torch.Generator().manual_seed(2))) * mask
    adv = torch.tensor([[1.0], [-0.5], [0.7], [-0.6], [-0.6]]).expand(5, 7).clone()
    for loss_type in LOSS_TYPES:
        for repo_r in (False, True):
            loss_t, _, g_t = _loss_and_grads(policy, prompt, ids, mask, old_logp, ref_t * mask, adv, loss_type,
                                             repo_r, True, lengths=lengths)
            loss_u, _, g_u = _loss_and_grads(policy, prompt, ids, mask, old_logp, ref_u * mask, adv, loss_type,
                                             repo_r, False)
            where = f"trimmed {loss_type} repo_r={repo_r}"
            torch.testing.assert_close(loss_t, loss_u, rtol=1e-6, atol=1e-8, msg=where)
            _assert_same_grads(g_t, g_u, where)


def test_length_chunks_is_the_cheapest_split():
    """The dynamic programme's split costs no more than any split of the sorted rows into contiguous batches
    (all 2^(G-1) of them), covers every row once, and keeps each batch's rows in length order."""
    import itertools

    from trainers.loop import length_chunks
    gen = torch.Generator().manual_seed(5)
    for trial in range(30):
        G = int(torch.randint(1, 9, (1,), generator=gen))
        lengths = torch.randint(1, 65, (G,), generator=gen).tolist()
        cost = int(torch.randint(0, 40, (1,), generator=gen))
        chunks = length_chunks(lengths, call_cost=cost)
        assert sorted(g for c in chunks for g in c) == list(range(G))
        flat = [g for c in chunks for g in c]
        assert [lengths[g] for g in flat] == sorted(lengths)
        got = sum(len(c) * max(lengths[g] for g in c) + cost for c in chunks)
        ls = sorted(lengths)
        best = min(sum((b - a) * ls[b - 1] + cost for a, b in zip((0,) + cuts, cuts + (G,)))
                   for k in range(G) for cuts in itertools.combinations(range(1, G), k))
        assert got == best, (lengths, cost, chunks)
    assert length_chunks([5, 5, 5]) == [[0, 1, 2]] and length_chunks([64, 3], call_cost=0) == [[1], [0]]


def test_trimmed_lengths_out_of_range_are_refused(smollm):
    from trainers.loop import group_logps
    policy, tokenizer = _policy(smollm, False)
    prompt, ids, _, _ = _ragged_inputs(tokenizer)
    for bad in ([0, 1, 7, 2, 4], [4, 1, 8, 2, 4]):
        with pytest.raises(ValueError, match="answer lengths must lie in 1..7"):
            group_logps(policy, prompt, ids, 1.0, lengths=bad)


@pytest.mark.slow
def test_batched_sampling_picks_the_per_prompt_tokens_at_zero_temperature(smollm):
    """Left-padded batched sampling continues each prompt as it would alone: at a near-zero temperature
    (sampling = argmax) the batch and the one-prompt-at-a-time sampler write the same answers."""
    from trainers.loop import _eos_ids, _prompt_ids, sample_groups
    policy, tokenizer = _policy(smollm, False)
    config = TrainConfig(num_generations=2, max_completion_length=8, temperature=1e-4, lora_r=4, lora_alpha=8)
    prompts = [_prompt_ids(tokenizer, t, "cpu") for t in
               ("Write one trading formula.", "Write an alpha for US stocks that trades on volume and close.")]
    assert prompts[0].shape[1] != prompts[1].shape[1]  # the batch really is padded
    eos = _eos_ids(policy, tokenizer)
    batched = sample_groups(policy, tokenizer, prompts, config, eos)
    alone = [sample_groups(policy, tokenizer, [p], config, eos)[0] for p in prompts]
    for (ids_b, mask_b, texts_b), (ids_a, mask_a, texts_a) in zip(batched, alone):
        assert texts_b == texts_a and texts_b[0].strip()
        n = int(mask_a[0].sum())
        assert torch.equal(ids_b[:, :n], ids_a[:, :n]) and torch.equal(mask_b[:, :n], mask_a[:, :n])


@pytest.mark.slow
def test_answers_that_end_leave_the_batch_without_changing_the_others(smollm):
    """drop_finished: rows that have written their EOS leave the batch as it samples (our decode loop), and
    at a near-zero temperature (sampling = argmax) every answer is the one transformers' `generate` writes
    with every row kept to the end. Two extra end tokens make the prompts' answers end at different steps."""
    from trainers.loop import _eos_ids, _prompt_ids, sample_groups
    policy, tokenizer = _policy(smollm, False)
    prompts = [_prompt_ids(tokenizer, t, "cpu") for t in
               ("Write one trading formula.", "Write an alpha for US stocks that trades on volume and close.")]
    config = TrainConfig(num_generations=2, max_completion_length=12, temperature=1e-4, lora_r=4, lora_alpha=8)
    eos = _eos_ids(policy, tokenizer)
    plain = sample_groups(policy, tokenizer, prompts, config.with_(drop_finished=False), eos)
    ends = sorted({*eos, int(plain[0][0][0, 3]), int(plain[1][0][0, 8])})  # prompt 0 ends by token 4, 1 by 9
    kept = sample_groups(policy, tokenizer, prompts, config.with_(drop_finished=False), ends, with_logps=True)
    dropped = sample_groups(policy, tokenizer, prompts, config, ends, with_logps=True)
    lengths = [int(g[1][0].sum()) for g in dropped]
    assert lengths[0] <= 4 < lengths[1] <= 9, lengths
    for (ids_d, mask_d, texts_d, logp_d, _), (ids_k, mask_k, texts_k, logp_k, _) in zip(dropped, kept):
        assert texts_d == texts_k and texts_d[0].strip()
        n = ids_k.shape[1]
        assert ids_d.shape[1] == n and torch.equal(ids_d, ids_k) and torch.equal(mask_d, mask_k)
        on = mask_d.bool()
        torch.testing.assert_close(logp_d[on], logp_k[on], rtol=0, atol=1e-5)
        assert (logp_d[~on] == 0).all()


@pytest.mark.slow
def test_the_samplers_logps_are_the_scored_logps(smollm):
    """sampler_logps: the log-probs and entropies kept from the sampler's logits (a left-padded batch, the
    preallocated cache) are group_logps' for the same answers, on every answer token."""
    from trainers.loop import _eos_ids, _prompt_ids, group_logps, sample_groups
    policy, tokenizer = _policy(smollm, False)
    config = TrainConfig(num_generations=3, max_completion_length=10, temperature=0.7, lora_r=4, lora_alpha=8)
    prompts = [_prompt_ids(tokenizer, t, "cpu") for t in
               ("Write one trading formula.", "Write an alpha for US stocks that trades on volume and close.")]
    eos = _eos_ids(policy, tokenizer)
    torch.manual_seed(3)
    sampled = sample_groups(policy, tokenizer, prompts, config, eos, with_logps=True)
    torch.manual_seed(3)
    plain = sample_groups(policy, tokenizer, prompts, config, eos)
    for p, (ids, mask, texts, logp, entropy), (ids0, _, texts0) in zip(prompts, sampled, plain):
        assert torch.equal(ids, ids0) and texts == texts0  # keeping the logits draws no other answers
        assert logp.shape == ids.shape == entropy.shape and torch.isfinite(logp).all() and torch.isfinite(entropy).all()
        with torch.no_grad():
            want, want_entropy = group_logps(policy, p, ids, 0.7, with_entropy=True)
        on = mask.bool()
        assert on.sum() > 3 and (logp[on] < 0).all()
        torch.testing.assert_close(logp[on], want[on], rtol=0, atol=1e-5)
        torch.testing.assert_close(entropy[on], want_entropy[on], rtol=0, atol=1e-5)


def test_speed_switches_are_validated():
    with pytest.raises(ValueError, match="share_prompt_cache"):
        TrainConfig(share_prompt_cache=1)
    with pytest.raises(ValueError, match="batch_generation"):
        TrainConfig(batch_generation="yes")
    with pytest.raises(ValueError, match="sampler_logps"):
        TrainConfig(sampler_logps=None)
    with pytest.raises(ValueError, match="trim_padding"):
        TrainConfig(trim_padding=0)
    with pytest.raises(ValueError, match="drop_finished"):
        TrainConfig(drop_finished="no")
    c = TrainConfig()
    assert c.share_prompt_cache and c.batch_generation and c.sampler_logps and c.trim_padding and c.drop_finished


def test_a_run_begun_before_the_speed_switches_still_resumes(tmp_path, small_synthetic):
    """A run folder whose settings have no share_prompt_cache / batch_generation (written before they
    existed) resumes with either value (COMPUTE_ONLY); a key that changes the losses is still refused."""
    from alpha_gym import settings as S
    from alpha_gym.scoring.config import ConfigError
    from alpha_gym.scoring.verifier import Verifier
    from trainers.config import COMPUTE_ONLY, RECIPES
    from trainers.loop import train
    verifier = Verifier(small_synthetic)
    old = {k: v for k, v in S.to_dict(RECIPES["dapo"]).items() if k not in COMPUTE_ONLY}
    assert set(COMPUTE_ONLY) == {"share_prompt_cache", "batch_generation", "sampler_logps", "trim_padding",
                                 "drop_finished"} and len(old) > 20
    S.claim_run_dir(tmp_path, {"verifier": S.to_dict(verifier.config), "train": old}, resume=False)
    for config in (RECIPES["dapo"], RECIPES["dapo"].with_(batch_generation=False, share_prompt_cache=False,
                                                          sampler_logps=False, trim_padding=False,
                                                          drop_finished=False)):
        with pytest.raises(Exception) as info:  # got past the settings check, to the model
            train(config, verifier, None, tmp_path, model="no/such-model", steps=2, resume=True)
        assert not isinstance(info.value, ConfigError) and "no/such-model" in str(info.value)
        S.claim_run_dir(tmp_path, {"verifier": S.to_dict(verifier.config), "train": old}, resume=False)
    with pytest.raises(ConfigError, match="train.learning_rate"):
        train(RECIPES["dapo"].with_(learning_rate=1e-3), verifier, None, tmp_path, model="no/such-model", steps=2,
              resume=True)


def test_the_cache_goes_by_the_name_the_models_forward_takes():
    """transformers 5.2x names the KV cache `cache`; 5.17 (the GPU image's) names it `past_key_values` and would
    swallow `cache=` in **kwargs, leaving the sampler's cache empty (found by benchmarks/gpu_check.py)."""
    from trainers.loop import _cache_kwarg

    class Old:
        def forward(self, input_ids=None, past_key_values=None, **kwargs): ...

    class New:
        def forward(self, input_ids=None, cache=None, **kwargs): ...

    assert _cache_kwarg(Old) == "past_key_values"
    assert _cache_kwarg(New) == "cache"
