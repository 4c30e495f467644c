"""SFT pairs for the improve task from an evolve run: parents -> a better child (issue 40.4, the warm start).

The improve task (`alpha_gym.tasks.improve`, AlphaFormulaEvolve-v0) shows k parent formulas with their
train-window numbers and asks for one better formula. The start model has never seen that prompt, so RL on it
starts from answers that rarely parse. The model-free evolve run (`alpha-gym evolve --mutator tree`) already
made the examples: each child it scored records its parents (`Program.parents`, in the order they were drawn:
best first, as the prompt lists them) and every program records the numbers the prompt shows (reward, CPCV,
turnover, IC, max |corr| with the book at its scoring). A pair is

    prompt      exactly the improve task's prompt for the child's parents, rendered through the task seam
                (`render_prompt(brief, limits, {"parents": parents_context(parents)}, task="improve")`): what
                a model mutator of that run would have been shown for that parent set
    completion  the child in the `<alpha>` answer contract (`<alpha>FORMULA</alpha>`, the formula as the
                run printed it after parsing it under the run's Limits)

for each child whose train reward beats its best parent's by more than `min_improvement`. The limits are the
run's verifier's (its state.json settings), the brief the run's `--brief` (its evolve-settings.json stamp;
none for a run without one or a bare `evolve()` folder), so the prompt is the one that run's mutators render.

What an evolve run folder records about parents: state.json's program database holds every valid program with
its parent ids (`Program.parents`) and numbers, and proposals.jsonl logs each proposal's parent ids; the kept
comparison files (results/seed-S/evolve.json, .jsonl) keep neither: they give `ImprovePairsError`.

Deterministic: pairs are ranked by improvement (largest first), then child id; `max_pairs` keeps the first;
`per_prompt` caps the children kept for one parent set (so one lucky parent pair cannot fill the data);
duplicate (prompt, completion) pairs are dropped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from alpha_gym.errors import InputError
from alpha_gym.jsonable import json_dumps
from alpha_gym.language import DEFAULT_LIMITS, Limits
from alpha_gym.ranges import shown
from alpha_gym.search.database import Program
from alpha_gym.search.run_state import STATE_FILE, STATE_FORMAT, RunStateError, check_state, read_json
from alpha_gym.tasks.parents import parents_context
from alpha_gym.tasks.task import render_prompt

#: The stamp `alpha-gym evolve` writes beside the run (its brief id); `evolve_arm.STAMP_FILE`.
STAMP_FILE = "evolve-settings.json"
TASK = "improve"


class ImprovePairsError(InputError):
    """A folder that holds no evolve run (no state.json, another format) or a run whose records name no parents."""


def _read_json(path: Path, what: str) -> Any:
    try:
        return read_json(path, what)
    except RunStateError as err:
        raise ImprovePairsError(str(err)) from None


def _not_a_run(folder: Path) -> ImprovePairsError:
    """The error for a folder without state.json, saying what the folder looks like instead."""
    kept = sorted(p.relative_to(folder).as_posix() for p in folder.glob("seed-*/*.json"))
    if kept or (folder / "curve.jsonl").exists():
        return ImprovePairsError(
            f"{folder} holds kept comparison files ({', '.join(kept[:3]) or 'curve.jsonl'}), not an evolve run "
            f"folder: they record no parent of any formula. Give the run's --out folder (it holds {STATE_FILE}); "
            "rerun `alpha-gym evolve` with the same flags to rebuild it (a run is deterministic for its seed)")
    return ImprovePairsError(f"{folder} holds no evolve run ({STATE_FILE} is missing): give the --out folder of "
                             "`alpha-gym evolve`")


def load_run(run_dir) -> tuple[list[Program], Limits, Any]:
    """(the run's programs, the Limits its verifier held answers to, its brief or None) from an evolve run folder.

    ImprovePairsError for a folder that is not one, a state of another format, programs without parent ids, or
    a checkpoint that does not check out (`alpha_gym.search.run_state.check_state`: every field, each program's
    text parsed again under the run's Limits and its numbers range-checked, so an edited text or reward reaches
    no pair)."""
    folder = Path(run_dir)
    if not folder.is_dir():
        raise ImprovePairsError(f"{folder} is not a folder: give the --out folder of an `alpha-gym evolve` run")
    state_path = folder / STATE_FILE
    if not state_path.exists():
        raise _not_a_run(folder)
    state = _read_json(state_path, "state")
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        got = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise ImprovePairsError(f"{state_path} is not an evolve state (format {got!r}, expected {STATE_FORMAT!r})")
    raw = state.get("database")
    if not isinstance(raw, dict) or not isinstance(raw.get("programs"), list):
        raise ImprovePairsError(f"{state_path} holds no program database: no parents to read")
    if any(not isinstance(p, dict) or "parents" not in p for p in raw["programs"]):
        raise ImprovePairsError(f"{state_path}: its programs carry no parent ids ('parents'), so no child can be "
                                "paired with the prompt it answers")
    try:                                     # ids are 0..n-1 in order, parents earlier ones: a parent is programs[i]
        checked = check_state(state, folder, state_path)
    except RunStateError as err:
        raise ImprovePairsError(str(err)) from None
    return checked.database.programs, checked.limits, _brief(folder)


def _brief(folder: Path):
    """The run's --brief (its stamp names it by id), or None: the prompt then carries the no-brief request."""
    path = folder / STAMP_FILE
    if not path.exists():
        return None
    stamp = _read_json(path, "stamp")
    brief_id = stamp.get("brief") if isinstance(stamp, dict) else None
    if brief_id is None:
        return None
    if not isinstance(brief_id, str):
        raise ImprovePairsError(f"{path}: brief = {shown(brief_id)}: not a brief id (the stamp was edited)")
    from alpha_gym.tasks.sets import require_brief
    return require_brief(brief_id)


def pairs_from_programs(programs: Sequence[Program], limits: Limits = DEFAULT_LIMITS, brief=None, *,
                        max_pairs: int | None = 256, per_prompt: int | None = 2,
                        min_improvement: float = 0.0) -> list[dict]:
    """The pairs of children that beat their best parent (see the module docstring), best improvement first.

    programs: a run's programs, ids 0..n-1 in order (`ProgramDatabase.programs`). max_pairs / per_prompt: None
    for no cap. Each row: prompt and completion (conversational, as `alpha-gym sft` reads them), the task, the
    child's id, formula, origin and reward, its parents' ids, the best parent's reward and the improvement."""
    for key, v in (("max_pairs", max_pairs), ("per_prompt", per_prompt)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise ImprovePairsError(f"{key} must be an integer >= 1 or None, got {v!r}")
    if isinstance(min_improvement, bool) or not isinstance(min_improvement, (int, float)) or min_improvement < 0:
        raise ImprovePairsError(f"min_improvement must be a number >= 0, got {min_improvement!r}")
    better = []
    for child in programs:
        if not child.parents:
            continue                          # a seed or a random fill: no prompt was answered
        parents = [programs[q] for q in child.parents]
        best = max(p.reward for p in parents)
        if child.reward - best > min_improvement:
            better.append((child.reward - best, child, parents, best))
    better.sort(key=lambda b: (-b[0], b[1].id))
    rows, seen, per_set = [], set(), {}
    for gain, child, parents, best in better:
        prompt = render_prompt(brief, limits, {"parents": parents_context(parents)}, task=TASK)
        completion = f"<alpha>{child.text}</alpha>"
        if (prompt, completion) in seen or (per_prompt is not None and per_set.get(prompt, 0) >= per_prompt):
            continue
        seen.add((prompt, completion))
        per_set[prompt] = per_set.get(prompt, 0) + 1
        rows.append({"prompt": [{"role": "user", "content": prompt}],
                     "completion": [{"role": "assistant", "content": completion}],
                     "task": TASK, "child": child.id, "parents": list(child.parents), "formula": child.text,
                     "origin": child.origin, "reward": child.reward, "parent_reward": best, "improvement": gain})
        if max_pairs is not None and len(rows) >= max_pairs:
            break
    return rows


def improve_pairs(run_dir, *, max_pairs: int | None = 256, per_prompt: int | None = 2,
                  min_improvement: float = 0.0) -> list[dict]:
    """The SFT pairs of the evolve run in `run_dir` (its --out folder); see `pairs_from_programs`."""
    programs, limits, brief = load_run(run_dir)
    return pairs_from_programs(programs, limits, brief, max_pairs=max_pairs, per_prompt=per_prompt,
                               min_improvement=min_improvement)


def build_improve_dataset(run_dir, out, *, max_pairs: int | None = 256, per_prompt: int | None = 2,
                          min_improvement: float = 0.0) -> dict:
    """Pairs -> JSONL at `out` (`alpha_gym.tasks.sft_data.save_jsonl`). Returns a summary: rows, the run's
    children and how many beat their best parent, distinct parent sets, the mean improvement, the path.

    run_dir: one run folder, or several (a list): each run gives its own pairs under the caps (so one run's
    favourite family cannot fill the data), in the order given; a (prompt, completion) pair already taken from
    an earlier run is dropped. The summary then adds one entry a run under "runs"."""
    from alpha_gym.tasks.sft_data import check_out_file, save_jsonl
    several = not isinstance(run_dir, (str, Path))
    folders = list(run_dir) if several else [run_dir]
    if not folders:
        raise ImprovePairsError("no evolve run given: nothing to read pairs from")
    for folder in folders:
        refuse_out_in_run(out, folder)
    check_out_file(out)                      # a folder or /dev/null is refused before the runs are read
    rows, seen, per_run = [], set(), []
    for folder in folders:
        programs, limits, brief = load_run(folder)
        got = [r for r in pairs_from_programs(programs, limits, brief, max_pairs=max_pairs, per_prompt=per_prompt,
                                              min_improvement=min_improvement)
               if _pair_key(r) not in seen]
        seen.update(_pair_key(r) for r in got)
        rows.extend(got)
        children = [p for p in programs if p.parents]
        better = sum(p.reward - max(programs[q].reward for q in p.parents) > min_improvement for p in children)
        per_run.append({"run": str(folder), "rows": len(got), "parent_sets": len({tuple(r["parents"]) for r in got}),
                        "children": len(children),
                        "better_children": int(better), "brief": getattr(brief, "id", None)})
    if not rows:
        where = folders[0] if len(folders) == 1 else f"{len(folders)} runs"
        raise ImprovePairsError(f"{where}: no child of the run beat its best parent by more than "
                                f"{min_improvement}: nothing to train on")
    save_jsonl(rows, out)
    summary = {"task": TASK, "rows": len(rows),
               "children": sum(r["children"] for r in per_run),
               "better_children": sum(r["better_children"] for r in per_run),
               "parent_sets": sum(r["parent_sets"] for r in per_run),   # parent ids are a run's own
               "mean_improvement": round(sum(r["improvement"] for r in rows) / len(rows), 4),
               "brief": per_run[0]["brief"], "run": str(folders[0]) if not several else [str(f) for f in folders],
               "path": str(out)}
    if several:
        summary["runs"] = per_run
    return summary


def refuse_out_in_run(out, run_dir) -> None:
    """ImprovePairsError when the output path `out` is the run folder `run_dir` or lies inside it (compared as
    resolved paths: a link, `..` or a relative spelling is the same file): the folder's files are the run's
    checkpoint, logs and kept files, which a resume or --keep-at reads and rewrites."""
    target, folder = Path(out).resolve(), Path(run_dir).resolve()
    if target == folder or folder in target.parents:
        raise ImprovePairsError(f"--out {out} is inside the evolve run it reads ({run_dir}): its files are the run's "
                                "checkpoint and logs; write the pairs outside the run folder")


def _pair_key(row: dict) -> tuple[str, str]:
    """A pair's identity across runs: its prompt and completion texts."""
    return (json_dumps(row["prompt"], sort_keys=True), json_dumps(row["completion"], sort_keys=True))
