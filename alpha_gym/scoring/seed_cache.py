"""The seed books of the novelty archive, cached on disk so a new process pays for them once.

Seeding evaluates the 82 Alpha101 seed formulas on the verifier's panel: 4 s on us46, 30-45 s on
496 stocks. The result depends only on the panel, the verifier's configuration and the code that
computes books, so it is stored under a key hashing all three:

- the panel's fingerprint (dates, tickers, every field);
- `repr(config)` (every threshold and limit; any new config field changes it);
- the source of the modules that turn a formula into a seed book (language, book, panel, CPCV,
  seeds, the verifier, its config and the archive), the Alpha101 table, and numpy's version.

A changed input is a new key, so a stale file is never read. Files are written atomically
(temporary file, then rename); one that cannot be read is ignored, recomputed and rewritten.
The folder is `$ALPHA_GYM_CACHE` (default `$XDG_CACHE_HOME/alpha_gym` or `~/.cache/alpha_gym`);
`ALPHA_GYM_CACHE=off` turns the cache off.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from alpha_gym.jsonable import json_dumps
from alpha_gym.user_cache import cache_dir

log = logging.getLogger("alpha_gym")

FORMAT_VERSION = 1
#: Seed files kept in the cache folder; older ones (other panels, configs or code versions) are removed.
KEEP_FILES = 16
_PACKAGE = Path(__file__).resolve().parents[1]
#: Sources whose code decides a seed book's numbers.
_CODE = ("language", "book", "market/panel.py", "scoring/cpcv.py", "scoring/seeds.py", "scoring/seed_cache.py",
         "scoring/verifier.py", "scoring/price_level.py", "scoring/live_terms.py", "scoring/config.py",
         "scoring/archive.py", "alpha101")


@dataclass(frozen=True)
class SeedBook:
    """What the archive keeps of one seed formula."""

    form: str
    text: str
    net: np.ndarray
    cpcv: float
    train_sharpes: np.ndarray
    test_sharpes: np.ndarray


@lru_cache(maxsize=1)
def code_digest() -> str:
    """SHA-256 of the source files that compute seed books (and numpy's version)."""
    h = hashlib.sha256(np.__version__.encode())
    for part in _CODE:
        path = _PACKAGE / part
        files = sorted(path.rglob("*")) if path.is_dir() else [path]
        for f in files:
            if f.is_file() and f.suffix in (".py", ".json", ".lark"):
                h.update(str(f.relative_to(_PACKAGE)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()


def seed_key(fingerprint: str, config) -> str:
    """The cache key of a panel's seed books under a configuration."""
    h = hashlib.sha256(f"v{FORMAT_VERSION}\n{fingerprint}\n{config!r}\n{code_digest()}".encode())
    return h.hexdigest()[:32]


def compute_seed_books(verifier, formulas) -> list[SeedBook]:
    """Evaluate the seed formulas; keep those that would score valid (`Verifier.valid_book`: they parse, trade
    at least the invalid-turnover floor, are not rounding noise nor a static price-level ranking)."""
    out = []
    for formula in formulas:
        ev = verifier.valid_book(formula)  # every validity rule; None for an invalid one, skipped
        if ev is not None:
            out.append(SeedBook(ev.form, ev.text, ev.net, ev.cpcv, ev.train_sharpes, ev.test_sharpes))
    return out


def _save(path: Path, books: list[SeedBook]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = json_dumps({"version": FORMAT_VERSION, "forms": [b.form for b in books], "texts": [b.text for b in books]})
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, meta=np.array(meta), net=np.array([b.net for b in books]),
                     cpcv=np.array([b.cpcv for b in books], dtype=np.float64),
                     train=np.array([b.train_sharpes for b in books]), test=np.array([b.test_sharpes for b in books]))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _load(path: Path, n_days: int) -> list[SeedBook] | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            net, cpcv, train, test = z["net"], z["cpcv"], z["train"], z["test"]
        if meta["version"] != FORMAT_VERSION or len(meta["forms"]) != len(net):
            raise ValueError("inconsistent seed cache file")
        if len(net) and net.shape[1] != n_days:
            raise ValueError(f"seed books of {net.shape[1]} days, expected {n_days}")
        return [SeedBook(f, t, net[i], float(cpcv[i]), train[i], test[i])
                for i, (f, t) in enumerate(zip(meta["forms"], meta["texts"]))]
    except FileNotFoundError:
        return None
    except Exception as err:  # a damaged file is a cache miss, never an error
        log.warning("ignoring unreadable seed cache %s: %r", path, err)
        return None


def seed_books(verifier, formulas) -> list[SeedBook]:
    """The seed books of `verifier`'s panel: from the disk cache, else computed (and cached)."""
    folder = cache_dir()
    if folder is None:
        return compute_seed_books(verifier, formulas)
    key = seed_key(verifier.panel.fingerprint(), verifier.config)
    path = folder / f"seeds-{key}.npz"
    n_days = len(verifier._returns)
    books = _load(path, n_days)
    if books is None:
        books = compute_seed_books(verifier, formulas)
        try:
            _save(path, books)
            _prune(folder)
        except OSError as err:  # a read-only or full disk only costs the next process the recompute
            log.warning("could not write seed cache %s: %r", path, err)
    return books


def _prune(folder: Path, keep: int = KEEP_FILES) -> None:
    """Remove all but the `keep` most recently written seed files (each code change makes new keys)."""
    files = sorted(folder.glob("seeds-*.npz"), key=lambda f: f.stat().st_mtime, reverse=True)
    for f in files[keep:]:
        f.unlink(missing_ok=True)
