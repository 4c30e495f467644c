"""Answers from a policy for a list of briefs: greedy (probe and holdout) or sampled (difficulty filter)."""

from __future__ import annotations

from typing import Sequence

import torch


def chat_prompt(tokenizer, text: str) -> str:
    """The brief as a one-turn chat, with the generation prompt appended (plain text if no chat template)."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                             add_generation_prompt=True)
    return text + "\n"


@torch.no_grad()
def generate_answers(model, tokenizer, prompts: Sequence[str], n: int = 1, temperature: float = 0.0,
                     max_new_tokens: int = 128, batch_size: int = 8, seed: int = 0) -> list[list[str]]:
    """`n` answers per prompt. temperature 0 -> greedy (then n is 1). Left-padded batches; deterministic for a seed."""
    greedy = temperature <= 0
    n = 1 if greedy else n
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    out: list[list[str]] = []
    try:
        texts = [chat_prompt(tokenizer, p) for p in prompts]
        for start in range(0, len(texts), batch_size):
            chunk = texts[start:start + batch_size]
            enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
            torch.manual_seed(seed + start)
            gen = model.generate(**enc, do_sample=not greedy, temperature=temperature if not greedy else None,
                                 top_p=None, top_k=None, max_new_tokens=max_new_tokens, num_return_sequences=n,
                                 pad_token_id=tokenizer.pad_token_id)
            completions = tokenizer.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
            for i in range(len(chunk)):
                out.append(completions[i * n:(i + 1) * n])
    finally:
        tokenizer.padding_side = side
        model.train(was_training)
    return out


def valid_share(verifier, answers: Sequence[str]) -> float:
    """Share of answers the verifier finds valid."""
    if not answers:
        return 0.0
    return sum(verifier.score(a).valid for a in answers) / len(answers)


def load_for_inference(path: str | None):
    """(model, tokenizer) from a training checkpoint (PEFT adapters over their recorded base), a model folder, or None.

    A checkpoint written by the training loop holds `adapter_config.json`; its
    `base_model_name_or_path` names the base the adapters were trained on.
    """
    import json
    from pathlib import Path

    from trainers.models import load_base
    if path is not None and (Path(path) / "adapter_config.json").exists():
        from peft import PeftModel
        base_path = json.loads((Path(path) / "adapter_config.json").read_text()).get("base_model_name_or_path")
        base, tokenizer = load_base(base_path or None)
        return PeftModel.from_pretrained(base, str(path)), tokenizer
    return load_base(path)
