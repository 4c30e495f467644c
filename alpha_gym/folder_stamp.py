"""Stamp a folder with the settings its contents rest on, and refuse a run with other settings.

A run that writes into a folder a later run resumes or adds to (a training run, a comparison's --out,
a score-batch output, an `alpha-gym eval` folder) records what its contents depend on in a stamp file beside
them; a later run with other settings is refused, naming what differs, rather than blending two experiments in
one folder. A resumed checkpoint is checked against the settings it was trained with the same way (its stamp
is written with the checkpoint). What counts as a difference is the caller's rule (a TOML settings file with
settings added since at their default, a comparison's stamp with the start model's identity, a sidecar's input
and panel, an eval folder's briefs compared by id): `claim_stamp` is the part they share, read the stamp, ask
the rule, write the new stamp whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable


def claim_stamp(path: str | Path, text: str | None, refusal: Callable[[Path], Exception | None], *, check: bool = True,
                replace: bool = True) -> None:
    """Refuse the folder when the stamp at `path` names other settings; else (re)write it as `text`.

    `refusal(path)` is the caller's rule, reading the stamp there as it was written: the error to raise (naming
    what differs, and what to do), or None when the stamp allows this run; it raises its own error for a
    damaged stamp. `check=False`
    skips the comparison (a fresh run replaces what a folder held); `replace=False` leaves an existing stamp
    as it is; `text=None` only checks (a stamp written elsewhere, a checkpoint's). The stamp is written by an
    atomic replace: a stopped run leaves the old stamp or the new one.
    """
    path = Path(path)
    if check and path.exists():
        error = refusal(path)
        if error is not None:
            raise error
    if text is not None and (replace or not path.exists()):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
