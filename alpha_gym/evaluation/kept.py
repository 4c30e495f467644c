"""The kept files of one comparison run, for rungs that train no model (the controls).

A rung of the trainer comparison keeps, under its results folder (`alpha-gym compare`, trainers/compare/):

    seed-S/NAME.jsonl   one line per probe brief: brief_id, step, answer (raw), formula, train_cpcv, train_valid
    seed-S/NAME.json    that run's numbers: rung, recipe, prompts, seed, n_prompts, train_seconds,
                        selected_step, checkpoints (one row per scored checkpoint), config, the training
                        means (clipped_share, ratio_mean, valid_share, nonzero_adv_share, kl_last), steps

A control writes the same files with the same keys, so `--report-only`, the intervals and
`alpha-gym holdout-formulas` read it like any rung; its own extra keys (e.g. `complies`, `verifier_calls`)
sit beside them. The training means a control has no value for are None. Nothing here needs torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from alpha_gym.jsonable import json_dumps

#: The training means of a rung's numbers; a control that trains nothing writes them as None.
TRAINING_MEANS = ("clipped_share", "ratio_mean", "valid_share", "nonzero_adv_share", "kl_last")


def answer_row(brief_id: str, step: int, answer: str, formula: str | None, train_cpcv: float | None,
               **extra) -> dict[str, Any]:
    """One kept probe answer, keyed as a rung's (`train_valid`: the train verifier found it valid)."""
    return {"brief_id": brief_id, "step": int(step), "answer": answer, "formula": formula,
            "train_cpcv": None if train_cpcv is None else float(train_cpcv), "train_valid": train_cpcv is not None,
            **extra}


def probe_scores(verifier, formulas: Sequence[str | None]) -> list[float | None]:
    """Train-window CPCV (the R1 channel) of each probe formula, None where invalid: as a rung's probe scoring.

    R1 depends on the formula and the panel only (not on the archive), so any fork of the verifier agrees.
    """
    out = []
    for f in formulas:
        s = verifier.score_formula(f) if f is not None else None
        out.append(s.channels["cpcv"] if s is not None and s.valid else None)
    return out


def checkpoint_row(step: int, train_cpcv: Sequence[float | None], train_panel, holdout_panel, verifier,
                   formulas: Sequence[str | None], run_dir: Path | None, label: str) -> dict[str, Any]:
    """The answers' row of a run's `checkpoints`: train CPCV (what selects), pseudo-holdout (reported only).

    Writes `run_dir/holdout-step-{step}.json` for `alpha-gym report` when run_dir is given, as a rung does.
    """
    from alpha_gym.evaluation.holdout import evaluate_holdout
    report = evaluate_holdout(list(formulas), train_panel, holdout_panel, train_verifier=verifier, label=label,
                              step=step)
    if run_dir is not None:
        report.save(run_dir, name=f"holdout-step-{step}.json")
    s = report.summary()
    valid = [c for c in train_cpcv if c is not None]
    return {"step": int(step), "train_cpcv": float(np.mean(valid)) if valid else None, "train_valid": len(valid),
            "holdout_score": s["mean_score"], "valid": s["n_valid"], "n": s["n_answers"], "families": s["n_families"],
            "book_return": report.book.total_return, "book_sharpe": report.book.sharpe}


def control_numbers(name: str, recipe: str, seed: int, seconds: float, step: int, checkpoint: dict, config: dict,
                    steps: int, **extra) -> dict[str, Any]:
    """A control's `seed-S/NAME.json`: a rung's keys (no training means), one checkpoint, selected by construction."""
    return {"rung": name, "recipe": recipe, "prompts": "none", "seed": int(seed), "n_prompts": 0,
            "train_seconds": round(float(seconds), 1), "selected_step": int(step), "checkpoints": [checkpoint],
            "config": config, **{k: None for k in TRAINING_MEANS}, "steps": int(steps), **extra}


def write_kept(results: Path, seed: int, name: str, rows: Sequence[dict], numbers: dict) -> tuple[Path, Path]:
    """Write results/seed-S/NAME.jsonl and NAME.json (each by an atomic replace). Returns both paths."""
    folder = Path(results) / f"seed-{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    jsonl, js = folder / f"{name}.jsonl", folder / f"{name}.json"
    for path, text in ((jsonl, "".join(json_dumps(r) + "\n" for r in rows)), (js, json_dumps(numbers, indent=1))):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    return jsonl, js
