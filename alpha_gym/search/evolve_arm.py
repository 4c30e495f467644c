"""An evolution run in a stamped folder, the run behind `alpha-gym evolve` and the comparison's evolve arms: run it,
read it along its curve, hand what it found to the walk-forward scoring.

`run_evolve` is what `alpha-gym evolve` and the comparison's evolve arms both call: it holds the run folder for
as long as it runs (`alpha_gym.search.run_state.locked`: a second process is refused), claims it
(`evolve-settings.json`, `alpha_gym.folder_stamp.claim_stamp`: other settings in the same folder are
refused; the budget is not a setting, so a rerun resumes and a larger budget goes on), builds the
mutators from their specs (`alpha_gym.search.mutators`), runs `evolution.evolve` for exactly the budget
(resumable from its last group), writes

    OUT/curve.jsonl     one row per group: calls, best train reward, programs, book members, effective bets,
                        book CPCV (train window), admitted, rejected, seconds (wall time of the run so far,
                        across resumes; `timing.jsonl` keeps it between them); written with each checkpoint

beside the run's own files (`evolution`: state.json, proposals.jsonl, archive.jsonl, book.json), and then,
still holding the folder, calls its `keep`: the comparison's arm files (RESULTS/seed-S/NAME.jsonl, NAME.json,
NAME.book.json, NAME.archive.jsonl) are the experiment's, written by `trainers.compare.arms.kept.keep_evolve`,
which the caller hands in (the command line, the comparison's arms: this package imports no trainer).

On a walk-forward fold (`validation=`, an `alpha_gym.evaluation.validation.ValidationScorer` on the fold), each
curve row also carries `best_validation`: the validation score of the row's best program by train reward, read at
each checkpoint with the search window's validity (the best is in the database, so valid there), as a loss curve
shows the validation loss beside the train loss. Each distinct best is scored once, its reading kept in
OUT/validation.jsonl (a resumed run reads it back); the run never reads it, so its rewards, archive and book are
those of the same run without it. A run without a validation window writes no such file and its curve is unchanged.

On a fold, the run also SHIPS what it chooses on the validation window, never what the train reward alone
picks: once it ends, OUT/book.json is rewritten (`ship_on_validation`) to hold the correlation-capped book that
`alpha_gym.evaluation.shipped.choose_to_ship` chooses (the train reward admits its shortlist of 100, the validation
score chooses: `walk_forward.score_fold`'s "book chosen on validation"), with `chosen_on`, the rule, its best by
validation beside the best by train reward, and the book chosen on train under `train_book` (what `run_pool` hands
the walk-forward scoring as the run's own book). The kept NAME.book.json and NAME.json say the same. A run on no
fold writes book.json as the engine chose it, key for key.

One run to 10,000 calls is read at 1,600 and 4,800 along its curve (`curve_at`): the schedule does not depend on
the budget, so the state after the last group ending at or before B calls is a run of budget B's, except that a
run stopped at B makes its last group short to spend the calls between (at most group_size - 1 calls).
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Callable, Sequence

from alpha_gym.errors import InputError
from alpha_gym.evaluation.validation import VALIDATION_LOG, validation_readings
from alpha_gym.folder_stamp import claim_stamp
from alpha_gym.jsonable import json_dumps, jsonable
from alpha_gym.ranges import shown
from alpha_gym.search.database import DatabaseConfig
from alpha_gym.search.evolution import BOOK_FILE, STATE_FILE, evolve, print_progress
from alpha_gym.search.run_state import RunStateError, check_folder, load_state_json, locked, read_json, read_state
from alpha_gym.service.http_json import json_depth
from alpha_gym.search.mutators import MUTATORS, MutatorRow, make_mutator

STAMP_FILE = "evolve-settings.json"
STAMP_FORMAT = "alpha-gym/evolve-run/v1"
CURVE_FILE = "curve.jsonl"
TIMING_LOG = "timing.jsonl"
#: The curve key of the best program's validation score (only in a run on a fold).
VALIDATION_KEY = "best_validation"
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
               rows: Sequence[MutatorRow] = MUTATORS, keep: Callable[..., dict], validation=None) -> dict:
    """Run (or resume) an evolution in `out` for exactly `budget` verifier calls and keep its arm's files.

    keep: writes the kept files, called once the run ends, the folder still held, as
    `keep(out, grown_verifier, train, holdout, probe, results, seed, name=, step=, config=, holdout_history=,
    fold=)` (`trainers.compare.arms.kept.keep_evolve`; fold: the validation scorer's `FoldPanels`, or None);
    what it returns is returned.

    verifier: the train-window `Verifier` (forked here: the run grows its own archive); train/holdout: the
    panels (the pseudo-holdout is scored only for the kept answers' table row); probe: the briefs the kept
    answers are for. mutators: specs read against `rows` (`alpha_gym.search.mutators.make_mutator`; the table
    with the model rows is `trainers.mutators.MUTATORS`). results: where the kept files go (default
    OUT/results). step: the kept answers' `step` (default: the run's groups). about: what
    the stamp records beside the settings (the data file, the universe). workers: scoring processes (`evolve`'s;
    not a setting: the run is the same on any number). holdout_history: the sessions just before `holdout` that
    its scoring reads as lookback, where they are not the end of `train` (a walk-forward fold's validation window,
    after its purge: `alpha_gym.market.folds`). validation: a `ValidationScorer` on the run's fold (None: a run
    without a validation window): the curve's `best_validation`, and the book the run ships chosen on the
    validation window (`ship_on_validation`; the module docstring).
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
        readings = None if validation is None else _ValidationReadings(out, validation)
        t0 = time.perf_counter()

        def on_checkpoint(history: list[dict]) -> None:       # the curve as the checkpoint stands
            clock.record(history[-1]["group"], time.perf_counter() - t0)
            write_curve(out, history, clock.seconds(), None if readings is None else readings.read(history))

        def on_group(row: dict) -> None:
            if row["group"] not in clock.rows:                 # a group after which no checkpoint was due
                clock.record(row["group"], time.perf_counter() - t0)
            if progress is not None:
                progress(row)
        result = evolve(grown, built, database, budget, seed=seed, out_dir=out, seed_formulas=seed_formulas,
                        group_size=group_size, progress=on_group, workers=workers, checkpointed=on_checkpoint)
        write_curve(out, result.history, clock.seconds(),
                    None if readings is None else readings.read(result.history))
        fold = None if validation is None else validation.panels
        if fold is not None:
            ship_on_validation(out, verifier, fold)
        return keep(out, grown, train, holdout, probe, results, seed, name=name, step=step,
                    config={"mutators": specs, "database": database.to_dict(), "group_size": group_size},
                    holdout_history=holdout_history, fold=fold)


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


def group_seconds(run_dir) -> dict[int, float]:
    """The run's wall time after each group (OUT/timing.jsonl), for its curve."""
    return {r["group"]: float(r["seconds"]) for r in _read_lines(Path(run_dir) / TIMING_LOG)}


def write_curve(out: Path, history: Sequence[dict], seconds: dict[int, float],
                validation: dict[str, float | None] | None = None) -> None:
    """OUT/curve.jsonl of the run's history so far (atomically: a reader never sees half of it)."""
    tmp = out / (CURVE_FILE + ".tmp")
    tmp.write_text("".join(json_dumps(r) + "\n" for r in curve_rows(history, seconds, validation)),
                   encoding="utf-8")
    tmp.replace(out / CURVE_FILE)


def curve_rows(history: Sequence[dict], seconds: dict[int, float] | None = None,
               validation: dict[str, float | None] | None = None) -> list[dict]:
    """The curve of a run: its history rows cut to `CURVE_KEYS`, with the wall time where it is known; with
    `validation` (formula -> validation score, a fold run's `validation_readings`) each row also has the validation
    score of its best program (None where that formula has no reading, or none is valid there)."""
    seconds = seconds or {}
    rows = [{k: (seconds.get(int(h["group"])) if k == "seconds" else h.get(k)) for k in CURVE_KEYS} for h in history]
    if validation is not None:
        for row, h in zip(rows, history):
            row[VALIDATION_KEY] = validation.get(h.get("best"))
    return rows


class _ValidationReadings:
    """The validation score of each distinct best program of a fold run, kept in OUT/validation.jsonl: scored once
    (a new best is rare after the first groups), read back on a resume. A formula's reading depends only on the
    formula and the fold, so a line cut by a kill is scored again to the same number."""

    def __init__(self, out: Path, scorer):
        self.path = out / VALIDATION_LOG
        self.scorer = scorer
        self.scores = validation_readings(out) or {}
        if not self.path.exists():
            self.path.write_text("", encoding="utf-8")

    def read(self, history: Sequence[dict]) -> dict[str, float | None]:
        new = [f for f in dict.fromkeys(h.get("best") for h in history) if f is not None and f not in self.scores]
        if new:
            with open(self.path, "a", encoding="utf-8") as fh:
                for formula in new:    # in the database: admitted by the search window's verifier
                    self.scores[formula] = self.scorer.reading(formula, True)["score"]
                    fh.write(json_dumps({"formula": formula, "validation": self.scores[formula]}) + "\n")
        return dict(self.scores)


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


def archive_lines(state: dict) -> list[dict]:
    """The run's archive lines as its checkpoint holds them (archive.jsonl's, once the run ended)."""
    return [v for _k, v in sorted(state["admitted"].items(), key=lambda kv: int(kv[0]))]


def run_pool(run_dir) -> tuple[list, tuple[str, ...]]:
    """What the finished run in `run_dir` found, for `alpha_gym.evaluation.walk_forward.score_fold`: its pool
    (`pool_of`) and the members of the book it chose on train at its end (book.json; on a fold its `train_book`,
    never the book it ships: score_fold's "book chosen on train" row is that book)."""
    run_dir = Path(run_dir)
    checked = read_state(run_dir)
    if checked.state["calls"] < checked.state["budget"]:
        raise EvolveRunError(f"{run_dir}: the run stopped at {checked.state['calls']} of its "
                             f"{checked.state['budget']} calls: rerun it to the end first")
    path = run_dir / BOOK_FILE
    book = read_json(path, "book") if path.exists() else None
    damage = "no such file" if book is None else book_damage(book)
    if damage is not None:
        raise EvolveRunError(f"{path} is missing or not the book an evolve run writes ({damage}): rerun the same "
                             "command to write it again")
    return pool_of(archive_lines(checked.state), checked.database.programs), tuple(train_book_of(book)["members"])


def pool_of(admitted: Sequence[dict], programs) -> list:
    """The run's pool (`walk_forward.PoolEntry`s): its archive lines (the formulas the verifier admitted), each with
    its train reward (its program's) and CPCV, and its best program when the archive left it out (a near-copy of
    an earlier entry)."""
    from alpha_gym.evaluation.walk_forward import PoolEntry
    programs = sorted(programs, key=lambda p: (-p.reward, p.id))
    by_text = {p.text: p for p in programs}
    pool = []
    for line in admitted:
        p = by_text.get(line["formula"])
        pool.append(PoolEntry(line["formula"], None if p is None else float(p.reward), line["train_cpcv"]))
    if programs and programs[0].text not in {e.formula for e in pool}:
        pool.append(PoolEntry(programs[0].text, float(programs[0].reward), programs[0].cpcv))
    return pool


# ------------------------------------------------------------------------------ the book a fold run ships
#: The keys a book chosen on the validation window adds to the engine's book.json (and the kept NAME.book.json).
TRAIN_BOOK_KEY = "train_book"
SHIPPED_KEYS = ("chosen_on", "rule", "fallback", "best", "train_best", "member_validation", TRAIN_BOOK_KEY)
#: The keys of the engine's book (book.json's, `evolution`), the train book kept under TRAIN_BOOK_KEY.
BOOK_KEYS = ("n_admitted", "n_members", "effective_bets", "members", "selection")
_TRAIN_KEYS = ("n_members", "effective_bets", "members", "selection")


def _members_damage(members) -> str | None:
    if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
        return "members is not a list of formulas"
    return None


def book_damage(book) -> str | None:
    """Why a book read back (book.json, or a kept NAME.book.json's book) is not one a run writes; None when it is
    one. A book shipped on a fold must carry its train book and say what it was chosen on."""
    if not isinstance(book, dict):
        return "not a JSON object"
    missing = [k for k in BOOK_KEYS if k not in book]
    if missing:
        return f"no {missing[0]}"
    if _members_damage(book["members"]):
        return _members_damage(book["members"])
    if "chosen_on" not in book and TRAIN_BOOK_KEY not in book:
        return None
    from alpha_gym.evaluation.shipped import ON_TRAIN, ON_VALIDATION
    missing = [k for k in SHIPPED_KEYS if k not in book]
    if missing:
        return f"a book shipped on a fold without {missing[0]}"
    if book.get("chosen_on") not in (ON_VALIDATION, ON_TRAIN):
        return f"chosen_on = {shown(book.get('chosen_on'))}: neither {ON_VALIDATION!r} nor {ON_TRAIN!r}"
    train = book.get(TRAIN_BOOK_KEY)
    if not isinstance(train, dict) or any(k not in train for k in _TRAIN_KEYS):
        return f"{TRAIN_BOOK_KEY} is not the book chosen on train"
    if _members_damage(train["members"]):
        return f"{TRAIN_BOOK_KEY}'s {_members_damage(train['members'])}"
    if book["chosen_on"] == ON_TRAIN and book["members"] != train["members"]:
        return "chosen on train, yet its members are not the train book's"
    return None


def train_book_of(book: dict) -> dict:
    """The book chosen on train of a book read back (checked by `book_damage`): the book itself on no fold, its
    `train_book` (with the book's other keys) when it was shipped on a fold."""
    if TRAIN_BOOK_KEY not in book:
        return book
    return {**{k: v for k, v in book.items() if k not in SHIPPED_KEYS}, **book[TRAIN_BOOK_KEY]}


def shipped_book(book: dict, choice: dict) -> dict:
    """A book chosen on train (book.json's keys) made into the book a fold run ships (`shipped.choose_to_ship`'s
    choice): the validation book's members and statistics in place of the train book's (kept under
    `train_book`), with what they were chosen on, the rule, the best by validation and by train; on a fallback
    the train book's members stay, and the file says why."""
    train = train_book_of(book)
    out = {**train, "chosen_on": choice["chosen_on"], "rule": choice["rule"], "fallback": choice["fallback"],
           "best": choice["best"], "train_best": choice["train_best"], "member_validation": None,
           TRAIN_BOOK_KEY: {k: train[k] for k in _TRAIN_KEYS}}
    chosen = choice["book"]
    if chosen is not None:
        out.update(n_members=len(chosen["members"]), effective_bets=chosen["selection"]["effective_bets"],
                   members=chosen["members"], selection=chosen["selection"],
                   member_validation=chosen["member_validation"])
    return out


def choice_of(shipped: dict) -> dict:
    """The choice (`shipped.choose_to_ship`'s keys) a shipped book read back (checked by `book_damage`) was made
    by, so that another copy of its train book ships the same (`shipped_book`)."""
    from alpha_gym.evaluation.shipped import ON_VALIDATION
    on_validation = shipped["chosen_on"] == ON_VALIDATION
    return {**{k: shipped[k] for k in ("chosen_on", "rule", "fallback", "best", "train_best")},
            "book": {k: shipped[k] for k in ("members", "member_validation", "selection")} if on_validation else None}


def ship_on_validation(out, verifier, panels) -> dict:
    """Rewrite the finished fold run's OUT/book.json as the book it ships (`shipped_book`: chosen on the fold's
    validation window from the run's pool, under the run's own book rule) and return it. The choice depends on
    the pool and the fold alone, so a resumed run, or a rerun of a finished one, ships the same book.

    verifier: a `Verifier` on the fold's search window; panels: the fold's `FoldPanels` (its test window is never
    read)."""
    from alpha_gym.evaluation.shipped import choose_to_ship
    out = Path(out)
    checked = read_state(out)
    path = out / BOOK_FILE
    book = read_json(path, "book")
    damage = book_damage(book)
    if damage is not None or book.get("groups") != checked.state["groups"]:
        raise EvolveRunError(f"{path} is not the book of the run's last checkpoint "
                             f"({damage or 'another group'}): rerun the same command to write it again")
    rule = checked.state["settings"]["book"]
    choice = choose_to_ship(pool_of(archive_lines(checked.state), checked.database.programs), verifier, panels,
                            max_corr=rule["max_corr"], min_turnover=rule["min_turnover"])
    shipped = shipped_book(book, choice)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json_dumps(shipped, indent=1), encoding="utf-8")
    tmp.replace(path)
    return shipped
