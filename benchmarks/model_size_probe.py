"""Two packaged models on the same probe briefs (issue 40.6, the size axis): parse rate and tokens/s.

    OMP_NUM_THREADS=1 python -m benchmarks.model_size_probe --models smollm2-135m-instruct gemma3-270m \\
        --probe 8 --max-new-tokens 128 --out benchmarks/results/model-size-probe

For each model (a packaged name, `trainers.models.PACKAGED_MODELS`, a folder or a Hub id), one torch thread:
the first --probe briefs of the `probe` set rendered by `render_prompt` for the write task at the default
Limits, answered greedily by `trainers.rollout.generate_answers` (the path of the comparison's probe,
`probe_records`, and of `alpha-gym eval --checkpoint`), all briefs in one batch. Reports:

    extracted   answers with one non-empty `<alpha>` block (`alpha_gym.language.answer.formula_or_none`)
    parses      of those, the formula parses under the default Limits (`alpha_gym.language.parse`)
    tokens/s    answer tokens (up to and with each row's first end token) over the generate call's wall time
    tokens/cpu-s  the same over the process's CPU time in that call (time.process_time; one thread, so on a
                shared machine it is the speed the model would have on an idle core, near enough)
    load s      `load_base` on the dense cached copy (the first use dequantises the GGUF; not timed here)

--gemma-turns gives a model without a chat template (the Gemma GGUF is the pretrained base) Gemma's
instruction-turn markup, `<bos><start_of_turn>user\nBRIEF<end_of_turn>\n<start_of_turn>model\n` (the -it
models' template), to see whether the base model answers a turn better than a document; not the project's rule.

The models run one after the other in one process, --repeats times each in turn (A B A B) so a machine whose
load changes affects both; the table keeps every repeat. Answers go to OUT/answers-NAME.json.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch


def answer_tokens(rows: torch.Tensor, stops: set[int]) -> int:
    """Tokens of each generated row up to and with its first stop (end or pad) token, summed."""
    total = 0
    for row in rows.tolist():
        n = 0
        for tok in row:
            n += 1
            if tok in stops:
                break
        total += n
    return total


GEMMA_TURNS = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' "
               "else m['role'] }}\n{{ m['content'] | trim }}<end_of_turn>\n{% endfor %}"
               "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


def run_one(name: str, prompts: list[str], max_new_tokens: int, gemma_turns: bool = False) -> dict:
    from alpha_gym.language import DEFAULT_LIMITS, FormulaError, parse
    from alpha_gym.language.answer import formula_or_none
    from trainers.models import load_base
    from trainers.rollout import end_token_ids, generate_answers
    t0 = time.perf_counter()
    model, tokenizer = load_base(name)
    load_s = time.perf_counter() - t0
    if gemma_turns and not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = GEMMA_TURNS
    seen: list[tuple[int, torch.Tensor]] = []
    original = model.generate

    def recording(*args, **kwargs):  # the ids generate returns, to count answer tokens exactly
        out = original(*args, **kwargs)
        seen.append((kwargs["input_ids"].shape[1], out))
        return out

    model.generate = recording
    t0, c0 = time.perf_counter(), time.process_time()
    answers = [a[0] for a in generate_answers(model, tokenizer, prompts, max_new_tokens=max_new_tokens,
                                              batch_size=len(prompts))]
    gen_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    stops = set(end_token_ids(model, tokenizer)) | {tokenizer.pad_token_id}
    tokens = sum(answer_tokens(out[:, width:], stops) for width, out in seen)
    formulas = [formula_or_none(a) for a in answers]
    parses = 0
    for f in formulas:
        if f is not None:
            try:
                parse(f, DEFAULT_LIMITS)
                parses += 1
            except FormulaError:
                pass
    prompt_tokens = [len(tokenizer(p).input_ids) for p in prompts]
    return {"model": name, "params": sum(p.numel() for p in model.parameters()),
            "chat_template": bool(getattr(tokenizer, "chat_template", None)), "load_s": round(load_s, 2),
            "generate_s": round(gen_s, 2), "generate_cpu_s": round(cpu_s, 2), "answer_tokens": tokens,
            "tokens_per_s": round(tokens / gen_s, 2), "tokens_per_cpu_s": round(tokens / cpu_s, 2),
            "prompt_tokens": [min(prompt_tokens), max(prompt_tokens)],
            "extracted": sum(f is not None for f in formulas),
            "parses": parses, "answers": answers, "formulas": formulas}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["smollm2-135m-instruct", "gemma3-270m"])
    ap.add_argument("--probe", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--gemma-turns", action="store_true", help="Gemma's turn markup for a model without a template")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    from alpha_gym.language import DEFAULT_LIMITS
    from alpha_gym.tasks.sets import brief_set
    from alpha_gym.tasks.task import render_prompt
    briefs = list(brief_set("probe"))[: args.probe]
    prompts = [render_prompt(b, DEFAULT_LIMITS) for b in briefs]
    rows = []
    for repeat in range(args.repeats):
        for name in args.models:
            r = run_one(name, prompts, args.max_new_tokens, args.gemma_turns)
            r["repeat"], r["loadavg"] = repeat, os.getloadavg()[0]
            rows.append(r)
            print(f"{name:24s} repeat {repeat}: extracted {r['extracted']}/{len(prompts)}, parses {r['parses']}, "
                  f"{r['answer_tokens']} answer tokens in {r['generate_s']} s = {r['tokens_per_s']} tok/s "
                  f"({r['generate_cpu_s']} CPU s = {r['tokens_per_cpu_s']} tok/CPU-s), "
                  f"load {r['load_s']} s, prompts {r['prompt_tokens']} tokens, chat template {r['chat_template']}, "
                  f"loadavg {r['loadavg']:.2f}", flush=True)
            if args.out:
                args.out.mkdir(parents=True, exist_ok=True)
                kept = {"briefs": [b.id for b in briefs], **{k: r[k] for k in ("answers", "formulas")}}
                suffix = "-turns" if args.gemma_turns else ""
                (args.out / f"answers-{Path(name).name}{suffix}.json").write_text(json.dumps(kept, indent=1))
    if args.out:
        (args.out / f"summary{'-turns' if args.gemma_turns else ''}.json").write_text(json.dumps(
            [{k: v for k, v in r.items() if k not in ("answers", "formulas")} for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
