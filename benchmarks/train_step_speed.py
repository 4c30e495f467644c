"""Seconds per training step on this machine: our loop and TRL's GRPOTrainer.

    python benchmarks/train_step_speed.py                # 4 prompts x 12 answers, 64 new tokens
    python benchmarks/train_step_speed.py --threads 2 --skip-trl

Model: SmolLM2-135M-Instruct (the built-in default, fp32, LoRA r32/alpha 64). Recipe: cispo (beta 0.08,
top_entropy_quantile 0.2, one pass) with refill off, so every trainer samples exactly one batch. Panel:
the real us46 universe when ../shared/data/us_equities is present, else the embedded synthetic market.
The split: generation (sampling), scoring (the verifier), update (old/reference log-probs, advantages,
loss, backward, optimizer). The first step includes no model loading. Prints a markdown table.

Our loop: the step's prompts sampled as one batch, preallocated cache, an answer that has ended leaves the
batch, old log-probs from the sampler, each answer scored to its own end, shared prompt. (The "before" and
"unshared" rows of BENCHMARKS.md, issues 28 and 31, timed the reference paths that were TrainConfig switches
then; they are the tests' oracles now, tests/oracles.py, and this script times the loop as it runs.)
--model DIR / --temperature T: the answers' lengths decide much of what the last two save, so time the
model and temperature a run trains with: the cpu preset's SFT start model at 0.5 writes ~25 tokens of
64; the untuned base model at the recipe's 1.0 mostly runs to the limit.
--clock cpu (the default) times with the process's CPU seconds, which other jobs on a shared machine
inflate much less than wall seconds; --clock wall times as the loop logs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]

from alpha_gym.tasks.briefs import FIXED_BRIEFS  # noqa: E402
from alpha_gym.tasks.task import render_prompt  # noqa: E402
from trainers.config import recipe  # noqa: E402


def build_verifier(data: str | None):
    from alpha_gym.market import load_panel, load_universe, synthetic_panel
    from alpha_gym.scoring.verifier import Verifier
    folder = Path(data) if data else ROOT.parent / "shared" / "data" / "us_equities"
    train_file = folder / "us_daily_train.csv.gz"
    if train_file.exists():
        panel = load_panel(train_file).select(load_universe(folder / "universe_us46.txt"))
        return Verifier(panel), f"real us46 ({panel.n_stocks} stocks x {panel.n_days} sessions)"
    panel = synthetic_panel()
    return Verifier(panel), f"synthetic ({panel.n_stocks} stocks x {panel.n_days} sessions)"


def ours(config, verifier, briefs, clock: str = "wall", model: str | None = None) -> dict:
    """One step of trainers.loop.train from fresh adapters (seed 42); its logged split, timed by `clock`."""
    import types

    from trainers import loop
    from trainers.models import load_policy
    from trainers.run_log import read_log
    real_time = loop.time
    if clock == "cpu":  # the loop times with time.perf_counter: hand it the CPU clock for this run
        loop.time = types.SimpleNamespace(perf_counter=time.process_time)
    try:
        with tempfile.TemporaryDirectory() as out:
            policy = load_policy(model, config)  # loading is not part of the step
            loop.train(config, verifier.fork(), briefs, out, model=policy, steps=1, progress=False)
            rec = read_log(out)[-1]
    finally:
        loop.time = real_time
    return {"generation": rec["seconds/generation"], "scoring": rec["seconds/scoring"],
            "update": rec["seconds/update"], "total": rec["seconds/total"], "loss": rec["loss"], "kl": rec["kl"],
            "entropy": rec["entropy"], "length": rec["completion_length"]}


def trl(config, verifier, briefs) -> dict:
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig

    from trainers.models import load_base
    from trainers.trl_adapter import AlphaGRPOTrainer

    clock = {"generation": 0.0, "scoring": 0.0}

    class Timed(AlphaGRPOTrainer):
        def _generate(self, prompts):
            t = time.perf_counter()
            try:
                return super()._generate(prompts)
            finally:
                clock["generation"] += time.perf_counter() - t

        def _calculate_rewards(self, *args, **kwargs):
            t = time.perf_counter()
            try:
                return super()._calculate_rewards(*args, **kwargs)
            finally:
                clock["scoring"] += time.perf_counter() - t

    P, G = config.prompts_per_step, config.num_generations
    base, tokenizer = load_base(None)
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": render_prompt(b)}]} for b in briefs[:P]])
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(), max_steps=1, seed=config.seed,
        # 48 answers per optimizer step, in 4 micro-batches of 12 (48 x 430 tokens at once does not fit in RAM)
        per_device_train_batch_size=G, gradient_accumulation_steps=P, num_generations=G,
        max_completion_length=config.max_completion_length, temperature=config.temperature,
        learning_rate=config.learning_rate, beta=config.beta, loss_type="cispo",
        epsilon_high=1.0 + config.resolved_epsilon_high,  # TRL's cispo cap is absolute
        top_entropy_quantile=config.top_entropy_quantile, num_iterations=config.num_iterations,
        multi_objective_aggregation="normalize_then_sum",
        bf16=False, gradient_checkpointing=False, use_cpu=True, report_to="none", save_strategy="no",
        logging_steps=1, disable_tqdm=True, shuffle_dataset=False)
    peft = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                      target_modules="all-linear", use_dora=config.use_dora, task_type="CAUSAL_LM")
    trainer = Timed(base, verifier, args=args, train_dataset=dataset, processing_class=tokenizer, peft_config=peft)
    t = time.perf_counter()
    trainer.train()
    total = time.perf_counter() - t
    return {"generation": clock["generation"], "scoring": clock["scoring"],
            "update": total - clock["generation"] - clock["scoring"], "total": total}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is steadier on a shared machine)")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--generations", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--skip-trl", action="store_true")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    ap.add_argument("--data", help="folder holding us_daily_train.csv.gz and universe_us46.txt")
    ap.add_argument("--model", help="start model folder (default: the built-in SmolLM2-135M); our loop only")
    ap.add_argument("--temperature", type=float, help="sampling temperature (default: the cispo recipe's)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    config = recipe("cispo", prompts_per_step=a.prompts, num_generations=a.generations,
                    max_completion_length=a.tokens, refill_rounds=0)
    if a.temperature is not None:
        config = config.with_(temperature=a.temperature)
    verifier, panel = build_verifier(a.data)
    briefs = list(FIXED_BRIEFS)
    variants = [("alpha-gym loop", config)]
    rows = []
    for name, c in variants:
        rows.append((name, ours(c, verifier, briefs, a.clock, a.model)))
        print(f"{name}: {rows[-1][1]}", flush=True)
    if not a.skip_trl:
        rows.append(("TRL GRPOTrainer (AlphaGRPOTrainer, wall s)", trl(config, verifier, briefs)))
    print(f"\nOne step, {a.prompts} prompts x {a.generations} answers, {a.tokens} new tokens, SmolLM2-135M fp32 "
          f"LoRA r{config.lora_r}, recipe cispo (beta {config.beta}), temperature {config.temperature}, model "
          f"{a.model or 'built-in'}, {a.threads} thread(s), {a.clock} seconds, panel: {panel}\n")
    base = rows[0][1]
    print("| trainer | generation s | scoring s | update s | total s | total vs our loop | mean answer tokens |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in rows:
        length = f"{r['length']:.1f}" if "length" in r else "-"
        print(f"| {name} | {r['generation']:.1f} | {r['scoring']:.2f} | {r['update']:.1f} | {r['total']:.1f} | "
              f"{base['total'] / r['total']:.2f}x | {length} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
