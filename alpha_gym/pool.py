"""The verifier pool: one process-wide Verifier per (panel fingerprint, config).

Building a Verifier is cheap, but its first score seeds the novelty archive with
the Alpha101-style books (4-44 s by panel). RL libraries that build one env per
episode or per trajectory (skyrl-gym, OpenEnv, textarena-style `make`) would pay
that every time; `shared_verifier` pays it once per process and data.

Every integration takes its settings through `resolve_config`: a `VerifierConfig`, a settings TOML
(`alpha-gym config show`), a mapping of its tables, and `--set` items, so a changed priority or
threshold gives the same reward through verl, skyrl, OpenEnv, verifiers, the service and the CLI.

It sits beside the scoring package rather than in it because it reads the settings file, which
itself builds on `scoring.config`; the integrations, the service and batch scoring all draw from it.

The cached verifier's archive is warmed under a lock before it is handed out, so
concurrent callers only read it. A caller that calls `update_archive` changes it
for every user of the same key: use `fresh=True` for a private one.
"""

from __future__ import annotations

import os
import threading
from dataclasses import asdict
from typing import Any, Mapping, Sequence

from alpha_gym.jsonable import json_dumps
from alpha_gym.market.panel import Panel
from alpha_gym.scoring.config import VerifierConfig
from alpha_gym.scoring.verifier import Verifier

_LOCK = threading.Lock()
_VERIFIERS: dict[tuple[str, str], Verifier] = {}
_PANELS: dict[tuple, Panel] = {}


def config_key(config: VerifierConfig | None) -> str:
    """A canonical text of every config field: equal configs give equal keys."""
    return json_dumps(asdict(config or VerifierConfig()), sort_keys=True, default=str)


def _plain(x):
    """Nested mappings and sequences (an OmegaConf DictConfig from verl or skyrl-train) as dicts and lists."""
    if isinstance(x, Mapping):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)) or type(x).__name__ == "ListConfig":
        return [_plain(v) for v in x]
    return x


def resolve_config(config: Any = None, settings: Sequence[str] | str = ()) -> VerifierConfig:
    """The VerifierConfig an integration was given, then each `--set` item of `settings` applied to it.

    `config`: None (the defaults), a `VerifierConfig`, the path of a settings TOML (its [verifier]
    table), or a mapping: of settings tables ({"verifier": {...}}) or of [verifier] keys alone
    ({"priorities": {"cpcv": 1.0}}). `settings`: items such as "verifier.priorities.cpcv=1" (one
    string or a list), as `alpha-gym ... --set`. A bad key or value raises ConfigError naming it.
    """
    from alpha_gym import settings as S
    sets = [settings] if isinstance(settings, str) else [str(s) for s in _plain(settings or [])]
    if isinstance(config, (str, os.PathLike)):
        return S.load(config, sets).verifier
    if config is None and not sets:
        return VerifierConfig()
    if isinstance(config, VerifierConfig):
        if not sets:
            return config
        tables = {"verifier": S.to_dict(config)}
    elif config is None:
        tables = {}
    elif isinstance(config, Mapping):
        plain = _plain(config)
        sections = set(S.defaults_tables()) | set(S.OPTIONAL_SECTIONS)
        tables = plain if plain and set(plain) <= sections else {"verifier": plain}
    else:
        raise TypeError(f"config must be a VerifierConfig, a settings file's path or a mapping, not "
                        f"{type(config).__name__}")
    for item in sets:  # after the given config, as --set comes after --config
        keys, value = S.parse_set(item)
        node = tables
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise S.ConfigError(f"--set {item!r}: {k} is a value, not a table")
        node[keys[-1]] = value
    return S.load(None, (), tables).verifier


def cached_panel(data: Any = None, universe=None, start=None, end=None) -> Panel:
    """`resolve_panel` for file paths (or the synthetic default), loaded once per process per arguments."""
    from alpha_gym.market.resolve import resolve_panel
    key = (None if data is None else str(data), None if universe is None else json_dumps(universe, default=str),
           None if start is None else str(start), None if end is None else str(end))
    with _LOCK:
        panel = _PANELS.get(key)
        if panel is None:
            panel = _PANELS[key] = resolve_panel(data=None if data is None else str(data), universe=universe,
                                                 train_start=start, train_end=end)
        return panel


def shared_verifier(panel: Panel | None = None, config: Any = None, *, data: Any = None,
                    universe=None, start=None, end=None, fresh: bool = False, settings: Sequence[str] = ()) -> Verifier:
    """The process's Verifier for this panel and config, built and warmed once.

    Give a `panel`, or the `data`/`universe`/`start`/`end` of `resolve_panel`
    (nothing: the embedded synthetic market). `config` and `settings`: anything `resolve_config`
    takes (a VerifierConfig, a settings TOML, a mapping, --set items). `fresh=True` builds a new, uncached one.
    """
    if panel is None:
        panel = cached_panel(data, universe, start, end)
    elif data is not None:
        raise ValueError("pass either panel= or data=, not both")
    config = resolve_config(config, settings)
    key = (panel.fingerprint(), config_key(config))
    with _LOCK:
        verifier = None if fresh else _VERIFIERS.get(key)
        if verifier is None:
            verifier = Verifier(panel, config)
            _ = verifier.archive, verifier.factors  # the lazy state, built now so later scores only read it
            if not fresh:
                _VERIFIERS[key] = verifier
        return verifier


def clear() -> None:
    """Forget every cached verifier and panel (tests; freeing memory)."""
    with _LOCK:
        _VERIFIERS.clear()
        _PANELS.clear()
