"""The optional extras a command needs, and the one line a command prints when one is not installed."""

from __future__ import annotations

import sys


#: Third-party modules that only the extras bring, and the extra that brings each.
OPTIONAL_MODULES = {"torch": "train", "transformers": "train", "trl": "train", "peft": "train", "datasets": "train",
                    "safetensors": "stress", "pandas": "data", "pyarrow": "data", "matplotlib": "plots",
                    "starlette": "serve", "uvicorn": "serve", "ray": "batch"}


#: The extras that bring torch: only these are preceded by the CPU torch build (a bare torch requirement
#: would pull a multi-GB CUDA build); `serve`, `batch`, `data`, `plots` need nothing of torch.
TORCH_EXTRAS = frozenset({"train", "stress"})


def missing_extra_message(extra: str, err: Exception) -> str:
    """The one line a command prints when an extra it needs is not installed: what to install, and nothing more."""
    first = "install torch==2.13.0 (CPU) first, then: " if extra in TORCH_EXTRAS else "install it: "
    return f"alpha-gym: this command needs the `{extra}` extra ({err}); {first}pip install -e '.[{extra}]'"


def missing_extra(extra: str, err: Exception) -> int:
    """Print `missing_extra_message` on stderr; the exit status 2."""
    print(missing_extra_message(extra, err), file=sys.stderr)
    return 2
