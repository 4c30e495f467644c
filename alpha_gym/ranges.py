"""The allowed range of every numeric setting, and the one check that enforces it.

Each config dataclass declares `RANGES = {field: Range(...)}` next to its fields and calls
`check_fields(self, RANGES)` first thing in `__post_init__` (and `check_choice` for a field that names a
mode), so the Python API, a settings file and `--set` all pass the same check. The check is also strict about types: a string is not a number, a
bool is not an integer, a number is not a bool, and a float must be finite.

Upper bounds are loose (far above any sensible value) but finite: they keep every channel, and the
priority-weighted sum of the channels, a finite number.
"""

from __future__ import annotations

import argparse
import math
import numbers
import reprlib
import types
import typing
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any, Mapping

from alpha_gym.errors import ConfigError

INF = math.inf


@dataclass(frozen=True)
class Range:
    """lo <= x <= hi (or < where open); `integer`: only ints; `or_zero`: 0 as well (a switch that is off, or a
    value far enough from 0 to act: "0 or [1e-06, 1000]"). Written as "[1, 32]" or "(0, 1]"."""

    lo: float = -INF
    hi: float = INF
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False
    or_zero: bool = False

    def __contains__(self, x) -> bool:
        above = x > self.lo if self.lo_open else x >= self.lo
        below = x < self.hi if self.hi_open else x <= self.hi
        return bool((above and below) or (self.or_zero and x == 0))

    def __str__(self) -> str:
        lo = "-inf" if self.lo == -INF else _num(self.lo)
        hi = "inf" if self.hi == INF else _num(self.hi)
        left = "(" if self.lo_open or self.lo == -INF else "["
        right = ")" if self.hi_open or self.hi == INF else "]"
        return f"{'an integer in ' if self.integer else ''}{'0 or ' if self.or_zero else ''}{left}{lo}, {hi}{right}"


_SHOWN = reprlib.Repr()
_SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlong, _SHOWN.maxlevel = 80, 80, 40, 4


def shown(value) -> str:
    """`repr(value)` cut to one readable line: a 5,000-digit number or 900 nested lists in an error message
    would bury what it says (reprlib: long numbers and strings elided in the middle, deep nesting as ...)."""
    return _SHOWN.repr(value)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e7 else f"{x:g}"


def ints(lo: int, hi: float = INF) -> Range:
    return Range(lo, hi, integer=True)


def closed(lo: float, hi: float) -> Range:
    return Range(lo, hi)


def above(lo: float, hi: float) -> Range:
    """(lo, hi]: strictly above lo."""
    return Range(lo, hi, lo_open=True)


class SettingError(ConfigError):
    """One setting out of its range or of the wrong type. The message names the key and what is allowed.

    `owner` is the class (Python API) or the settings table ("verifier.cpcv") the key belongs to;
    `settings.from_dict` re-raises it `under` the table's dotted path.
    """

    def __init__(self, owner: str, key: str, value: Any, allowed: str):
        self.owner, self.key, self.value, self.allowed = owner, key, value, allowed
        super().__init__(f"{owner}.{key} = {shown(value)}: must be {allowed}")

    def under(self, owner: str) -> "SettingError":
        return SettingError(owner, self.key, self.value, self.allowed)


@lru_cache(maxsize=None)
def _scalar_types(cls: type) -> dict[str, tuple[type, bool]]:
    """{field: (bool | int | float | str, optional)} for the scalar fields of a dataclass."""
    out = {}
    for name, tp in typing.get_type_hints(cls).items():
        optional = False
        if typing.get_origin(tp) in (typing.Union, types.UnionType):
            inner = [a for a in typing.get_args(tp) if a is not type(None)]
            optional = len(inner) < len(typing.get_args(tp))
            if len(inner) != 1:
                continue
            tp = inner[0]
        if tp in (bool, int, float, str):
            out[name] = (tp, optional)
    return out


def type_problem(tp: type, value) -> str | None:
    """What is wrong with `value` as a `tp`, or None."""
    if tp is bool:
        return None if isinstance(value, bool) else "true or false"
    if tp is str:
        return None if isinstance(value, str) else "a string"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return "an integer" if tp is int else "a number"
    if tp is int and not isinstance(value, numbers.Integral):
        return "an integer"
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int past any float (a 400-digit number): not a setting either
        finite = False
    if not finite:
        return "a finite number"
    return None


def check_value(owner: str, key: str, value, rng: Range | None, tp: type = float) -> None:
    """Raise SettingError unless `value` is a `tp` inside `rng`."""
    problem = type_problem(int if rng is not None and rng.integer else tp, value)
    if problem is not None:  # "an integer in [2, 64]", not "an integer in an integer in [2, 64]"
        where = str(rng).removeprefix("an integer in ") if rng is not None else ""
        raise SettingError(owner, key, value, problem + (f" in {where}" if rng is not None and tp is not bool
                                                          and tp is not str else ""))
    if rng is not None and value not in rng:
        raise SettingError(owner, key, value, str(rng))


def check_choice(owner: str, key: str, value, choices) -> None:
    """Raise SettingError unless `value` is one of `choices` (a setting that names a mode)."""
    if isinstance(value, bool) or value not in choices:
        raise SettingError(owner, key, value, f"one of {', '.join(map(str, choices))}")


def check_fields(obj, ranges: Mapping[str, Range]) -> None:
    """Type-check every scalar field of dataclass `obj` and range-check those in `ranges` (None passes
    where the field is optional)."""
    owner = type(obj).__name__
    types_ = _scalar_types(type(obj))
    for f in fields(obj):
        if f.name not in types_:
            continue
        tp, optional = types_[f.name]
        value = getattr(obj, f.name)
        if value is None and optional:
            continue
        check_value(owner, f.name, value, ranges.get(f.name), tp)


def unranged_numeric_fields(cls: type, ranges: Mapping[str, Range]) -> list[str]:
    """Numeric fields of `cls` without a declared range (a test keeps this empty)."""
    return [k for k, (tp, _) in _scalar_types(cls).items() if tp in (int, float) and k not in ranges]


def flag(rng: Range):
    """An argparse `type` for a numeric flag: the error names the range (argparse adds the flag's name)."""
    def parse(text: str):
        try:
            value = int(text) if rng.integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if rng.integer else 'a number'}")
        if (not rng.integer and not math.isfinite(value)) or value not in rng:
            raise argparse.ArgumentTypeError(f"{text} is out of range: must be {rng}")
        return value
    parse.__name__ = "int" if rng.integer else "float"
    return parse


# ------------------------------------------------------------------------------ counts against the machine
def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system says, else the machine's count)."""
    import os
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def available_memory() -> int | None:
    """Bytes of memory a new process can still take: MemAvailable, lowered to the cgroup's limit where one is set
    (a container); None where neither can be read (not Linux)."""
    found = []
    try:
        with open("/proc/meminfo") as fh:
            found += [int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as fh:
            limit = fh.read().strip()
        with open("/sys/fs/cgroup/memory.current") as fh:
            used = int(fh.read().strip())
        if limit.isdigit():
            found.append(max(0, int(limit) - used))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def check_workers(workers, flag_name: str, per_worker_bytes: int | None, allow_zero: bool = True,
                  cores: int | None = None) -> int:
    """`workers` as a count of worker processes this machine can run: an integer from 0 (or 1) to its usable
    cores, whose memory (`per_worker_bytes` each; None: not checked) fits what is available. ConfigError naming
    `flag_name`, the machine's cores and memory, and what would work; `cores`: another limit (a Ray cluster's
    CPUs, whose memory is the cluster's to check)."""
    lo = 0 if allow_zero else 1
    if isinstance(workers, bool) or not isinstance(workers, numbers.Integral) or workers < lo:
        raise ConfigError(f"{flag_name} {workers!r}: must be an integer from {lo}" +
                          (" (0: in this process, no workers)" if allow_zero else ""))
    most = usable_cores() if cores is None else int(cores)
    where = "this machine has" if cores is None else "the cluster has"
    if workers > most:
        raise ConfigError(f"{flag_name} {workers}: {where} {most} usable core{'s' * (most != 1)}; give {lo} to "
                          f"{most} (more workers than cores only wait for each other, and each holds its own memory)")
    free = available_memory() if per_worker_bytes else None
    if workers > 1 and per_worker_bytes and free is not None and workers * per_worker_bytes > free:
        fit = max(lo, free // max(1, per_worker_bytes))
        raise ConfigError(f"{flag_name} {workers}: {workers} workers need about {workers * per_worker_bytes >> 20} "
                          f"MiB ({per_worker_bytes >> 20} MiB each) and {free >> 20} MiB is available; give at most "
                          f"{fit}")
    return int(workers)
