"""Checkpoint files of a world model (no torch here): the JSON manifest, hashes, the data check.

A checkpoint directory holds

* ``model.safetensors``: the weights (online and EMA target encoders,
  predictor, geometry head, decoder);
* ``manifest.json``: format version, the data the model was fitted on (its
  `Panel.fingerprint()`, shape, span, source and how to reload it), the
  config, standardisation and calibration constants, the gate values and
  verdicts, the scenario checks and which scenarios are enabled, the
  validation AUCs when run, the fit's time and steps, library versions, and
  the SHA-256 of the weights file;
* ``partial.safetensors`` + ``partial.json`` while a fit is in progress
  (removed when it completes; a new `fit` into the directory resumes from them);
* ``scenarios/<key>.npz`` (+ ``.json``): the cached scenario panels, keyed by
  a hash of (panel fingerprint, weights hash, scenario config).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from alpha_gym.jsonable import json_dumps
from alpha_gym.stress.config import StressError

FORMAT_VERSION = 1
MODEL_FILE = "model.safetensors"
MANIFEST_FILE = "manifest.json"
PARTIAL_FILE = "partial.safetensors"
PARTIAL_JSON = "partial.json"
SCENARIO_DIR = "scenarios"


#: The world-model identity a score carries when R3 is off (no model, failed gates, every scenario off).
OFF = "off"


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _stat_key(path: Path) -> tuple:
    st = path.stat()
    return str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino


@functools.lru_cache(maxsize=32)
def _sha256_of(key: tuple) -> str:
    return file_sha256(key[0])


def cached_sha256(path: str | os.PathLike) -> str:
    """`file_sha256`, computed once per file version (path, size, mtime, inode): every verifier of a
    process shares one hash of the weights, and a rewritten file is hashed again."""
    return _sha256_of(_stat_key(Path(path)))


def identity(directory, model_sha256: str) -> str:
    """The world model's content identity: "sha256:" and 16 hex digits of a hash over the manifest's
    bytes and the weights' sha256 (which `check_weights` verified against the file). Two folders
    holding the same files have the same identity; any edit to either file changes it."""
    h = hashlib.sha256((Path(directory) / MANIFEST_FILE).read_bytes())
    h.update(b"\0" + str(model_sha256).encode())
    return "sha256:" + h.hexdigest()[:16]


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path, obj) -> None:
    atomic_write_text(path, json_dumps(obj, indent=2, sort_keys=False) + "\n")


def has_checkpoint(directory) -> bool:
    d = Path(directory)
    return (d / MANIFEST_FILE).is_file() and (d / MODEL_FILE).is_file()


def read_manifest(directory) -> dict[str, Any]:
    d = Path(directory)
    path = d / MANIFEST_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no world model at {d} (no {MANIFEST_FILE}); fit one with `alpha-gym stress fit`")
    manifest = json.loads(path.read_text(encoding="utf-8"))
    if manifest.get("format") != FORMAT_VERSION:
        raise StressError(f"{path} has checkpoint format {manifest.get('format')!r}; this alpha-gym reads "
                          f"format {FORMAT_VERSION}")
    return manifest


def describe_data(info: dict) -> str:
    return (f"{info.get('source', '?')} ({info.get('n_stocks')} stocks x {info.get('n_days')} sessions, "
            f"{info.get('first')}..{info.get('last')}, fingerprint {str(info.get('fingerprint'))[:12]})")


def check_data(manifest: dict, panel, directory="the checkpoint") -> None:
    """Refuse a panel other than the one the model was fitted on."""
    info = manifest["data"]
    if info["fingerprint"] != panel.fingerprint():
        here = {"source": panel.source, "n_stocks": panel.n_stocks, "n_days": panel.n_days,
                "first": str(panel.dates[0]), "last": str(panel.dates[-1]), "fingerprint": panel.fingerprint()}
        raise StressError(f"the world model in {directory} was fitted on {describe_data(info)}, not on this panel, "
                          f"{describe_data(here)}; a world model is tied to its data: fit one on this panel "
                          f"with `alpha-gym stress fit`")


def check_weights(manifest: dict, directory) -> None:
    path = Path(directory) / MODEL_FILE
    if not path.is_file():
        raise StressError(f"{directory} has a manifest but no {MODEL_FILE}")
    digest = cached_sha256(path)
    if digest != manifest.get("model_sha256"):
        raise StressError(f"{path} does not match its manifest (sha256 {digest[:12]} != "
                          f"{str(manifest.get('model_sha256'))[:12]}): the checkpoint is corrupt or was edited")


def versions() -> dict[str, str]:
    import platform

    import numpy as np

    from alpha_gym._version import __version__
    out = {"alpha_gym": __version__, "numpy": np.__version__, "python": platform.python_version()}
    for name in ("torch", "safetensors"):
        try:
            mod = __import__(name)
            out[name] = getattr(mod, "__version__", "?")
        except ImportError:  # pragma: no cover
            out[name] = "missing"
    return out
