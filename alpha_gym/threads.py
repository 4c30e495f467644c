"""Thread pinning for a block: numpy's OpenBLAS threads, torch's intra-op threads, or both.

Small LAPACK calls (46 x 46 eigen-decompositions, thousands of them) run far
slower with several BLAS threads on a busy 2-core machine than with one, and the
world model's gates and scenarios are bit-reproducible only on one torch thread.
One module so the world model, its validation and batch scoring pin threads the same way.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import sys

_SETTERS: list | None = None
_NAMES = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads64_",
          "openblas_set_num_threads")
_GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads", "openblas_get_num_threads64_",
            "openblas_get_num_threads")


def _libraries():
    global _SETTERS
    if _SETTERS is not None:
        return _SETTERS
    import numpy as np
    found = []
    base = os.path.dirname(os.path.dirname(np.__file__))
    for path in sorted(glob.glob(os.path.join(base, "numpy.libs", "*openblas*")))[:4]:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        setter = next((getattr(lib, n) for n in _NAMES if hasattr(lib, n)), None)
        getter = next((getattr(lib, n) for n in _GETTERS if hasattr(lib, n)), None)
        if setter is not None and getter is not None:
            getter.restype = ctypes.c_int
            found.append((setter, getter))
    _SETTERS = found
    return found


@contextlib.contextmanager
def blas_threads(n: int = 1):
    """numpy's OpenBLAS on `n` threads inside the block (best effort, ctypes; a no-op where the symbol is
    not found). Unlike OMP_NUM_THREADS it works after numpy is loaded."""
    libs = _libraries()
    previous = []
    for setter, getter in libs:
        try:
            previous.append(int(getter()))
            setter(ctypes.c_int(n))
        except Exception:  # pragma: no cover - best effort
            previous.append(None)
    try:
        yield
    finally:
        for (setter, _), prev in zip(libs, previous):
            if prev is not None:
                setter(ctypes.c_int(prev))


@contextlib.contextmanager
def torch_threads(n: int = 1):
    """torch's intra-op thread count set to `n` inside the block, the previous count restored after."""
    import torch
    prev = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(prev)


@contextlib.contextmanager
def single_threaded():
    """One torch thread and one BLAS thread inside the block (needs torch)."""
    with torch_threads(1), blas_threads(1):
        yield


#: The variables BLAS and OpenMP libraries read when they load.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def one_thread_per_process() -> None:
    """Pin this whole process to one compute thread, for good: numpy's OpenBLAS now, torch's intra-op threads if
    torch is loaded, and (through the environment) any BLAS or OpenMP library loaded later. For worker
    processes, one per core: N workers then use N cores, never N x cores threads fighting for them."""
    for name in THREAD_VARIABLES:
        os.environ[name] = "1"
    for setter, _ in _libraries():
        try:
            setter(ctypes.c_int(1))
        except Exception:  # pragma: no cover - best effort, as blas_threads
            pass
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)
