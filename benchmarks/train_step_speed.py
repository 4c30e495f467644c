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

--parts (issue 42.3): one step at the cpu preset (`trainers.compare.ladder.SCALES["cpu"]`: 2 prompts x 8
answers, 64 new tokens, temperature 0.5; recipe `cispo_repo_r`, 2 passes x 2 mini-batches) measured against
the machine. Hooks on the model record every forward call's shape (rows, new tokens, cached tokens, rows
through the LM head, adapters on or off, gradients on or off) while the loop runs; each part is timed on
both clocks: generation, scoring, the reference pass, each optimizer step (forward + backward + AdamW).
FLOPs are counted from the model config and those shapes (`forward_flops`, `backward_flops`: matmuls only,
softmax/norms/elementwise not counted). Then the same run times torch.matmul over the model's own weight
matrices at each call's row count (`time_gemms`), so each part's utilisation is against GEMMs of its own
shapes on this machine, same threads, same clocks; the best of those rates is the machine's achievable
FLOP/s. Prints a markdown table (`parts_table`).

    python benchmarks/train_step_speed.py --parts                         # the cpu preset, built-in model
    python benchmarks/train_step_speed.py --parts --prompts 1 --generations 2 --tokens 4   # seconds
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]

from alpha_gym.tasks.briefs import FIXED_BRIEFS  # noqa: E402
from alpha_gym.tasks.task import render_prompt  # noqa: E402
from trainers.config import DEFAULT_RECIPE, recipe  # noqa: E402


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


# ---------------------------------------------------------------------------------- --parts: FLOPs and the machine
@dataclass(frozen=True)
class Dims:
    """What the FLOP count reads from a Llama-style config (SmolLM2-135M: 30 layers, 576 hidden, 1536
    intermediate, 9 heads, 3 key/value heads of 64, vocabulary 49152)."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @classmethod
    def of(cls, config) -> "Dims":
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return cls(config.num_hidden_layers, config.hidden_size, config.intermediate_size,
                   config.num_attention_heads, config.num_key_value_heads, head_dim, config.vocab_size)

    def linears(self) -> tuple[tuple[str, int, int], ...]:
        """(name, in, out) of one decoder layer's linear layers (every one carries a LoRA adapter)."""
        h, q, kv, i = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        return (("q_proj", h, q), ("k_proj", h, kv), ("v_proj", h, kv), ("o_proj", q, h),
                ("gate_proj", h, i), ("up_proj", h, i), ("down_proj", i, h))


def linear_flops(tokens: int, d_in: int, d_out: int) -> int:
    """A linear layer on `tokens` rows: one multiply and one add per weight per row."""
    return 2 * tokens * d_in * d_out


def attention_flops(dims: Dims, batch: int, q: int, past: int = 0) -> int:
    """QK^T and softmax(.)V of every layer for `q` new tokens after `past` cached ones, causal: new token j
    attends past + j + 1 positions. Useful work only: the masked half of the new block is not counted
    (SDPA may compute it), nor the softmax. Grouped key/value heads still attend with every query head."""
    attended = q * past + q * (q + 1) // 2
    return 2 * 2 * batch * dims.heads * dims.head_dim * attended * dims.layers


def forward_flops(dims: Dims, batch: int, q: int, past: int = 0, logits: int | None = None,
                  lora_r: int = 0) -> dict[str, int]:
    """FLOPs of one forward call of `batch` rows x `q` new tokens after `past` cached tokens, by component:
    the layers' linear weights, their LoRA adapters of rank `lora_r` (0: adapters off), attention, and the
    LM head on `logits` rows (None: every token; the loop's prompt passes keep 1 row a sequence). The
    embedding is a lookup: no FLOPs."""
    tokens = batch * q
    logits = tokens if logits is None else logits
    return {"linear": dims.layers * sum(linear_flops(tokens, i, o) for _, i, o in dims.linears()),
            "lora": dims.layers * sum(linear_flops(tokens, i, lora_r) + linear_flops(tokens, lora_r, o)
                                      for _, i, o in dims.linears()),
            "attention": attention_flops(dims, batch, q, past),
            "head": linear_flops(logits, dims.hidden, dims.vocab)}


#: Backward FLOPs per forward FLOP, with LoRA on a frozen base. The frozen weights need no weight gradient,
#: but their input gradients carry the loss back to every earlier adapter: one matmul each (1x). The adapters
#: need both (2x). Attention has no weights: gradients of Q, K and V (2x). The LM head (tied to the frozen
#: embedding) needs only its input gradient (1x). (Layer 0's q/k/v inputs need none, as nothing trainable
#: lies before them: counting them overstates the backward by about 0.2%.)
BACKWARD_PER_FORWARD = {"linear": 1, "lora": 2, "attention": 2, "head": 1}


def backward_flops(forward: dict[str, int]) -> dict[str, int]:
    """The backward's FLOPs by component, from the forward's (`forward_flops`)."""
    return {k: BACKWARD_PER_FORWARD[k] * v for k, v in forward.items()}


@dataclass(frozen=True)
class Call:
    """One forward call of the model as the loop made it, recorded by `_record_calls`."""

    part: str
    batch: int
    q: int          # new tokens per row
    past: int       # cached tokens per row (left padding included: it is computed)
    logits: int     # rows through the LM head
    lora: bool      # adapters on
    grad: bool      # gradients on: the loss's backward runs through this call too

    @property
    def tokens(self) -> int:
        return self.batch * self.q


def call_flops(dims: Dims, call: Call, lora_r: int) -> dict[str, int]:
    """Forward (and, with gradients on, backward) FLOPs of one call, by component."""
    fwd = forward_flops(dims, call.batch, call.q, call.past, call.logits, lora_r if call.lora else 0)
    if not call.grad:
        return fwd
    bwd = backward_flops(fwd)
    return {k: fwd[k] + bwd[k] for k in fwd}


def utilisation(flops: float, seconds: float, reference_flops_per_s: float) -> float:
    """Share of the reference rate (a GEMM's FLOP/s) that `flops` in `seconds` achieved."""
    if seconds <= 0 or reference_flops_per_s <= 0:
        raise ValueError(f"utilisation needs positive seconds and reference rate, got {seconds}, "
                         f"{reference_flops_per_s}")
    return flops / seconds / reference_flops_per_s


#: Row counts at which the GEMMs are timed: a call's rows are rounded to the nearest of these (log scale);
#: a GEMM's rate changes slowly with its row count above ~16, so a grid keeps the timing to seconds.
GEMM_ROWS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072,
             4096)


def gemm_rows(m: int) -> int:
    """The grid's row count nearest to m on a log scale (`GEMM_ROWS`)."""
    if m < 1:
        raise ValueError(f"a GEMM needs at least one row, got {m}")
    return min(GEMM_ROWS, key=lambda g: abs(math.log(g / m)))


def gemm_equivalent(dims: Dims, calls, rates: dict[int, tuple[float, float]]) -> tuple[float, float, float]:
    """(linear FLOPs, cpu s, wall s) that the calls' linear layers and LM head, forward and (with gradients)
    input-gradient matmuls, take as plain GEMMs at `rates` ({grid rows: (cpu FLOP/s, wall FLOP/s)}, from
    `time_gemms`). Their ratio is the rate a GEMM reaches at the part's own shapes."""
    flops = cpu = wall = 0.0
    for c in calls:
        times = 2 if c.grad else 1  # forward + input gradients: the same shapes transposed
        for rows, f in ((c.tokens, forward_flops(dims, c.batch, c.q, logits=0)["linear"]),
                        (c.logits, linear_flops(c.logits, dims.hidden, dims.vocab))):
            if rows:
                r_cpu, r_wall = rates[gemm_rows(rows)]
                flops += times * f
                cpu += times * f / r_cpu
                wall += times * f / r_wall
    return flops, cpu, wall


def time_gemms(weights, rows: set[int], min_seconds: float = 0.2,
               dtype: torch.dtype | None = torch.float32) -> dict[int, tuple[float, float]]:
    """{rows: (cpu FLOP/s, wall FLOP/s)} of torch.matmul(x, W.T) over every matrix in `weights` (the model's
    own: each layer's seven and the LM head, so a small-row GEMM streams every weight from memory as the
    model does, instead of one matrix that stays in cache), in `dtype` (the weights cast once, outside the
    timing; None: each weight and its input in the weight's own dtype, as a bf16 base runs), the current
    thread count. Each sweep over all weights repeats until `min_seconds` and at least
    twice; the fastest sweep counts, by each clock."""
    out = {}
    weights = [w if dtype is None or w.dtype == dtype else w.to(dtype) for w in weights]
    for m in sorted(rows):
        xs = {(w.shape[1], w.dtype): torch.randn(m, w.shape[1], dtype=w.dtype) for w in weights}
        flops = sum(linear_flops(m, w.shape[1], w.shape[0]) for w in weights)
        best_cpu = best_wall = math.inf
        start, n = time.perf_counter(), 0
        with torch.no_grad():
            while n < 2 or time.perf_counter() - start < min_seconds:
                c, t = time.process_time(), time.perf_counter()
                for w in weights:
                    torch.matmul(xs[w.shape[1], w.dtype], w.t())
                best_cpu = min(best_cpu, time.process_time() - c)
                best_wall = min(best_wall, time.perf_counter() - t)
                n += 1
        out[m] = (flops / max(best_cpu, 1e-9), flops / max(best_wall, 1e-9))
    return out


class _Clocks:
    """Both clocks' seconds, summed over the spans `span` opens."""

    def __init__(self):
        self.cpu = self.wall = 0.0

    def add(self, cpu: float, wall: float) -> None:
        self.cpu += cpu
        self.wall += wall


def parts(config, verifier, briefs, model: str | None = None, gemm_seconds: float = 0.2,
          profile: bool = False, bf16_gemm: bool = False) -> dict:
    """One step of trainers.loop.train from fresh adapters, timed by part on both clocks, with every forward
    call's shape (`Call`); then the GEMMs at those shapes (`time_gemms`). Returns the model's `Dims`, the calls,
    each part's clocks, the whole step's, the GEMM rates and the LoRA rank: what `part_rows` reads. profile:
    the step runs under torch.profiler too (which slows it), each part a `record_function` range, and the
    result holds {part: {kind: seconds}} of the ops' own time (`op_kind`) under "ops". bf16_gemm: the GEMMs are
    timed in bfloat16 too, under "gemm_bf16" (the case for a bf16 base: measured, not built).

    The parts are found by wrapping what the loop calls: `sample_groups` (generation), `_score` (scoring), the
    update's (`trainers.update`) `group_logps` without gradients (the reference pass, adapters off), and each
    optimizer step: from its first `group_logps` with gradients to the end of AdamW's step (forward, loss,
    backward, clipping, step).
    """
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from trainers import loop, update
    from trainers.models import load_policy

    policy, tokenizer = load_policy(model, config)  # loading is not part of the step
    base = policy.get_base_model()
    dims = Dims.of(base.config)
    lora_layers = [m for m in policy.modules() if hasattr(m, "disable_adapters") and hasattr(m, "lora_A")]
    clocks: dict[str, _Clocks] = {}
    calls: list[Call] = []
    state = {"part": "other", "step": 0, "open": None}

    def span(name, fn):
        def timed(*args, **kwargs):
            outer, state["part"] = state["part"], name
            c, t = time.process_time(), time.perf_counter()
            try:
                with _labelled(name, profile):
                    return fn(*args, **kwargs)
            finally:
                clocks.setdefault(state["part"], _Clocks()).add(time.process_time() - c, time.perf_counter() - t)
                state["part"] = outer
        return timed

    def logps(*args, **kwargs):
        if not torch.is_grad_enabled():
            return span("reference pass", real_logps)(*args, **kwargs)
        if state["open"] is None:  # the optimizer step's first forward: its span starts here
            state["part"] = _update_name(config, state["step"])
            state["label"] = _labelled(state["part"], profile)
            state["label"].__enter__()  # closed by step_done: the range holds the backward and the step too
            state["open"] = (time.process_time(), time.perf_counter())
        return real_logps(*args, **kwargs)

    def step_done(optimizer, args, kwargs):
        c, t = state["open"] or (time.process_time(), time.perf_counter())
        clocks.setdefault(state["part"], _Clocks()).add(time.process_time() - c, time.perf_counter() - t)
        if state.get("label") is not None:
            state.pop("label").__exit__(None, None, None)
        state["step"], state["part"], state["open"] = state["step"] + 1, "other", None

    def record(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs["inputs_embeds"]
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        past = int(cache.get_seq_length()) if cache is not None else 0
        lora = bool(lora_layers) and not lora_layers[0].disable_adapters
        calls.append(Call(state["part"], ids.shape[0], ids.shape[1], past, 0, lora, torch.is_grad_enabled()))

    def head_rows(module, args):
        x = args[0]
        calls[-1] = Call(**{**calls[-1].__dict__, "logits": x.numel() // x.shape[-1]})

    real_sample, real_score, real_logps = loop.sample_groups, loop._score, update.group_logps
    hooks = [base.model.register_forward_pre_hook(record, with_kwargs=True),
             base.lm_head.register_forward_pre_hook(head_rows),
             register_optimizer_step_post_hook(step_done)]
    loop.sample_groups, loop._score = span("generation", real_sample), span("scoring", real_score)
    update.group_logps = logps
    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) if profile else None
    try:
        with tempfile.TemporaryDirectory() as out, (profiler or _nothing()):
            c, t = time.process_time(), time.perf_counter()
            loop.train(config, verifier.fork(), briefs, out, model=(policy, tokenizer), steps=1, progress=False)
            total = _Clocks()
            total.add(time.process_time() - c, time.perf_counter() - t)
    finally:
        loop.sample_groups, loop._score, update.group_logps = real_sample, real_score, real_logps
        for h in hooks:
            h.remove()
    modules = [getattr(layer.self_attn if name.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) else layer.mlp, name)
               for layer in base.model.layers for name, _, _ in dims.linears()]
    weights = [getattr(m, "base_layer", m).weight.detach() for m in modules]  # the frozen weight under LoRA
    head = base.lm_head.weight.detach()
    rows = {gemm_rows(r) for c in calls for r in (c.tokens, c.logits) if r}
    # a bf16 base is held to GEMMs in its own dtypes (bf16 layers, the fp32 LM head), an fp32 one to fp32 GEMMs
    gemm = time_gemms([*weights, head], rows, gemm_seconds, None if config.bf16_base else torch.float32)
    gemm_bf16 = time_gemms([*weights, head], rows, gemm_seconds, torch.bfloat16) if bf16_gemm else None
    ops = op_seconds(_part_events(profiler.events())) if profile else None
    return {"dims": dims, "calls": calls, "clocks": clocks, "total": total, "gemm": gemm, "lora_r": config.lora_r,
            "ops": ops, "gemm_bf16": gemm_bf16}


PART_LABEL = "part: "


@contextmanager
def _nothing():
    yield


def _labelled(name: str, profile: bool):
    """A profiler range named after the part (a no-op context when not profiling)."""
    return torch.profiler.record_function(PART_LABEL + name) if profile else _nothing()


def _part_events(events):
    """(op name, own seconds, part) of every profiled op inside a part's range; a part's range itself counts as
    the op "(outside torch ops)": its own time is the Python between the ops (the loop, hooks, PEFT's glue)."""
    out = []
    for e in events:
        if e.name.startswith(PART_LABEL):
            out.append(("(outside torch ops)", e.self_cpu_time_total / 1e6, e.name[len(PART_LABEL):]))
            continue
        parent = e.cpu_parent
        while parent is not None and not parent.name.startswith(PART_LABEL):
            parent = parent.cpu_parent
        if parent is not None:
            out.append((e.name, e.self_cpu_time_total / 1e6, parent.name[len(PART_LABEL):]))
    return out


#: What an op's own time is spent on, by its profiler name (first match wins); the rest is "elementwise".
OP_KINDS = (("outside torch ops", ("(outside torch ops)",)),
            ("attention", ("scaled_dot_product", "flash_attention")),
            ("matmul", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear")),
            ("softmax", ("softmax",)),
            ("autograd engine", ("autograd::", "Backward", "AccumulateGrad")))
OP_KIND_NAMES = ("matmul", "attention", "softmax", "elementwise", "autograd engine", "outside torch ops")


def op_kind(name: str) -> str:
    """The kind of a profiled op (`OP_KINDS`): matmul, attention (SDPA, forward and backward), softmax and
    log-softmax (the sampler's and the loss's, over the 49152-word vocabulary), the autograd engine's own
    bookkeeping, time outside any torch op, or "elementwise" (norms, activations, copies, indexing, AdamW)."""
    for kind, needles in OP_KINDS:
        if any(n in name for n in needles):
            return kind
    return "elementwise"


def op_seconds(events) -> dict[str, dict[str, float]]:
    """{part: {kind: own seconds}} from (op name, own seconds, part) triples."""
    out: dict[str, dict[str, float]] = {}
    for name, seconds, part in events:
        kinds = out.setdefault(part, dict.fromkeys(OP_KIND_NAMES, 0.0))
        kinds[op_kind(name)] += seconds
    return out


def dtype_table(dims: Dims, calls, fp32: dict, bf16: dict, parts_in_order) -> str:
    """Markdown: the GEMM rate at each timed row count in fp32 and bf16, then what each part's linear layers
    (forward and input gradients) take as plain GEMMs in each (`gemm_equivalent`), by CPU seconds."""
    lines = ["| rows | fp32 GFLOP/s (CPU s) | bf16 GFLOP/s (CPU s) | bf16 / fp32 |", "|---:|---:|---:|---:|"]
    for m in sorted(fp32):
        lines.append(f"| {m} | {fp32[m][0] / 1e9:.1f} | {bf16[m][0] / 1e9:.1f} | {bf16[m][0] / fp32[m][0]:.2f}x |")
    lines += ["", "| part | linear GFLOP | as fp32 GEMMs, CPU s | as bf16 GEMMs, CPU s | bf16 / fp32 speed |",
              "|---|---:|---:|---:|---:|"]
    for name, names in parts_in_order:
        mine = [c for c in calls if c.part in names]
        flops, t32, _ = gemm_equivalent(dims, mine, fp32)
        if flops:
            t16 = gemm_equivalent(dims, mine, bf16)[1]
            lines.append(f"| {name} | {flops / 1e9:.1f} | {t32:.2f} | {t16:.2f} | {t32 / t16:.2f}x |")
    return "\n".join(lines)


def ops_table(ops: dict[str, dict[str, float]]) -> str:
    """Markdown: each part's profiled seconds and the share of each kind of op (`op_kind`)."""
    lines = ["| part (profiled) | s | " + " | ".join(OP_KIND_NAMES) + " |",
             "|---|---:|" + "---:|" * len(OP_KIND_NAMES)]
    for part, kinds in ops.items():
        total = sum(kinds.values())
        if total <= 0:
            continue
        lines.append(f"| {part} | {total:.2f} | " + " | ".join(f"{kinds[k] / total:.0%}" for k in OP_KIND_NAMES)
                     + " |")
    return "\n".join(lines)


def _update_name(config, k: int) -> str:
    """The k-th (0-based) optimizer step of a step: its pass over the batch and its mini-batch."""
    it, mb = divmod(k, config.steps_per_generation)
    return f"update {k + 1} (pass {it + 1}, mini-batch {mb + 1})"


#: The parts in the table's order; the update's steps come where "update" stands.
PART_ORDER = ("generation", "scoring", "reference pass", "update", "other")


def part_rows(result: dict) -> list[dict]:
    """The table's rows from `parts`' result: each part's seconds (both clocks), FLOPs by component, and the
    GEMM-equivalent of its linear layers; then every update step together, and the whole step. "other" is
    the step's time outside the named parts (advantages, masks, the log and checkpoint files)."""
    dims, calls, clocks, gemm, r = result["dims"], result["calls"], result["clocks"], result["gemm"], result["lora_r"]
    updates = sorted((p for p in clocks if p.startswith("update ")), key=lambda p: int(p.split()[1]))
    named = [u for p in PART_ORDER[:-1] for u in (updates if p == "update" else [p] if p in clocks else [])]
    total = result["total"]
    other = _Clocks()
    other.add(total.cpu - sum(clocks[p].cpu for p in named), total.wall - sum(clocks[p].wall for p in named))

    def row(name, part_names, cpu, wall):
        mine = [c for c in calls if c.part in part_names]
        flops = {k: 0 for k in ("linear", "lora", "attention", "head")}
        for c in mine:
            for k, v in call_flops(dims, c, r).items():
                flops[k] += v
        g_flops, g_cpu, g_wall = gemm_equivalent(dims, mine, gemm)
        tokens = sum(c.tokens for c in mine)
        return {"part": name, "cpu": cpu, "wall": wall, "flops": flops, "calls": len(mine),
                "rows_per_call": sum(c.tokens ** 2 for c in mine) / tokens if tokens else 0.0,
                "gemm_flops": g_flops, "gemm_cpu": g_cpu, "gemm_wall": g_wall}

    rows = [row(p, {p}, clocks[p].cpu, clocks[p].wall) for p in named]
    rows.append(row("other", {"other"}, other.cpu, other.wall))
    if len(updates) > 1:
        rows.append(row(f"update, all {len(updates)} steps", set(updates), sum(clocks[u].cpu for u in updates),
                        sum(clocks[u].wall for u in updates)))
    rows.append(row("step", {c.part for c in calls}, total.cpu, total.wall))
    peak = max(gemm.values(), key=lambda v: v[0]) if gemm else (0.0, 0.0)
    for x in rows:
        x["peak_cpu"], x["peak_wall"] = peak
    return rows


def _pct(flops: float, seconds: float, rate: float) -> str:
    return f"{utilisation(flops, seconds, rate):.0%}" if flops and seconds > 0 and rate > 0 else "-"


def parts_table(rows: list[dict]) -> str:
    """Markdown: per part, seconds by both clocks, GFLOP counted, GFLOP/s (CPU seconds), the GFLOP/s that
    plain GEMMs reach at the part's linear shapes, and the part's utilisation of that rate by CPU seconds and
    by wall seconds, and of the best GEMM rate of the run (the machine's achievable, CPU seconds)."""
    lines = ["| part | CPU s | wall s | GFLOP | GFLOP/s (CPU s) | GEMM GFLOP/s at its shapes (CPU s) | "
             "utilisation vs that GEMM, CPU s | same, wall s | vs best GEMM, CPU s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for x in rows:
        flops = sum(x["flops"].values())
        rate_cpu = x["gemm_flops"] / x["gemm_cpu"] if x["gemm_cpu"] else 0.0
        rate_wall = x["gemm_flops"] / x["gemm_wall"] if x["gemm_wall"] else 0.0
        speed = f"{flops / x['cpu'] / 1e9:.1f}" if flops and x["cpu"] > 0 else "-"
        gemm = f"{rate_cpu / 1e9:.1f}" if rate_cpu else "-"
        lines.append(f"| {x['part']} | {x['cpu']:.2f} | {x['wall']:.2f} | {flops / 1e9:.1f} | {speed} | {gemm} | "
                     f"{_pct(flops, x['cpu'], rate_cpu)} | {_pct(flops, x['wall'], rate_wall)} | "
                     f"{_pct(flops, x['cpu'], x['peak_cpu'])} |")
    return "\n".join(lines)


def flops_table(rows: list[dict]) -> str:
    """Markdown: each part's FLOPs by component (share of its total) and its forward calls' size (rows per
    linear call, weighted by rows: a call of 1 row reads every weight for 2 FLOPs each)."""
    lines = ["| part | forward calls | rows per call | GFLOP | linear | LoRA | attention | LM head |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for x in rows:
        f = x["flops"]
        total = sum(f.values())
        if not total:
            continue
        share = " | ".join(f"{f[k] / total:.1%}" for k in ("linear", "lora", "attention", "head"))
        lines.append(f"| {x['part']} | {x['calls']} | {x['rows_per_call']:.0f} | {total / 1e9:.1f} | {share} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is steadier on a shared machine)")
    ap.add_argument("--prompts", type=int, help="prompts per step (default 4; --parts: the cpu preset's 2)")
    ap.add_argument("--generations", type=int, help="answers per prompt (default 12; --parts: the cpu preset's 8)")
    ap.add_argument("--tokens", type=int, help="new tokens at most (default 64; --parts: the cpu preset's 64)")
    ap.add_argument("--skip-trl", action="store_true")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu", help="(--parts prints both)")
    ap.add_argument("--data", help="folder holding us_daily_train.csv.gz and universe_us46.txt")
    ap.add_argument("--model", help="start model folder (default: the built-in SmolLM2-135M); our loop only")
    ap.add_argument("--temperature", type=float, help="sampling temperature (default: the recipe's; --parts: "
                                                      "the cpu preset's 0.5)")
    ap.add_argument("--parts", action="store_true", help="one step at the cpu preset by part: FLOPs, seconds and "
                                                         "utilisation against GEMMs of the same shapes")
    ap.add_argument("--recipe", help=f"--parts only: the recipe (default {DEFAULT_RECIPE}, the ladder's)")
    ap.add_argument("--gemm-seconds", type=float, default=0.2, help="--parts: least seconds per GEMM row count")
    ap.add_argument("--bf16-gemm", action="store_true", help="--parts: also time the GEMMs in bfloat16")
    ap.add_argument("--bf16-base", action="store_true", help="--parts: the step with TrainConfig.bf16_base (the "
                                                             "frozen linear layers in bf16), its parts held to "
                                                             "GEMMs in the same dtypes")
    ap.add_argument("--profile", action="store_true", help="--parts: also profile the step's ops by kind (slower: "
                                                           "time the table without it)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    if a.parts:
        return _main_parts(a)
    if a.recipe is not None:
        ap.error("--recipe goes with --parts (the trainers' comparison times the cispo recipe)")
    a.prompts, a.generations, a.tokens = a.prompts or 4, a.generations or 12, a.tokens or 64
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


def _main_parts(a) -> int:
    """--parts: one step at the cpu preset (or the flags' sizes), its parts against GEMMs of their shapes."""
    from trainers.compare.ladder import SCALES
    preset = dict(SCALES["cpu"].train, refill_rounds=0)  # one sampled batch: refill would add generation
    for key, value in (("prompts_per_step", a.prompts), ("num_generations", a.generations),
                       ("max_completion_length", a.tokens), ("temperature", a.temperature)):
        if value is not None:
            preset[key] = value
    name = a.recipe or DEFAULT_RECIPE
    config = recipe(name, **preset)
    config = config.with_(steps_per_generation=min(config.steps_per_generation, config.num_generations),
                          bf16_base=a.bf16_base)
    verifier, panel = build_verifier(a.data)
    result = parts(config, verifier, list(FIXED_BRIEFS), a.model, a.gemm_seconds, a.profile, a.bf16_gemm)
    rows = part_rows(result)
    d = result["dims"]
    print(f"\nOne step, {config.prompts_per_step} prompts x {config.num_generations} answers, "
          f"{config.max_completion_length} new tokens at most, temperature {config.temperature}, recipe {name} "
          f"({config.num_iterations} pass(es) x {config.steps_per_generation} mini-batches, beta {config.beta}), "
          f"model {a.model or 'built-in SmolLM2-135M-Instruct'} {'bf16 base' if a.bf16_base else 'fp32'} ({d.layers} layers, hidden {d.hidden}, "
          f"intermediate {d.intermediate}, {d.heads} heads / {d.kv_heads} kv, vocab {d.vocab}), "
          f"LoRA r{config.lora_r}, {torch.get_num_threads()} thread(s), panel: {panel}. Reference-pass answer "
          f"chunks (rows x tokens): "
          f"{[(c.batch, c.q) for c in result['calls'] if c.part == 'reference pass' and c.logits > 1]}; "
          f"prompt lengths {[c.q for c in result['calls'] if c.part == 'reference pass' and c.logits == 1]}.\n")
    print(parts_table(rows))
    print()
    print(flops_table(rows))
    peak = max(result["gemm"].items(), key=lambda kv: kv[1][0])
    print(f"\nGEMMs timed (torch.matmul over the model's own weights, "
          f"{'bf16 but the fp32 LM head' if a.bf16_base else 'fp32'}): "
          + ", ".join(f"{m} rows {v[0] / 1e9:.1f}" for m, v in sorted(result["gemm"].items()))
          + f" GFLOP/s by CPU s; best {peak[1][0] / 1e9:.1f} at {peak[0]} rows.")
    if result["gemm_bf16"]:
        updates = [r["part"] for r in rows if r["part"].startswith("update ") and "all" not in r["part"]]
        named = [(p, {p}) for p in ("generation", "reference pass", *updates)]
        print("\nThe same GEMMs in bfloat16 (weights and inputs cast; fp32 as above):\n")
        print(dtype_table(result["dims"], result["calls"], result["gemm"], result["gemm_bf16"],
                          [*named, (f"update, all {len(updates)} steps", set(updates)),
                           ("step", {c.part for c in result["calls"]})]))
    if result["ops"]:
        print("\nWhere each part's time goes (torch.profiler, the ops' own time, wall clock; under the profiler):\n")
        print(ops_table(result["ops"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
