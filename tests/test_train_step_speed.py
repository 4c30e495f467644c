"""`benchmarks/train_step_speed.py --parts`: the FLOP count, the utilisation arithmetic and the table.

The count is held to a hand count on a tiny config, and to what torch's own FlopCounterMode counts when a tiny
Llama with LoRA runs forward and backward (so the backward convention, frozen base with input gradients only,
is checked against the matmuls autograd really runs). The end-to-end run is one real step of SmolLM2-135M at
tiny token counts: every part printed, and the step's FLOPs the sum of its parts'.
"""

from __future__ import annotations

import re

import pytest
import torch

from alpha_gym.threads import torch_threads
from benchmarks.train_step_speed import (BACKWARD_PER_FORWARD, Call, Dims, attention_flops, backward_flops,
                                         call_flops, dtype_table, forward_flops, gemm_equivalent, gemm_rows, linear_flops, main,
                                         op_kind, op_seconds, ops_table, parts_table, utilisation)

TINY = Dims(layers=2, hidden=8, intermediate=16, heads=2, kv_heads=1, head_dim=4, vocab=10)


def test_a_linear_layer_is_two_flops_per_weight_per_row():
    assert linear_flops(3, 4, 5) == 2 * 3 * 4 * 5 == 120
    assert linear_flops(0, 4, 5) == 0


def test_the_forward_of_a_tiny_config_matches_a_hand_count():
    # 1 row, 3 new tokens after 2 cached, LoRA rank 2, every token through the LM head
    f = forward_flops(TINY, batch=1, q=3, past=2, lora_r=2)
    # per layer: q 8x8, k 8x4, v 8x4, o 8x8, gate 8x16, up 8x16, down 16x8 = 64+32+32+64+128+128+128 = 576 weights
    assert f["linear"] == 2 * (2 * 3 * 576)
    # per layer, rank 2: (in + out) x 2 weights per adapter = 2 x (16+12+12+16+24+24+24) = 256 weights
    assert f["lora"] == 2 * (2 * 3 * 256)
    # causal: token j of 3 attends 2 + j + 1 keys -> 3 + 4 + 5 = 12; QK^T and AV, 2 heads of 4, 2 layers
    assert f["attention"] == 2 * (2 * 2 * 2 * 4 * 12)
    assert f["head"] == 2 * 3 * 8 * 10
    assert forward_flops(TINY, batch=1, q=3, past=2, logits=1)["head"] == 2 * 1 * 8 * 10
    assert forward_flops(TINY, batch=1, q=3)["lora"] == 0  # adapters off
    assert attention_flops(TINY, batch=4, q=1, past=9) == 4 * attention_flops(TINY, 1, 1, 9)


#: SmolLM2-135M's config (the end-to-end test checks that `Dims.of` reads these from the real model)
SMOLLM2 = Dims(layers=30, hidden=576, intermediate=1536, heads=9, kv_heads=3, head_dim=64, vocab=49152)


def test_smollm2_forward_per_token():
    f = forward_flops(SMOLLM2, batch=1, q=1)
    # ~2 x 134.5M weights a token: 30 layers x 3.54M + the tied 28.3M LM head (the embedding is a lookup)
    assert f["linear"] + f["head"] == 2 * (30 * (2 * 576 * 576 + 2 * 576 * 192 + 3 * 576 * 1536) + 576 * 49152)
    assert f["linear"] + f["head"] == pytest.approx(2 * 134.5e6, rel=0.01)


def test_backward_counts_input_gradients_only_for_frozen_weights():
    fwd = forward_flops(TINY, batch=2, q=3, past=1, lora_r=4)
    assert backward_flops(fwd) == {k: BACKWARD_PER_FORWARD[k] * v for k, v in fwd.items()}
    assert BACKWARD_PER_FORWARD == {"linear": 1, "lora": 2, "attention": 2, "head": 1}
    grad = call_flops(TINY, Call("u", 2, 3, 1, 6, lora=True, grad=True), lora_r=4)
    no_grad = call_flops(TINY, Call("u", 2, 3, 1, 6, lora=True, grad=False), lora_r=4)
    assert grad == {"linear": 2 * fwd["linear"], "lora": 3 * fwd["lora"], "attention": 3 * fwd["attention"],
                    "head": 2 * fwd["head"]}
    assert no_grad == fwd
    assert call_flops(TINY, Call("r", 2, 3, 1, 6, lora=False, grad=False), lora_r=4)["lora"] == 0


def test_the_count_is_what_autograd_runs_on_a_tiny_lora_llama():
    """FlopCounterMode counts every matmul torch runs, forward and backward: the linear, LoRA and LM head count
    (attention aside) must equal ours, but for the one place the convention overstates on purpose: layer 0's
    q/k/v inputs (the embedding) need no gradient, so autograd skips those input-gradient matmuls."""
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainers.config import TrainConfig
    from trainers.models import add_adapters
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=True)
    model = LlamaForCausalLM(config)
    model.config._attn_implementation = "sdpa"
    policy = add_adapters(model, TrainConfig(lora_r=4, lora_alpha=8))
    dims = Dims.of(config)
    B, T = 2, 5
    ids = torch.randint(0, 40, (B, T))
    with FlopCounterMode(display=False) as counter:
        policy(ids).logits.float().logsumexp(-1).sum().backward()
    counts = counter.get_flop_counts()["Global"]
    matmuls = sum(v for op, v in counts.items() if "mm" in str(op) and "bmm" not in str(op))
    ours = call_flops(dims, Call("u", B, T, 0, B * T, lora=True, grad=True), lora_r=4)
    tokens = B * T
    skipped = sum(linear_flops(tokens, i, o) + linear_flops(tokens, i, 4)  # base and LoRA A input gradients
                  for name, i, o in dims.linears() if name in ("q_proj", "k_proj", "v_proj"))
    assert matmuls == ours["linear"] + ours["lora"] + ours["head"] - skipped


def test_utilisation_is_the_achieved_rate_over_the_reference():
    assert utilisation(100e9, 2.0, 100e9) == pytest.approx(0.5)
    assert utilisation(3e9, 1.0, 2e9) == pytest.approx(1.5)  # above 1: faster than the reference GEMM
    with pytest.raises(ValueError, match="positive"):
        utilisation(1e9, 0.0, 1e9)
    with pytest.raises(ValueError, match="positive"):
        utilisation(1e9, 1.0, 0.0)


def test_gemm_rows_round_on_a_log_scale_and_gemm_equivalent_adds_gradients():
    assert gemm_rows(1) == 1 and gemm_rows(427) == 384 and gemm_rows(460) == 512 and gemm_rows(5) in (4, 6)
    with pytest.raises(ValueError, match="at least one row"):
        gemm_rows(0)
    rates = {4: (1e9, 0.5e9), 8: (2e9, 1e9)}
    layer = sum(linear_flops(4, i, o) for _, i, o in TINY.linears()) * TINY.layers
    head = linear_flops(8, TINY.hidden, TINY.vocab)
    flops, cpu, wall = gemm_equivalent(TINY, [Call("u", 1, 4, 0, 8, lora=True, grad=False)], rates)
    assert flops == layer + head
    assert cpu == pytest.approx(layer / 1e9 + head / 2e9) and wall == pytest.approx(2 * cpu)
    flops_g, cpu_g, _ = gemm_equivalent(TINY, [Call("u", 1, 4, 0, 8, lora=True, grad=True)], rates)
    assert flops_g == 2 * flops and cpu_g == pytest.approx(2 * cpu)  # forward + input gradients


def test_the_table_formats_rates_and_utilisations():
    row = {"part": "update 1", "cpu": 2.0, "wall": 4.0, "flops": {"linear": 80e9, "lora": 10e9, "attention": 10e9,
                                                                   "head": 0}, "gemm_flops": 80e9, "gemm_cpu": 1.0,
           "gemm_wall": 1.0, "peak_cpu": 100e9, "peak_wall": 100e9, "calls": 2, "rows_per_call": 400.0}
    idle = {**row, "part": "scoring", "flops": {"linear": 0, "lora": 0, "attention": 0, "head": 0}, "gemm_flops": 0.0,
            "gemm_cpu": 0.0, "gemm_wall": 0.0}
    lines = parts_table([row, idle]).splitlines()
    assert lines[0].startswith("| part | CPU s | wall s | GFLOP |") and len(lines) == 4
    # 100 GFLOP in 2 CPU s = 50 GFLOP/s; the GEMM at its shapes 80 GFLOP/s: 62%; wall 25 of 80: 31%; best 100: 50%
    assert lines[2] == "| update 1 | 2.00 | 4.00 | 100.0 | 50.0 | 80.0 | 62% | 31% | 50% |"
    assert lines[3] == "| scoring | 2.00 | 4.00 | 0.0 | - | - | - | - | - |"


def test_the_dtype_table_compares_rates_and_a_parts_gemm_seconds():
    fp32, bf16 = {4: (1e9, 1e9), 8: (2e9, 2e9)}, {4: (2e9, 2e9), 8: (3e9, 3e9)}
    calls = [Call("u", 1, 4, 0, 8, lora=True, grad=True), Call("g", 1, 4, 0, 8, lora=True, grad=False)]
    lines = dtype_table(TINY, calls, fp32, bf16, [("u", {"u"}), ("none", {"x"})]).splitlines()
    assert lines[2] == "| 4 | 1.0 | 2.0 | 2.00x |" and lines[3] == "| 8 | 2.0 | 3.0 | 1.50x |"
    layer = sum(linear_flops(4, i, o) for _, i, o in TINY.linears()) * TINY.layers
    head = linear_flops(8, TINY.hidden, TINY.vocab)
    t32, t16 = 2 * (layer / 1e9 + head / 2e9), 2 * (layer / 2e9 + head / 3e9)  # forward + input gradients
    assert lines[-1] == f"| u | {2 * (layer + head) / 1e9:.1f} | {t32:.2f} | {t16:.2f} | {t32 / t16:.2f}x |"
    assert not any(line.startswith("| none") for line in lines)  # a part without calls has no row


def test_profiled_ops_are_sorted_into_kinds():
    assert op_kind("aten::addmm") == op_kind("aten::mm") == op_kind("aten::bmm") == "matmul"
    assert op_kind("aten::_scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert op_kind("aten::_scaled_dot_product_flash_attention_for_cpu_backward") == "attention"
    assert op_kind("aten::_log_softmax") == op_kind("aten::_softmax_backward_data") == "softmax"
    assert op_kind("autograd::engine::evaluate_function: MmBackward0") == "autograd engine"
    assert op_kind("aten::mul") == op_kind("aten::copy_") == op_kind("aten::_foreach_addcdiv_") == "elementwise"
    ops = op_seconds([("aten::mm", 3.0, "u"), ("aten::mul", 1.0, "u"), ("(outside torch ops)", 1.0, "u"),
                      ("aten::addmm", 2.0, "g")])
    assert ops["u"]["matmul"] == 3.0 and ops["u"]["elementwise"] == 1.0 and ops["u"]["outside torch ops"] == 1.0
    assert ops["g"]["matmul"] == 2.0 and sum(ops["g"].values()) == 2.0
    table = ops_table(ops).splitlines()
    assert table[2] == "| u | 5.00 | 60% | 0% | 0% | 20% | 0% | 20% |"
    assert table[3] == "| g | 2.00 | 100% | 0% | 0% | 0% | 0% | 0% |"


@pytest.mark.slow
def test_parts_runs_one_real_step_and_prints_every_part(capsys, tmp_path):
    """SmolLM2-135M, 1 prompt x 2 answers of at most 2 tokens, cispo (one pass, 2 mini-batches), the synthetic
    market (tmp_path holds no panel), profiled: seconds, not minutes."""
    with torch_threads(1):
        assert main(["--parts", "--prompts", "1", "--generations", "2", "--tokens", "2", "--recipe", "cispo",
                     "--gemm-seconds", "0.01", "--data", str(tmp_path), "--profile"]) == 0
    out = capsys.readouterr().out
    assert "(30 layers, hidden 576, intermediate 1536, 9 heads / 3 kv, vocab 49152)" in out  # Dims.of, as SMOLLM2
    table = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 9 and cells[0] != "part":
            table[cells[0]] = cells
    assert list(table) == ["generation", "scoring", "reference pass", "update 1 (pass 1, mini-batch 1)",
                           "update 2 (pass 1, mini-batch 2)", "other", "update, all 2 steps", "step"]
    gflop = {k: float(v[3]) for k, v in table.items()}
    assert gflop["scoring"] == gflop["other"] == 0.0
    # a ~430-token prompt through 2 x 134.5M weights: about 0.1 TFLOP a forward; the update runs it with gradients
    assert 80 < gflop["reference pass"] < 150
    assert gflop["update 1 (pass 1, mini-batch 1)"] > 2 * gflop["reference pass"]
    parts = ("generation", "reference pass", "update 1 (pass 1, mini-batch 1)", "update 2 (pass 1, mini-batch 2)")
    assert gflop["step"] == pytest.approx(sum(gflop[p] for p in parts), abs=0.25)
    for p in parts:
        share = table[p][6]
        assert re.fullmatch(r"\d+%", share) and 0 < int(share[:-1]) < 300, (p, share)
    assert "GEMMs timed" in out and "best" in out
    profiled = [line for line in out.splitlines() if line.startswith("| update 1 (pass 1, mini-batch 1) |")][-1]
    assert profiled.count("%") == 6 and int(profiled.split("|")[3].strip()[:-1]) > 30  # matmuls: most of it
