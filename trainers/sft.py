"""Supervised warm start: LoRA SFT on verified brief -> formula pairs with TRL's SFTTrainer.

    rows = alpha_gym.tasks.sft_data.build_sft_dataset(verifier, briefs, "sft.jsonl")
    run_sft(model=None, data="sft.jsonl", out="runs/sft")      # merged model folder in runs/sft/model

The adapters are merged into the base weights at the end, so the result is a
plain model folder that `alpha-gym train --model runs/sft/model` (or any
Hugging Face loader) takes as the starting policy.

Reproducible: the same data, settings and thread count give the same weights bit for bit on one kind of
machine (another thread count sums in another order: other floats, other greedy answers). The summary
records the thread count and the merged model's content identity (`trainers.models.model_identity`),
which a comparison stamps, so a start model rebuilt in a later session is checked, not assumed, to be the
same one.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from alpha_gym.errors import InputError
from alpha_gym.jsonable import json_dumps
from alpha_gym.threads import torch_threads


class SFTLengthError(InputError):
    """A row longer than `max_length` tokens: TRL would cut its end, the answer the row is there to teach."""


@dataclass
class SFTSettings:
    epochs: float = 2.0
    learning_rate: float = 2e-4
    batch_size: int = 8
    lora_r: int = 16
    lora_alpha: int = 32
    max_length: int = 768        # tokens of a templated row; the write task's are ~550, the improve task's ~1,050
    max_steps: int = -1          # > 0 overrides epochs (tests use a few steps)
    seed: int = 42
    threads: int | None = None   # torch intra-op threads for the run; None keeps torch's own count


def run_sft(model: str | None, data: str | Path, out: str | Path, settings: SFTSettings | None = None) -> dict:
    """Train LoRA adapters on the JSONL rows, merge them, save `out/model`; return a summary."""
    from datasets import load_dataset
    from peft import LoraConfig
    from trl import SFTConfig, SFTTrainer

    from trainers.models import load_base, model_identity

    settings = settings or SFTSettings()
    if settings.threads is not None and settings.threads < 1:
        raise InputError(f"SFT threads must be >= 1, got {settings.threads}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    data = Path(data)
    if not data.exists():
        raise FileNotFoundError(f"SFT data {data} not found (build it with `alpha-gym sft-data`)")
    dataset = load_dataset("json", data_files=str(data), split="train").select_columns(["prompt", "completion"])
    if len(dataset) == 0:
        raise InputError(f"{data} holds no rows")
    base, tokenizer = load_base(model)
    longest = check_lengths(dataset, tokenizer, settings.max_length, data)
    args = SFTConfig(output_dir=str(out / "trainer"), num_train_epochs=settings.epochs, max_steps=settings.max_steps,
                     learning_rate=settings.learning_rate, per_device_train_batch_size=settings.batch_size,
                     max_length=settings.max_length, seed=settings.seed, logging_steps=5, save_strategy="no",
                     report_to=[], use_cpu=not torch.cuda.is_available(), bf16=torch.cuda.is_available(),
                     disable_tqdm=False)
    lora = LoraConfig(r=settings.lora_r, lora_alpha=settings.lora_alpha, target_modules="all-linear",
                      task_type="CAUSAL_LM")
    trainer = SFTTrainer(model=base, args=args, train_dataset=dataset, processing_class=tokenizer, peft_config=lora)
    t0 = time.perf_counter()
    threads_used = settings.threads or torch.get_num_threads()
    with torch_threads(threads_used):  # the merge is a matmul too: the same thread count for it
        result = trainer.train()
        merged = trainer.model.merge_and_unload()
    merged.save_pretrained(out / "model")
    tokenizer.save_pretrained(out / "model")
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    summary = {"rows": len(dataset), "steps": trainer.state.global_step, "seconds": round(time.perf_counter() - t0, 1),
               "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
               "train_loss": result.training_loss, "model_dir": str(out / "model"),
               "model_identity": model_identity(out / "model"), "threads": threads_used, "longest_row": longest,
               "settings": asdict(settings)}
    (out / "sft_summary.json").write_text(json_dumps(summary, indent=2))
    return summary


def row_length(tokenizer, row: dict) -> int:
    """Tokens of a prompt/completion row as TRL's SFTTrainer tokenizes it: the chat template of the prompt and
    completion messages together (the trainer truncates this sequence to `max_length`)."""
    text = tokenizer.apply_chat_template(list(row["prompt"]) + list(row["completion"]), tokenize=False)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def check_lengths(dataset, tokenizer, max_length: int, where="the data") -> int:
    """The longest row's tokens; SFTLengthError when any row exceeds `max_length`.

    TRL's SFTConfig truncates with `truncation_mode="keep_start"` (its only supported mode): a row longer than
    `max_length` loses its end, which is the completion, so it would train on a prompt with the answer cut or
    gone. The write task's rows (~550 tokens) fit the default 768; the improve task's (parents and their
    numbers before the DSL reference, ~650-1,050) do not, so the run is refused with the length it needs."""
    if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length < 1:
        raise InputError(f"SFT max_length must be an integer >= 1, got {max_length!r}")
    lengths = [row_length(tokenizer, row) for row in dataset]
    over = [n for n in lengths if n > max_length]
    if over:
        raise SFTLengthError(f"{len(over)} of {len(lengths)} rows of {where} are longer than max_length "
                             f"{max_length} tokens (the longest: {max(over)}); the trainer keeps a row's start, so "
                             f"their answers would be cut: pass --max-length {max(over)} or more")
    return max(lengths, default=0)


def probe_valid_rate(model_dir: str | None, verifier, briefs, max_new_tokens: int = 96, task: str = "write") -> dict:
    """Greedy answers to the briefs and the share the verifier finds valid; the prompts are `task`'s under the
    verifier's limits, brief i's the Gym env's after `reset(seed=prompt_seed(i))`, as the comparison's probe."""
    from alpha_gym.search.task_prompts import task_prompts
    from trainers.rollout import generate_answers
    from trainers.models import load_base
    prompts = task_prompts(task, verifier, owner="probe_valid_rate").prompts(briefs)
    model, tokenizer = load_base(model_dir)
    answers = [a[0] for a in generate_answers(model, tokenizer, prompts,
                                              max_new_tokens=max_new_tokens)]
    scores = [verifier.score(a, brief=b) for a, b in zip(answers, briefs)]
    return {"valid": sum(s.valid for s in scores), "n": len(scores),
            "tagged": sum(s.diagnostics.get("error") != "answer" for s in scores),
            "valid_share": sum(s.valid for s in scores) / max(1, len(scores)), "answers": answers}
