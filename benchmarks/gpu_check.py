"""A short check of the `--scale gpu` path: NF4 load, LoRA and DoRA steps of the ladder's recipes, scored groups.

Made to fit one device lease (see /work/.library/device): the machine there has torch, transformers and
peft but no network, so everything it needs travels with the working tree (64 MiB at most):

    # here, once: a small model with SmolLM2's real tokenizer and random weights (a few MiB), and wheels
    python benchmarks/gpu_check.py --prepare .gpu/model
    pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_24_x86_64 \
        -d .gpu/whl bitsandbytes==0.50.2 trl==1.16.0
    # there (carry .gpu): install the wheels, then the check, about 2 minutes
    pip install -q --no-deps --target /tmp/site .gpu/whl/*.whl && PYTHONPATH=/tmp/site:. \
        python benchmarks/gpu_check.py --model .gpu/model --out $OUT

SmolLM2-135M itself (a 94 MiB GGUF) does not fit the 64 MiB a lease carries, so the check measures the
mechanics on a model of the same tokenizer and shape family, not answer quality: NF4 weights really
load (4-bit linear layers), adapters get gradients and move, each optimizer step runs the recipe's
loss on the GPU, every group is scored by the verifier, and time and peak memory per step are recorded.
On a machine without CUDA it runs the same steps in fp32 (what the test suite does).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RECIPES = ("cispo_repo_r", "cispo_repo_r_dora", "dapo")


def prepare(folder: Path, hidden: int = 128, layers: int = 4) -> Path:
    """A small Llama with SmolLM2-135M-Instruct's tokenizer and chat template, random weights, saved to `folder`."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
    from trainers.models import materialise_default_model
    source = materialise_default_model()
    tokenizer = AutoTokenizer.from_pretrained(source)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 4,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=2048, tie_word_embeddings=True,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    model = LlamaForCausalLM(config).to(torch.float16)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def check(model_dir: str, out: Path, steps: int = 2) -> dict:
    import torch
    from alpha_gym.market import synthetic_panel
    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.tasks.sets import brief_set
    from trainers.config import RECIPES as ALL
    from trainers.loop import train
    from trainers.run_log import read_log
    from trainers.models import load_policy, resolve_4bit
    cuda = torch.cuda.is_available()
    result = {"cuda": cuda, "device": torch.cuda.get_device_name(0) if cuda else "cpu",
              "torch": torch.__version__, "model": model_dir, "recipes": {}}
    verifier = Verifier(synthetic_panel(n_stocks=46, n_days=800, seed=0))
    briefs = list(brief_set("train"))[:8]
    for name in RECIPES:
        config = ALL[name].with_(prompts_per_step=2, num_generations=4, max_completion_length=32, save_steps=0)
        nf4 = resolve_4bit(config)
        policy, _ = load_policy(model_dir, config)
        linear4 = sum(type(m).__name__ == "Linear4bit" for m in policy.modules())
        before = {n: p.detach().float().clone() for n, p in policy.named_parameters() if p.requires_grad}
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        summary = train(config, verifier.fork(), briefs, out / name, model=(policy, _), steps=steps, progress=False)
        seconds = time.perf_counter() - t0
        moved = sum(not torch.equal(before[n], p.detach().float()) for n, p in summary["policy"].named_parameters()
                    if n in before)
        log = read_log(out / name)
        probe = grad_probe(summary["policy"], _, briefs[0])
        result["recipes"][name] = {
            "nf4": nf4, "linear4bit_layers": linear4, "adapters": len(before), "adapters_moved": moved,
            "probe_adapters_with_grad": probe["with_grad"], "probe_adapters_moved": probe["moved"],
            "use_dora": config.use_dora, "seconds_per_step": round(seconds / steps, 2),
            "peak_gpu_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1) if cuda else None,
            "groups_scored": steps * config.prompts_per_step,
            "loss_finite": all(x.get("loss") is not None and x["loss"] == x["loss"] for x in log),
            "valid_share": [x.get("valid_share") for x in log]}
        del policy, summary
        if cuda:
            torch.cuda.empty_cache()
    # A random-weight model writes no valid answer, so every group's advantages are 0 and training alone moves
    # nothing (adapters_moved 0 is then expected); the probe is what shows gradients reach the adapters.
    result["passed"] = all(r["probe_adapters_moved"] > 0 and r["loss_finite"] and (r["nf4"] or not cuda)
                           and (r["linear4bit_layers"] > 0) == r["nf4"] for r in result["recipes"].values())
    return result


def grad_probe(policy, tokenizer, brief) -> dict:
    """Generate a few tokens (no grad), then backpropagate their log-likelihood and take one SGD step.

    This is the path bitsandbytes' 4-bit layers break on CPU (no LoRA gradient after a no-grad `generate`),
    checked directly, whatever the answers' rewards were.
    """
    import torch
    from alpha_gym.tasks.task import render_prompt
    from trainers.rollout import chat_prompt
    device = next(policy.parameters()).device
    ids = tokenizer(chat_prompt(tokenizer, render_prompt(brief)), add_special_tokens=False,
                    return_tensors="pt").input_ids.to(device)
    with torch.no_grad():
        out = policy.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=True)
    params = [p for p in policy.parameters() if p.requires_grad]
    before = [p.detach().float().clone() for p in params]
    policy.train()
    logits = policy(out).logits[:, :-1].float()
    logp = torch.log_softmax(logits, -1).gather(-1, out[:, 1:, None]).squeeze(-1)[:, ids.shape[1] - 1:]
    logp.sum().backward()
    with_grad = sum(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in params)
    torch.optim.SGD(params, lr=1e-2).step()
    moved = sum(not torch.equal(b, p.detach().float()) for b, p in zip(before, params))
    policy.zero_grad(set_to_none=True)
    return {"with_grad": with_grad, "moved": moved}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prepare", metavar="DIR", help="write the small model with SmolLM2's tokenizer to DIR and stop")
    ap.add_argument("--model", help="model folder (from --prepare)")
    ap.add_argument("--out", default="runs/gpu-check")
    ap.add_argument("--steps", type=int, default=2)
    args = ap.parse_args(argv)
    if args.prepare:
        print(f"wrote {prepare(Path(args.prepare))}")
        return 0
    if not args.model:
        ap.error("--model DIR is needed (make one with --prepare)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = check(args.model, out, args.steps)
    (out / "gpu_check.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
