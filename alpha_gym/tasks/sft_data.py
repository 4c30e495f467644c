"""Verified brief -> formula pairs for a supervised warm start.

A small model rarely writes a valid `<alpha>` answer at first, so RL has no
signal. The warm start teaches the answer format, the DSL and the brief on pairs
where every formula meets every check the brief channel (R13) pays for, on the
formula's live tree, passes every validity rule of the verifier and has train
CPCV above 0:

1. optionally draw a pool of random formulas (`alpha_gym.language.sample`) and
   trade each once on the training panel; keep those with turnover in
   [min_turnover, max_turnover] and CPCV >= min_cpcv;
2. for each brief, a search (`alpha_gym.tasks.template_search`): the pool
   formulas that meet the brief first, then formulas composed from the parts
   the brief asks for, up to `per_brief` distinct ones, none answering more than
   `max_briefs_per_formula` briefs, so the pairs show several compliant answers
   per brief and no one formula for many briefs;
3. the summary says how many briefs got a formula and, per reason, why the
   others did not (`template_search.REASONS`).

Rows are conversational prompt/completion records that `datasets` loads and
TRL's `SFTTrainer` trains on (the loss covers the completion only).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from alpha_gym.errors import InputError
from alpha_gym.jsonable import json_dumps
from alpha_gym.language.sample import random_formula
from alpha_gym.tasks.briefs import Brief
from alpha_gym.tasks.template_search import SearchBounds, search_briefs
from alpha_gym.tasks.prompts import TaskPrompts


def formula_pool(verifier, n: int, seed: int = 0, min_cpcv: float = -0.5, min_turnover: float = 0.03,
                 max_turnover: float = 0.5, progress: bool = False) -> list[dict]:
    """`n` random formulas traded on the verifier's panel, filtered to reasonable books (sorted by CPCV, best first)."""
    rng = np.random.default_rng(seed)
    seen: set[str] = set()
    kept = []
    iterator = range(n)
    if progress and n:  # no bar for an empty pool (the default)
        try:
            from tqdm import tqdm
            iterator = tqdm(iterator, desc="formula pool", unit="formula")
        except ImportError:
            pass
    for _ in iterator:
        text = random_formula(rng, depth=int(rng.integers(2, 5)))
        if text in seen:
            continue
        seen.add(text)
        ev = verifier.valid_book(text)  # every validity rule (turnover, rounding, price level); None: skipped
        if ev is None:
            continue
        if min_turnover <= ev.turnover <= max_turnover and ev.cpcv >= min_cpcv:
            kept.append({"formula": ev.text, "node": ev.node, "live": ev.live, "cpcv": ev.cpcv,
                         "turnover": ev.turnover})
    kept.sort(key=lambda r: (-r["cpcv"], r["formula"]))
    return kept


def pair_rows(briefs: Sequence[Brief], found: Mapping[str, Sequence[dict]],
              prompts: TaskPrompts | None = None) -> list[dict]:
    """For each brief, its searched formulas (`found[brief.id]`: `template_search.search_briefs`' items, in
    order) as prompt/completion rows; the prompt is
    `prompts`' (pass the verifier's: `TaskPrompts(limits=verifier.config.limits)`; None: the write task under
    the default limits), brief i's the Gym env's after `reset(seed=prompt_seed(i))`."""
    rows = []
    for brief, prompt in zip(briefs, (prompts or TaskPrompts()).prompts(briefs)):
        for item in found.get(brief.id, ()):
            rows.append({
                "prompt": [{"role": "user", "content": prompt}],
                "completion": [{"role": "assistant", "content": f"<alpha>{item['formula']}</alpha>"}],
                "brief_id": brief.id, "family": brief.family, "formula": item["formula"],
                "cpcv": float(item["cpcv"]), "turnover": float(item["turnover"]),
                "compliance": float(item["compliance"]), "checks": int(item["checks"]),
            })
    return rows


def check_out_file(path: str | Path) -> Path:
    """`path` as a Path when a file can be written there (it is a plain file, or nothing yet under folders);
    InputError when it is a folder, /dev/null, a FIFO, or lies under a file."""
    path = Path(path)
    for p in (path, *path.parents):
        if p.exists():
            if not (p.is_file() if p == path else p.is_dir()):
                raise InputError(f"{path}" + ("" if p == path else f": {p}") + f" is not a "
                                 f"{'plain file' if p == path else 'folder'}: the pairs are written to a file (a new "
                                 "one, or one they replace)")
            break
    return path


def save_jsonl(rows: Iterable[dict], path: str | Path) -> Path:
    """One JSON object per line; `datasets.load_dataset("json", data_files=path)` reads it.

    Written to PATH.tmp, then moved onto `path` (a stopped write leaves the old file or the new one). InputError,
    before anything is written, for a `path` that exists and is not a plain file (a folder, /dev/null, a FIFO)
    or lies under a file; a write that fails removes its temporary file."""
    path = check_out_file(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        with open(tmp, "w") as fh:
            for row in rows:
                fh.write(json_dumps(row) + "\n")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def build_sft_dataset(verifier, briefs: Sequence[Brief], out: str | Path, pool_size: int = 0,
                      per_brief: int = 3, seed: int = 0, max_briefs_per_formula: int = 3,
                      progress: bool = False, prompts: TaskPrompts | None = None,
                      bounds: SearchBounds | None = None) -> dict:
    """Pool -> search per brief -> pairs -> JSONL. Returns a summary (`search_summary`). `bounds` overrides
    `per_brief` and `max_briefs_per_formula` (and sets the search's draw and verifier-call budgets). `prompts`:
    the task's (`alpha_gym.search.task_prompts.task_prompts(task, verifier)`); None: the write task under
    the verifier's limits."""
    pool = formula_pool(verifier, pool_size, seed=seed, progress=progress)
    bounds = bounds or SearchBounds(per_brief=per_brief, max_briefs=max_briefs_per_formula)
    results, uses = search_briefs(verifier, briefs, bounds, seed=seed, pool=pool,
                                  progress=_say if progress else None)
    rows = pair_rows(briefs, {r.brief_id: r.found for r in results},
                     prompts or TaskPrompts(limits=verifier.config.limits))
    save_jsonl(rows, out)
    return {**search_summary(results, uses, bounds), "rows": len(rows), "pool_kept": len(pool),
            "pool_drawn": pool_size, "path": str(out)}


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def search_summary(results, uses: Mapping[str, int], bounds: SearchBounds) -> dict:
    """How many briefs got a formula (and `per_brief` of them), why the others did not (reason -> briefs; those
    short of `per_brief` under `short`), the cap and how many briefs the most shared formula answers."""
    left = Counter(r.reason for r in results if not r.found)
    short = Counter(r.reason for r in results if r.found and r.reason)
    return {"briefs": len(results), "briefs_covered": sum(bool(r.found) for r in results),
            "briefs_full": sum(len(r.found) >= bounds.per_brief for r in results), "per_brief": bounds.per_brief,
            "left": dict(sorted(left.items())), "short": dict(sorted(short.items())),
            "distinct_formulas": len(uses), "max_briefs_per_formula": bounds.max_briefs,
            "most_briefs_one_formula": max(uses.values(), default=0)}
