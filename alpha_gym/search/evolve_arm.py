"""An evolution run as an arm of the comparison: run it in a folder, keep its files, read it along its curve.

`run_evolve` is what `alpha-gym evolve` and the comparison's `evolve` arm both call: it holds the run folder for
as long as it runs (`alpha_gym.search.run_state.locked`: a second process is refused), claims it
(`evolve-settings.json`, `alpha_gym.folder_stamp.claim_stamp`: other settings in the same folder are
refused; the budget is not a setting, so a rerun resumes and a larger budget goes on), builds the
mutators from their specs (`alpha_gym.search.mutators`), runs `evolution.evolve` for exactly the budget
(resumable from its last group), and writes:

    OUT/curve.jsonl     one row per group: calls, best train reward, programs, book members, effective bets,
                        book CPCV (train window), admitted, rejected, seconds (wall time of the run so far,
                        across resumes; `timing.jsonl` keeps it between them); written with each checkpoint
    RESULTS/seed-S/NAME.jsonl, NAME.json, NAME.book.json, NAME.archive.jsonl
                        the kept files of a comparison arm (`keep_evolve`), so `alpha-gym compare
                        --report-only` and `alpha-gym holdout-formulas --formulas seed-S/NAME.jsonl` read it

beside the run's own files (`evolution`: state.json, proposals.jsonl, archive.jsonl, book.json).

The kept answers: for each probe brief, the best-rewarded formula the run scored that meets the brief's
constraints (`alpha_gym.tasks.compliance`), else the best overall (`complies` says which). NAME.json holds the
curve, so one run to 10,000 calls is read at 1,600 and 4,800 along it (`curve_at`); `keep_evolve(..., calls=B)`
rewrites the kept files as the run stood after its last group ending at or before B calls (its programs, its
book, its curve to there). The schedule does not depend on the budget, so that state is a run of budget B's,
except that a run stopped at B makes its last group short to spend the calls between (at most group_size - 1
calls).

Nothing here reads the pseudo-holdout but `checkpoint_row`, which scores the kept answers on it for the table.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Callable, Sequence

from alpha_gym.errors import InputError
from alpha_gym.evaluation.kept import answer_row, checkpoint_row, control_numbers, write_kept, write_object
from alpha_gym.evaluation.selection import Candidate, select_correlation_capped
from alpha_gym.folder_stamp import claim_stamp
from alpha_gym.jsonable import json_dumps, jsonable
from alpha_gym.ranges import shown
from alpha_gym.search.database import DatabaseConfig
from alpha_gym.search.evolution import BOOK_FILE, STATE_FILE, evolve, print_progress
from alpha_gym.search.run_state import (PROPOSALS_LOG, RunStateError, check_folder, load_state_json, locked,
                                        read_json, read_log, read_state)
from alpha_gym.service.http_json import json_depth
from alpha_gym.search.mutators import MUTATORS, MutatorRow, make_mutator

STAMP_FILE = "evolve-settings.json"
STAMP_FORMAT = "alpha-gym/evolve-run/v1"
CURVE_FILE = "curve.jsonl"
TIMING_LOG = "timing.jsonl"
#: The keys of a curve row (a group's history row, and the run's wall time so far).
CURVE_KEYS = ("group", "calls", "best_reward", "programs", "book_members", "effective_bets", "book_cpcv",
              "admitted", "rejected", "seconds")


class EvolveRunError(InputError):
    """A run folder made with other settings, a budget prefix the run never reached, a folder holding no run."""


def _refusal(stamp: dict):
    """The claim_stamp rule: a stamp naming other settings (any but the budget) refuses the folder."""
    def refuse(path: Path):
        try:
            kept = read_json(path, "stamp")
        except RunStateError:
            return EvolveRunError(f"{path} is damaged (not JSON): not a stamp this command wrote; choose another --out")
        if not isinstance(kept, dict) or kept.get("format") != STAMP_FORMAT:
            return EvolveRunError(f"{path} is not an evolve stamp: choose another --out")
        differ = sorted(k for k in set(stamp) | set(kept) if kept.get(k) != stamp.get(k))
        if differ:
            return EvolveRunError(f"{path.parent} holds an evolve run with other settings ({', '.join(differ)}): "
                                  "rerun it with the same settings (a larger --budget goes on) or choose another --out")
        return None
    return refuse


def run_evolve(verifier, train, holdout, probe: Sequence, *, mutators: Sequence[str] = ("tree",), budget: int,
               seed: int = 0, out, results=None, name: str = "evolve", database: DatabaseConfig = DatabaseConfig(),
               group_size: int = 8, seed_formulas: Sequence[str] | None = None, brief=None, step: int | None = None,
               about: dict | None = None, workers: int | None = None,
               progress: Callable[[dict], None] | None = print_progress, holdout_history=None,
               rows: Sequence[MutatorRow] = MUTATORS) -> dict:
    """Run (or resume) an evolution in `out` for exactly `budget` verifier calls and keep its arm's files.

    verifier: the train-window `Verifier` (forked here: the run grows its own archive); train/holdout: the
    panels (the pseudo-holdout is scored only for the kept answers' table row); probe: the briefs the kept
    answers are for. mutators: specs read against `rows` (`alpha_gym.search.mutators.make_mutator`; the table
    with the model rows is `trainers.mutators.MUTATORS`). results: where the kept files go (default
    OUT/results). step: the kept answers' `step` (default: the run's groups). about: what
    the stamp records beside the settings (the data file, the universe). workers: scoring processes (`evolve`'s;
    not a setting: the run is the same on any number). holdout_history: the sessions just before `holdout` that
    its scoring reads as lookback, where they are not the end of `train` (a walk-forward fold's validation window,
    after its purge: `alpha_gym.market.folds`). Returns the kept NAME.json numbers.
    """
    out = check_folder(out)
    results = check_folder(out / "results" if results is None else results, "--results")
    specs = [str(m) for m in mutators]
    from alpha_gym.settings import to_dict
    stamp = jsonable({"format": STAMP_FORMAT, "name": name, "mutators": specs, "seed": seed, "group_size": group_size,
                      "database": database.to_dict(), "train_window": [str(train.dates[0]), str(train.dates[-1])],
                      "pseudo_holdout": [str(holdout.dates[0]), str(holdout.dates[-1])],
                      "panel": train.fingerprint(), "probe_briefs": [b.id for b in probe],
                      "brief": None if brief is None else brief.id, "seed_formulas": seed_formulas,
                      "verifier": to_dict(verifier.config), **(about or {})})
    grown = verifier.fork()
    with locked(out):            # the stamp, the clock, the run and its kept files: one process at a time
        built = [make_mutator(s, verifier=grown, limits=grown.config.limits, brief=brief, seed=seed, rows=rows)
                 for s in specs]
        claim_stamp(out / STAMP_FILE, json_dumps(stamp, indent=1), _refusal(json.loads(json_dumps(stamp))))
        clock = _Clock(out)
        t0 = time.perf_counter()

        def on_checkpoint(history: list[dict]) -> None:       # the curve as the checkpoint stands
            clock.record(history[-1]["group"], time.perf_counter() - t0)
            write_curve(out, history, clock.seconds())

        def on_group(row: dict) -> None:
            if row["group"] not in clock.rows:                 # a group after which no checkpoint was due
                clock.record(row["group"], time.perf_counter() - t0)
            if progress is not None:
                progress(row)
        result = evolve(grown, built, database, budget, seed=seed, out_dir=out, seed_formulas=seed_formulas,
                        group_size=group_size, progress=on_group, workers=workers, checkpointed=on_checkpoint)
        write_curve(out, result.history, clock.seconds())
        return keep_evolve(out, grown, train, holdout, probe, results, seed, name=name, step=step,
                           config={"mutators": specs, "database": database.to_dict(), "group_size": group_size},
                           holdout_history=holdout_history)


def check_run_folder(out, train, probe: Sequence) -> dict:
    """The stamp of the run in `out`, when it was made on this train panel for these probe briefs (EvolveRunError
    if not: kept files read on other data would be another experiment's)."""
    path = check_folder(out) / STAMP_FILE
    if not path.exists():
        raise EvolveRunError(f"{out} holds no evolve run ({STAMP_FILE} is missing)")
    stamp = read_json(path, "stamp")
    if not isinstance(stamp, dict) or stamp.get("format") != STAMP_FORMAT or type(stamp.get("seed")) is not int:
        raise EvolveRunError(f"{path} is not an evolve stamp: not a run this command made")
    name = stamp.get("name", "evolve")      # the kept files' name: a plain file name, never a path
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name):
        raise EvolveRunError(f"{path}: name = {shown(name)}: not an arm name (letters, digits, _ . -)")
    if stamp.get("panel") != train.fingerprint():
        raise EvolveRunError(f"{out} was evolved on another panel than the data given (or another --pseudo-holdout)")
    if stamp.get("probe_briefs") != [b.id for b in probe]:
        raise EvolveRunError(f"{out} kept its answers for other probe briefs: give its --probe")
    return stamp


class _Clock:
    """The run's wall time per group, kept in OUT/timing.jsonl across resumes (cut back to the checkpoint)."""

    def __init__(self, out: Path):
        self.path = out / TIMING_LOG
        groups = 0
        if (out / STATE_FILE).exists():   # a damaged state is refused here, before the times are cut back
            groups = load_state_json(out / STATE_FILE).get("groups")
            if type(groups) is not int or groups < 0:
                raise EvolveRunError(f"{out / STATE_FILE}: groups = {shown(groups)}: must be an integer >= 0")
        rows = _read_lines(self.path) if groups else []
        self.rows = {r["group"]: r["seconds"] for r in rows if r["group"] <= groups}
        self.offset = max(self.rows.values(), default=0.0)
        out.mkdir(parents=True, exist_ok=True)
        self.path.write_text("".join(json_dumps({"group": g, "seconds": s}) + "\n" for g, s in sorted(self.rows.items())),
                             encoding="utf-8")

    def record(self, group: int, elapsed: float) -> None:
        self.rows[group] = round(self.offset + elapsed, 3)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json_dumps({"group": group, "seconds": self.rows[group]}) + "\n")

    def seconds(self) -> dict[int, float]:
        return dict(self.rows)


def _read_lines(path: Path) -> list[dict]:
    """timing.jsonl's rows ({"group": int, "seconds": float}); a line that is not one is left out (a line cut by
    a kill: the group runs again; its time is only a curve's seconds)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_bytes().splitlines():
        try:
            row = json.loads(line) if json_depth(line) <= 2 else None
        except ValueError:
            continue
        if isinstance(row, dict) and type(row.get("group")) is int and type(row.get("seconds")) in (int, float) \
                and math.isfinite(row["seconds"]) and row["seconds"] >= 0:
            out.append(row)
    return out


def write_curve(out: Path, history: Sequence[dict], seconds: dict[int, float]) -> None:
    """OUT/curve.jsonl of the run's history so far (atomically: a reader never sees half of it)."""
    tmp = out / (CURVE_FILE + ".tmp")
    tmp.write_text("".join(json_dumps(r) + "\n" for r in curve_rows(history, seconds)), encoding="utf-8")
    tmp.replace(out / CURVE_FILE)


def curve_rows(history: Sequence[dict], seconds: dict[int, float] | None = None) -> list[dict]:
    """The curve of a run: its history rows cut to `CURVE_KEYS`, with the wall time where it is known."""
    seconds = seconds or {}
    return [{k: (seconds.get(int(h["group"])) if k == "seconds" else h.get(k)) for k in CURVE_KEYS} for h in history]


def curve_at(curve: Sequence[dict], calls: int) -> dict:
    """The curve's row at a budget prefix: the last group ending at or before `calls` verifier calls.

    `curve`: curve rows (NAME.json's "curve", curve.jsonl). EvolveRunError when the run never got that far or
    no group ends by then."""
    if not curve or calls > curve[-1]["calls"]:
        raise EvolveRunError(f"the run stopped at {curve[-1]['calls'] if curve else 0} calls, before {calls}")
    rows = [r for r in curve if r["calls"] <= calls]
    if not rows:
        raise EvolveRunError(f"no group of the run ends at or before {calls} calls")
    return rows[-1]


def read_curve(path) -> list[dict]:
    """A run's curve: OUT/curve.jsonl, or a kept NAME.json (its "curve")."""
    path = Path(path)
    if path.suffix == ".json":
        from alpha_gym.evaluation.kept import read_object
        return list(read_object(path)["curve"])
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ------------------------------------------------------------------------------------------ the kept files
def keep_evolve(run_dir, verifier, train, holdout, probe: Sequence, results, seed: int, *, name: str = "evolve",
                calls: int | None = None, step: int | None = None, config: dict | None = None,
                holdout_history=None) -> dict:
    """Write results/seed-S/NAME.jsonl, NAME.json, NAME.book.json and NAME.archive.jsonl from the run in `run_dir`
    (its state.json), as it stood after its last group ending at or before `calls` (None: the whole run).

    verifier: a train-window verifier (the probe answers' CPCV and the book's P&L do not depend on its archive).
    holdout_history: the lookback sessions of `holdout` where they are not the end of `train` (`run_evolve`).
    Returns the numbers written to NAME.json (a control's keys, `alpha_gym.evaluation.kept.control_numbers`,
    plus budget, verifier_calls, groups, mutator shares, the curve and the book)."""
    from alpha_gym.tasks.compliance import check_compliance
    run_dir = Path(run_dir)
    state_path = run_dir / STATE_FILE
    if not state_path.exists():
        raise EvolveRunError(f"{run_dir} holds no evolve run ({STATE_FILE} is missing)")
    checked = read_state(run_dir)
    state = checked.state
    history = list(state["history"])
    if not history:
        raise EvolveRunError(f"{run_dir}: the run scored no group yet")
    seconds = {r["group"]: float(r["seconds"]) for r in _read_lines(run_dir / TIMING_LOG)}
    curve = curve_rows(history, seconds)
    at = curve[-1] if calls is None else curve_at(curve, calls)
    curve = [r for r in curve if r["group"] <= at["group"]]
    limits = verifier.config.limits
    programs = sorted((p for p in checked.database.programs if p.call <= at["calls"]), key=lambda p: (-p.reward, p.id))
    step = at["group"] if step is None else int(step)
    rows, formulas, cpcvs, complied = [], [], [], 0
    trees: dict[int, object] = {}

    def tree(p):                              # parsed once, for every brief that looks at it
        if p.id not in trees:
            trees[p.id] = p.tree(limits)
        return trees[p.id]
    for brief in probe:
        hit = next((p for p in programs if all(check_compliance(brief, tree(p)).values())), None)
        pick = hit if hit is not None else (programs[0] if programs else None)
        complied += hit is not None
        formulas.append(None if pick is None else pick.text)
        cpcvs.append(None if pick is None else pick.core)
        rows.append(answer_row(brief.id, step, "" if pick is None else f"<alpha>{pick.text}</alpha>",
                               None if pick is None else pick.text, None if pick is None else pick.core,
                               complies=hit is not None, reward=None if pick is None else pick.reward,
                               origin=None if pick is None else pick.origin, call=None if pick is None else pick.call))
    checkpoint = checkpoint_row(step, cpcvs, train if holdout_history is None else holdout_history, holdout, verifier,
                                formulas, run_dir, label=name)
    admitted = [line for line in _archive_lines(state) if line["step"] <= at["group"]]
    finished = run_dir / BOOK_FILE
    book = None
    if at["group"] == state["groups"] and state["calls"] >= state["budget"] and finished.exists():
        book = _finished_book(finished, at["group"])   # the book the run chose at its end: no formula traded again
    if book is None:
        book = _book(admitted, verifier, state["settings"]["book"])
    logged = read_log(run_dir / PROPOSALS_LOG, state["groups"], state["calls"])
    scored = [r for _line, r in logged if r.get("status") == "scored" and r["call"] <= at["calls"]]
    numbers = control_numbers(
        name, "evolve", seed, at["seconds"] or 0.0, step, checkpoint,
        {**(config or {}), "settings": state["settings"]["database"], "group_size": state["settings"]["group_size"]},
        steps=at["group"], budget=state["budget"] if calls is None else int(calls), verifier_calls=at["calls"],
        seed_formulas=len(state["settings"]["seed_formulas"]), complies=complied,
        valid_share=sum(bool(r["valid"]) for r in scored) / len(scored) if scored else None,
        best_reward=at["best_reward"], programs=len(programs), curve=curve,
        mutator_calls=_origins(scored))
    write_kept(check_folder(results, "--results"), seed, name, rows, numbers)
    folder = Path(results) / f"seed-{seed}"
    (folder / f"{name}.archive.jsonl").write_text("".join(json_dumps(x) + "\n" for x in admitted), encoding="utf-8")
    write_object(folder / f"{name}.book.json", {"rung": name, "seed": int(seed), **book})
    return numbers


def _archive_lines(state: dict) -> list[dict]:
    """The run's archive lines as its checkpoint holds them (archive.jsonl's, once the run ended)."""
    return [v for _k, v in sorted(state["admitted"].items(), key=lambda kv: int(kv[0]))]


def _origins(scored: Sequence[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in scored:
        out[r["origin"]] = out.get(r["origin"], 0) + 1
    return dict(sorted(out.items()))


def _finished_book(path: Path, groups: int) -> dict | None:
    """The run's book.json when it is the book after `groups` groups (None when it is another checkpoint's: a
    kill between the state and the book leaves the book before; a file without "groups" predates the check)."""
    d = read_json(path, "book")
    keys = ("n_admitted", "n_members", "effective_bets", "members", "selection")
    if not isinstance(d, dict) or any(k not in d for k in keys) or not isinstance(d["members"], list):
        raise EvolveRunError(f"{path} is not the book an evolve run writes: damaged or edited (remove it, and "
                             "rerun the same command to write it again)")
    if d.get("groups", groups) != groups:
        return None
    return {"n_admitted": d["n_admitted"], "n_members": d["n_members"], "effective_bets": d["effective_bets"],
            "members": d["members"], "unscored": [], "selection": d["selection"]}


def _book(admitted: Sequence[dict], verifier, settings: dict) -> dict:
    """The correlation-capped book of the admitted formulas (`trainers.run_book.build_run_book`'s keys)."""
    formulas = list(dict.fromkeys(line["formula"] for line in admitted))
    candidates = [Candidate.from_evaluated(verifier.evaluate(f)) for f in formulas]
    selection = select_correlation_capped(candidates, settings["max_corr"], settings["min_turnover"])
    from alpha_gym.jsonable import finite_or_none
    return {"n_admitted": len(formulas), "n_members": selection.n,
            "effective_bets": finite_or_none(selection.effective_bets), "members": list(selection.members),
            "unscored": [], "selection": selection.to_dict()}


def run_pool(run_dir) -> tuple[list, tuple[str, ...]]:
    """What the finished run in `run_dir` found, for `alpha_gym.evaluation.walk_forward.score_fold`: its archive (the
    formulas the verifier admitted), each with its train reward and CPCV, its best program when the archive left it
    out (a near-copy of an earlier entry), and the members of the book it chose at its end (book.json)."""
    from alpha_gym.evaluation.walk_forward import PoolEntry
    run_dir = Path(run_dir)
    checked = read_state(run_dir)
    if checked.state["calls"] < checked.state["budget"]:
        raise EvolveRunError(f"{run_dir}: the run stopped at {checked.state['calls']} of its "
                             f"{checked.state['budget']} calls: rerun it to the end first")
    book = read_json(run_dir / BOOK_FILE, "book") if (run_dir / BOOK_FILE).exists() else None
    members = book.get("members") if isinstance(book, dict) else None
    if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
        raise EvolveRunError(f"{run_dir / BOOK_FILE} is missing or not the book an evolve run writes: rerun the same "
                             "command to write it again")
    programs = sorted(checked.database.programs, key=lambda p: (-p.reward, p.id))
    by_text = {p.text: p for p in programs}
    pool = []
    for line in _archive_lines(checked.state):
        p = by_text.get(line["formula"])
        pool.append(PoolEntry(line["formula"], None if p is None else float(p.reward), line["train_cpcv"]))
    if programs and programs[0].text not in {e.formula for e in pool}:
        pool.append(PoolEntry(programs[0].text, float(programs[0].reward), programs[0].cpcv))
    return pool, tuple(members)
