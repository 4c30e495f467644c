"""Reading a checkpoint's files for --resume: a damaged or truncated file is a `CheckpointError`, not a traceback.

A run killed while it wrote a checkpoint, a full disk or a partial copy leaves a file that
torch or safetensors cannot read; every reader here names the file and says what to do
(delete that checkpoint and resume from the one before, or start afresh). A missing file
stays FileNotFoundError.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from alpha_gym.errors import InputError


class CheckpointError(InputError):
    """A checkpoint file that cannot be read (what is wrong, which file, and what to do instead)."""


def damaged(path, err: BaseException) -> CheckpointError:
    """The error for an unreadable checkpoint file `path` (the reader library's exception `err`)."""
    path = Path(path)
    return CheckpointError(f"{path} is truncated or damaged ({type(err).__name__}: {str(err)[:200]}); delete "
                           f"{path.parent} to resume from an earlier checkpoint, or start afresh without --resume")


def load_tensors(path, device: str = "cpu") -> dict:
    """safetensors.torch.load_file, with a damaged file as CheckpointError."""
    from safetensors.torch import load_file
    _exists(path)
    try:
        return load_file(str(path), device=device)
    except Exception as err:  # SafetensorError, OSError, ...: the file cannot be used either way
        raise damaged(path, err) from None


def load_state(path, keys: tuple[str, ...] = ()) -> dict:
    """torch.load of our own trainer state (RNG states are tuples: weights_only=False), checked to be a dict
    holding `keys`; a damaged or foreign file is CheckpointError."""
    import torch
    _exists(path)
    try:
        state = torch.load(path, weights_only=False, map_location="cpu")
    except Exception as err:  # zip, pickle and EOF errors: torch has no single type for "truncated"
        raise damaged(path, err) from None
    missing = [k for k in keys if not isinstance(state, dict) or k not in state]
    if missing:
        raise CheckpointError(f"{path} is not an alpha-gym trainer state (no {missing}); delete {Path(path).parent} "
                              "to resume from an earlier checkpoint, or start afresh without --resume")
    return state


def check_folder(folder) -> None:
    """Read-check every file a Hugging Face Trainer resumes from (safetensors, torch zips, JSON) before it does,
    so that a damaged one is a CheckpointError naming it rather than a traceback from deep inside the Trainer."""
    from safetensors import safe_open
    for path in sorted(Path(folder).iterdir()):
        try:
            if path.suffix == ".safetensors":
                with safe_open(str(path), framework="pt") as fh:  # checks the header against the file's size
                    fh.keys()
            elif path.suffix in (".pt", ".pth", ".bin") and zipfile.is_zipfile(path):  # torch.save's format
                with zipfile.ZipFile(path) as z:
                    bad = z.testzip()  # every member's CRC
                if bad is not None:
                    raise ValueError(f"member {bad} fails its CRC check")
            elif path.suffix in (".pt", ".pth"):  # a truncated zip has lost its directory, at the end
                raise ValueError("not a torch zip archive (truncated?)")
            elif path.suffix == ".json":
                json.loads(path.read_text(encoding="utf-8"))
        except Exception as err:
            raise damaged(path, err) from None


def _exists(path) -> None:
    if not Path(path).is_file():
        raise FileNotFoundError(f"checkpoint file not found: {path}")
