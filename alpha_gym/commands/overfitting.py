"""`alpha-gym overfitting`: whether a run's selection overfits, from the formulas its archive admitted.

    alpha-gym overfitting benchmarks/results/compare-10000/seed-42/evolve.archive.jsonl \\
        --data ../shared/data/us_equities/us_daily_train.csv.gz --universe ../shared/data/us_equities/universe_us46.txt
    alpha-gym overfitting runs/evolve-us46 --data ... --universe ...       # a run folder (its archive.jsonl)
    alpha-gym overfitting runs/compare/results --data ... --universe ...   # every archive a comparison kept

Each distinct formula of the archive is traded again on the run's train window (the window and the verifier
settings its stamp names: the comparison's settings.json above a kept archive, a run folder's
evolve-settings.json; without one, the data flags and the settings), and its daily net P&L goes into the
statistics of `alpha_gym.evaluation.overfitting`: the probability of backtest overfitting over CSCV blocks,
the effective trials, the deflated Sharpe of the best formula by train CPCV (at the effective trials, and at
the run's verifier calls: a kept archive's NAME.json, a run folder's curve.jsonl, or --calls), and the top 20's
train score. The result is written to overfitting.json beside the comparison's kept results (one entry per
archive, replacing that archive's earlier entry) or in the run folder, where `alpha-gym report` and the
comparison's table show it; --out FILE writes it elsewhere. Scoring is the time it takes: 6,152 formulas of
an evolve archive on us46 took 809 s on two shared cores, the statistics 22 s. docs/overfitting.md says how
to read it.
Exit status 0; 2 for bad input (an archive that is not one, a window the data does not hold).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from alpha_gym.errors import InputError
from alpha_gym.evaluation.overfitting import CSCV_BLOCKS, MAX_CSCV_BLOCKS, OverfittingError, overfitting_summary
from alpha_gym.evaluation.report_overfitting import OVERFITTING_FILE, OVERFITTING_FORMAT, read_overfitting_file
from alpha_gym.jsonable import json_dumps
from alpha_gym.ranges import flag, ints

#: The file names of an archive: a run folder's, and a comparison's kept one (seed-S/NAME.archive.jsonl).
RUN_ARCHIVE = "archive.jsonl"
KEPT_SUFFIX = ".archive.jsonl"
#: The stamps that name a run's train window and verifier settings.
COMPARISON_STAMP = "settings.json"
EVOLVE_STAMP = "evolve-settings.json"


@dataclass(frozen=True)
class Archive:
    """One archive to report: its file, its label in overfitting.json, where that file goes, the stamp that
    names its window (None: the flags), and the file its verifier calls are read from (None: not known)."""

    path: Path
    label: str
    home: Path
    stamp: Path | None
    calls_from: Path | None


def _kept(path: Path) -> Archive:
    """A comparison's kept archive, results/seed-S/NAME.archive.jsonl."""
    name = path.name[:-len(KEPT_SUFFIX)]
    results = path.parent.parent
    stamp = results / COMPARISON_STAMP
    numbers = path.with_name(f"{name}.json")
    return Archive(path, f"{path.parent.name}/{name}", results, stamp if stamp.is_file() else None,
                   numbers if numbers.is_file() else None)


def find_archives(source) -> list[Archive]:
    """The archives a SOURCE names: an archive file, a run folder (its archive.jsonl) or a comparison's results
    folder (every seed-S/NAME.archive.jsonl)."""
    source = Path(source)
    if source.is_file():
        if source.name.endswith(KEPT_SUFFIX) and source.parent.name.startswith("seed-"):
            return [_kept(source)]
        folder = source.parent
        stamp = folder / EVOLVE_STAMP
        curve = folder / "curve.jsonl"
        return [Archive(source, folder.name if source.name == RUN_ARCHIVE else source.name, folder,
                        stamp if stamp.is_file() else None, curve if curve.is_file() else None)]
    if source.is_dir():
        if (source / RUN_ARCHIVE).is_file():
            return find_archives(source / RUN_ARCHIVE)
        kept = sorted(source.glob(f"seed-*/*{KEPT_SUFFIX}"))
        if kept:
            return [_kept(p) for p in kept]
        raise InputError(f"{source} holds no archive: neither {RUN_ARCHIVE} (a run folder) nor "
                         f"seed-S/NAME{KEPT_SUFFIX} (a comparison's kept results)")
    raise FileNotFoundError(f"{source}: no such file or folder")


def _json_object(path: Path, what: str) -> dict:
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"{path} is not JSON ({err}): not the {what} a run writes") from None
    if not isinstance(d, dict):
        raise InputError(f"{path} is not a JSON object: not the {what} a run writes")
    return d


def stamp_window(stamp: Path) -> tuple[list[str], dict, dict]:
    """(train window [first, last], verifier settings, {data, universe}) a run's stamp names."""
    d = _json_object(stamp, "stamp")
    window, verifier = d.get("train_window"), d.get("verifier")
    if not (isinstance(window, list) and len(window) == 2 and all(isinstance(x, str) for x in window)):
        raise InputError(f"{stamp} names no train window (train_window: [first, last])")
    if not isinstance(verifier, dict):
        raise InputError(f"{stamp} names no verifier settings")
    return window, verifier, {k: d.get(k) for k in ("data", "universe", "panel")}


def verifier_calls(archive: Archive) -> int | None:
    """The verifier calls of the run behind an archive: its kept NAME.json's verifier_calls, or the last row of
    its run folder's curve.jsonl (None when neither says)."""
    if archive.calls_from is None:
        return None
    if archive.calls_from.suffix == ".json":
        from alpha_gym.evaluation.kept import read_object
        calls = read_object(archive.calls_from).get("verifier_calls")
    else:
        lines = [x for x in archive.calls_from.read_text(encoding="utf-8").splitlines() if x.strip()]
        try:
            calls = json.loads(lines[-1]).get("calls") if lines else None
        except (json.JSONDecodeError, AttributeError):
            raise InputError(f"{archive.calls_from}: its last line is not a curve row") from None
    if calls is None:
        return None
    if isinstance(calls, bool) or not isinstance(calls, int) or calls < 1:
        raise InputError(f"{archive.calls_from}: verifier calls = {calls!r}, not a count")
    return calls


def archive_formulas(path: Path) -> tuple[list[str], dict[str, float]]:
    """The archive's distinct formulas in file order, and the train CPCV it kept for each (where a number)."""
    from trainers.run_book import RunBookError, read_admitted
    try:
        rows = read_admitted(path)
    except RunBookError as err:                 # it names the file and the line
        raise InputError(str(err)) from None
    except UnicodeDecodeError as err:
        raise InputError(f"{path} is not an archive (not UTF-8 text: {err.reason} at byte {err.start})") from None
    formulas = list(dict.fromkeys(row["formula"] for row in rows))
    kept = {}
    for row in rows:
        v = row.get("train_cpcv")
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            kept.setdefault(row["formula"], float(v))
    return formulas, kept


def _panel(args, window: list[str] | None, named: dict):
    """The train panel: the stamp's window of --data (or of the data file the stamp names), else the flags'."""
    from alpha_gym.market.resolve import resolve_panel
    from alpha_gym.commands.flags import universe_arg
    data, universe = args.data, universe_arg(args.universe)
    if window is not None and data is None and named.get("data"):
        if not Path(named["data"]).is_file():
            raise InputError(f"the run read {named['data']}, which is not here: give --data (and --universe)")
        data, universe = named["data"], named.get("universe")
    if window is None:
        return resolve_panel(data=data, universe=universe, train_start=args.start, train_end=args.end)
    panel = resolve_panel(data=data, universe=universe, train_start=window[0], train_end=window[1])
    got = [str(panel.dates[0]), str(panel.dates[-1])]
    if got != window:
        raise InputError(f"the run's train window is {window[0]}..{window[1]}, the data gives {got[0]}..{got[1]}: "
                         "give the data file the run read")
    if named.get("panel") and panel.fingerprint() != named["panel"]:
        raise InputError("the data's train window is not the panel the run read (another universe or other "
                         "prices): give the data file and universe the run read")
    return panel


def _verifier(args, archive: Archive):
    """The train-window verifier an archive's formulas are traded with, and the window it names."""
    from alpha_gym.commands.flags import settings_from_args
    from alpha_gym.scoring.config import VerifierConfig
    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.settings import from_dict
    if archive.stamp is None:
        panel = _panel(args, None, {})
        config = settings_from_args(args).verifier.with_(stress_checkpoint=None)
        return Verifier(panel, config), [str(panel.dates[0]), str(panel.dates[-1])]
    given = [f for f, v in (("--start", args.start), ("--end", args.end), ("--config", args.config),
                            ("--set", args.settings)) if v]
    if given:
        raise InputError(f"{archive.stamp} names the run's train window and verifier settings: leave "
                         f"{', '.join(given)} out")
    window, settings, named = stamp_window(archive.stamp)
    config = from_dict(VerifierConfig, settings, where="verifier").with_(stress_checkpoint=None)  # R3 moves no P&L
    return Verifier(_panel(args, window, named), config), window


def _relative(path: Path, home: Path) -> str:
    """The archive's path as overfitting.json names it: from its run's folder (a comparison's results, a run folder)."""
    try:
        return path.resolve().relative_to(home.resolve()).as_posix()
    except ValueError:
        return str(path)


def report_archive(archive: Archive, verifier, window, calls: int | None, blocks: int, top: int,
                   progress=None) -> dict:
    """One overfitting.json entry: the archive's formulas traded on the verifier's panel, then every statistic."""
    import numpy as np
    from trainers.run_book import NOT_EVALUATED, scored_candidates
    formulas, kept = archive_formulas(archive.path)
    failures: dict[str, int] = {}

    def failed(formula, err):
        """A formula the verifier itself failed on (not one it refuses): said, counted, and the report goes on."""
        if not isinstance(err, NOT_EVALUATED):
            failures[type(err).__name__] = failures.get(type(err).__name__, 0) + 1
            print(f"alpha-gym: warning: the verifier raised {type(err).__name__} ({err}) on {formula}: left out, "
                  "counted in verifier_failures (a bug to report)", file=sys.stderr)
    t0 = time.perf_counter()
    candidates, unscored = scored_candidates(formulas, verifier, progress, errors=(Exception,), on_error=failed)
    scoring = time.perf_counter() - t0
    if len(candidates) < 2:
        raise InputError(f"{archive.path}: {len(candidates)} of its {len(formulas)} formulas evaluate on this "
                         "train window; the statistics need at least 2")
    t0 = time.perf_counter()
    pnl = np.stack([np.asarray(c.pnl, dtype=np.float64) for c in candidates], axis=1)
    summary = overfitting_summary(pnl, [c.cpcv for c in candidates], [c.name for c in candidates],
                                  verifier_calls=calls, n_blocks=blocks, top=top)
    differ = sum(1 for c in candidates if c.name in kept and not np.isclose(kept[c.name], c.cpcv, rtol=1e-9,
                                                                            atol=1e-12))
    return {"label": archive.label, "archive": _relative(archive.path, archive.home), "train_window": window,
            "n_formulas": len(formulas), "n_unscored": len(unscored), "verifier_failures": failures,
            "n_rescored_differently": differ,
            "seconds": {"scoring": scoring, "statistics": time.perf_counter() - t0}, **summary}


def merged(path: Path, entries: list[dict]) -> dict:
    """overfitting.json with `entries` in place of the file's entries of the same labels, in label order."""
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder: give --out a file name")
    before = read_overfitting_file(path) if path.exists() else []
    fresh = {e["label"]: e for e in entries}
    rows = [e for e in before if e["label"] not in fresh] + list(fresh.values())
    return {"format": OVERFITTING_FORMAT, "entries": sorted(rows, key=lambda e: e["label"])}


def _line(e: dict) -> str:
    d = e["deflated_sharpe"]
    calls = d.get("calls")
    return (f"{e['label']}: {e['n_candidates']:,} formulas on {e['n_days']:,} days; PBO {e['pbo']['pbo']:.3f} "
            f"({e['pbo']['n_splits']:,} splits of {e['pbo']['n_blocks']} blocks); effective trials "
            f"{e['effective_trials']['n_trials']:,}; best Sharpe {d['effective']['sharpe']:+.2f}, deflated "
            f"{d['effective']['dsr']:.3f} at the effective trials (expected best {d['effective']['benchmark_sharpe']:+.2f})"
            + (f", {calls['dsr']:.3f} at {e['verifier_calls']:,} calls (expected best {calls['benchmark_sharpe']:+.2f})"
               if calls else "")
            + f"; top {e['top']['k']} train CPCV {e['top']['train']:+.2f}; {e['seconds']['scoring']:.0f} s scoring, "
              f"{e['seconds']['statistics']:.1f} s statistics")


def cmd_overfitting(args) -> int:
    if args.blocks % 2:   # before minutes of scoring
        raise InputError(f"--blocks {args.blocks}: must be even (each split takes half the blocks in sample)")
    archives = [a for source in args.sources for a in find_archives(source)]
    labels = [a.label for a in archives]
    if len(set(labels)) != len(labels):
        raise InputError("two archives have the same label: report them one command each")
    homes = {a.home for a in archives}
    if args.out is None and len(homes) > 1:
        raise InputError("the archives belong to different runs: give --out FILE, or one command a run")
    out = Path(args.out) if args.out is not None else next(iter(homes)) / OVERFITTING_FILE
    merged(out, [])        # a file there that is no overfitting report is refused before minutes of scoring
    entries = []
    for archive in archives:
        verifier, window = _verifier(args, archive)
        calls = args.calls if args.calls is not None else verifier_calls(archive)
        formulas = len(archive_formulas(archive.path)[0])

        def progress(done, n=formulas, label=archive.label):
            if not args.quiet and (done % 500 == 0 or done == n):
                print(f"{label}: {done:,} of {n:,} formulas scored", file=sys.stderr, flush=True)
        try:
            entries.append(report_archive(archive, verifier, window, calls, args.blocks, args.top, progress))
        except OverfittingError as err:
            raise InputError(f"{archive.path}: {err}") from None
        print(_line(entries[-1]), flush=True)
        text = _write(out, merged(out, entries[-1:]))     # after each archive: a later failure loses none
    print(f"wrote {out}", file=sys.stderr)
    if args.json:
        print(text)
    return 0


def _write(path: Path, report: dict) -> str:
    """Write the report atomically (a reader never sees half a file); returns its text."""
    text = json_dumps(report, indent=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return text


def register(subparsers) -> argparse.ArgumentParser:
    """Add `overfitting` to `subparsers` (what `ArgumentParser.add_subparsers()` returns)."""
    from alpha_gym.commands.flags import add_data_args, add_settings_args
    p = subparsers.add_parser("overfitting", help="whether a run's selection overfits: PBO, deflated Sharpe and "
                                                  "effective trials over its archive's formulas (overfitting.json)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sources", nargs="+", metavar="SOURCE",
                   help="an archive file (a run's archive.jsonl, a comparison's seed-S/NAME.archive.jsonl), a run "
                        "folder, or a comparison's results folder")
    p.add_argument("--blocks", type=flag(ints(2, MAX_CSCV_BLOCKS)), default=CSCV_BLOCKS,
                   help=f"CSCV blocks, even (default {CSCV_BLOCKS}: C(16, 8) = 12,870 splits)")
    p.add_argument("--top", type=flag(ints(1, 100_000)), default=20, help="the top K by train CPCV (default 20)")
    p.add_argument("--calls", type=flag(ints(1, 10**12)),
                   help="the run's verifier calls, the deflated Sharpe's upper count of trials (default: what the "
                        "run kept)")
    p.add_argument("--out", help=f"the file to write (default: {OVERFITTING_FILE} beside the comparison's kept "
                                 "results, or in the run folder)")
    p.add_argument("--json", action="store_true", help="also print the file's object")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    add_data_args(p)
    add_settings_args(p)
    p.set_defaults(func=cmd_overfitting)
    return p
