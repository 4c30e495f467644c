"""The improve task's prompts outside the Gym env: its parents drawn from a program database as
`AlphaFormulaEvolve-v0` draws them, so a consumer (the training loop, best-of-N, the probe, SFT data, the
integrations) renders the env's prompt for the same brief, seed and verifier (`alpha_gym.tasks.prompts`).

`program_database` builds the database the env's `database=` names (default: the Alpha101 formulas that need no
sector labels or market cap, scored by the verifier); `draw_parents` is the env's draw; `task_prompts(task,
verifier)` is the `TaskPrompts` every consumer renders with.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from alpha_gym.errors import InputError
from alpha_gym.language import canonical
from alpha_gym.scoring.verifier import Verifier
from alpha_gym.search.database import DatabaseConfig, Program, ProgramDatabase
from alpha_gym.search.evolution import read_answer
from alpha_gym.tasks.parents import parents_context
from alpha_gym.tasks.prompts import TaskPrompts, check_task
from alpha_gym.tasks.task import TASKS

#: The env's default k (`AlphaFormulaEvolveEnv(parents_per_prompt=)`).
PARENTS_PER_PROMPT = 2


def draw_parents(database: ProgramDatabase, k: int, rng) -> tuple[int, tuple[Program, ...]]:
    """(island, parents): an island drawn uniformly among the non-empty ones, then k distinct programs of it with
    the database's weights (the best k at temperature 0), best first; the database is read, never changed."""
    islands = [i for i, members in enumerate(database.islands) if members]
    island = islands[int(rng.integers(len(islands)))]
    ids, p = database.weights(island)
    k = min(k, len(ids))
    if int((p > 0).sum()) >= k:
        picks = [ids[int(j)] for j in rng.choice(len(ids), size=k, replace=False, p=p)]
    else:  # temperature 0: the best k
        picks = [q.id for q in database.island_programs(island)[:k]]
    return island, tuple(sorted((database.programs[i] for i in picks), key=lambda q: (-q.reward, q.id)))


def task_prompts(task: str, verifier: Verifier, database=None, parents_per_prompt: int = PARENTS_PER_PROMPT,
                 owner: str = "task_prompts") -> TaskPrompts:
    """The prompts of `task` under `verifier.config.limits`; for the improve task, parents drawn from
    `program_database(database, verifier)` (scored once here, the verifier's archive untouched). An unknown task
    is a SettingError naming `owner` (the consumer's setting)."""
    check_task(owner, task)
    if not TASKS[task].context:
        return TaskPrompts(task, verifier.config.limits)
    db = program_database(database, verifier, DatabaseConfig(parents_per_prompt=parents_per_prompt))
    if not db.programs:
        raise InputError("the program database holds no valid formula: the improve task needs parents")
    return TaskPrompts(task, verifier.config.limits,
                       parents=lambda rng: parents_context(draw_parents(db, parents_per_prompt, rng)[1]))


def program_database(source, verifier: Verifier, config: DatabaseConfig = DatabaseConfig(),
                     strict: bool = False) -> ProgramDatabase:
    """The program database `AlphaFormulaEvolveEnv(database=)` names (see its docstring). Formulas are parsed
    under the verifier's limits, scored as one group without touching its archive, and the valid ones dealt
    to the islands in turn; strict: a formula that does not parse, repeats another or scores invalid is a
    ValueError instead of being left out."""
    if isinstance(source, ProgramDatabase):
        return source
    if source is None:
        from alpha_gym.alpha101 import formulas as paper
        source = list(paper(industry_free=True).values())
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            path = path / "state.json"
        if not path.is_file():
            raise ValueError(f"database {str(source)!r}: no such file (an evolve run folder, its state.json, "
                             "or a JSONL file of lines with a 'formula')")
        if path.suffix == ".jsonl":
            source = _formulas_of_lines(path)
        else:
            return _stored_database(path, verifier.config.limits)
    limits = verifier.config.limits
    read, forms = [], set()
    for f in source:
        r = read_answer(f, limits)
        if isinstance(r, str) or canonical(r[2]) in forms:
            if strict:
                raise ValueError(f"parent {f!r:.80}: " + (r if isinstance(r, str) else "repeats another parent"))
            continue
        forms.add(canonical(r[2]))
        read.append(r)
    db = ProgramDatabase(config)
    group = verifier.score_group([r[0] for r in read]) if read else None
    for (answer, text, node), s in zip(read, group.scores if group else ()):
        if not s.valid:
            if strict:
                raise ValueError(f"parent {text!r:.80} scores invalid ({s.reason}): it has no numbers to show")
            continue
        d = s.diagnostics
        db.add(text, node, s.reward, s.channels["cpcv"], d.get("cpcv"), d.get("turnover"), d.get("ic"),
               d.get("max_pnl_corr"), origin="seed")
    return db


def _not_a_database(path: Path, why: str) -> InputError:
    return InputError(f"database {str(path)!r} is neither an evolve state nor JSONL lines with a 'formula' ({why})")


def _formulas_of_lines(path: Path) -> list:
    """The `formula` of each line of a JSONL file (a run's archive.jsonl); scored as a list of formulas is."""
    from alpha_gym.search.run_state import MAX_DEPTH
    from alpha_gym.service.http_json import json_depth
    out = []
    for n, line in enumerate(path.read_bytes().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line) if json_depth(line) <= MAX_DEPTH else None
        except (UnicodeDecodeError, ValueError) as err:
            raise _not_a_database(path, f"line {n}: {type(err).__name__}: {err}") from None
        if not isinstance(row, dict) or "formula" not in row:
            raise _not_a_database(path, f"line {n} is not an object with a 'formula'")
        out.append(row["formula"])
    return out


def _stored_database(path: Path, limits) -> ProgramDatabase:
    """The database of an evolve run's state.json (the whole checkpoint checked, `run_state.check_state`), or of
    a file holding one database state (`ProgramDatabase.to_dict`'s): every field checked and each program's
    text parsed again, under the run's Limits (else `limits`), so an edited text or reward never reaches a prompt."""
    from alpha_gym.search.run_state import STATE_FORMAT, RunStateError, check_state, read_json
    try:
        state = read_json(path, "state")
    except RunStateError as err:
        raise _not_a_database(path, str(err)) from None
    if isinstance(state, dict) and state.get("format") == STATE_FORMAT:
        return check_state(state, path.parent, path).database
    return ProgramDatabase.from_dict(state, limits)
