"""TrainConfig.bf16_base: the frozen base's linear layers held in bfloat16, the adapters and the rest in fp32.

A tiny Llama (random weights, built from a config) checks the conversion and the gradients in seconds; the
real SmolLM2-135M runs two planted steps of the loop with it (as tests/test_training.py does), checks that the
run records the setting, that the adapters learn, that a resume repeats the step exactly and that the
checkpoint answers on the fp32 base. Fidelity against the fp32 base is measured, not asserted, in
BENCHMARKS.md ("A bf16 base": `benchmarks/bf16_base_parity.py`).
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from trainers.config import TrainConfig, recipe


def tiny_llama(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    return LlamaForCausalLM(config).eval()


def test_every_linear_but_the_head_is_held_in_bf16_and_frozen():
    import copy

    from trainers.models import Bf16FrozenLinear, hold_linears_in_bf16
    fp32 = tiny_llama()
    model = copy.deepcopy(fp32)
    assert hold_linears_in_bf16(model) == 2 * 7  # q, k, v, o, gate, up, down in each of 2 layers
    linears = {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    assert {n for n, m in linears.items() if type(m) is Bf16FrozenLinear} == set(linears) - {"lm_head"}
    for name, m in linears.items():
        if name != "lm_head":
            assert m.weight.dtype == torch.bfloat16 and not m.weight.requires_grad
    # the head and the embedding it is tied to stay fp32, and stay one tensor
    assert model.lm_head.weight.dtype == torch.float32
    assert model.lm_head.weight is model.model.embed_tokens.weight
    ids = torch.randint(0, 64, (2, 9))
    with torch.no_grad():
        a, b = model(ids).logits, fp32(ids).logits
    assert a.dtype == torch.float32
    # rounded, so not the fp32 logits, but close to them (bf16 keeps 8 bits of mantissa)
    assert not torch.equal(a, b)
    assert torch.allclose(a, b, atol=0.05 * b.abs().max().item())


def test_a_model_with_adapters_is_refused():
    from trainers.models import add_adapters, hold_linears_in_bf16
    policy = add_adapters(tiny_llama(), TrainConfig())
    with pytest.raises(ValueError, match="before adapters"):
        hold_linears_in_bf16(policy)


def test_adapters_stay_fp32_and_learn_over_a_bf16_base():
    from trainers.models import Bf16FrozenLinear, add_adapters
    policy = add_adapters(tiny_llama(), TrainConfig(bf16_base=True, lora_r=4, lora_alpha=8))
    trainable = {n: p for n, p in policy.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n and p.dtype == torch.float32 for n, p in trainable.items())
    assert sum(isinstance(m, Bf16FrozenLinear) for m in policy.modules()) == 14
    optimizer = torch.optim.AdamW(trainable.values(), lr=1e-2)
    ids = torch.randint(0, 64, (2, 9))
    before = {n: p.detach().clone() for n, p in trainable.items()}
    for _ in range(2):  # lora_B starts at 0, so lora_A's gradient is 0 until B has moved once
        optimizer.zero_grad()
        policy(ids, labels=ids).loss.backward()
        optimizer.step()
    moved = {n for n, p in trainable.items() if not torch.equal(p, before[n])}
    assert moved == set(trainable)  # every adapter matrix, A and B in every layer


def test_the_loop_refuses_bf16_base_over_adapters_already_on_an_fp32_base(tmp_path):
    """A policy passed with its adapters already added cannot be held in bf16 afterwards: the run would record
    bf16_base = true over an fp32 base, so the loop refuses it."""
    from trainers import loop
    from trainers.models import add_adapters
    policy = add_adapters(tiny_llama(), TrainConfig())
    with pytest.raises(ValueError, match="already has adapters"):
        loop._policy((policy, None), TrainConfig(bf16_base=True))


def test_off_by_default_and_the_fp32_base_is_untouched():
    from trainers.models import Bf16FrozenLinear, add_adapters
    assert TrainConfig().bf16_base is False
    policy = add_adapters(tiny_llama(), TrainConfig())
    assert not any(isinstance(m, Bf16FrozenLinear) for m in policy.modules())
    assert {p.dtype for p in policy.parameters()} == {torch.float32}


@pytest.mark.slow
@pytest.mark.real_data
def test_two_loop_steps_on_a_bf16_base_record_it_resume_exactly_and_answer_on_fp32(real_us46, tmp_path):
    """The real SmolLM2 and verifier, two planted steps (tests/test_training.py's helpers): the settings say
    bf16_base = true, the adapters move, checkpoint-1 resumed repeats step 2 bit for bit, and the checkpoint
    loads for answering over the recorded base in fp32."""
    from safetensors.torch import load_file
    from test_training import BRIEFS, TINY, planting

    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.threads import torch_threads
    from trainers import loop
    from trainers.answers import load_for_inference
    from trainers.models import Bf16FrozenLinear, load_base
    from trainers.run_log import read_log
    verifier = Verifier(real_us46)
    # one prompt a step (TINY has two): its planted group still carries signal, at half the cost of three steps
    config = recipe("cispo", **{**TINY, "prompts_per_step": 1}).with_(bf16_base=True)

    def run(out, resume=False):
        sample_group, _ = planting()
        with pytest.MonkeyPatch.context() as mp, torch_threads(1):
            mp.setattr(loop, "sample_groups", sample_group)
            return loop.train(config, verifier.fork(), BRIEFS, out, model=load_base(None), steps=2, resume=resume,
                              progress=False)

    first = tmp_path / "first"
    run(first)
    assert "bf16_base = true" in (first / "settings.toml").read_text()
    log = read_log(first)
    assert [r["step"] for r in log] == [1, 2] and all(r["reward"] == r["reward"] for r in log)
    a1 = load_file(str(first / "checkpoint-1" / "adapter_model.safetensors"))
    a2 = load_file(str(first / "checkpoint-2" / "adapter_model.safetensors"))
    assert {v.dtype for v in a2.values()} == {torch.float32}
    assert any(not torch.equal(a1[k], a2[k]) for k in a1)  # step 2 moved the adapters

    resumed = tmp_path / "resumed"
    resumed.mkdir()
    for name in ("checkpoint-1", "log.jsonl", "archive.jsonl"):
        (shutil.copytree if name.startswith("checkpoint") else shutil.copy)(first / name, resumed / name)
    again = run(resumed, resume=True)
    assert again["start_step"] == 1
    b2 = load_file(str(resumed / "checkpoint-2" / "adapter_model.safetensors"))
    assert all(torch.equal(a2[k], b2[k]) for k in a2)
    timing = {k for k in log[1] if k.startswith("seconds/")}
    assert {k: v for k, v in read_log(resumed)[1].items() if k not in timing} == \
        {k: v for k, v in log[1].items() if k not in timing}

    # the probe and `alpha-gym eval` answer with the adapters over the base in fp32 (what the checkpoint names)
    model, _ = load_for_inference(str(first / "checkpoint-2"))
    assert not any(isinstance(m, Bf16FrozenLinear) for m in model.modules())
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert json.loads((first / "checkpoint-2" / "adapter_config.json").read_text())["r"] == config.lora_r
