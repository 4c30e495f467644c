"""`alpha-gym evolve`: evolution from a program database under an exact verifier-call budget.

    alpha-gym evolve --budget 1600 --out runs/evolve-tree                      # the synthetic market
    alpha-gym evolve --data ../shared/data/us_equities/us_daily_train.csv.gz \\
        --universe ../shared/data/us_equities/universe_us46.txt --budget 10000 --out runs/evolve-us46
    alpha-gym evolve ... --mutator tree --mutator endpoint:http://127.0.0.1:8000/v1#NAME   # the bandit shares
    alpha-gym evolve ... --mutator rl:recipe=cispo,group=4,every=2 --out runs/evolve-rl   # trains the start model
    alpha-gym compare --scale cpu --report-only --results runs/evolve-tree/results --out runs/table
    alpha-gym holdout-formulas --formulas runs/evolve-tree/results/seed-0/evolve.jsonl ...

With `--fold K` (1..5) the run sees only the search window of walk-forward fold K (`alpha_gym.market.folds`:
test windows of --pseudo-holdout sessions counted back from the data's end, so fold 5's is the pseudo-holdout,
a validation window as long before each, and a 252-session purge before that); its kept answers are scored on
the validation window, and after the run what it chose (its best, top 20 and book by train reward, and by
validation score among its 100 best by train reward) is scored on the validation and test windows: printed, and
written to OUT/walk-forward.json and walk-forward.jsonl (`alpha_gym.evaluation.walk_forward`). Along the run, each
curve row also has the validation score of the run's best by train reward (best_validation; each new best scored
once, kept in OUT/validation.jsonl), as a loss curve shows train and validation loss; the test window is read
only after the run. The run ships what it chooses on the validation window: book.json and the kept book hold
the correlation-capped book chosen there among its 100 best by train reward (the book chosen on train kept beside
it as train_book), and the summary names its best by validation beside its best by train reward.

The last `--pseudo-holdout` sessions of the data are cut off before the run (the comparison's pseudo-holdout:
252 at its cpu and gpu scales, 120 at smoke), and only the kept answers are scored on them. The run writes
into --out its checkpoint (state.json, written after each group while that is cheap, else once the time since
the last is 20 times what it took: a rerun of the same command resumes from it; a larger
--budget goes on; other settings are refused), proposals.jsonl, the run's archive (archive.jsonl), its
correlation-capped book (book.json) and its curve (curve.jsonl: calls, best train reward, book members,
effective bets, book CPCV, seconds), and into --results (default OUT/results) the kept files of the
comparison's `evolve` arm for `--probe` probe briefs (`trainers.compare.arms.kept`). `--keep-at CALLS`
rewrites those kept files as the run stood at CALLS calls, without a new call. The curve, the archive and
the book are written with each checkpoint, so a stopped run has them as they stood then. The summary at the end
says where the calls went (the seeds, each mutator, the random fill that takes the places the mutators left
empty) and each mutator's share of the proposals the bandit handed out.

An endpoint mutator's server is asked first (its model list and one short chat request): one that cannot answer
is named in one line before any data is read. On stderr: one progress line per group, a line while a group
waits for its proposals (answers asked, parsed, refused) and one when the mutators wrote no new formula and
random ones fill the group; a resumed run says at how many calls it resumes. One run uses a folder at a time:
a second command on a folder in use is refused. Ctrl-C, SIGINT or SIGTERM stop the run at once, also when it was
started in the background from a script (which hands it SIGINT ignored); rerun the same command to resume.
Exit status 0; 2 for bad input (a damaged or edited checkpoint among it); 3 when an endpoint cannot answer;
130 after Ctrl-C or SIGINT, 143 after SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

from alpha_gym.commands.flags import add_data_args, add_settings_args, panel_from_args, settings_from_args, universe_arg
from alpha_gym.commands.flags import fold_arg
from alpha_gym.evaluation.endpoint import EndpointFailure
from alpha_gym.evaluation.validation import ValidationScorer
from alpha_gym.market.folds import fold_panels
from alpha_gym.ranges import flag, ints
from alpha_gym.search.database import DATABASE_RANGES, REFRESH_MODES, DatabaseConfig
from alpha_gym.search.evolve_arm import VALIDATION_KEY, EvolveRunError, check_run_folder, run_evolve
from alpha_gym.search.mutators import check_endpoints, kinds_line, parse_spec
from trainers.compare.arms.kept import keep_evolve
from trainers.mutators import MUTATORS
from alpha_gym.search.run_state import check_folder, locked

#: The most verifier calls one run may be given (10,000 is the comparison's largest budget).
MAX_BUDGET = 10_000_000


def register(subparsers) -> argparse.ArgumentParser:
    """Add `evolve` to `subparsers` (what `ArgumentParser.add_subparsers()` returns)."""
    p = subparsers.add_parser("evolve", help="evolve formulas from a program database under an exact verifier-call "
                                             "budget (model-free tree operators, a model, or a bandit over several)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(func=main)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The command's flags."""
    d = DatabaseConfig()
    p.add_argument("--budget", type=flag(ints(1, MAX_BUDGET)), default=1600,
                   help="verifier calls, exactly (e.g. 1600, 4800, 10000; default 1600)")
    p.add_argument("--mutator", action="append", metavar="SPEC", dest="mutators",
                   help=f"a mutation operator, repeatable (more than one: a bandit shares the calls): {kinds_line(MUTATORS)} "
                        "(default: tree)")
    p.add_argument("--out", required=True, help="the run folder (checkpoint, logs, archive, book, curve)")
    p.add_argument("--results", help="folder for the kept files of the comparison arm (default: OUT/results)")
    p.add_argument("--seed", type=flag(ints(0, 2**32 - 1)), default=0,
                   help="of the run's one random generator (parents, mutators, bandit, fill) and an endpoint's "
                        "request seeds; the same seed gives the same run (default 0)")
    p.add_argument("--islands", type=flag(DATABASE_RANGES["n_islands"]), default=d.n_islands,
                   help=f"islands of the program database, each evolving on its own (default {d.n_islands})")
    p.add_argument("--parents", type=flag(DATABASE_RANGES["parents_per_prompt"]), default=d.parents_per_prompt,
                   help=f"parents per proposal (default {d.parents_per_prompt})")
    p.add_argument("--temperature", type=flag(DATABASE_RANGES["temperature"]), default=d.temperature,
                   help="of the parent draw, on rewards scaled by the island's median absolute deviation (default "
                        f"{d.temperature:g})")
    p.add_argument("--cells", action=argparse.BooleanOptionalAction, default=d.cells,
                   help="cap each (family, horizon) cell of an island so one idea cannot fill it (default: "
                        f"{'--cells' if d.cells else '--no-cells'})")
    p.add_argument("--cell-capacity", type=flag(DATABASE_RANGES["cell_capacity"]), default=d.cell_capacity,
                   metavar="PROGRAMS", help=f"programs a cell holds with --cells (default {d.cell_capacity})")
    p.add_argument("--refresh", choices=REFRESH_MODES, default=d.refresh,
                   help=f"what happens to the islands every --refresh-interval calls (default {d.refresh})")
    p.add_argument("--refresh-interval", type=flag(DATABASE_RANGES["refresh_interval"]),
                   default=d.refresh_interval, metavar="CALLS",
                   help=f"verifier calls between refreshes (default {d.refresh_interval})")
    p.add_argument("--group-size", type=flag(ints(1, 4096)), default=8, metavar="ANSWERS",
                   help="answers scored together (a training step's group; default 8, the cpu comparison's)")
    p.add_argument("--pseudo-holdout", type=flag(ints(1, 100_000)), default=252, metavar="SESSIONS",
                   help="sessions at the end of the data held out of the run (default 252, the comparison's; "
                        "smoke: 120)")
    p.add_argument("--probe", type=flag(ints(1, 10_000)), default=50, metavar="BRIEFS",
                   help="probe briefs the kept answers are for (default 50, the comparison's; smoke: 2)")
    p.add_argument("--brief", metavar="ID", help="a brief the model mutators' prompts carry (seeded or fixed id; "
                                                 "default: none)")
    p.add_argument("--workers", type=flag(ints(1)), default=None,
                   help="scoring processes (default: every usable core the memory holds; 1: this process); the run "
                        "is the same on any number")
    p.add_argument("--keep-at", type=flag(ints(1, MAX_BUDGET)), metavar="CALLS",
                   help="no new call: rewrite the kept files as the run in --out stood at CALLS calls (under the "
                        "run's own arm name and seed, from its stamp)")
    p.add_argument("--fold", type=fold_arg(), metavar="K",
                   help="a walk-forward fold, 1..5 (oldest first): the run sees only its search window; its choices "
                        "are then scored on its validation window and test year (OUT/walk-forward.json)")
    add_data_args(p)
    add_settings_args(p)


def split_panel(full, pseudo_holdout: int):
    """(train, pseudo-holdout): the last `pseudo_holdout` sessions cut off, as the comparison cuts them."""
    cut = full.n_days - pseudo_holdout
    if cut < 120:
        raise EvolveRunError(f"--pseudo-holdout {pseudo_holdout} leaves {max(cut, 0)} of the data's {full.n_days} "
                             "sessions to evolve on: at least 120 are needed")
    return full.window(end=full.dates[cut - 1]), full.window(start=full.dates[cut])


def main(args) -> int:
    try:
        with stopped_by_signals():
            return _main(args)
    except EndpointFailure as err:       # the server stopped answering during the run
        print(f"alpha-gym evolve: error: {err}; the run in {args.out} resumes from its last checkpoint: rerun the "
              "same command once the endpoint answers", file=sys.stderr)
        return 3
    except KeyboardInterrupt as stop:
        how = f"stopped by {signal.Signals(stop.signum).name}" if isinstance(stop, Stopped) else "interrupted"
        print(f"alpha-gym evolve: {how}; the run in {args.out} resumes from its last checkpoint: rerun the same "
              "command", file=sys.stderr)
        return 128 + (stop.signum if isinstance(stop, Stopped) else signal.SIGINT)


def _main(args) -> int:
    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.tasks.sets import brief_set, require_brief
    mutators = args.mutators or ["tree"]
    for spec in mutators:                      # a bad spec is named before any data is read
        parse_spec(spec, MUTATORS)
    check_folder(args.out, "--out")
    check_folder(args.results or f"{args.out}/results", "--results")
    if len(set(mutators)) != len(mutators):
        raise EvolveRunError(f"--mutator names {sorted(m for m in set(mutators) if mutators.count(m) > 1)[0]!r} "
                             "twice: give each mutator once")
    if args.keep_at is None:              # as `alpha-gym eval` does: a dead endpoint is named before the data load
        try:
            check_endpoints(mutators, seed=args.seed, rows=MUTATORS)
        except EndpointFailure as err:
            print(f"alpha-gym evolve: error: {err}", file=sys.stderr)
            return 3
    database = DatabaseConfig(n_islands=args.islands, parents_per_prompt=args.parents, temperature=args.temperature,
                              cells=args.cells, cell_capacity=args.cell_capacity, refresh=args.refresh,
                              refresh_interval=args.refresh_interval)
    brief = require_brief(args.brief) if args.brief else None
    probe = list(brief_set("probe"))
    if args.probe > len(probe):
        raise EvolveRunError(f"--probe {args.probe}: there are {len(probe)} probe briefs")
    probe = probe[: args.probe]
    full = panel_from_args(args)
    fold = None if args.fold is None else fold_panels(full, args.fold, args.pseudo_holdout)
    train, holdout = split_panel(full, args.pseudo_holdout) if fold is None else (fold.search, fold.validation)
    history = None if fold is None else fold.validation_history    # the validation window's lookback: the purge
    verifier = Verifier(train, settings_from_args(args).verifier)
    if args.keep_at is not None:
        # the run's own arm name and seed (its stamp): a comparison's evolve_model or random run folder is kept
        # under its name, so another budget's --results reads it as that arm
        stamp = check_run_folder(args.out, train, probe)
        results = args.results or f"{args.out}/results"
        with locked(args.out):      # not while a run goes on in the folder: it rewrites the same kept files
            keep_evolve(args.out, verifier, train, holdout, probe, results, int(stamp["seed"]), calls=args.keep_at, holdout_history=history,
                        name=stamp.get("name", "evolve"), fold=fold,
                        config={k: stamp[k] for k in ("mutators", "database", "group_size") if k in stamp})
        print(f"kept the run in {args.out} ({stamp.get('name', 'evolve')}, seed {stamp['seed']}) at {args.keep_at} "
              f"calls into {results}")
        return 0
    if args.workers is not None:  # refused here, naming the flag, before the run folder is claimed
        from alpha_gym.pool import worker_bytes
        from alpha_gym.ranges import check_workers
        check_workers(args.workers, "--workers", worker_bytes(train), allow_zero=False)
    universe = universe_arg(args.universe)
    about = {"data": args.data, "universe": universe, **({} if fold is None else {"fold": fold.fold.to_dict()})}
    numbers = run_evolve(verifier, train, holdout, probe, mutators=mutators, budget=args.budget, seed=args.seed,
                         out=args.out, results=args.results, database=database, group_size=args.group_size,
                         brief=brief, about=about, workers=args.workers, holdout_history=history, rows=MUTATORS,
                         keep=keep_evolve, validation=None if fold is None else ValidationScorer(fold, verifier))
    c = numbers["curve"][-1]
    best = "-" if c["best_reward"] is None else f"{c['best_reward']:+.3f}"
    print(f"evolve: {c['calls']} verifier calls in {c['seconds'] or 0:.1f} s, best train reward {best}, book "
          f"{c['book_members']} members ({c['effective_bets']:.1f} effective bets), kept answers valid "
          f"{numbers['checkpoints'][0]['train_valid']}/{len(probe)}; run folder {args.out}")
    if "shipped" in numbers:
        print(shipped_lines(numbers["shipped"]))
    elif VALIDATION_KEY in c:
        score = "- (not valid there)" if c[VALIDATION_KEY] is None else f"{c[VALIDATION_KEY]:+.3f}"
        print(f"evolve: the best by train reward scores {score} on the fold's validation window")
    print(calls_summary(args.out))
    if fold is not None:
        walk_forward(args.out, verifier, fold)
    return 0


def shipped_lines(shipped: dict) -> str:
    """What a fold run ships (NAME.json's "shipped"), in lines: its best by validation with its validation score,
    the best by train reward beside it, or the fallback to the train choice and why."""
    def said(x):
        if x is None:
            return "none"
        v = "- (not valid there)" if x["validation"] is None else f"{x['validation']:+.3f}"
        r = "-" if x["reward"] is None else f"{x['reward']:+.3f}"
        return f"{x['formula']} (validation {v}, train reward {r})"
    rule = shipped["rule"]
    if shipped["fallback"]:
        return (f"evolve: ships the choice on train: {shipped['fallback']}\n"
                f"evolve: best by train reward {said(shipped['train_best'])}")
    return (f"evolve: ships the book and best chosen on the fold's validation window ({rule['valid_on_validation']} of "
            f"the {rule['candidates']} best by train reward valid there)\n"
            f"evolve: best by validation {said(shipped['best'])}\n"
            f"evolve: best by train reward {said(shipped['train_best'])}")


def calls_summary(out) -> str:
    """Where the run's verifier calls went (the seeds, each mutator, the random fill) and each mutator's share of
    the proposals the bandit handed out, scored or refused, read from OUT/proposals.jsonl."""
    import json
    from collections import Counter
    from alpha_gym.search.run_state import PROPOSALS_LOG
    calls, asked = Counter(), Counter()
    try:
        lines = (Path(out) / PROPOSALS_LOG).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        return f"calls by origin: n/a ({PROPOSALS_LOG} unreadable: {type(err).__name__})"
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("origin"), str):
            calls[row["origin"]] += row.get("status") == "scored"
            asked[row["origin"]] += row["origin"] not in ("seed", "random")
    total, handed = sum(calls.values()), sum(asked.values())
    line = "calls by origin: " + ", ".join(f"{o} {n} ({n / total:.0%})" for o, n in calls.most_common() if n) \
        if total else "calls by origin: none"
    if handed:
        line += "; the bandit's proposals: " + ", ".join(
            f"{o} {n / handed:.0%} ({n} asked, {calls[o]} scored)" for o, n in asked.most_common() if n)
    return line


def walk_forward(out, verifier, fold) -> None:
    """What the finished run in `out` chose, scored on the fold's validation and test windows: printed and written."""
    from alpha_gym.evaluation.walk_forward import score_fold, summary_lines, write_walk_forward
    from alpha_gym.search.evolve_arm import run_pool
    pool, book = run_pool(out)
    result = score_fold(pool, verifier, fold, book=book, label="evolve")
    paths = write_walk_forward(out, result)
    print("\n".join(summary_lines(result) + [f"  written to {paths[0]} and {paths[1].name}"]))


class Stopped(KeyboardInterrupt):
    """SIGTERM, raised where the run stands as Ctrl-C is (the same unwinding: the checkpoint on disk stays)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stopped(signum, _frame):
    raise Stopped(signum)


@contextmanager
def stopped_by_signals():
    """SIGINT and SIGTERM stop the run for the block (KeyboardInterrupt, `Stopped`), whatever this process
    inherited: a script's `alpha-gym evolve ... &` starts it with SIGINT ignored (what a shell without job control
    does to its background commands), so neither Ctrl-C nor `kill -INT` would stop it. A signal someone chose to
    handle otherwise (not ignored, not the default) is left alone; the handlers before are restored after."""
    if threading.current_thread() is not threading.main_thread():   # only the main thread may set handlers
        yield
        return
    wanted = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: _raise_stopped}
    before = {sig: signal.getsignal(sig) for sig in wanted}
    for sig, handler in wanted.items():
        if before[sig] in (signal.SIG_IGN, signal.SIG_DFL):
            signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
