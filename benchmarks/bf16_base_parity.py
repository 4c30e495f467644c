"""Greedy probe answers over a bf16 base against the fp32 base (issue 42.3): how many of the 50 stay the same.

    python benchmarks/bf16_base_parity.py --model runs/sft/model
    python benchmarks/bf16_base_parity.py --model runs/sft/model --variants fp32,bf16,bf16_head,bf16x3

Answers the probe briefs of the kept long comparison (`benchmarks/results/compare-long/settings.json`) greedily,
at most 64 new tokens, as its step-0 answers were (`trainers.rollout.generate_answers`), once per variant of
the same start model, and counts the answers identical to the fp32 base's (and to the kept step-0 answers,
where `--kept` names them). Variants, each a way of computing every frozen linear layer y = x W^T:

    fp32       the weights as trained (the reference)
    bf16       TrainConfig.bf16_base: x and W rounded to bf16, the product accumulated in fp32; LM head fp32
    bf16_head  the same with the LM head in bf16 too (a bf16 copy; the embedding stays fp32)
    bf16x2     x split into bf16 high and low parts, W in bf16: the error of W alone (2 GEMMs)
    bf16x3     x and W both split (x_hi W_hi + x_lo W_hi + x_hi W_lo): about 16 bits of mantissa, 3 bf16 GEMMs

bf16x2 and bf16x3 are not options of the loop: they locate how much precision greedy decoding needs (a
precision ladder), so a miss of the fp32 answers can be read as the rounding's and not a bug's.
Prints a table; `--out FILE` keeps every variant's answers (JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]

VARIANTS = ("fp32", "bf16", "bf16_head", "bf16x2", "bf16x3")
KEPT = ROOT / "benchmarks" / "results" / "compare-long"


def split_linear(module: torch.nn.Linear, terms: int) -> None:
    """Replace `module`'s forward by a sum of bf16 GEMMs: 1 = bf16 x and W, 2 = x split (hi + lo), 3 = x and W
    split (the lo x lo term dropped). In place; the fp32 weight is kept for nothing else."""
    bf16 = torch.bfloat16
    w = module.weight.detach()
    w_hi = w.to(bf16)
    w_lo = (w - w_hi.float()).to(bf16)
    bias = module.bias

    def forward(self, x):
        x_hi = x.to(bf16)
        y = torch.nn.functional.linear(x_hi, w_hi).float()
        if terms >= 2:
            y = y + torch.nn.functional.linear((x - x_hi.float()).to(bf16), w_hi).float()
        if terms >= 3:
            y = y + torch.nn.functional.linear(x_hi, w_lo).float()
        return (y if bias is None else y + bias).to(x.dtype)
    module.forward = types.MethodType(forward, module)


def load_variant(model: str | None, variant: str):
    from trainers.models import hold_linears_in_bf16, load_base
    base, tokenizer = load_base(model)
    if variant == "bf16":
        hold_linears_in_bf16(base)
    elif variant != "fp32":
        terms = {"bf16_head": 1, "bf16x2": 2, "bf16x3": 3}[variant]
        for name, m in base.named_modules():
            if isinstance(m, torch.nn.Linear) and (name != "lm_head" or variant == "bf16_head"):
                split_linear(m, terms)
    return base, tokenizer


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="start model folder (default: the built-in SmolLM2-135M-Instruct)")
    ap.add_argument("--variants", default="fp32,bf16,bf16_head,bf16x2,bf16x3",
                    help=f"comma-separated, from {', '.join(VARIANTS)}; fp32 is always answered first")
    ap.add_argument("--settings", default=str(KEPT / "settings.json"), help="the comparison's settings.json "
                                                                            "(its probe_briefs)")
    ap.add_argument("--kept", default=str(KEPT / "step-0.jsonl"), help="kept step-0 answers to compare with too "
                                                                       "('' for none)")
    ap.add_argument("--tokens", type=int, default=64, help="new tokens at most (the cpu scale's 64)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", help="write every variant's answers here (JSON)")
    a = ap.parse_args(argv)
    variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    bad = sorted(set(variants) - set(VARIANTS))
    if bad:
        ap.error(f"unknown variants {bad}; choose from {', '.join(VARIANTS)}")
    variants = ["fp32", *[v for v in variants if v != "fp32"]]
    torch.set_num_threads(a.threads)

    from alpha_gym.tasks.sets import brief_by_id
    from alpha_gym.tasks.task import render_prompt
    from trainers.rollout import generate_answers
    ids = json.loads(Path(a.settings).read_text())["probe_briefs"]
    prompts = [render_prompt(brief_by_id(i)) for i in ids]
    kept = None
    if a.kept:
        rows = [json.loads(line) for line in Path(a.kept).read_text().splitlines() if line.strip()]
        if [r["brief_id"] for r in rows] != ids:
            ap.error(f"{a.kept} answers other briefs than {a.settings}")
        kept = [r["answer"] for r in rows]
    answers, seconds = {}, {}
    for v in variants:
        model, tokenizer = load_variant(a.model, v)
        t = time.perf_counter()
        answers[v] = [x[0] for x in generate_answers(model, tokenizer, prompts, max_new_tokens=a.tokens)]
        seconds[v] = time.perf_counter() - t
        print(f"{v}: {sum(x == y for x, y in zip(answers[v], answers['fp32']))}/{len(ids)} as fp32, "
              f"{seconds[v]:.0f} s", file=sys.stderr, flush=True)
        del model

    from alpha_gym.language.answer import formula_or_none
    n = len(ids)
    print(f"\nGreedy answers to the {n} probe briefs, at most {a.tokens} new tokens, model {a.model or 'built-in'}, "
          f"{a.threads} thread(s)\n")
    print("| variant | same answer as fp32 | same formula as fp32 | answers holding a formula | same as kept step 0 | s |")
    print("|---|---:|---:|---:|---:|---:|")
    ref = [formula_or_none(x) for x in answers["fp32"]]
    for v in variants:
        f = [formula_or_none(x) for x in answers[v]]
        same_kept = f"{sum(x == y for x, y in zip(answers[v], kept))}/{n}" if kept else "-"
        print(f"| {v} | {sum(x == y for x, y in zip(answers[v], answers['fp32']))}/{n} | "
              f"{sum(x == y for x, y in zip(f, ref))}/{n} | {sum(x is not None for x in f)}/{n} | {same_kept} | "
              f"{seconds[v]:.0f} |")
    if a.out:
        Path(a.out).write_text(json.dumps({"briefs": ids, "answers": answers}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
