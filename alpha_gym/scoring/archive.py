"""The novelty archive behind R8/R9: known books (daily P&L) and known ideas (bucketed canonical forms).

Policy (documented, deterministic):
- seeded with Alpha101-style formulas scored on the same panel; seeds are never evicted;
- `add` takes a valid answer when its bucketed form is new AND its P&L correlates
  below `admit_corr` (0.9) with every book already there; answers are offered in
  the order given, so `add_group` sorts a group by canonical text first;
- bounded at `capacity` (1,024): when full, the non-seed entry with the lowest
  CPCV leaves (a weaker version of an idea makes room for a stronger one).

Saved atomically (write to a temporary file, fsync, rename) as one `.npz`, and
versioned with the panel's fingerprint: loading against other data is refused.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np

FORMAT_VERSION = 1


class ArchiveError(ValueError):
    """An archive file that is corrupt, of another version, or computed on other data."""


def standardise(pnl: np.ndarray) -> np.ndarray:
    x = np.asarray(pnl, dtype=np.float64)
    sd = x.std()
    return (x - x.mean()) / sd if sd > 1e-15 else np.zeros_like(x)


class Archive:
    """Books and bucketed canonical forms, tied to one panel fingerprint."""

    def __init__(self, fingerprint: str, n_days: int, capacity: int = 1024, admit_corr: float = 0.9):
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
        if not seed and (form in self.forms or self.max_abs_corr(pnl) >= self.admit_corr):
            return False
        if len(self) >= self.capacity:
            candidates = [i for i in range(len(self)) if not self.seed[i]]
            if not candidates:
                return False
            worst = min(candidates, key=lambda i: (self.cpcv[i], self.forms[i]))
            if not seed and self.cpcv[worst] >= cpcv:
                return False
            self._remove(worst)
        self.forms.append(form)
        self.texts.append(text)
        self.cpcv.append(float(cpcv))
        self.seed.append(bool(seed))
        self.in_sample.append(np.asarray(in_sample, dtype=np.float64))
        self.out_of_sample.append(np.asarray(out_of_sample, dtype=np.float64))
        self._z = np.vstack([self._z, standardise(pnl)[None, :]])
        return True

    def _remove(self, i: int) -> None:
        for seq in (self.forms, self.texts, self.cpcv, self.seed, self.in_sample, self.out_of_sample):
            del seq[i]
        self._z = np.delete(self._z, i, axis=0)

    # ----------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike) -> None:
        """Write atomically: a crash mid-save leaves the previous file intact."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {"format_version": FORMAT_VERSION, "fingerprint": self.fingerprint, "n_days": self.n_days,
                "capacity": self.capacity, "admit_corr": self.admit_corr, "forms": self.forms,
                "texts": self.texts, "cpcv": self.cpcv, "seed": self.seed}
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, meta=np.array(json.dumps(meta)), z=self._z,
                         in_sample=np.array(self.in_sample).reshape(len(self), -1),
                         out_of_sample=np.array(self.out_of_sample).reshape(len(self), -1))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike, fingerprint: str) -> "Archive":
        """Read an archive saved by `save`; refuse a corrupt file or one computed on other data."""
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(str(data["meta"]))
                z, ins, oos = data["z"], data["in_sample"], data["out_of_sample"]
        except FileNotFoundError:
            raise
        except Exception as err:  # zipfile, JSON, missing keys: all mean the file is not usable
            raise ArchiveError(f"{path} is not a readable alpha-gym archive ({type(err).__name__}: {err})") from None
        if meta.get("format_version") != FORMAT_VERSION:
            raise ArchiveError(f"{path} has archive format {meta.get('format_version')}, expected {FORMAT_VERSION}")
        if meta.get("fingerprint") != fingerprint:
            raise ArchiveError(f"{path} was computed on other data (panel fingerprint {meta.get('fingerprint', '?')[:12]}"
                               f" != {fingerprint[:12]}); rebuild it for this panel")
        n = len(meta["forms"])
        if z.shape != (n, meta["n_days"]) or len(meta["texts"]) != n or len(meta["cpcv"]) != n:
            raise ArchiveError(f"{path} is inconsistent: {n} entries but arrays of shape {z.shape}")
        out = cls(fingerprint, meta["n_days"], meta["capacity"], meta["admit_corr"])
        out.forms, out.texts = list(meta["forms"]), list(meta["texts"])
        out.cpcv, out.seed = [float(c) for c in meta["cpcv"]], [bool(s) for s in meta["seed"]]
        out.in_sample, out.out_of_sample = list(ins), list(oos)
        out._z = np.array(z, dtype=np.float64).reshape(n, meta["n_days"])
        return out
