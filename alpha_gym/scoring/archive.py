"""The novelty archive behind R8/R9: known books (daily P&L) and known ideas (bucketed canonical forms).

Policy (documented, deterministic):
- seeded with Alpha101-style formulas scored on the same panel; seeds are never evicted;
- `add` takes a valid answer when its bucketed form is new (and, with `admit_corr`
  below 1, its P&L correlates less than that with every book already there);
  answers are offered in the order given, so `Verifier.update_archive` sorts a
  group by canonical text first;
- bounded at `capacity` (1,024): when full, the OLDEST non-seed entry leaves, so
  the archive follows what a training run has recently been writing.

Saved atomically (write to a temporary file, fsync, rename) as one `.npz`;
`save(path, merge=True)` first unions the entries already in the file, under an
exclusive lock (PATH.lock), so two processes saving to one path lose no entries. Versioned with
the panel's fingerprint: loading against other data is refused, and a file
whose arrays disagree with each other, or whose books are not standardised P&L
(mean 0, mean square 1: rows of 1e308 or of zeros would score silently wrong), raises `ArchiveError`.
Every metadata field is type- and range-checked (`forms` and `texts` strings, `capacity` and `n_days`
integers and never booleans, `admit_corr` a number in (0, 1], CPCV scores and slice Sharpes finite and
within +-`SHARPE_BOUND`), and the file carries a SHA-256 of its content (the metadata and every array):
an edit that passes every other check (a formula swapped, a CPCV changed, a book's days shuffled, which
keeps it standardised) is refused because the content no longer matches its hash. Files written before
the hash (format 2) are refused too; `python -m alpha_gym.scoring.archive --rehash PATH` re-saves one you
trust (it must pass every other check).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import sys
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from alpha_gym.errors import InputError
from alpha_gym.jsonable import json_dumps

FORMAT_VERSION = 3  # 3: a content hash ("sha256" in the metadata)
#: The largest |CPCV score| or |slice Sharpe| a saved entry may hold. An annualised Sharpe is
#: mean / sd * sqrt(252); a real book's is a few units and a degenerate one's still far below this,
#: while 1e300 in a reference row would decide R2's ranks alone.
SHARPE_BOUND = 1e4


class ArchiveError(InputError):
    """An archive file that is corrupt, of another version, or computed on other data."""


def standardise(pnl: np.ndarray) -> np.ndarray:
    x = np.asarray(pnl, dtype=np.float64)
    sd = x.std()
    return (x - x.mean()) / sd if sd > 1e-15 else np.zeros_like(x)


class Archive:
    """Books and bucketed canonical forms, tied to one panel fingerprint."""

    def __init__(self, fingerprint: str, n_days: int, capacity: int = 1024, admit_corr: float = 1.0):
        if capacity < 1:
            raise ValueError("archive capacity must be at least 1")
        self.fingerprint = fingerprint
        self.n_days = n_days
        self.capacity = capacity
        self.admit_corr = admit_corr
        self.forms: list[str] = []
        self.texts: list[str] = []
        self.cpcv: list[float] = []
        self.seed: list[bool] = []
        self.in_sample: list[np.ndarray] = []
        self.out_of_sample: list[np.ndarray] = []
        self.added: list[int] = []   # wall-clock ns of admission: orders entries of two processes when merging
        self._z = np.zeros((0, n_days))

    def __len__(self) -> int:
        return len(self.forms)

    # ------------------------------------------------------------- queries
    def max_abs_corr(self, pnl: np.ndarray) -> float:
        """Largest |Pearson correlation| of a daily P&L with any archived book (0 when empty)."""
        return float(self.max_abs_corrs(standardise(pnl)[None, :])[0])

    def max_abs_corrs(self, z: np.ndarray) -> np.ndarray:
        """The same for (G, days) P&L rows already standardised (`standardise`), in one product."""
        if not len(self):
            return np.zeros(len(z))
        return np.abs(self._z @ z.T).max(axis=0) / self.n_days

    def abs_corrs(self, pnl: np.ndarray) -> np.ndarray:
        """|Pearson correlation| of a daily P&L with each archived book, in archive order ((0,) when empty)."""
        if not len(self):
            return np.zeros(0)
        return np.abs(self._z @ standardise(pnl)) / self.n_days

    def abs_corr_matrix(self, z: np.ndarray) -> np.ndarray:
        """|Pearson correlation| of each archived book (rows) with each standardised P&L row of `z` (columns):
        (entries, G); (0, G) when empty."""
        if not len(self):
            return np.zeros((0, len(z)))
        return np.abs(self._z @ z.T) / self.n_days

    def count_form(self, form: str) -> int:
        return self.forms.count(form)

    def sharpe_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(in-sample, out-of-sample) slice Sharpes of every entry, (n, 15) each."""
        if not len(self):
            return np.zeros((0, 15)), np.zeros((0, 15))
        return np.array(self.in_sample), np.array(self.out_of_sample)

    # ------------------------------------------------------------- updates
    def add(self, form: str, text: str, pnl: np.ndarray, cpcv: float, in_sample, out_of_sample,
            seed: bool = False) -> bool:
        """Offer one book; returns whether it was admitted (see the module's policy)."""
        if len(pnl) != self.n_days:
            raise ArchiveError(f"P&L of {len(pnl)} days does not fit an archive of {self.n_days}")
        if not seed and (form in self.forms or (self.admit_corr < 1 and self.max_abs_corr(pnl) >= self.admit_corr)):
            return False
        if len(self) >= self.capacity:
            oldest = next((i for i in range(len(self)) if not self.seed[i]), None)  # entries are in admission order
            if oldest is None:
                return False
            self._remove(oldest)
        self._append(form, text, float(cpcv), bool(seed), np.asarray(in_sample, dtype=np.float64),
                     np.asarray(out_of_sample, dtype=np.float64), standardise(pnl), time.time_ns())
        return True

    def _append(self, form, text, cpcv, seed, ins, oos, z, added) -> None:
        self.forms.append(form)
        self.texts.append(text)
        self.cpcv.append(cpcv)
        self.seed.append(seed)
        self.in_sample.append(ins)
        self.out_of_sample.append(oos)
        self.added.append(int(added))
        self._z = np.vstack([self._z, z[None, :]])

    def _remove(self, i: int) -> None:
        for seq in (self.forms, self.texts, self.cpcv, self.seed, self.in_sample, self.out_of_sample, self.added):
            del seq[i]
        self._z = np.delete(self._z, i, axis=0)

    def merge(self, other: "Archive") -> int:
        """Take every entry of `other` whose form is not here yet; keep admission order; trim the oldest
        non-seed entries beyond capacity. Returns how many entries were taken."""
        if other.fingerprint != self.fingerprint or other.n_days != self.n_days:
            raise ArchiveError("cannot merge archives computed on different data")
        new = [i for i in range(len(other)) if other.forms[i] not in set(self.forms)]
        for i in new:
            self._append(other.forms[i], other.texts[i], other.cpcv[i], other.seed[i], other.in_sample[i],
                         other.out_of_sample[i], other._z[i], other.added[i])
        if new:  # re-sort by admission time (seeds first: they are never evicted and came first)
            order = sorted(range(len(self)), key=lambda i: (not self.seed[i], self.added[i], self.forms[i]))
            self._reorder(order)
        while len(self) > self.capacity:
            oldest = next((i for i in range(len(self)) if not self.seed[i]), None)
            if oldest is None:
                break
            self._remove(oldest)
        return len(new)

    def _reorder(self, order: list[int]) -> None:
        for name in ("forms", "texts", "cpcv", "seed", "in_sample", "out_of_sample", "added"):
            seq = getattr(self, name)
            setattr(self, name, [seq[i] for i in order])
        self._z = self._z[order]

    def copy(self) -> "Archive":
        out = Archive(self.fingerprint, self.n_days, self.capacity, self.admit_corr)
        for i in range(len(self)):
            out._append(self.forms[i], self.texts[i], self.cpcv[i], self.seed[i], self.in_sample[i],
                        self.out_of_sample[i], self._z[i], self.added[i])
        return out

    # ----------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike, merge: bool = False) -> None:
        """Write atomically: a crash mid-save leaves the previous file intact.

        merge=True: first take the entries of the file already at `path` (written by another process)
        that are not here, so concurrent savers lose no entries (`merge`); this archive then holds the union.
        Only a merge takes the lock (PATH.lock): its read and write must not interleave with another's, while a
        plain save replaces the file in one rename whoever else writes (and leaves no lock file beside it).
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not merge:
            self._write(path)
            return
        with _locked(path):
            if path.exists():
                self.merge(Archive.load(path, self.fingerprint))
            self._write(path)

    def _write(self, path: Path) -> None:
        meta = {"format_version": FORMAT_VERSION, "fingerprint": self.fingerprint, "n_days": self.n_days,
                "capacity": self.capacity, "admit_corr": self.admit_corr, "forms": self.forms,
                "texts": self.texts, "cpcv": self.cpcv, "seed": self.seed, "added": self.added}
        arrays = {"z": self._z, "in_sample": np.array(self.in_sample).reshape(len(self), -1),
                  "out_of_sample": np.array(self.out_of_sample).reshape(len(self), -1)}
        meta["sha256"] = content_hash(meta, arrays)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, meta=np.array(json_dumps(meta)), **arrays)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike, fingerprint: str) -> "Archive":
        """Read an archive saved by `save`; refuse a corrupt or inconsistent file, or one computed on other data."""
        try:
            return cls._load(Path(path), fingerprint)
        except ArchiveError:
            raise
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as err:
            # a field of the wrong type (text where numbers belong, a number where a list does): not our file
            raise ArchiveError(f"{path} is inconsistent: a field has the wrong type ({type(err).__name__}: "
                               f"{str(err)[:200]})") from None

    @classmethod
    def _load(cls, path: Path, fingerprint: str) -> "Archive":
        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(str(data["meta"]))
                z, ins, oos = data["z"], data["in_sample"], data["out_of_sample"]
        except FileNotFoundError:
            raise
        except Exception as err:  # zipfile, JSON, missing keys: all mean the file is not usable
            raise ArchiveError(f"{path} is not a readable alpha-gym archive ({type(err).__name__}: {err})") from None
        if not isinstance(meta, dict) or meta.get("format_version") not in (2, FORMAT_VERSION):
            version = meta.get("format_version") if isinstance(meta, dict) else None
            raise ArchiveError(f"{path} has archive format {version!r}, expected {FORMAT_VERSION}")
        if meta.get("fingerprint") != fingerprint:
            raise ArchiveError(f"{path} was computed on other data (panel fingerprint {meta.get('fingerprint', '?')[:12]}"
                               f" != {fingerprint[:12]}); rebuild it for this panel")
        _check_consistent(path, meta, z, ins, oos)
        _check_books(path, meta, z)
        _check_hash(path, meta, {"z": z, "in_sample": ins, "out_of_sample": oos})
        n = len(meta["forms"])
        out = cls(fingerprint, meta["n_days"], meta["capacity"], meta["admit_corr"])
        out.forms, out.texts = list(meta["forms"]), list(meta["texts"])  # strings: checked above
        out.cpcv, out.seed = [float(c) for c in meta["cpcv"]], [bool(s) for s in meta["seed"]]
        out.added = [int(a) for a in meta["added"]]
        out.in_sample = [np.asarray(r, dtype=np.float64) for r in ins.reshape(n, -1)]
        out.out_of_sample = [np.asarray(r, dtype=np.float64) for r in oos.reshape(n, -1)]
        out._z = np.array(z, dtype=np.float64).reshape(n, meta["n_days"])
        return out


def _check_consistent(path, meta: dict, z: np.ndarray, ins: np.ndarray, oos: np.ndarray) -> None:
    """Every way the parts of a saved archive can disagree, as one ArchiveError naming the first found."""
    def fail(why: str):
        raise ArchiveError(f"{path} is inconsistent: {why}")

    keys = ("forms", "texts", "cpcv", "seed", "added", "n_days", "capacity", "admit_corr")
    missing = [k for k in keys if k not in meta]
    if missing:
        fail(f"missing fields {missing}")
    n, n_days, capacity = len(meta["forms"]), meta["n_days"], meta["capacity"]
    if not _integer(n_days) or n_days < 1 or not _integer(capacity) or capacity < 1:
        fail(f"n_days {n_days!r} and capacity {capacity!r} must be positive integers")
    if capacity > 1_000_000:  # VerifierConfig.archive_capacity's range
        fail(f"capacity {capacity} is above 1,000,000")
    admit = meta["admit_corr"]
    if isinstance(admit, bool) or not isinstance(admit, (int, float)) or not 0 < admit <= 1:  # NaN fails too
        fail(f"admit_corr {admit!r} must be a number in (0, 1]")
    for key in ("forms", "texts", "cpcv", "seed", "added"):
        if not isinstance(meta[key], list):
            fail(f"{key} must be a list, not {type(meta[key]).__name__}")
    for key in ("forms", "texts"):
        wrong = [i for i, v in enumerate(meta[key]) if not isinstance(v, str)]
        if wrong:
            fail(f"{key}[{wrong[0]}] = {meta[key][wrong[0]]!r} is not a string")
    wrong = [i for i, v in enumerate(meta["added"]) if not _integer(v) or v < 0]
    if wrong:
        fail(f"added[{wrong[0]}] = {meta['added'][wrong[0]]!r} is not a non-negative integer (a time in ns)")
    wrong = [i for i, v in enumerate(meta["cpcv"]) if isinstance(v, bool) or not isinstance(v, (int, float))]
    if wrong:
        fail(f"cpcv[{wrong[0]}] = {meta['cpcv'][wrong[0]]!r} is not a number")
    if any(len(meta[k]) != n for k in ("texts", "cpcv", "seed", "added")):
        fail(f"{n} forms but {[len(meta[k]) for k in ('texts', 'cpcv', 'seed', 'added')]} texts/cpcv/seed/added")
    if z.shape != (n, n_days):
        fail(f"{n} entries of {n_days} days but a P&L array of shape {z.shape}")
    if ins.shape[0] != n or oos.shape != ins.shape:
        fail(f"slice Sharpes of shapes {ins.shape} and {oos.shape} for {n} entries")
    if n > capacity and sum(not s for s in meta["seed"]) > 0:
        fail(f"{n} entries exceed the capacity {capacity}")
    learned = [f for f, s in zip(meta["forms"], meta["seed"]) if not s]
    if len(set(learned)) != len(learned) or set(learned) & {f for f, s in zip(meta["forms"], meta["seed"]) if s}:
        fail("a learned entry's canonical form appears twice")
    if not (np.isfinite(z).all() and np.isfinite(ins).all() and np.isfinite(oos).all()
            and all(isinstance(c, (int, float)) and np.isfinite(c) for c in meta["cpcv"])):  # NaN is written null
        fail("non-finite values")
    for name, values in (("cpcv", np.asarray(meta["cpcv"], dtype=np.float64)), ("in_sample", ins),
                         ("out_of_sample", oos)):
        if values.size and np.abs(values).max() > SHARPE_BOUND:
            fail(f"{name} holds {np.abs(values).max():.3g}, beyond +-{SHARPE_BOUND:g} (no book's Sharpe is near it)")


def _integer(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def content_hash(meta: dict, arrays: dict) -> str:
    """SHA-256 of an archive's metadata (canonical JSON, without its own "sha256") and its arrays (as float64)."""
    h = hashlib.sha256(json_dumps({k: v for k, v in meta.items() if k != "sha256"}, sort_keys=True).encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name], dtype=np.float64)
        h.update(f"{name}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _check_hash(path, meta: dict, arrays: dict) -> None:
    if meta.get("format_version") == 2:
        raise ArchiveError(f"{path} was written before archives carried a content hash (format 2), so an edit to "
                           "it cannot be told from the original; rebuild it, or re-save it if you trust it: python -m "
                           f"alpha_gym.scoring.archive --rehash {path}")
    if meta.get("sha256") != content_hash(meta, arrays):
        raise ArchiveError(f"{path} does not match its content hash: it was edited or damaged after it was saved "
                           "(a formula, a score or a book's days changed); rebuild it, or restore the saved copy")


#: how far a saved book may be from `standardise`'s output (mean 0, mean square 1); rounding is ~1e-15
BOOK_TOLERANCE = 1e-6


def _check_books(path, meta: dict, z: np.ndarray) -> None:
    """Each saved book is a standardised P&L (mean 0, mean square 1) and each seed flag a JSON boolean.

    Anything else would score silently wrong: rows of 1e308 overflow the correlations into NaN, and
    rows of zeros correlate with nothing, paying full novelty to every answer.
    """
    bad_flags = [i for i, s in enumerate(meta["seed"]) if not isinstance(s, bool)]
    if bad_flags:
        raise ArchiveError(f"{path} is inconsistent: seed flag {meta['seed'][bad_flags[0]]!r} of entry "
                           f"{bad_flags[0]} is not true or false")
    if not len(z):
        return
    with np.errstate(all="ignore"):  # a row of 1e308 overflows here: it fails the test below, as it should
        mean = np.abs(z.mean(axis=1))
        square = np.abs((z * z).mean(axis=1) - 1.0)
    off = np.flatnonzero(~((mean <= BOOK_TOLERANCE) & (square <= BOOK_TOLERANCE)))
    if len(off):
        raise ArchiveError(f"{path} is inconsistent: {len(off)} of {len(z)} books (first: entry {off[0]}, "
                           f"{meta['forms'][off[0]][:60]!r}) are not standardised P&L (mean 0, mean square 1)")


def rehash(path, fingerprint: str | None = None) -> Archive:
    """Re-save a format-2 archive (or any archive whose hash is off) with its content hash, after every other
    check: for a file you trust. Returns the archive."""
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            arrays = {k: data[k] for k in ("z", "in_sample", "out_of_sample")}
        if not isinstance(meta, dict):
            raise ValueError("its metadata is not a JSON object")
    except FileNotFoundError:
        raise
    except Exception as err:  # zipfile, JSON, missing keys
        raise ArchiveError(f"{path} is not a readable alpha-gym archive ({type(err).__name__}: {err})") from None
    meta = {**meta, "format_version": FORMAT_VERSION}
    meta["sha256"] = content_hash(meta, arrays)
    fixed = Path(str(path) + ".rehash.npz")
    np.savez(fixed, meta=np.array(json_dumps(meta)), **arrays)
    try:
        archive = Archive.load(fixed, fingerprint if fingerprint is not None else meta.get("fingerprint", ""))
        archive.save(path)
    finally:
        fixed.unlink(missing_ok=True)
    return archive


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m alpha_gym.scoring.archive",
                                 description="Re-save a trusted novelty archive with a content hash.")
    ap.add_argument("--rehash", required=True, metavar="PATH", help="an archive.npz (format 2, or its hash off)")
    args = ap.parse_args(argv)
    try:
        archive = rehash(args.rehash)
    except (ArchiveError, OSError) as err:
        print(f"archive: error: {err}", file=sys.stderr)
        return 2
    print(f"{args.rehash}: {len(archive)} entries re-saved with a content hash")
    return 0


@contextmanager
def _locked(path: Path):
    """An exclusive advisory lock on `path` + ".lock" for the duration of the block (POSIX flock)."""
    lock = path.with_name(path.name + ".lock")
    with open(lock, "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


if __name__ == "__main__":
    sys.exit(main())
