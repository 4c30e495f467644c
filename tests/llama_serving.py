"""llama-cpp-python's OpenAI-compatible server on 127.0.0.1 for a test: started on a free port, stopped after.

    with llama_server(gguf_path, alias="m") as url:   # url = "http://127.0.0.1:PORT/v1"
        ...

`skip_without_llama_cpp()` skips the calling test with the reason when llama-cpp-python is not installed.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest


def skip_without_llama_cpp() -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed (pip install 'llama-cpp-python[server]', see .ci/install)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def llama_server(gguf, alias: str, n_ctx: int = 2048, threads: int = 2, start_timeout_s: float = 120):
    """The server answering for `gguf` under the model name `alias`; its log is $TMPDIR/llama-server-PORT.log."""
    port = free_port()
    log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"llama-server-{port}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
                                 "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", str(threads),
                                 "--model_alias", alias], stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}/v1"
            deadline = time.monotonic() + start_timeout_s
            while True:
                try:
                    urllib.request.urlopen(url + "/models", timeout=2).read()
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        pytest.fail(f"llama_cpp.server did not start (see {log_path})")
                    time.sleep(0.5)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
