"""Which fitted world model belongs to which panel: R3 on by default where a model was fitted.

`alpha-gym stress fit` registers its checkpoint under the panel's fingerprint, in the user's cache
folder (`alpha_gym.user_cache`, `stress/<fingerprint>.json`: the checkpoint's absolute path). A
verifier whose `stress_checkpoint` is "auto" (the default) looks its panel up here: no entry, or an
entry whose folder is gone, leaves R3 off and says so; a registered model still has to pass its gates
and have a scenario enabled (`StressProvider.from_checkpoint`) before R3 counts. Every score names the
model it used (`Score.world_model`, the checkpoint's content hash from `checkpoint.identity`, or "off").
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from alpha_gym.stress import checkpoint as ck
from alpha_gym.stress.config import StressError
from alpha_gym.user_cache import cache_dir

#: `VerifierConfig.stress_checkpoint` value that means "the model registered for this panel, if any".
AUTO = "auto"
#: Why R3 is off under "auto" when nothing is registered for the panel.
NOT_FITTED = "no world model fitted for this panel (`alpha-gym stress fit` fits one and registers it)"


def registry_dir() -> Path | None:
    """The registry folder, or None when the cache is off."""
    folder = cache_dir()
    return None if folder is None else folder / "stress"


def register(directory, fingerprint: str) -> Path | None:
    """Record `directory` as the world model of the panel with this fingerprint; the entry's path (None:
    the cache is off). A later fit on the same panel replaces the entry."""
    folder = registry_dir()
    if folder is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    entry = folder / f"{fingerprint}.json"
    ck.write_json(entry, {"directory": str(Path(directory).resolve()), "fingerprint": fingerprint,
                          "registered": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    return entry


def lookup(panel) -> Path | None:
    """The registered world model of `panel` (None: none registered, its folder is gone, or the cache is off).

    The panel's fingerprint (a hash of every field) is only computed when the registry has entries."""
    folder = registry_dir()
    if folder is None or not folder.is_dir() or not any(folder.glob("*.json")):
        return None
    entry = folder / f"{panel.fingerprint()}.json"
    try:
        directory = Path(json.loads(entry.read_text(encoding="utf-8"))["directory"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # nothing registered for this panel, or an unreadable entry (a fit rewrites it)
    return directory if ck.has_checkpoint(directory) else None


def named_folder(checkpoint) -> Path:
    """The folder a `stress_checkpoint` setting names; a StressError when it names none (a typo, a file): R3 would
    be off without a word. A folder that holds no model (yet: a fit in progress) is the provider's to judge."""
    path = Path(checkpoint)
    if not path.is_dir():
        what = "is a file, not a folder" if path.exists() else "does not exist"
        raise StressError(f"stress_checkpoint {checkpoint}: {what}; give the folder `alpha-gym stress fit` wrote, "
                          f"'{AUTO}' (the model fitted for this data, if any) or 'none' (R3 off)")
    return path


def resolve(checkpoint: str | None, panel) -> str | None:
    """A `stress_checkpoint` setting made explicit: "auto" -> the registered folder of `panel` or None;
    anything else unchanged, once it is found to name a folder (`named_folder`). Runs record the resolved
    value, so a model registered later never changes the rewards of a run that resumes (its settings would
    differ, and the resume is refused)."""
    if checkpoint != AUTO:
        if checkpoint is not None:
            named_folder(checkpoint)
        return checkpoint
    found = lookup(panel)
    return None if found is None else str(found)
