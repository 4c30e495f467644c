"""A model mutator's generation on an fp32 base against a bf16 base (issue 40.5's throughput lever).

    python benchmarks/mutator_bf16.py --model runs/improve-warm2/sft/model --pairs runs/improve-warm2/pairs.jsonl

The first --prompts improve prompts of an `alpha-gym sft-data --task improve` file, one torch thread: the prefill
of each prompt alone, then the mutator's batched sampling of one answer each (`trainers.rollout.sample_groups`,
temperature 1, 128 new tokens, the same torch seed), on the model as loaded and on a copy whose frozen linear
layers are held in bf16 (`trainers.models.hold_linears_in_bf16`), alternated for --rounds rounds. Prints seconds.
Meaningful on CPUs with native bf16 (AMX or AVX512_BF16, `trainers.models.native_bf16`); elsewhere torch emulates it.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the mutator's model folder")
    ap.add_argument("--pairs", required=True, help="an improve-task SFT file (its prompts are used)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    import torch
    from trainers.models import hold_linears_in_bf16, load_base, native_bf16
    from trainers.mutator import _Sampling
    from trainers.rollout import end_token_ids, prompt_ids, sample_groups
    torch.set_num_threads(1)
    with open(args.pairs, encoding="utf-8") as fh:
        prompts = [json.loads(line)["prompt"][0]["content"] for line in fh if line.strip()][: args.prompts]
    fp32, tokenizer = load_base(args.model)
    bf16, _ = load_base(args.model)
    hold_linears_in_bf16(bf16)
    for m in (fp32, bf16):
        m.eval()
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    eos = end_token_ids(fp32, tokenizer)
    ids = [prompt_ids(tokenizer, p, "cpu") for p in prompts]
    print(f"native bf16: {native_bf16()}; prompt tokens {[int(i.shape[-1]) for i in ids]}")

    def prefill(model) -> float:
        t = time.perf_counter()
        with torch.no_grad():
            for i in ids:
                model(i.view(1, -1))
        return time.perf_counter() - t

    def sample(model) -> float:
        torch.manual_seed(0)
        t = time.perf_counter()
        sample_groups(model, tokenizer, ids, _Sampling(1, 1.0, 128), eos)
        return time.perf_counter() - t
    for r in range(args.rounds):
        print(f"round {r + 1}: prefill fp32 {prefill(fp32):.1f} s, bf16 {prefill(bf16):.1f} s; "
              f"sampling fp32 {sample(fp32):.1f} s, bf16 {sample(bf16):.1f} s", flush=True)


if __name__ == "__main__":
    main()
