"""The shared-prompt computation gives the unshared numbers: log-probs, entropies and adapter gradients.

`trainers.logprobs.group_logps` runs a group's prompt once and shares its key/value cache across the group's
answers, each answer only to its own end; the oracle `tests/oracles.unshared_logps` runs prompt + answer for
every answer. Both must give the same log-probs and the same LoRA/DoRA gradients, through every loss the loop
can run (grpo, dapo, cispo, each with and without REPO-R shaping, with the KL term on), to float
rounding. Real SmolLM2-135M on CPU, tiny inputs (a short prompt, 3 answers of 6 tokens, one padded),
in float64 (Llama's RMSNorm still computes in float32, so gradients agree to ~1e-6 of their largest
element, not 1e-12), so that a real difference (a gradient lost through the shared prompt, a position
off by one: 1e-2 or more) cannot hide inside the tolerance; in float32 the two agree to ~1e-4 relative.
The adapters are perturbed first: fresh LoRA has B = 0, which would make every A gradient zero.

Batched sampling (`trainers.rollout.sample_groups`) is checked against the oracle `per_prompt_groups` (one
prompt at a time, transformers' `generate`) at a near-zero temperature, where sampling is the argmax and the
two must pick the same tokens; at temperature 1 they draw other random numbers (the same distribution, other
answers).
"""

from __future__ import annotations

import copy

import pytest
import torch

from alpha_gym.threads import torch_threads
from oracles import padded_logps, per_prompt_groups, unshared_logps
from trainers.config import LOSS_TYPES, TrainConfig

TOKENS = 6

#: A model folder that does not exist: loading it fails at once, where a Hub id ("owner/name") would be looked up
#: on the Hub first (a minute of retries on a machine without the network).
MISSING_MODEL = "/nonexistent/no-such-model"


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
    from trainers.rollout import prompt_ids
    prompt = prompt_ids(tokenizer, "Write one trading formula.", "cpu")
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(100, 20000, (3, TOKENS), generator=gen)
    mask = torch.ones(3, TOKENS)
    ids[2, 4:] = tokenizer.pad_token_id  # answer 2 ends after 4 tokens
    mask[2, 4:] = 0.0
    return prompt, ids, mask


def _grads(policy) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in policy.named_parameters() if p.requires_grad}


def _loss_and_grads(policy, prompt, ids, mask, old_logp, ref, adv, loss_type, repo_r, logps, lengths=None):
    """One loop-style loss (KL to `ref` on): log-probs by one path (`logps`: the product's group_logps or an
    oracle), backward, the adapters' gradients."""
    from trainers.losses import policy_loss
    from trainers.repo_r import shape_advantages
    policy.zero_grad(set_to_none=True)
    logp, _ = logps(policy, prompt, ids, 1.0, lengths=lengths)
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
    from trainers.logprobs import group_logps
    policy, tokenizer = _policy(smollm, use_dora)
    prompt, ids, mask = _inputs(tokenizer)

    with torch.no_grad():
        shared, ent_shared = group_logps(policy, prompt, ids, 0.7, with_entropy=True)
        unshared, ent_unshared = unshared_logps(policy, prompt, ids, 0.7, with_entropy=True)
    assert shared.shape == (3, TOKENS) and torch.isfinite(shared).all()
    torch.testing.assert_close(shared, unshared, rtol=0, atol=1e-5)
    torch.testing.assert_close(ent_shared, ent_unshared, rtol=0, atol=1e-5)
    # answer 2's first 4 log-probs do not depend on its padding: the same as the 4-token answer alone
    with torch.no_grad():
        short, _ = group_logps(policy, prompt, ids[2:, :4], 0.7)
    torch.testing.assert_close(shared[2:, :4], short, rtol=0, atol=1e-5)
    # the reference (adapters off), by each path
    with torch.no_grad(), policy.disable_adapter():
        ref = {share: logps(policy, prompt, ids, 1.0)[0] for share, logps in ((True, group_logps),
                                                                               (False, unshared_logps))}
    torch.testing.assert_close(ref[True], ref[False], rtol=0, atol=1e-5)
    assert (ref[True] - group_logps(policy, prompt, ids, 1.0)[0].detach()).abs().max() > 1e-3  # adapters matter

    # an older policy's log-probs a little off the current ones: ratios leave 1, so clip and cap act
    gen = torch.Generator().manual_seed(2)
    old_logp = (shared.detach() + 0.3 * torch.randn(shared.shape, generator=gen))
    adv = torch.tensor([[1.0], [-0.5], [-0.5]]).expand(3, TOKENS).clone()
    for loss_type in LOSS_TYPES:
        for repo_r in (False, True):
            loss_s, _, g_s = _loss_and_grads(policy, prompt, ids, mask, old_logp, ref[True], adv, loss_type, repo_r,
                                             group_logps)
            loss_u, _, g_u = _loss_and_grads(policy, prompt, ids, mask, old_logp, ref[False], adv, loss_type, repo_r,
                                             unshared_logps)
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
    from trainers.rollout import prompt_ids
    prompt = prompt_ids(tokenizer, "Write one trading formula.", "cpu")
    lengths = [4, 1, 7, 2, 4]
    ids = torch.randint(100, 20000, (5, 7), generator=torch.Generator().manual_seed(4))
    mask = (torch.arange(7)[None] < torch.tensor(lengths)[:, None]).double()
    ids[mask == 0] = tokenizer.pad_token_id
    return prompt, ids, mask, lengths


@pytest.mark.slow
@pytest.mark.parametrize("call_cost", [0, 1000], ids=["a-batch-per-length", "one-batch"])
def test_trimmed_answers_give_the_padded_logps_and_gradients(smollm, call_cost, monkeypatch):
    """Each answer computed only up to its own end, in batches of similar length that each continue a copy of
    the shared prompt's cache, gives the oracles' log-probs, entropies, losses and adapter gradients on every
    answer token (prompt + answer per row; the prompt shared and every answer padded), for every loss (4
    batches here, or 1); 0 after each end."""
    from trainers import logprobs
    monkeypatch.setattr(logprobs, "CALL_COST_TOKENS", call_cost)
    assert len(logprobs.length_chunks([4, 1, 7, 2, 4])) == (4 if call_cost == 0 else 1)
    policy, tokenizer = _policy(smollm, False)
    prompt, ids, mask, lengths = _ragged_inputs(tokenizer)
    on = mask.bool()
    with torch.no_grad():
        trimmed, ent_t = logprobs.group_logps(policy, prompt, ids, 0.7, with_entropy=True, lengths=lengths)
        unshared, ent_u = unshared_logps(policy, prompt, ids, 0.7, with_entropy=True)
        padded, ent_p = padded_logps(policy, prompt, ids, 0.7, with_entropy=True)
        with policy.disable_adapter():
            ref_t = logprobs.group_logps(policy, prompt, ids, 1.0, lengths=lengths)[0]
            ref_u = unshared_logps(policy, prompt, ids, 1.0)[0]
    assert trimmed.shape == ids.shape and (trimmed[~on] == 0).all() and (ent_t[~on] == 0).all()
    for a, b in ((trimmed, unshared), (ent_t, ent_u), (ref_t, ref_u), (trimmed, padded), (ent_t, ent_p)):
        torch.testing.assert_close(a[on], b[on], rtol=0, atol=1e-5)
    old_logp = (unshared + 0.3 * torch.randn(ids.shape, generator=torch.Generator().manual_seed(2))) * mask
    adv = torch.tensor([[1.0], [-0.5], [0.7], [-0.6], [-0.6]]).expand(5, 7).clone()
    for loss_type in LOSS_TYPES:
        for repo_r in (False, True):
            loss_t, _, g_t = _loss_and_grads(policy, prompt, ids, mask, old_logp, ref_t * mask, adv, loss_type,
                                             repo_r, logprobs.group_logps, lengths=lengths)
            loss_u, _, g_u = _loss_and_grads(policy, prompt, ids, mask, old_logp, ref_u * mask, adv, loss_type,
                                             repo_r, unshared_logps)
            where = f"trimmed {loss_type} repo_r={repo_r}"
            torch.testing.assert_close(loss_t, loss_u, rtol=1e-6, atol=1e-8, msg=where)
            _assert_same_grads(g_t, g_u, where)


def test_length_chunks_is_the_cheapest_split():
    """The dynamic programme's split costs no more than any split of the sorted rows into contiguous batches
    (all 2^(G-1) of them), covers every row once, and keeps each batch's rows in length order."""
    import itertools

    from trainers.logprobs import length_chunks
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
    from trainers.logprobs import group_logps
    policy, tokenizer = _policy(smollm, False)
    prompt, ids, _, _ = _ragged_inputs(tokenizer)
    for bad in ([0, 1, 7, 2, 4], [4, 1, 8, 2, 4]):
        with pytest.raises(ValueError, match="answer lengths must lie in 1..7"):
            group_logps(policy, prompt, ids, 1.0, lengths=bad)


@pytest.mark.slow
def test_batched_sampling_picks_the_per_prompt_tokens_at_zero_temperature(smollm):
    """Left-padded batched sampling continues each prompt as it would alone: at a near-zero temperature
    (sampling = argmax) the batch writes the answers of the product sampler given one prompt, and of the
    oracle (one prompt at a time, transformers' `generate` with its own cache)."""
    from trainers.rollout import end_token_ids, prompt_ids, sample_groups
    policy, tokenizer = _policy(smollm, False)
    config = TrainConfig(num_generations=2, max_completion_length=8, temperature=1e-4, lora_r=4, lora_alpha=8)
    prompts = [prompt_ids(tokenizer, t, "cpu") for t in
               ("Write one trading formula.", "Write an alpha for US stocks that trades on volume and close.")]
    assert prompts[0].shape[1] != prompts[1].shape[1]  # the batch really is padded
    eos = end_token_ids(policy, tokenizer)
    batched = sample_groups(policy, tokenizer, prompts, config, eos)
    alone = [sample_groups(policy, tokenizer, [p], config, eos)[0] for p in prompts]
    oracle = per_prompt_groups(policy, tokenizer, prompts, config, eos)
    for (ids_b, mask_b, texts_b), (ids_o, mask_o, texts_o) in zip(batched, oracle):
        assert texts_b == texts_o and texts_b[0].strip()
        for row in range(ids_b.shape[0]):
            n = int(mask_o[row].sum())
            assert int(mask_b[row].sum()) == n and torch.equal(ids_b[row, :n], ids_o[row, :n])
    for (ids_b, mask_b, texts_b), (ids_a, mask_a, texts_a) in zip(batched, alone):
        assert texts_b == texts_a and texts_b[0].strip()
        n = int(mask_a[0].sum())
        assert torch.equal(ids_b[:, :n], ids_a[:, :n]) and torch.equal(mask_b[:, :n], mask_a[:, :n])


@pytest.mark.slow
def test_answers_that_end_leave_the_batch_without_changing_the_others(smollm):
    """Rows that have written their EOS leave the batch as it samples (our decode loop), and at a near-zero
    temperature (sampling = argmax) every answer is the one transformers' `generate` writes with every row
    kept to the end (`drop_finished=False`, best-of-N's way), and the oracle's (one prompt at a time). Two
    extra end tokens make the prompts' answers end at different steps."""
    from trainers.rollout import end_token_ids, prompt_ids, sample_groups
    policy, tokenizer = _policy(smollm, False)
    prompts = [prompt_ids(tokenizer, t, "cpu") for t in
               ("Write one trading formula.", "Write an alpha for US stocks that trades on volume and close.")]
    config = TrainConfig(num_generations=2, max_completion_length=12, temperature=1e-4, lora_r=4, lora_alpha=8)
    eos = end_token_ids(policy, tokenizer)
    plain = sample_groups(policy, tokenizer, prompts, config, eos, drop_finished=False)
    ends = sorted({*eos, int(plain[0][0][0, 3]), int(plain[1][0][0, 8])})  # prompt 0 ends by token 4, 1 by 9
    kept = sample_groups(policy, tokenizer, prompts, config, ends, with_logps=True, drop_finished=False)
    dropped = sample_groups(policy, tokenizer, prompts, config, ends, with_logps=True)
    oracle = per_prompt_groups(policy, tokenizer, prompts, config, ends)
    for (ids_d, mask_d, texts_d, *_), (ids_o, mask_o, texts_o) in zip(dropped, oracle):
        assert texts_d == texts_o and mask_d.sum(1).tolist() == mask_o.sum(1).tolist()
        for row in range(ids_d.shape[0]):
            n = int(mask_o[row].sum())
            assert torch.equal(ids_d[row, :n], ids_o[row, :n])
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
    """The log-probs and entropies kept from the sampler's logits (a left-padded batch, the preallocated cache)
    are the oracle's (prompt + answer per row) for the same answers, on every answer token."""
    from trainers.rollout import end_token_ids, prompt_ids, sample_groups
    policy, tokenizer = _policy(smollm, False)
    config = TrainConfig(num_generations=3, max_completion_length=10, temperature=0.7, lora_r=4, lora_alpha=8)
    prompts = [prompt_ids(tokenizer, t, "cpu") for t in
               ("Write one trading formula.", "Write an alpha for US stocks that trades on volume and close.")]
    eos = end_token_ids(policy, tokenizer)
    torch.manual_seed(3)
    sampled = sample_groups(policy, tokenizer, prompts, config, eos, with_logps=True)
    torch.manual_seed(3)
    plain = sample_groups(policy, tokenizer, prompts, config, eos)
    for p, (ids, mask, texts, logp, entropy), (ids0, _, texts0) in zip(prompts, sampled, plain):
        assert torch.equal(ids, ids0) and texts == texts0  # keeping the logits draws no other answers
        assert logp.shape == ids.shape == entropy.shape and torch.isfinite(logp).all() and torch.isfinite(entropy).all()
        with torch.no_grad():
            want, want_entropy = unshared_logps(policy, p, ids, 0.7, with_entropy=True)
        on = mask.bool()
        assert on.sum() > 3 and (logp[on] < 0).all()
        torch.testing.assert_close(logp[on], want[on], rtol=0, atol=1e-5)
        torch.testing.assert_close(entropy[on], want_entropy[on], rtol=0, atol=1e-5)


def test_the_retired_speed_switches_still_load_from_a_settings_file():
    """The former reference-path switches are no TrainConfig fields now; a settings file or `--set` that names
    them still loads (true: what the loop does; false: dropped with a warning), and a non-bool is refused."""
    from alpha_gym import settings as S
    from alpha_gym.scoring.config import ConfigError
    from trainers.config import RETIRED, register_train_table
    register_train_table()
    assert set(RETIRED) == {"share_prompt_cache", "batch_generation", "sampler_logps", "trim_padding",
                            "drop_finished"}
    assert not set(RETIRED) & set(S.to_dict(TrainConfig()))
    on = S.load(None, [f"train.{k}=true" for k in RETIRED])["train"].config
    assert on == S.load(None, [])["train"].config
    with pytest.warns(UserWarning, match="train.batch_generation = false is retired"):
        off = S.load(None, ["train.batch_generation=false", "train.learning_rate=2e-5"])["train"].config
    assert off.learning_rate == 2e-5
    with pytest.raises(ConfigError, match="train.share_prompt_cache: expected true or false"):
        S.load(None, ["train.share_prompt_cache=1"])["train"]
    with pytest.raises(ValueError, match="unknown TrainConfig fields"):
        TrainConfig().with_(trim_padding=False)  # the Python API has no such field


def test_a_run_recorded_with_the_speed_switches_still_resumes(tmp_path, small_synthetic):
    """A run folder whose settings hold share_prompt_cache / batch_generation / ... (written while they were
    TrainConfig fields, either value) resumes; a key that changes the losses is still refused."""
    from alpha_gym import settings as S
    from alpha_gym.scoring.config import ConfigError
    from alpha_gym.scoring.verifier import Verifier
    from trainers.config import RECIPES, RETIRED
    from trainers.loop import train
    verifier = Verifier(small_synthetic)
    for value in (True, False):
        old = {**S.to_dict(RECIPES["dapo"]), **{k: value for k in RETIRED}}
        assert len(old) > 20
        S.claim_run_dir(tmp_path, {"verifier": S.to_dict(verifier.config), "train": old}, resume=False)
        with pytest.raises(Exception) as info:  # got past the settings check, to the model
            train(RECIPES["dapo"], verifier, None, tmp_path, model=MISSING_MODEL, steps=2, resume=True)
        assert not isinstance(info.value, ConfigError) and MISSING_MODEL in str(info.value)
    S.claim_run_dir(tmp_path, {"verifier": S.to_dict(verifier.config), "train": old}, resume=False)
    with pytest.raises(ConfigError, match="train.learning_rate"):
        train(RECIPES["dapo"].with_(learning_rate=1e-3), verifier, None, tmp_path, model=MISSING_MODEL, steps=2,
              resume=True)


def test_one_chat_template_with_one_fallback():
    """Every local model's prompt is `chat_prompt`'s: the tokenizer's chat template, or (a model without one)
    the plain text and a newline; the loop's ids are that text tokenized without special tokens."""
    from trainers.rollout import chat_prompt, prompt_ids

    class Plain:
        chat_template = None

        def __call__(self, text, add_special_tokens=True, return_tensors=None):
            class Out:
                input_ids = torch.tensor([[ord(c) for c in text]])
            assert not add_special_tokens
            return Out()

    assert chat_prompt(Plain(), "Write one formula.") == "Write one formula.\n"
    assert prompt_ids(Plain(), "ab", "cpu").tolist() == [[97, 98, 10]]


def test_the_chat_template_of_a_model_that_has_one(smollm):
    from trainers.rollout import chat_prompt, prompt_ids
    _, tokenizer = smollm
    text = chat_prompt(tokenizer, "Write one trading formula.")
    assert text == tokenizer.apply_chat_template([{"role": "user", "content": "Write one trading formula."}],
                                                 tokenize=False, add_generation_prompt=True)
    assert "Write one trading formula." in text and text != "Write one trading formula.\n"
    assert prompt_ids(tokenizer, "Write one trading formula.", "cpu")[0].tolist() == \
        tokenizer(text, add_special_tokens=False).input_ids


def test_the_cache_goes_by_the_name_the_models_forward_takes():
    """transformers 5.2x names the KV cache `cache`; 5.17 (the GPU image's) names it `past_key_values` and would
    swallow `cache=` in **kwargs, leaving the sampler's cache empty (found by benchmarks/gpu_check.py)."""
    from trainers.rollout import _cache_kwarg

    class Old:
        def forward(self, input_ids=None, past_key_values=None, **kwargs): ...

    class New:
        def forward(self, input_ids=None, cache=None, **kwargs): ...

    assert _cache_kwarg(Old) == "past_key_values"
    assert _cache_kwarg(New) == "cache"
