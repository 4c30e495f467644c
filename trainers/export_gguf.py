"""A trained or SFT model folder as one GGUF file that llama.cpp serves (`alpha-gym export-gguf`).

    alpha-gym export-gguf runs/sft/model --out runs/sft/model-f32.gguf
    python -m llama_cpp.server --model runs/sft/model-f32.gguf --host 127.0.0.1 --port 8080 --model_alias sft

`serve_gguf(path, alias)` runs that server for a block (tests, benchmarks/served_eval.py) and stops it after.

What `source` may be (`model_source`):
    a Hugging Face model folder: config.json, *.safetensors and the tokenizer (`alpha-gym sft`'s OUT/model)
    an `alpha-gym sft` output folder: its model/
    an adapter folder (adapter_config.json: a training checkpoint, RUN/checkpoint-N): merged into its
        base first (the base its adapter_config.json records, or `base`)
    a training run folder: its latest checkpoint-N

The conversion is llama.cpp's own `convert_hf_to_gguf.py`, run as a child process: it knows each
architecture's tensor names and the pre-tokenizer llama.cpp must use (found by hashing the tokenizer's
output on a probe text), which a writer of our own would have to guess, and a wrong guess tokenizes
differently. The llama-cpp-python wheel does not hold it; its source archive (sdist) vendors it with the
`gguf-py` and `conversion/` package of the same llama.cpp commit as the server. Where it is found
(`find_converter`), first hit wins:
    `converter`:                    convert_hf_to_gguf.py, a llama.cpp checkout, or the sdist (.tar.gz)
    $ALPHA_GYM_GGUF_CONVERTER:      the same
    the cache folder's llama.cpp/:  an sdist put there (alpha_gym/user_cache.py; .ci/install does it):
        pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d ~/.cache/alpha_gym/llama.cpp
From an archive only the converter's files are read out (2 MB of its 77), into a temporary folder.
The converter imports sentencepiece (even for BPE tokenizers) besides torch and transformers.

Precision: "f32" keeps the weights as trained (the trainers' CPU models are fp32), so llama.cpp's greedy
answers match transformers' (tests/test_export_gguf.py); "f16" halves the file.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from alpha_gym.errors import InputError

CONVERTER = "convert_hf_to_gguf.py"
CONVERTER_ENV = "ALPHA_GYM_GGUF_CONVERTER"
OUTTYPES = ("f32", "f16")
#: What the converter needs beside itself, in an sdist's vendor/llama.cpp/ or a llama.cpp checkout.
_CONVERTER_PARTS = (CONVERTER, "conversion/", "gguf-py/gguf/")
_WEIGHTS = ("*.safetensors", "pytorch_model*.bin")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
_HOW_TO_GET = ("llama.cpp's converter (convert_hf_to_gguf.py) was not found: pass --converter with "
               "llama-cpp-python's source archive, e.g. after `pip download --no-deps --no-binary :all: "
               "llama-cpp-python==0.3.36 -d DIR`, --converter DIR/llama_cpp_python-0.3.36.tar.gz (or a llama.cpp "
               f"checkout), set ${CONVERTER_ENV}, or download the archive into {{cache}}")


#: What an export needs beyond the base install: the `train` extra's torch and transformers (the model is read and
#: adapters merged) and sentencepiece, which llama.cpp's converter imports for every tokenizer (no extra brings it).
EXPORT_MODULES = ("torch", "transformers", "sentencepiece")
#: The one install line that brings all of them.
EXPORT_INSTALL = "install torch==2.13.0 (CPU) first, then: pip install -e '.[train]' sentencepiece"


def missing_modules() -> list[str]:
    """The modules of `EXPORT_MODULES` that cannot be imported here (found, never imported)."""
    return [m for m in EXPORT_MODULES if importlib.util.find_spec(m) is None]


def needs_message(missing) -> str:
    """One line naming every need of an export at once, and which of them are missing."""
    return (f"export-gguf needs the `train` extra (torch, transformers) and sentencepiece (llama.cpp's converter "
            f"imports it); missing here: {', '.join(missing)}; {EXPORT_INSTALL}")


class ExportError(InputError):
    """A folder that is not a model, a converter that cannot be found, or a conversion that failed."""


@dataclass(frozen=True)
class ModelSource:
    """What `model_source` found: `folder` holds a full model ("model") or adapters over a base ("adapter")."""

    kind: str
    folder: Path


def model_source(path) -> ModelSource:
    """The model folder, adapter folder, sft output or run folder at `path` (see the module docstring)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"model folder {path} not found")
    if not path.is_dir():
        what = "already a GGUF file" if path.suffix == ".gguf" else "a file"
        raise ExportError(f"{path} is {what}, not a model folder (config.json, *.safetensors and a tokenizer)")
    if (path / "adapter_config.json").is_file():  # a checkpoint: LoRA/DoRA adapters over a base
        _read_json(path / "adapter_config.json")
        return ModelSource("adapter", path)
    if (path / "config.json").is_file():
        _check_model_folder(path)
        return ModelSource("model", path)
    if (path / "model" / "config.json").is_file():  # `alpha-gym sft --out OUT` keeps the model in OUT/model
        _check_model_folder(path / "model")
        return ModelSource("model", path / "model")
    from trainers.checkpoints import latest_checkpoint
    ckpt = latest_checkpoint(path)
    if ckpt is not None:
        return model_source(ckpt)
    raise ExportError(f"{path} holds no model: expected config.json with *.safetensors (a model folder), "
                      "adapter_config.json (a checkpoint), model/ (an `alpha-gym sft` output) or checkpoint-N/ "
                      "(a training run)")


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ExportError(f"{path} is not valid JSON ({err}): the folder is damaged or not a model") from None
    if not isinstance(data, dict):
        raise ExportError(f"{path} is not a JSON object: the folder is damaged or not a model")
    return data


def _check_model_folder(folder: Path) -> None:
    config = _read_json(folder / "config.json")
    if not config.get("architectures"):
        raise ExportError(f"{folder / 'config.json'} names no architectures: not a transformers model folder")
    if not any(next(folder.glob(p), None) for p in _WEIGHTS):
        raise ExportError(f"{folder} holds config.json but no weights (*.safetensors or pytorch_model*.bin)")
    if not any((folder / f).is_file() for f in _TOKENIZER_FILES):
        raise ExportError(f"{folder} holds no tokenizer ({', '.join(_TOKENIZER_FILES)}): save the tokenizer beside "
                          "the model (tokenizer.save_pretrained)")


# ----------------------------------------------------------------------------------- the converter
def find_converter(converter=None) -> Path:
    """The path given, else $ALPHA_GYM_GGUF_CONVERTER, else an sdist in the cache folder's llama.cpp/."""
    from alpha_gym.user_cache import cache_dir
    given = converter or os.environ.get(CONVERTER_ENV)
    if given:
        path = Path(given).expanduser()
        if not path.exists():
            raise FileNotFoundError(f"converter {path} not found (a {CONVERTER}, a llama.cpp checkout or "
                                    "llama-cpp-python's sdist .tar.gz)")
        return path
    cache = cache_dir()
    found = sorted((cache / "llama.cpp").glob("llama_cpp_python-*.tar.gz")) if cache is not None else []
    if not found:
        where = (cache / "llama.cpp") if cache is not None else "the cache folder (caching is off)"
        raise ExportError(_HOW_TO_GET.format(cache=where))
    return found[-1]


@contextmanager
def converter_script(path: Path):
    """Yields the convert_hf_to_gguf.py to run for `path`: itself, in a checkout, or read out of an sdist."""
    path = Path(path)
    if path.is_file() and path.name == CONVERTER:
        yield path
    elif path.is_dir():
        for root in (path, path / "vendor" / "llama.cpp"):
            if (root / CONVERTER).is_file():
                yield root / CONVERTER
                return
        raise ExportError(f"{path} holds no {CONVERTER} (nor vendor/llama.cpp/{CONVERTER})")
    elif path.name.endswith((".tar.gz", ".tgz")):
        with tempfile.TemporaryDirectory(prefix="alpha_gym_converter_") as tmp:
            yield _extract_converter(path, Path(tmp))
    else:
        raise ExportError(f"{path} is not a {CONVERTER}, a llama.cpp checkout or an sdist .tar.gz")


def _extract_converter(archive: Path, into: Path) -> Path:
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = []
            for m in tar:
                head, sep, rest = m.name.partition("/vendor/llama.cpp/")
                if sep and "/" not in head and m.isfile() and rest.startswith(_CONVERTER_PARTS):
                    members.append(m)
            tar.extractall(into, members=members, filter="data")
    except (tarfile.TarError, OSError, EOFError) as err:
        raise ExportError(f"{archive} cannot be read as a .tar.gz ({err})") from None
    found = sorted(into.glob(f"*/vendor/llama.cpp/{CONVERTER}"))
    if not found:
        raise ExportError(f"{archive} holds no vendor/llama.cpp/{CONVERTER}: not llama-cpp-python's sdist")
    return found[0]


# ----------------------------------------------------------------------------------------- export
def merge_adapters(adapter_dir: Path, into: Path, base=None) -> Path:
    """Adapters merged into their base (the recorded one, or `base`), saved with the tokenizer as a model folder."""
    from peft import PeftModel

    from trainers.models import load_base
    recorded = _read_json(adapter_dir / "adapter_config.json").get("base_model_name_or_path")
    try:
        model, tokenizer = load_base(base if base is not None else recorded or None)
    except (FileNotFoundError, OSError) as err:
        raise ExportError(f"the base of the adapters in {adapter_dir} cannot be loaded ({err}); pass it with --base "
                          "(the model folder they were trained on)") from None
    merged = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    merged.save_pretrained(into)
    tokenizer.save_pretrained(into)
    return into


def export_gguf(source, out, *, outtype: str = "f32", converter=None, base=None, overwrite: bool = False) -> dict:
    """Write `source` (see `model_source`) as the GGUF file `out`; returns a summary (what, from where, size)."""
    if outtype not in OUTTYPES:
        raise ExportError(f"outtype must be one of {', '.join(OUTTYPES)}, got {outtype!r}")
    out = Path(out).expanduser()
    if out.suffix != ".gguf":
        raise ExportError(f"--out {out}: name the GGUF file to write (ending in .gguf)")
    if out.exists() and not overwrite:
        raise ExportError(f"{out} exists: pass --force to replace it, or another --out")
    missing = missing_modules()  # every need at once, before any work: not one install per try
    if missing:
        raise ExportError(needs_message(missing))
    found = model_source(source)
    if base is not None and found.kind != "adapter":
        raise ExportError(f"--base is for adapter folders; {found.folder} is a full model")
    converter_path = find_converter(converter)
    from alpha_gym.stress.checkpoint import file_sha256
    from trainers.models import model_identity
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=".alpha_gym_export_", dir=out.parent) as tmp:
        folder = found.folder
        if found.kind == "adapter":
            folder = merge_adapters(found.folder, Path(tmp) / "merged", base)
        partial = Path(tmp) / out.name
        with converter_script(converter_path) as script:
            _convert(script, folder, partial, outtype)
        os.replace(partial, out)  # a killed export leaves no half-written file under the final name
    return {"gguf": str(out), "outtype": outtype, "bytes": out.stat().st_size, "sha256": "sha256:" + file_sha256(out),
            "source": str(found.folder), "kind": found.kind, "source_identity": model_identity(found.folder),
            "base": base, "converter": str(converter_path), "seconds": round(time.perf_counter() - t0, 1)}


def _convert(script: Path, folder: Path, out: Path, outtype: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NO_LOCAL_GGUF"}  # its own gguf-py, of its commit
    cmd = [sys.executable, str(script), str(folder), "--outfile", str(out), "--outtype", outtype]
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0 or not out.is_file():
        tail = "\n".join(done.stdout.strip().splitlines()[-8:])
        raise ExportError(f"llama.cpp's converter failed on {folder} (exit {done.returncode}):\n{tail}")


# ------------------------------------------------------------------------------------------ serving
def free_port() -> int:
    """A TCP port nothing listens on at the moment, on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serve_gguf(gguf, alias: str, *, threads: int = 1, n_ctx: int = 2048, start_timeout_s: float = 120,
               log_dir=None, port: int | None = None):
    """llama-cpp-python's OpenAI-compatible server for `gguf` on 127.0.0.1 (`port`, else a free one), answering
    under the model name `alias`, for the block: yields its base URL (http://127.0.0.1:PORT/v1) and stops it after.
    Its log is `log_dir`/llama-server-PORT.log ($TMPDIR or /tmp by default).

    One thread by default: on a busy 2-core machine two llama.cpp threads wait for each other at every
    token (SmolLM2 f32, load average 12 on 2 cores: 0.7 tokens/s with 2 threads started under `nice`,
    11-12 with 1 thread not niced)."""
    port = free_port() if port is None else port
    log_path = Path(log_dir or os.environ.get("TMPDIR", "/tmp")) / f"llama-server-{port}.log"
    proc = start_server(gguf, alias, port=port, threads=threads, n_ctx=n_ctx, log_path=log_path)
    try:
        yield wait_until_serving(proc, port, start_timeout_s, f"llama.cpp's server did not start on {gguf} "
                                                              f"(see {log_path})")
    finally:
        stop_server(proc)


def start_server(gguf, alias: str, *, port: int, threads: int = 1, n_ctx: int = 2048, log_path,
                 cpus: str | None = None) -> subprocess.Popen:
    """The server process of `serve_gguf`, its output into `log_path`, on the CPUs `cpus` names ("0", "0-1":
    `taskset -c`; None: wherever the system puts it). Wait for it with `wait_until_serving`."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise ExportError("llama-cpp-python's server is not installed: pip install 'llama-cpp-python[server]' "
                          "(see .ci/install for the build flags)")
    pin = [] if cpus is None else ["taskset", "-c", cpus]
    with open(log_path, "w") as log:     # the child holds its own descriptor
        return subprocess.Popen(pin + [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf),
                                       "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx),
                                       "--n_threads", str(threads), "--model_alias", alias],
                                stdout=log, stderr=subprocess.STDOUT,
                                preexec_fn=_die_with_parent if sys.platform == "linux" else None)


def _die_with_parent() -> None:
    """In the server's process before it starts: SIGTERM to it when the process that started it ends, however
    that ends (a test or benchmark killed by a time-out runs no `finally`, and its server went on serving)."""
    import ctypes
    import signal
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))     # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def wait_until_serving(proc: subprocess.Popen, port: int, timeout_s: float, failed: str) -> str:
    """The base URL once the server on `port` lists its models; ExportError(`failed`) if it exits or takes
    longer than `timeout_s` (the process is left to the caller to stop)."""
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(url + "/models", timeout=2).read()
            return url
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ExportError(failed) from None
            time.sleep(0.5)


def stop_server(proc: subprocess.Popen) -> None:
    """Stop a server `start_server` started (SIGTERM, then SIGKILL after 30 s)."""
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
