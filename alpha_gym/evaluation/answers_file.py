"""A file of answers to score on a window: its formulas, the brief of each, and the universe its run used.

`alpha-gym holdout-formulas --formulas FILE` reads a text file of formulas (one a line) or JSONL rows (the kept
answers of a comparison or an `alpha-gym eval` folder: "formula" or "answer", and a "brief_id"); a report
names the universe it scored (`universe_record`) and warns when the answers' run used another.
"""

from __future__ import annotations

import json
from pathlib import Path

from alpha_gym.errors import InputError


def read_formulas(path) -> list[str | None]:
    """Formulas from a file: JSONL objects with a "formula" (or "answer") key, or one formula per line.

    In a text file blank lines and lines starting with '#' are skipped.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    out: list[str | None] = []
    if path.suffix in (".jsonl", ".json"):
        for k, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if isinstance(row, str):
                out.append(row)
            elif isinstance(row, dict) and ("formula" in row or "answer" in row):
                out.append(row.get("formula", row.get("answer")))
            else:
                raise InputError(f"{path}:{k}: expected a string or an object with a 'formula' key")
        return out
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def read_briefs(path) -> list | None:
    """The brief of each formula `read_formulas(path)` returns: a JSONL row's "brief_id" where it names a seeded or
    fixed brief (kept probe answers carry one), else None; None for the whole file when no row names one."""
    from alpha_gym.tasks.sets import brief_by_id
    path = Path(path)
    if path.suffix not in (".jsonl", ".json"):
        return None
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    briefs = [brief_by_id(row.get("brief_id")) if isinstance(row, dict) else None for row in rows]
    return briefs if any(b is not None for b in briefs) else None


def universe_record(value, panel, data) -> dict:
    """How a report names the universe it scored: where it came from, how many tickers, a hash of them."""
    import hashlib
    if value is None:
        name = f"all tickers of {Path(data).name}"
    elif isinstance(value, list):
        name = ",".join(value[:8]) + (f",... ({len(value)} listed)" if len(value) > 8 else "")
    else:
        name = Path(value).name
    tickers = sorted(panel.tickers)
    return {"name": name, "size": len(tickers),
            "tickers_sha256": hashlib.sha256("\n".join(tickers).encode()).hexdigest()[:16]}


def answers_universe(formulas) -> tuple[Path, str | None] | None:
    """(settings.json, its "universe") of the run that wrote the answers file: beside it or one folder up
    (a comparison's `seed-S/RUNG.jsonl`); None when there is none to read."""
    for folder in (Path(formulas).resolve().parent, Path(formulas).resolve().parent.parent):
        path = folder / "settings.json"
        if not path.is_file():
            continue
        try:
            settings = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, OSError):
            return None
        if isinstance(settings, dict) and "universe" in settings:
            theirs = settings["universe"]
            return path, (str(theirs) if theirs is not None else None)
    return None


def universe_warning(universe: dict, value, formulas) -> str | None:
    """A warning when the answers' run was trained on another universe than this report scores."""
    found = answers_universe(formulas)
    if found is None:
        return None
    path, theirs = found
    ours = None if value is None else universe["name"]
    if (Path(theirs).name if theirs is not None else None) == ours:
        return None
    return (f"warning: the answers in {formulas} come from a run on universe {theirs or 'all tickers'} ({path}); "
            f"this report scores them on {universe['name']} ({universe['size']} tickers): pass --universe to match")
