"""One configuration file for every setting that decides a reward or a run.

    alpha-gym config show > run.toml          # every default, as a file that loads back to the defaults
    alpha-gym score --config run.toml --set verifier.turnover_cap=0.4 "rank(-ts_delta(close, 5))"

Sections (each is one dataclass; a nested dataclass is a sub-table):

    [verifier]       VerifierConfig: priorities, channel constants, invalid rewards, archive, limits, CPCV,
                     training costs. The holdout shares its CPCV, turnover and clip rules with it.
    [holdout]        HoldoutConfig's own fields (context, min_turnover, crash_threshold) and
    [holdout.costs]  RealisticCosts: the costs the holdout charges.
    [stress]         StressConfig: the R3 world model, its gates and scenarios.
    [train]          TrainConfig with its `recipe` (registered by `trainers.config.register_train_table()`,
                     which the trainers' entry points call; before that a [train] table is kept as given,
                     unchecked, and `settings["train"]` raises UnregisteredTableError naming the table).

TOML has no null: an optional setting that is unset is written as the string "none".
A file may hold any subset of the keys; the rest keep their defaults. Unknown keys are errors that
name the key and the nearest known one. Each dataclass checks its own values' types and declared ranges
(`alpha_gym.ranges`); `from_dict` re-raises that error under the key's dotted name (verifier.cpcv.n_blocks). `--set KEY=VALUE` takes a dotted key and a TOML value
(a bare word is read as a string).
"""

from __future__ import annotations

import difflib
from collections import abc
import math
import re
import sys
import tomllib
import types
import typing
from dataclasses import MISSING, dataclass, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, Callable, Collection, Mapping, Sequence

from alpha_gym.folder_stamp import claim_stamp
from alpha_gym.ranges import SettingError, shown
from alpha_gym.scoring.config import ConfigError

NONE = "none"  # how an unset optional value is written
#: The deepest nesting of arrays and inline tables a settings text may have: every setting nests at most 3
#: deep, and tomllib recurses once a level (3,000 `[` were a RecursionError).
MAX_NESTING = 32
# TOML's strings, basic and literal: brackets inside one do not nest.
_TOML_STRING = re.compile(rb'"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'')


class NotToml(ConfigError):
    """Text that is not TOML at all (`parse_set` then reads a bare word as a string)."""


def toml_loads(text: str, where: str) -> dict:
    """`tomllib.loads(text)`, or ConfigError starting with `where` for text that is not TOML (NotToml), nests
    deeper than MAX_NESTING, or holds an integer past Python's digit limit: never a RecursionError or ValueError."""
    from alpha_gym.jsonable import nesting_depth
    depth = nesting_depth(text.encode("utf-8", "surrogatepass"), _TOML_STRING)
    if depth > MAX_NESTING:
        raise ConfigError(f"{where}: nests {depth} levels deep; settings nest at most {MAX_NESTING}")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise NotToml(f"{where}: not a valid TOML {'file' if where.startswith('--config') else 'value'} ({err})"
                      ) from None
    except (ValueError, RecursionError) as err:  # an integer past sys.get_int_max_str_digits(), ...
        why = (f"an integer of more than {sys.get_int_max_str_digits():,} digits" if "digits" in str(err)
               else f"{type(err).__name__}: {shown(str(err))}")
        raise ConfigError(f"{where}: holds no usable TOML value ({why}; no setting is near that)") from None


# ------------------------------------------------------------------------------ dataclass <-> dict
def to_dict(obj: Any) -> dict[str, Any]:
    """A dataclass as plain nested dicts (None as "none", tuples as lists), in field order."""
    out = {}
    for f in fields(obj):
        out[f.name] = _plain(getattr(obj, f.name))
    return out


def _plain(v):
    if is_dataclass(v):
        return to_dict(v)
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return NONE if v is None else v


def from_dict(cls: type, data: Mapping[str, Any], base: Any = None, where: str = "") -> Any:
    """An instance of dataclass `cls` from `base` (or the defaults) with the keys of `data` changed.

    Each value is checked against the field's type; unknown keys raise ConfigError naming the nearest one.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"[{where}] must be a table of settings, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls) if f.init}
    values = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else key
        if key not in known:
            near = difflib.get_close_matches(key, list(known), n=1)
            raise ConfigError(f"unknown setting {path!r}" + (f" (did you mean {where + '.' if where else ''}"
                                                            f"{near[0]}?)" if near else ""))
        current = getattr(base, key) if base is not None else _default(known[key])
        values[key] = _coerce(hints[key], value, path, current)
    try:
        return replace(base, **values) if base is not None else cls(**values)
    except SettingError as err:  # a range check of the dataclass: name the key as the file spells it
        raise err.under(where or cls.__name__) from None
    except ConfigError:
        raise
    except (TypeError, ValueError) as err:  # the dataclass's own validation (StressError, TrainConfig's ValueError)
        raise ConfigError(f"[{where or cls.__name__}] {err}") from err


def _default(f):
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def _coerce(tp, value, path: str, current):
    """`value` (from TOML) as type `tp`, or ConfigError saying what was expected."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if type(None) in args and (value is None or (isinstance(value, str) and value.lower() == NONE)):
            return None
        if len(inner) == 1:
            return _coerce(inner[0], value, path, current)
        raise ConfigError(f"{path}: unsupported type {tp}")
    if is_dataclass(tp):
        return from_dict(tp, value, base=current, where=path)
    if origin in (Mapping, dict, abc.Mapping) or tp in (dict, Mapping, abc.Mapping):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a table, got {shown(value)}")
        merged = dict(current or {})
        vt = args[1] if len(args) == 2 else Any
        for k, v in value.items():
            merged[k] = _coerce(vt, v, f"{path}.{k}", None)
        return merged
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}: expected a list, got {shown(value)}")
        item = args[0] if args else Any
        return tuple(_coerce(item, v, f"{path}[{i}]", None) for i, v in enumerate(value))
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false, got {shown(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: expected an integer, got {shown(value)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path}: expected a number, got {shown(value)}")
        if (isinstance(value, int) and abs(value) > 1e308) or not math.isfinite(value):  # an int past any float
            raise ConfigError(f"{path}: expected a finite number, got {shown(value)}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {shown(value)}")
        return value
    return value


# ------------------------------------------------------------------------------ TOML out
def dumps(tables: Mapping[str, Mapping[str, Any]], header: str = "") -> str:
    """TOML text of nested dicts (scalars, lists, tables); the inverse of `tomllib.loads` for what `to_dict` makes."""
    lines = [f"# {h}" if h else "#" for h in header.splitlines()] if header else []

    def table(name: str, d: Mapping[str, Any]):
        scalars = {k: v for k, v in d.items() if not isinstance(v, Mapping)}
        subs = {k: v for k, v in d.items() if isinstance(v, Mapping)}
        if scalars or not subs:
            lines.extend(["", f"[{name}]"])
            lines.extend(f"{_key(k)} = {_value(v)}" for k, v in scalars.items())
        for k, v in subs.items():
            table(f"{name}.{_key(k)}", v)

    for name, d in tables.items():
        table(name, d)
    return "\n".join(lines).lstrip("\n") + "\n"


def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else '"' + k.replace('"', '\\"') + '"'


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)  # shortest text that reads back to the same float
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise ConfigError(f"cannot write {v!r} to TOML")


# ------------------------------------------------------------------------------ the sections
@dataclass(frozen=True)
class Section:
    """One [name] table: how to build its object from the table and the other sections' objects."""

    name: str
    defaults: Callable[[], dict]                   # the table as `config show` prints it
    build: Callable[[Mapping[str, Any], dict], Any]  # (table, built sections so far) -> object


#: Holdout fields that come from [verifier] (HoldoutConfig.from_verifier), so they are not in [holdout].
_HOLDOUT_SHARED = ("cpcv", "turnover_cap", "turnover_penalty", "clip", "min_valid_stocks", "limits")


def _verifier_section() -> Section:
    from alpha_gym.scoring.config import VerifierConfig
    return Section("verifier", lambda: to_dict(VerifierConfig()),
                   lambda t, built: from_dict(VerifierConfig, t, where="verifier"))


def _holdout_section() -> Section:
    from alpha_gym.book.costs import RealisticCosts
    from alpha_gym.scoring.holdout_config import HoldoutConfig

    def defaults():
        d = {k: v for k, v in to_dict(HoldoutConfig()).items() if k not in _HOLDOUT_SHARED}
        return {**d, "costs": to_dict(RealisticCosts())}

    def build(table, built):
        table = dict(table)
        shared = sorted(set(table) & set(_HOLDOUT_SHARED))
        if shared:
            raise ConfigError(f"holdout.{shared[0]} is shared with training: set verifier.{_shared_name(shared[0])}")
        costs = from_dict(RealisticCosts, table.pop("costs", {}), where="holdout.costs")
        base = HoldoutConfig.from_verifier(built["verifier"])
        return HoldoutSettings(rules=from_dict(HoldoutConfig, table, base=base, where="holdout"), costs=costs)
    return Section("holdout", defaults, build)


def _shared_name(k: str) -> str:
    return {"clip": "cpcv_clip"}.get(k, k)


def _stress_section() -> Section:
    from alpha_gym.stress.config import StressConfig
    return Section("stress", lambda: to_dict(StressConfig()),
                   lambda t, built: from_dict(StressConfig, t, where="stress"))


@dataclass(frozen=True)
class HoldoutSettings:
    rules: Any   # HoldoutConfig
    costs: Any   # RealisticCosts


_SECTIONS: dict[str, Callable[[], Section]] = {"verifier": _verifier_section, "holdout": _holdout_section,
                                               "stress": _stress_section}


def register_section(name: str, factory: Callable[[], Section]) -> None:
    """Add a [name] table (`trainers.config.register_train_table` adds [train]); `factory` is called when it is
    needed."""
    _SECTIONS[name] = factory


#: Tables that another package registers by an explicit call (`trainers.config.register_train_table()` adds
#: [train]; the trainers' entry points make it). Until then such a table is kept as given, unchecked, in
#: `Settings.tables`: the environment never imports the trainers.
OPTIONAL_SECTIONS = ("train",)

#: Who registers each optional table, for the error that asks for it.
_REGISTERED_BY = {"train": "trainers.config.register_train_table()"}


class UnregisteredTableError(ConfigError, LookupError):
    """An optional settings table (such as [train]) asked for before the package that owns it registered it."""


def _unregistered(name: str) -> UnregisteredTableError:
    return UnregisteredTableError(
        f"the [{name}] settings table is not registered: call {_REGISTERED_BY[name]} before loading the settings "
        f"(the trainers' commands do); until then [{name}] is kept unchecked in settings.tables[{name!r}]")


@dataclass(frozen=True)
class Settings:
    """Every section built: `settings.verifier`, `settings.holdout.rules`, `settings.stress`, `settings["train"]`."""

    objects: Mapping[str, Any]
    tables: Mapping[str, Mapping[str, Any]]   # the effective settings as written to a run folder
    given: Mapping[str, Mapping[str, Any]] = None  # only what the file, --set and the flags said

    def __getattr__(self, name):
        try:
            return self[name]
        except UnregisteredTableError:
            raise
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, name):
        if name in OPTIONAL_SECTIONS and name not in self.objects:
            raise _unregistered(name)
        return self.objects[name]

    def toml(self) -> str:
        return dumps(self.tables, header=HEADER)


HEADER = ("alpha-gym settings (alpha-gym config show). Any subset of these keys may be given;\n"
          "the rest keep these defaults. Unset optional values are written \"none\".")


def defaults_tables() -> dict[str, dict]:
    return {name: factory().defaults() for name, factory in _SECTIONS.items()}


def parse_set(item: str) -> tuple[list[str], Any]:
    """`verifier.turnover_cap=0.4` -> (["verifier", "turnover_cap"], 0.4). A bare word is a string."""
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key or any(not p for p in key.split(".")):
        raise ConfigError(f"--set {item!r}: expected SECTION.KEY=VALUE, e.g. verifier.turnover_cap=0.4")
    raw = raw.strip()
    try:
        value = toml_loads(f"v = {raw}", f"--set {key}")["v"]
    except NotToml:
        value = raw  # paths, recipe names: strings without quotes
    return key.split("."), value


def load(path: str | Path | None = None, sets: Sequence[str] = (),
         overrides: Mapping[str, Mapping[str, Any]] | None = None) -> Settings:
    """The effective settings: defaults, then the file at `path`, then each `--set`, then `overrides`.

    `overrides` are what a command's own flags say ({"verifier": {"format_enabled": True}}), applied last.
    """
    tables: dict[str, dict] = {}
    if path is not None:
        p = Path(path)
        if p.is_dir():
            raise ConfigError(f"--config {path}: is a directory, not a settings file (alpha-gym config show "
                              f"> run.toml writes one)")
        if not p.is_file():
            raise ConfigError(f"--config {path}: no such file")
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise ConfigError(f"--config {path}: not a valid TOML file ({err})") from None
        tables = toml_loads(text, f"--config {path}")
    from_file = {k: dict(v) if isinstance(v, Mapping) else v for k, v in tables.items()}
    for item in sets:
        keys, value = parse_set(item)
        if keys[-1] == "recipe" and len(keys) == 2:
            _check_recipe(from_file, keys[0], value, f"--set {item}")
        node = tables
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item!r}: {k} is a value, not a table")
        node[keys[-1]] = value
    for name, table in (overrides or {}).items():
        if "recipe" in table:
            _check_recipe(from_file, name, table["recipe"], "the command's recipe")
        tables.setdefault(name, {}).update(table)
    unknown = sorted(set(tables) - set(_SECTIONS) - set(OPTIONAL_SECTIONS))
    if unknown:
        near = difflib.get_close_matches(unknown[0], list(_SECTIONS), n=1)
        raise ConfigError(f"unknown section [{unknown[0]}]" + (f" (did you mean [{near[0]}]?)" if near else "")
                          + f"; sections are {sorted(_SECTIONS)}")
    built: dict[str, Any] = {}
    effective: dict[str, dict] = {}
    for name, factory in _SECTIONS.items():
        section = factory()
        built[name] = section.build(tables.get(name, {}), built)
        effective[name] = _effective_table(section, built[name])
    for name in OPTIONAL_SECTIONS:
        if name not in _SECTIONS and name in tables:
            effective[name] = dict(tables[name])  # unchecked; `settings[name]` asks for the registration
    return Settings(objects=built, tables=effective, given=tables)


def _check_recipe(from_file: Mapping[str, Any], section: str, recipe, who: str) -> None:
    """A recipe is the base the other keys of its table change. A file that names one recipe and lists its
    keys, run under another recipe's name, would silently train the file's settings under the wrong name."""
    given = from_file.get(section, {})
    if isinstance(given, Mapping) and "recipe" in given and given["recipe"] != recipe and len(given) > 1:
        raise ConfigError(f"{who} names recipe {recipe!r}, but the settings file gives {section}.recipe = "
                          f"{given['recipe']!r} together with {len(given) - 1} of its keys; write a file for that "
                          f"recipe (alpha-gym config show --set {section}.recipe={recipe}) or drop the file's other "
                          f"[{section}] keys")


def _effective_table(section: Section, obj) -> dict:
    if isinstance(obj, HoldoutSettings):
        d = {k: v for k, v in to_dict(obj.rules).items() if k not in _HOLDOUT_SHARED}
        return {**d, "costs": to_dict(obj.costs)}
    if hasattr(obj, "to_settings"):
        return obj.to_settings()
    return to_dict(obj)


def flatten(tables: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"verifier": {"costs": {"fee_bps": 2}}} -> {"verifier.costs.fee_bps": 2}."""
    out = {}
    for k, v in tables.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def differing_keys(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Dotted keys whose values differ between two settings tables (a key missing on one side differs)."""
    fa, fb = flatten(a), flatten(b)
    return sorted(k for k in set(fa) | set(fb) if fa.get(k, MISSING) != fb.get(k, MISSING))


SETTINGS_FILE = "settings.toml"


def other_settings(before: Mapping[str, Any], settings_tables: Mapping[str, Any], ignore: Collection[str] = (),
                   who: str = "") -> ConfigError | None:
    """The ConfigError naming the keys where the recorded settings `before` (as read from a settings file) differ
    from `settings_tables` (`ignore`: dotted keys that may differ), or None where they agree. `who` starts the
    message ("runs/x was run"); `claim_run_dir` and a checkpoint's resume raise it through `claim_stamp`."""
    now = tomllib.loads(dumps(settings_tables))  # compare as read back, so floats and lists match
    diff = [k for k in differing_keys(before, now) if k not in ignore and not _added_at_default(k, before, now)]
    if not diff:
        return None
    shown = ", ".join(f"{k} ({flatten(before).get(k, 'unset')} -> {flatten(now).get(k, 'unset')})"
                      for k in diff[:8])
    return ConfigError(f"{who or 'this run'} with other settings: {shown}"
                       + (f" and {len(diff) - 8} more" if len(diff) > 8 else "")
                       + "; resume with the same settings, or start a new run folder")


def _added_at_default(key: str, before: Mapping[str, Any], now: Mapping[str, Any]) -> bool:
    """A setting the record lacks (added to the code after the run was recorded) that now holds its default.

    New settings are off by default, their default being the behaviour before they existed, so such a key
    is no difference: a run recorded before `verifier.self_corr_gate` existed resumes with it unset.
    """
    fb, fn = flatten(before), flatten(now)
    if key in fb or key not in fn:
        return False
    defaults = flatten(tomllib.loads(dumps(defaults_tables())))
    return key in defaults and defaults[key] == fn[key]


def claim_run_dir(out: str | Path, settings_tables: Mapping[str, Any], resume: bool,
                  ignore: Collection[str] = ()) -> None:
    """Write the effective settings into a run folder; on a resume, refuse settings that differ.

    A run resumed with other settings would blend two experiments in one log and one checkpoint.
    `ignore`: dotted keys that change only what is written, never what is learned (e.g. how often to log).
    """
    claim_stamp(Path(out) / SETTINGS_FILE, dumps(settings_tables, header=HEADER),
                lambda path: other_settings(tomllib.loads(path.read_text(encoding="utf-8")), settings_tables, ignore,
                                            f"{out} was run"), check=resume)
