"""Verified brief -> formula pairs for a supervised warm start.

A small model rarely writes a valid `<alpha>` answer at first, so RL has no
signal. The warm start teaches the answer format and the DSL on pairs where
every formula was drawn from the grammar, scored by the verifier, and kept
only when it is valid, trades a reasonable book and satisfies its brief's
checkable constraints:

1. draw a pool of random formulas (`alpha_gym.language.sample`);
2. trade each once on the training panel; keep those with turnover in
   [min_turnover, max_turnover] and CPCV >= min_cpcv;
3. for each brief, take the pool formulas that satisfy the largest share of its
   constraints (at least `min_compliance`), best CPCV first, up to `per_brief`,
   so the pairs teach both the contract and, as far as the pool allows, the brief.

Rows are conversational prompt/completion records that `datasets` loads and
TRL's `SFTTrainer` trains on (the loss covers the completion only).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from alpha_gym.errors import InputError
from alpha_gym.jsonable import json_dumps
from alpha_gym.language.sample import random_formula
from alpha_gym.tasks.briefs import Brief
from alpha_gym.tasks.compliance import check_compliance
from alpha_gym.tasks.prompts import TaskPrompts


def formula_pool(verifier, n: int, seed: int = 0, min_cpcv: float = -0.5, min_turnover: float = 0.03,
                 max_turnover: float = 0.5, progress: bool = False) -> list[dict]:
    """`n` random formulas traded on the verifier's panel, filtered to reasonable books (sorted by CPCV, best first)."""
    rng = np.random.default_rng(seed)
    seen: set[str] = set()
    kept = []
    iterator = range(n)
    if progress:
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
            kept.append({"formula": ev.text, "node": ev.node, "cpcv": ev.cpcv, "turnover": ev.turnover})
    kept.sort(key=lambda r: (-r["cpcv"], r["formula"]))
    return kept


def pair_rows(briefs: Sequence[Brief], pool: list[dict], per_brief: int = 2,
              min_compliance: float = 0.5, prompts: TaskPrompts | None = None) -> list[dict]:
    """For each brief, the most compliant pool formulas (then best CPCV) as prompt/completion rows; the prompt is
    `prompts`' (pass the verifier's: `TaskPrompts(limits=verifier.config.limits)`; None: the write task under
    the default limits), brief i's the Gym env's after `reset(seed=prompt_seed(i))`."""
    rows = []
    for brief, prompt in zip(briefs, (prompts or TaskPrompts()).prompts(briefs)):
        ranked = []
        for k, item in enumerate(pool):  # the pool is sorted best CPCV first, so k breaks ties by CPCV
            checks = check_compliance(brief, item["node"]) if brief.constraints else {}
            share = sum(checks.values()) / len(checks) if checks else 1.0
            if share >= min_compliance:
                ranked.append((-share, k, item))
        for neg_share, _, item in sorted(ranked, key=lambda r: r[:2])[:per_brief]:
            rows.append({
                "prompt": [{"role": "user", "content": prompt}],
                "completion": [{"role": "assistant", "content": f"<alpha>{item['formula']}</alpha>"}],
                "brief_id": brief.id, "family": brief.family, "formula": item["formula"],
                "cpcv": float(item["cpcv"]), "turnover": float(item["turnover"]), "compliance": -neg_share,
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


def build_sft_dataset(verifier, briefs: Sequence[Brief], out: str | Path, pool_size: int = 4000,
                      per_brief: int = 2, seed: int = 0, min_compliance: float = 0.5,
                      progress: bool = False, prompts: TaskPrompts | None = None) -> dict:
    """Pool -> pairs -> JSONL. Returns a summary (rows, briefs covered, mean compliance, pool kept). `prompts`:
    the task's (`alpha_gym.search.task_prompts.task_prompts(task, verifier)`); None: the write task under
    the verifier's limits."""
    pool = formula_pool(verifier, pool_size, seed=seed, progress=progress)
    rows = pair_rows(briefs, pool, per_brief, min_compliance, prompts or TaskPrompts(limits=verifier.config.limits))
    save_jsonl(rows, out)
    covered = len({r["brief_id"] for r in rows})
    mean_compliance = float(np.mean([r["compliance"] for r in rows])) if rows else 0.0
    return {"rows": len(rows), "briefs": len(briefs), "briefs_covered": covered,
            "mean_compliance": round(mean_compliance, 3), "pool_kept": len(pool),
            "pool_drawn": pool_size, "path": str(out)}
