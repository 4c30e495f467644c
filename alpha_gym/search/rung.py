"""The `search` control as a rung of the trainer comparison: same verifier calls, same kept files."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

from alpha_gym.evaluation.kept import answer_row, checkpoint_row, control_numbers, write_kept
from alpha_gym.jsonable import json_dumps
from alpha_gym.search.evolve import SearchConfig, SearchError, pick_answers, rung_budget, search


def scale_budget(scale) -> int:
    """A comparison scale's verifier calls per rung: steps x prompts_per_step x num_generations.

    `scale`: the comparison's `Scale` (anything with `.steps` and a `.train` dict holding prompts_per_step and
    num_generations, every preset does). At `--scale cpu`: 30 x 2 x 8 = 480.
    """
    train = getattr(scale, "train", None) or {}
    missing = [k for k in ("prompts_per_step", "num_generations") if k not in train]
    if missing:
        raise SearchError(f"the scale's train settings lack {', '.join(missing)}: the budget needs them")
    return rung_budget(scale.steps, train["prompts_per_step"], train["num_generations"])


def scale_search_config(scale, **more) -> SearchConfig:
    """The search sized like the scale's training step: groups of num_generations, prompts_per_step a generation."""
    return SearchConfig(group_size=scale.train["num_generations"],
                        groups_per_generation=scale.train["prompts_per_step"], **more)


def run_search_rung(scale, seed: int, verifier, train, holdout, probe: Sequence, step0_formulas: Sequence[str | None],
                    results: Path, out: Path | None = None, name: str = "search", config: SearchConfig | None = None,
                    pool: str = "population") -> dict:
    """Run the model-free search control for one seed and keep its answers as a rung's.

    Inputs as a rung gets them: the comparison's `scale` (its budget, `scale_budget`, and generation size),
    the training `seed`, the comparison's train `verifier` (forked here: the search grows its own archive from
    the seeded one, as each rung does), the train and pseudo-holdout panels, the `probe` briefs, and the
    start model's step-0 probe formulas (`step0_formulas`, None for an answer without one), which seed the
    search with the Alpha101 set. Each probe brief gets the best formula of `pool` meeting the brief's
    constraints, or the best overall (the answer line's `complies` says which).

    Writes `results/seed-S/NAME.jsonl` (brief_id, step, answer, formula, train_cpcv, train_valid, and
    complies, reward, origin, generation) and `results/seed-S/NAME.json` (a rung's numbers; selected_step is
    the scale's steps: the calls of that many training steps), and, when `out` is given,
    `out/seed-S/NAME/search.json` (every scored formula, the population, per-generation history),
    `archive.npz` (the novelty archive the search grew) and `holdout-step-N.json`. A rerun with the same
    settings reuses search.json instead of searching again. Returns the numbers written to NAME.json.
    """
    config = config or scale_search_config(scale)
    budget = scale_budget(scale)
    run_dir = None if out is None else Path(out) / f"seed-{seed}" / name
    settings = {"budget": budget, "seed": int(seed), "config": config.to_dict(), "pool": pool,
                "step0_formulas": list(step0_formulas)}
    t0 = time.perf_counter()
    cached = _cached(run_dir, settings, verifier) if run_dir is not None else None
    if cached is None:
        grown = verifier.fork()
        result = search(grown, step0_formulas, budget, config, seed=seed)
        searched = time.perf_counter() - t0
        if run_dir is not None:
            _save(run_dir, settings, result, searched)
            grown.save_archive(run_dir / "archive.npz")  # the archive the search grew, as a checkpoint keeps it
    else:
        # a rerun reports the search's own wall time, not the moment it took to read it back (a search.json saved
        # before the time was kept: the reading, as before)
        result, searched = cached
    t0 = time.perf_counter() - (searched if searched is not None else 0.0)
    picks = pick_answers(result, probe, pool)
    step = scale.steps
    rows, formulas, cpcvs = [], [], []
    for brief, (c, complies) in zip(probe, picks):
        text = None if c is None else c.text
        cpcv = c.cpcv if c is not None and c.valid else None
        formulas.append(text)
        cpcvs.append(cpcv)
        rows.append(answer_row(brief.id, step, "" if text is None else f"<alpha>{text}</alpha>", text, cpcv,
                               complies=bool(complies), reward=None if c is None else c.reward,
                               origin=None if c is None else c.origin, generation=None if c is None else c.generation))
    checkpoint = checkpoint_row(step, cpcvs, train, holdout, verifier, formulas, run_dir, label=name)
    scored = result.candidates
    numbers = control_numbers(
        name, "search", seed, time.perf_counter() - t0, step, checkpoint, {"search": config.to_dict(), "pool": pool},
        steps=result.generations, budget=budget, verifier_calls=result.calls, redrawn=result.redrawn,
        seed_formulas=len(result.seeds), complies=sum(bool(k) for _, k in picks),
        valid_share=sum(c.valid for c in scored) / len(scored) if scored else None, history=result.history)
    write_kept(results, seed, name, rows, numbers)
    return numbers


def _save(run_dir: Path, settings: dict, result, seconds: float) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "search.json"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json_dumps({"settings": settings, "seconds": round(seconds, 3), "calls": result.calls,
                               "generations": result.generations,
                               "redrawn": result.redrawn, "history": result.history,
                               "population": [c.text for c in result.population],
                               "candidates": [c.to_dict() for c in result.candidates]}, indent=1), encoding="utf-8")
    tmp.replace(path)


def _cached(run_dir: Path, settings: dict, verifier):
    """(the saved search, its wall seconds or None where not kept) when run_dir/search.json was made with these
    settings, else None."""
    import json
    from alpha_gym.language import parse
    from alpha_gym.search.evolve import Candidate, SearchResult
    path = run_dir / "search.json"
    if not path.exists():
        return None
    d = json.loads(path.read_text(encoding="utf-8"))
    if d["settings"] != json.loads(json_dumps(settings)):
        return None
    limits = verifier.config.limits
    cands = [Candidate(c["text"], parse(c["text"], limits), c["generation"], c["origin"], c["valid"],
                       float(c["reward"]), c["cpcv"], c["reason"]) for c in d["candidates"]]
    by_text = {c.text: c for c in cands}
    return (SearchResult(cands, [by_text[t] for t in d["population"]], d["calls"], settings["budget"],
                         d["generations"], d["redrawn"], d["history"]), d.get("seconds"))
