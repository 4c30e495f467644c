"""An evolve run folder read back: the lock a run holds on it, its checkpoint (state.json) checked field by field,
and its proposals log cut back to the checkpoint.

    lock         `locked(out)`: an exclusive `flock` on OUT/evolve.lock for as long as a run (or a rewrite of its
                 kept files) uses the folder. A second process is refused in one line naming the process that
                 holds it; the kernel drops the lock when that process ends, however it ends, so a killed run
                 leaves no lock that blocks its rerun. The thread that holds it may take it again (the command
                 locks the folder, then `evolve` does)
    state.json   `read_state(folder)`: the text (UTF-8, nested at most MAX_DEPTH deep, without NaN or Infinity,
                 which the run's writer never writes), then every field: its type and range, how the fields
                 agree (calls in [0, budget], one history row per group, programs scored by calls the run made,
                 the settings the database and bandit were built with), the program database parsed again under
                 the run's Limits (`ProgramDatabase.from_dict`: an edited formula text reaches no prompt), the
                 bandit, the generator's state, and the files it names: one of the two archive slots, and the
                 learners' files of the same slot, present in the folder
    the log      `read_log`: proposals.jsonl's lines of the checkpointed groups, checked to hold the calls the
                 state counts (one scored line per call, 1..calls in order). The lines of later groups are left
                 out, and so is a last line cut short (no newline): both are what a kill leaves, written
                 before the checkpoint that would have counted them, so the rerun resumes as from any kill

Anything else is one RunStateError (an InputError: one line on the command line) naming the file and the field.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from alpha_gym.errors import InputError
from alpha_gym.language import DEFAULT_LIMITS, Limits
from alpha_gym.ranges import SettingError, check_value, closed, ints, shown
from alpha_gym.search.bandit import Bandit
from alpha_gym.search.database import REFRESH_MODES, REWARD_BOUND, ProgramDatabase
from alpha_gym.service.http_json import json_depth

STATE_FORMAT = "alpha-gym/evolve/v1"
STATE_FILE = "state.json"
PROPOSALS_LOG = "proposals.jsonl"
LOCK_FILE = "evolve.lock"
ARCHIVE_SLOTS = ("archive-even.npz", "archive-odd.npz")   # the verifier's archive, written in turn (`archive_slot`)
#: The deepest nesting a state or a log line may have (a state nests 5 levels, a log line 2).
MAX_DEPTH = 64
#: The most calls (and rejections) a state may count: far above any budget (the command's largest is 10^7).
MAX_CALLS = 10**12
_STATE_KEYS = {"format", "settings", "budget", "calls", "groups", "seeded", "rejected", "rng", "database", "bandit",
               "admitted", "history", "archive"}
_HISTORY_KEYS = {"group", "calls", "budget", "best_reward", "best", "programs", "book_members", "effective_bets",
                 "book_cpcv", "admitted", "rejected", "refresh", "arms"}
_ADMITTED_KEYS = {"step", "formula", "form", "train_cpcv", "turnover", "added"}
_REWARDS = closed(-REWARD_BOUND, REWARD_BOUND)


class RunStateError(InputError):
    """A run folder that cannot be used: in use by another process, not a folder, or a checkpoint or log that
    is damaged or was edited (the message names the file and the field)."""


def archive_slot(turn: int) -> str:
    """The archive file of slot `turn` (0 or 1). Each checkpoint writes the slot the state before it does not name,
    so that state's files stay whole until the new state replaces it (a kill in between resumes from them), and
    removes the other slot once the new state is written: the folder keeps the one file a resume reads."""
    return ARCHIVE_SLOTS[turn % 2]


def learner_file(name: str, turn: int) -> str:
    """The file a learning mutator's state goes to in slot `turn`, with the archive's."""
    return f"learner-{name}-{'even' if turn % 2 == 0 else 'odd'}.pt"


# ------------------------------------------------------------------------------------------ the folder and its lock
def check_folder(path, what: str = "the run folder") -> Path:
    """`path` as a Path when it is a folder or can be made one; RunStateError when it or a folder above it is a
    file (`--out /dev/null`, a FIFO, a path under a file)."""
    path = Path(path)
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                raise RunStateError(f"{path} is not a folder" + ("" if p == path else f" ({p} is a file)")
                                    + f": {what} must be a folder, or a path where one can be made")
            break
    return path


_HELD: dict[Path, list] = {}      # resolved folder -> [lock file, times taken, thread]: this process's locks
_HELD_GUARD = threading.Lock()


@contextmanager
def locked(out) -> Iterator[Path]:
    """Hold the run folder `out` (made if missing) for the block: RunStateError at once when another process,
    or another thread of this one, holds it (see the module docstring)."""
    folder = check_folder(out)
    folder.mkdir(parents=True, exist_ok=True)
    key = folder.resolve()
    with _HELD_GUARD:
        held = _HELD.get(key)
        if held is not None and held[2] == threading.get_ident():
            held[1] += 1
            mine = True
        else:
            mine = False
    if mine:
        try:
            yield folder
        finally:
            with _HELD_GUARD:
                held[1] -= 1
        return
    fh = open(key / LOCK_FILE, "a+", encoding="utf-8")
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.seek(0)
        holder = fh.read().strip()[:20]
        fh.close()
        raise RunStateError(f"{out} is in use by another evolve run (process {holder or '?'} holds {LOCK_FILE}): "
                            "wait for it to end, or give another run folder") from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()}\n")
    fh.flush()
    with _HELD_GUARD:
        _HELD[key] = [fh, 1, threading.get_ident()]
    try:
        yield folder
    finally:
        with _HELD_GUARD:
            del _HELD[key]
        fh.close()                    # closing the file drops the lock


# ------------------------------------------------------------------------------------------ state.json
@dataclass(frozen=True)
class RunState:
    """A checkpoint read back and checked: its JSON, and the run's database, bandit and Limits built from it."""

    state: dict
    database: ProgramDatabase
    bandit: Bandit
    limits: Limits


class _Constant(ValueError):
    pass


def _refuse_constant(name: str):
    raise _Constant(name)


def read_json(path: Path, what: str) -> Any:
    """The JSON value in the file `path` (a `what` of an evolve run); RunStateError for text that is not UTF-8,
    not JSON, nested deeper than MAX_DEPTH or holding NaN or Infinity."""
    raw = Path(path).read_bytes()
    depth = json_depth(raw)
    if depth > MAX_DEPTH:
        raise RunStateError(f"{path} nests {depth} levels deep (at most {MAX_DEPTH}): not the {what} of an evolve run")
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except UnicodeDecodeError as err:
        raise RunStateError(f"{path} is not UTF-8 text (byte {err.start}): damaged") from None
    except _Constant as err:
        raise RunStateError(f"{path} holds {err}, which no evolve run writes: edited or damaged") from None
    except json.JSONDecodeError as err:
        raise RunStateError(f"{path} is not JSON ({err.msg}, line {err.lineno} column {err.colno}): damaged or "
                            "cut short") from None


def load_state_json(path: Path) -> dict:
    """state.json's object once it is an evolve state's JSON (its fields are `check_state`'s)."""
    state = read_json(path, "state")
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        got = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise RunStateError(f"{path} is not an evolve state (format {shown(got)}, expected {STATE_FORMAT!r})")
    return state


def read_state(folder) -> RunState:
    """The checkpoint of the run in `folder`, read and checked (`check_state`)."""
    path = Path(folder) / STATE_FILE
    return check_state(load_state_json(path), Path(folder), path)


def check_state(state: dict, folder: Path, path: Path | None = None) -> RunState:
    """Every field of a checkpoint (see the module docstring); RunStateError naming `path` and the field."""
    where = path or Path(folder) / STATE_FILE
    try:
        return _checked(state, Path(folder))
    except (RunStateError, InputError) as err:      # the database's, the bandit's and the settings' errors too
        raise RunStateError(f"{where}: {err}") from None


def _checked(state: dict, folder: Path) -> RunState:
    if set(state) - {"learners"} != _STATE_KEYS:
        odd = sorted((set(state) - {"learners"}) ^ _STATE_KEYS)[0]
        raise RunStateError(f"no {odd!r}" if odd in _STATE_KEYS else f"an unknown field {odd!r}")
    settings = _settings(state["settings"])
    limits = run_limits(settings)
    budget = _int(state, "budget", 0, MAX_CALLS)
    calls = _int(state, "calls", 0, budget)
    groups = _int(state, "groups", min(calls, 1), calls)     # every group makes at least one call
    _int(state, "seeded", 0, min(calls, len(settings["seed_formulas"])))
    _int(state, "rejected", 0, MAX_CALLS)
    _check_rng(state["rng"])
    database = ProgramDatabase.from_dict(state["database"], limits)
    if database.config.to_dict() != settings["database"]:
        raise RunStateError("the database's config is not the run's settings' (database)")
    programs = database.programs
    if len(programs) > calls or [p.call for p in programs] != sorted({p.call for p in programs}) \
            or any(not 1 <= p.call <= calls for p in programs):
        raise RunStateError(f"its programs are not {calls} calls' (one program per valid call, in call order)")
    if database.last_refresh > calls:
        raise RunStateError(f"database.last_refresh = {database.last_refresh}: after the run's {calls} calls")
    bandit = Bandit.from_dict(state["bandit"])
    if bandit.arms != settings["mutators"] or bandit.config.to_dict() != settings["bandit"]:
        raise RunStateError("the bandit's arms or config are not the run's settings' (mutators, bandit)")
    _check_admitted(state["admitted"], database, groups)
    _check_history(state["history"], database, groups, calls)
    _check_files(state, folder, settings["mutators"])
    return RunState(state, database, bandit, limits)


def _int(d: Mapping, key: str, lo: int, hi: int, owner: str = "state") -> int:
    try:
        check_value(owner, key, d[key], ints(lo, hi))
    except SettingError as err:
        raise RunStateError(str(err)) from None
    return d[key]


def _number(d: Mapping, key: str, rng, owner: str, optional: bool = True) -> None:
    if d[key] is None and optional:
        return
    try:
        check_value(owner, key, d[key], rng)
    except SettingError as err:
        raise RunStateError(str(err)) from None


def _settings(settings: Any) -> dict:
    """The settings the readers of a run use, checked (a resume compares all of them with its own first)."""
    if not isinstance(settings, dict):
        raise RunStateError(f"settings = {shown(settings)}: must be the run's settings object")
    for key, tp in (("seed", int), ("group_size", int), ("mutators", list), ("seed_formulas", list),
                    ("database", dict), ("bandit", dict), ("book", dict)):
        if key not in settings or type(settings[key]) is not tp:
            raise RunStateError(f"settings.{key} = {shown(settings.get(key))}: must be a {tp.__name__}")
    names = settings["mutators"]
    if not names or len(set(map(str, names))) != len(names) or not all(isinstance(n, str) and n for n in names):
        raise RunStateError(f"settings.mutators = {shown(names)}: must be distinct mutator names")
    if not all(isinstance(f, str) for f in settings["seed_formulas"]):
        raise RunStateError("settings.seed_formulas must be formulas (strings)")
    _int(settings, "seed", 0, 2**64, "settings")
    _int(settings, "group_size", 1, MAX_CALLS, "settings")
    book = settings["book"]
    if set(book) != {"max_corr", "min_turnover"}:
        raise RunStateError(f"settings.book = {shown(book)}: must hold max_corr and min_turnover")
    _number(book, "max_corr", closed(0.0, 1.0), "settings.book", optional=False)
    _number(book, "min_turnover", closed(0.0, 2.0), "settings.book", optional=False)
    return settings


def run_limits(settings: Mapping) -> Limits:
    """The Limits the run's verifier held answers to (its settings' verifier.limits; the defaults without them)."""
    from alpha_gym.settings import from_dict
    verifier = settings.get("verifier")
    if not isinstance(verifier, Mapping) or "limits" not in verifier:
        return DEFAULT_LIMITS
    if not isinstance(verifier["limits"], Mapping):
        raise RunStateError(f"settings.verifier.limits = {shown(verifier['limits'])}: must be an object")
    try:
        return from_dict(Limits, verifier["limits"], where="limits")
    except InputError as err:
        raise RunStateError(f"the run's verifier limits cannot be read: {err}") from None


def _check_rng(rng: Any) -> None:
    """numpy's PCG64 state, as `Generator.bit_generator.state` gives it."""
    ok = (isinstance(rng, dict) and set(rng) == {"bit_generator", "state", "has_uint32", "uinteger"}
          and rng["bit_generator"] == "PCG64" and isinstance(rng["state"], dict)
          and set(rng["state"]) == {"state", "inc"}
          and all(type(v) is int and 0 <= v < 2**128 for v in rng["state"].values())
          and rng["state"]["inc"] % 2 == 1                        # PCG's increment is odd
          and rng["has_uint32"] in (0, 1) and type(rng["has_uint32"]) is int
          and type(rng["uinteger"]) is int and 0 <= rng["uinteger"] < 2**32)
    if not ok:
        raise RunStateError(f"rng = {shown(rng)}: not the state of the run's PCG64 generator")


def _check_admitted(admitted: Any, database: ProgramDatabase, groups: int) -> None:
    """program id -> its archive.jsonl line (the formula the program's, the group one the run made)."""
    if not isinstance(admitted, dict):
        raise RunStateError(f"admitted = {shown(admitted)}: must map program ids to archive lines")
    for key, line in admitted.items():
        if not (key.isascii() and key.isdigit()) or str(int(key)) != key or int(key) >= len(database.programs):
            raise RunStateError(f"admitted names {shown(key)}, not a program of the database")
        owner = f"admitted[{key}]"
        if not isinstance(line, dict) or set(line) != _ADMITTED_KEYS:
            raise RunStateError(f"{owner} = {shown(line)}: must be an archive line ({', '.join(sorted(_ADMITTED_KEYS))})")
        if line["formula"] != database.programs[int(key)].text or not isinstance(line["form"], str):
            raise RunStateError(f"{owner}.formula = {shown(line['formula'])}: not program {key}'s formula")
        _int(line, "step", 1, groups, owner)
        _int(line, "added", 0, 2**64, owner)
        _number(line, "train_cpcv", _REWARDS, owner)
        _number(line, "turnover", closed(0.0, 2.0 + 1e-6), owner)


def _check_history(history: Any, database: ProgramDatabase, groups: int, calls: int) -> None:
    """One row per group: its number, its calls (rising to the state's), the best program then, the counts."""
    if not isinstance(history, list):
        raise RunStateError(f"history = {shown(history)}: must be a list of one row per group")
    if len(history) != groups:
        raise RunStateError(f"history holds {len(history)} rows for the run's {groups} groups")
    rewards = {p.text: p.reward for p in database.programs}
    last = 0
    for k, row in enumerate(history):
        owner = f"history[{k}]"
        if not isinstance(row, dict) or set(row) - {"updates"} != _HISTORY_KEYS:
            raise RunStateError(f"{owner} = {shown(row)}: must be a history row ({', '.join(sorted(_HISTORY_KEYS))})")
        _int(row, "group", k + 1, k + 1, owner)
        last = _int(row, "calls", last + 1, calls, owner)
        _int(row, "budget", last, MAX_CALLS, owner)
        for key in ("programs", "book_members", "admitted", "rejected"):
            _int(row, key, 0, MAX_CALLS, owner)
        _number(row, "best_reward", _REWARDS, owner)
        _number(row, "effective_bets", closed(0.0, 1e9), owner)
        _number(row, "book_cpcv", _REWARDS, owner)
        if (row["best"] is None) != (row["best_reward"] is None) or (
                row["best"] is not None and rewards.get(row["best"]) != row["best_reward"]):
            raise RunStateError(f"{owner}.best = {shown(row['best'])}: not a program of the run with that reward")
        if row["refresh"] is not None and row["refresh"] not in REFRESH_MODES:
            raise RunStateError(f"{owner}.refresh = {shown(row['refresh'])}: must be one of {REFRESH_MODES}")
        arms = row["arms"]
        if not isinstance(arms, dict) or any(not isinstance(v, (int, float)) or isinstance(v, bool)
                                             or not 0.0 <= v <= 1.0 for v in arms.values()):
            raise RunStateError(f"{owner}.arms = {shown(arms)}: must give each arm its share in [0, 1]")
        if "updates" in row and not isinstance(row["updates"], dict):
            raise RunStateError(f"{owner}.updates = {shown(row['updates'])}: must be an object")
    if groups and last != calls:
        raise RunStateError(f"history ends at {last} calls, the state at {calls}")


def _check_files(state: dict, folder: Path, mutators: list) -> None:
    """The files the state names: an archive slot and the learners' files of the same slot, in the folder."""
    archive = state["archive"]
    if archive not in ARCHIVE_SLOTS:
        raise RunStateError(f"archive = {shown(archive)}: a checkpoint names {ARCHIVE_SLOTS[0]!r} or "
                            f"{ARCHIVE_SLOTS[1]!r}, a file of the run folder")
    turn = ARCHIVE_SLOTS.index(archive)
    names = {"archive": (archive, archive)}
    learners = state.get("learners", {})
    if not isinstance(learners, dict) or any(n not in mutators for n in learners):
        raise RunStateError(f"learners = {shown(learners)}: must map the run's mutators to their files")
    names.update({f"learners.{n}": (f, learner_file(n, turn)) for n, f in learners.items()})
    inside = folder.resolve()
    for key, (given, expected) in names.items():
        if given != expected or (folder / expected).resolve().parent != inside:
            raise RunStateError(f"{key} = {shown(given)}: the checkpoint that names {archive!r} names "
                                f"{expected!r}, a file of the run folder")
        if not (folder / expected).is_file():
            raise RunStateError(f"{key} = {shown(given)}: no such file in {folder} (the checkpoint's own file: "
                                "removed or not this run's)")


# ------------------------------------------------------------------------------------------ the log
def read_log(path: Path, groups: int, calls: int) -> list[tuple[str, dict]]:
    """(line, row) of each line of proposals.jsonl for groups <= `groups`, checked to hold the checkpoint's
    `calls` scored calls 1..calls in order (see the module docstring for what is left out)."""
    path = Path(path)
    pieces = path.read_bytes().split(b"\n") if path.exists() else [b""]
    pieces.pop()                          # after the last newline: empty, or a line a kill cut short
    kept, scored = [], []
    for n, piece in enumerate(pieces, start=1):
        if not piece.strip():
            continue
        row = _log_row(piece, path, n)
        if row["group"] <= groups:
            kept.append((piece.decode("utf-8"), row))
            if row.get("status") == "scored":
                scored.append(row.get("call"))
    if scored != list(range(1, calls + 1)):
        raise RunStateError(f"{path} does not hold the checkpoint's {calls} calls in order ({len(scored)} scored "
                            f"lines in its first {groups} groups): damaged or edited; the run cannot resume from it")
    return kept


def _log_row(piece: bytes, path: Path, n: int) -> dict:
    if json_depth(piece) > MAX_DEPTH:
        raise RunStateError(f"{path}: line {n} nests more than {MAX_DEPTH} levels deep: not a log line")
    try:
        row = json.loads(piece.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError) as err:
        raise RunStateError(f"{path}: line {n} is not a JSON line ({type(err).__name__}): damaged") from None
    if not isinstance(row, dict) or type(row.get("group")) is not int or row["group"] < 1:
        raise RunStateError(f"{path}: line {n} is not a log line (an object with its group number)")
    return row
