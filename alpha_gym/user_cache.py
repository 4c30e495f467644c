"""The user's cache folder: seed books of the archive and the registry of fitted world models.

`$ALPHA_GYM_CACHE` (default `$XDG_CACHE_HOME/alpha_gym` or `~/.cache/alpha_gym`); `ALPHA_GYM_CACHE=off`
turns every cache off.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path | None:
    """The cache folder, or None when caching is off."""
    value = os.environ.get("ALPHA_GYM_CACHE")
    if value is not None:
        return None if value.strip().lower() in ("", "0", "off", "none") else Path(value)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "alpha_gym"
