"""llama-cpp-python's server for a test: `llama_server(gguf, alias)` (trainers.export_gguf.serve_gguf) yields
"http://127.0.0.1:PORT/v1" and stops the server after; the test skips without llama-cpp-python.
"""

from __future__ import annotations

import importlib.util
from contextlib import contextmanager

import pytest


def skip_without_llama_cpp() -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed (pip install 'llama-cpp-python[server]', see .ci/install)")


@contextmanager
def llama_server(gguf, alias: str, threads: int = 1):
    skip_without_llama_cpp()
    from trainers.export_gguf import serve_gguf
    with serve_gguf(gguf, alias, threads=threads) as url:
        yield url
