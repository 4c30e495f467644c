"""Keep freed memory in the process for reuse, instead of handing it back to the OS after every formula.

Scoring a formula allocates and frees a few dozen panel-sized arrays (13 MB each on 496 stocks).
With glibc's defaults, blocks that size are mmap-ed fresh and unmapped on free (or trimmed off the
heap's top), so every new array pays its page faults and the kernel's zeroing again: on 496
stocks that was about a third of the scoring time. Raising the mmap and trim thresholds makes
freed arrays reusable at once. Peak memory is unchanged (it is bounded by the evaluator, which
frees intermediates early); memory above the peak is simply not returned between formulas.

Set ALPHA_GYM_KEEP_FREED_MEMORY=0 to leave the allocator alone. No effect outside glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: Blocks below this come from the heap (a 6,608-session x 496-stock array is 26 MB).
MMAP_THRESHOLD = 64 << 20
#: Free memory kept at the heap's top before any is returned to the OS.
TRIM_THRESHOLD = 1 << 30

_done = False


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds once per process; True if they were set."""
    global _done
    if _done:
        return False
    _done = True
    if os.environ.get("ALPHA_GYM_KEEP_FREED_MEMORY", "1") == "0":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (macOS, musl, Windows): nothing to tune
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
