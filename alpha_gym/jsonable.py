"""JSON-safe values: what every file and report this package writes passes through.

JSON has no NaN or infinity and no numpy types; a non-finite number is written as null. Every JSON text
the package and the trainers write goes through `json_dumps` (tests/test_settings.py greps for others).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping

import numpy as np


def finite_or_none(x) -> float | None:
    """A number as a float, or None when it is missing, NaN or infinite."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def jsonable(x):
    """`x` with numpy scalars and arrays turned into Python ones, tuples into lists and NaN/inf into None."""
    if isinstance(x, Mapping):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, np.ndarray) and x.ndim == 0:
        return jsonable(x.item())
    if isinstance(x, (list, tuple, np.ndarray)):
        return [jsonable(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (np.floating, float)):
        return finite_or_none(x)
    if isinstance(x, np.integer):
        return int(x)
    return x


def json_dumps(x, **kwargs) -> str:
    """`json.dumps` of `jsonable(x)`, with allow_nan=False: never a bare NaN or Infinity, which strict JSON
    readers refuse. A non-finite value that `default=` makes is a bug and raises ValueError."""
    return json.dumps(jsonable(x), allow_nan=False, **kwargs)


def content_hash(record: Mapping, key: str = "sha256") -> str:
    """The hash a record carries of itself under `key` (score-batch records, kept comparison files): sha256 of its
    canonical JSON without `key` (key order and spacing do not count), first 32 hex digits."""
    body = {k: v for k, v in record.items() if k != key}
    return hashlib.sha256(json_dumps(body, sort_keys=True).encode()).hexdigest()[:32]


_NESTING = np.zeros(256, dtype=np.int64)
_NESTING[[ord("["), ord("{")]] = 1
_NESTING[[ord("]"), ord("}")]] = -1


def nesting_depth(raw: bytes, strings: re.Pattern) -> int:
    """How deeply the arrays and objects (tables) of a JSON or TOML text nest (0 for a scalar), in linear time
    and without recursion, so a text of 100,000 `[` is refused before a recursive parser meets it.
    `strings`: a bytes pattern of the language's strings (brackets inside one do not nest)."""
    steps = _NESTING[np.frombuffer(strings.sub(b'""', raw), dtype=np.uint8)]
    return int(np.cumsum(steps).max(initial=0))
