"""The arms along their verifier calls (issue 40.5): what each arm had found after 1,600, 4,800 and 10,000 calls.

An arm whose kept NAME.json holds a curve can be read at any smaller budget: the evolve arms (`evolve`, `random`,
`evolve_model`, `evolve_rl`, and `search`, the genetic-programming configuration of the same engine: one row per
group with the calls so far, the best train reward, the run's own book (members, effective bets, book CPCV) and the
wall time, `alpha_gym.search.evolve_arm`), and a `search` kept before it ran on that engine (its history: calls and
best train reward per generation; its own book and wall time on its last row, from NAME.book.json and NAME.json). Trained rungs and `best_of_n` keep no curve: they have one point, at their own budget, and are left
out here (the comparison table has them).

    calls.md    one row per arm and budget (each of BUDGETS the arm's runs reached, and the arm's own budget):
                seeds, then mean [min, max] over seeds of the best train reward, book members, effective bets,
                book CPCV, wall seconds, verifier calls a second and proposals a second (the answers a mutator
                wrote, those refused before a call included: what a model mutator's generation costs)
    calls.png   best train reward, book members and effective bets against calls, one line per arm (the mean over
                seeds), its band the seeds' min to max

A run on a walk-forward fold keeps beside each curve row the validation score of its best by train reward
(`best_validation`, `alpha_gym.search.evolve_arm`): calls.md then gains that column, and calls.png draws it dashed
beside the best train reward (same colour), as a loss curve shows train and validation loss. Curves without it
(runs on no fold) give the table and plot they gave before.

Reading a curve at B is reading a run of budget B where the arm's schedule does not depend on its budget: true of
the evolve arms (`evolve_arm` says why), up to the last group, which a run stopped at B shortens. It is not true of
a kept mu+lambda `search` exactly where its budget cut the seeds it scored (at most `seed_share` of the budget): its rows
below its own budget are marked "part-way" only at budgets that would have scored fewer seeds than the run did
(at the comparison's sizes, 116 seeds, a budget under 232).

A run kept at a budget that falls inside a group (`alpha-gym evolve --keep-at 4800`: its last group ends at
4,796) is read at its budget as the run of that budget, as a longer run read there is.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

#: The budgets of issue 40.5's comparison.
BUDGETS = (1600, 4800, 10000)
#: Arms whose schedule does not depend on the budget: a curve read at B is a budget-B run (for curves given without
#: `exact_from`; `arm_curves` reads it from the kept file).
BUDGET_FREE = ("evolve", "random", "evolve_model", "evolve_rl")
#: A curve row's numbers, in the table's order.
COLUMNS = (("best_reward", "best train reward", "+.3f"), ("book_members", "book members", ".1f"),
           ("effective_bets", "eff. bets", ".1f"), ("book_cpcv", "book CPCV", "+.2f"), ("seconds", "wall s", ",.0f"),
           ("calls_per_s", "calls/s", ".2f"), ("proposals_per_s", "proposals/s", ".2f"))
#: Throughput, from a row's calls, wall seconds and proposals refused before a call (duplicates, unparseable):
#: a proposal is an answer a mutator wrote, scored or not.
RATES = ("calls_per_s", "proposals_per_s")
#: The column of a fold run's curve: its best's validation score (shown only where a kept curve has it).
VALIDATION_COLUMN = ("best_validation", "best's validation score", "+.3f")


def arm_curves(results: Path) -> dict[str, dict[int, list[dict]]]:
    """{arm: {seed: curve rows}} of every kept arm in `results` with a curve (NAME.json's "curve", or search's
    "history" cut to calls and best reward), each row with every key of COLUMNS (None where not kept)."""
    from alpha_gym.evaluation.kept import read_object
    out: dict[str, dict[int, list[dict]]] = {}
    for path in sorted(Path(results).glob("seed-*/*.json")):
        if path.name.endswith(".book.json"):
            continue
        numbers = read_object(path)
        rows = numbers.get("curve")
        if rows is None and numbers.get("recipe") == "search":
            rows = numbers.get("history")
        if not rows:
            continue
        seed = int(path.parent.name[len("seed-"):])
        curve = [{"calls": int(r["calls"]), "rejected": r.get("rejected"),
                  **{k: r.get(k) for k, _, _ in COLUMNS if k not in RATES},
                  **({} if VALIDATION_COLUMN[0] not in r else {VALIDATION_COLUMN[0]: r[VALIDATION_COLUMN[0]]})}
                 for r in rows]
        _end_book(curve[-1], numbers, path.with_name(f"{path.stem}.book.json"))
        # how far the run went (its budget, where it stopped inside a group), and from which budget on a
        # reading of it is that budget's run
        budget = numbers.get("budget")
        curve[-1]["reached"] = max(curve[-1]["calls"], int(budget) if isinstance(budget, int) else 0)
        # an evolution run's curve (every arm kept with one, `search` since it runs on the evolution engine) is
        # budget-free; a kept mu+lambda search (its "history") depends on its budget through its seeds
        curve[-1]["exact_from"] = 0 if numbers.get("curve") else _search_exact_from(numbers)
        for row in curve:
            _rates(row)
        out.setdefault(path.stem, {})[seed] = curve
    return out


def _search_exact_from(numbers: dict) -> float:
    """The smallest budget whose search run is this run read there: a kept mu+lambda search (the `search` arm
    before it ran on the evolution engine; its NAME.json keeps a "history", no "curve") depends on its budget only
    through the seeds it scores (the first `seed_share` x budget of them), so from the
    budget that fits all the seeds this run scored on, its schedule is the same. inf where the kept file does not
    say (every row below the run's end is then part-way)."""
    share = ((numbers.get("config") or {}).get("search") or {}).get("seed_share")
    seeds = numbers.get("seed_formulas")
    if not isinstance(share, (int, float)) or not isinstance(seeds, int) or share <= 0:
        return math.inf
    return math.ceil(seeds / share)


def _end_book(last: dict, numbers: dict, book_path: Path) -> None:
    """A curve without book columns (search's history) gets the run's own book (NAME.book.json, chosen at its end)
    and the run's wall time on its last row: the one point where they are known."""
    from alpha_gym.evaluation.kept import read_object
    if last["book_members"] is None and book_path.exists():
        book = read_object(book_path)
        # (its book CPCV is not kept: book.json holds the members' median CPCV, another number)
        last["book_members"], last["effective_bets"] = book.get("n_members"), book.get("effective_bets")
    if last["seconds"] is None:
        last["seconds"] = numbers.get("train_seconds")


def _rates(row: dict) -> None:
    """calls/s and proposals/s of a curve row (None where its seconds or refusals are not kept)."""
    seconds = row.get("seconds")
    ok = seconds is not None and seconds > 0
    row["calls_per_s"] = row["calls"] / seconds if ok else None
    row["proposals_per_s"] = (row["calls"] + row["rejected"]) / seconds if ok and row.get("rejected") is not None \
        else None


def _with_rates(row: dict) -> dict:
    out = dict(row)
    _rates(out)
    return out


def at_calls(curve: list[dict], calls: int) -> dict | None:
    """The curve's last row at or before `calls` (None if the run never got there or no row ends by then)."""
    if not curve or _reached(curve) < calls:
        return None
    rows = [r for r in curve if r["calls"] <= calls]
    return rows[-1] if rows else None


def _reached(curve: list[dict]) -> int:
    """The calls a run went to: its budget where it stopped inside a group, else its last row's calls."""
    return max(curve[-1]["calls"], curve[-1].get("reached") or 0)


def _spread(values) -> tuple[float, float, float] | None:
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return (sum(vals) / len(vals), min(vals), max(vals)) if vals else None


def budget_rows(curves: dict[str, dict[int, list[dict]]], budgets=BUDGETS) -> list[dict]:
    """One row per arm and budget: each budget of `budgets` every seed's run reached, and the arms' own end."""
    rows = []
    for arm, seeds in curves.items():
        ends = sorted({_reached(c) for c in seeds.values()})
        points = sorted({b for b in budgets if b <= min(ends)} | {min(ends)})
        for b in points:
            got = {s: at_calls(c, b) for s, c in seeds.items()}
            got = {s: r if all(k in r for k in RATES) else _with_rates(r) for s, r in got.items() if r is not None}
            free = 0 if arm in BUDGET_FREE else math.inf   # a curve not read by arm_curves says no exact_from
            row = {"arm": arm, "budget": b, "seeds": sorted(got),
                   "part_way": any(b < _reached(c) and b < c[-1].get("exact_from", free) for c in seeds.values())}
            for key, _, _ in COLUMNS:
                row[key] = _spread(r[key] for r in got.values())
            key = VALIDATION_COLUMN[0]
            if any(key in r for r in got.values()):     # a fold run: its validation column
                row[key] = _spread(r.get(key) for r in got.values())
            rows.append(row)
    return rows


def _cell(spread, spec: str) -> str:
    if spread is None:
        return "-"
    mean, lo, hi = spread
    return f"{format(mean, spec)} [{format(lo, spec)}, {format(hi, spec)}]"


def calls_table(rows: list[dict]) -> str:
    """calls.md's text (with the validation column where a row has one: runs on a walk-forward fold)."""
    with_validation = any(VALIDATION_COLUMN[0] in r for r in rows)
    columns = (COLUMNS[0], VALIDATION_COLUMN, *COLUMNS[1:]) if with_validation else COLUMNS
    where = ("train window, and the fold's validation window for the best's validation score; the test window is "
             "not read here" if with_validation else "train window only; the pseudo-holdout is in comparison.md")
    lines = ["The arms along their verifier calls: mean [min, max] over seeds of each run as it stood after the "
             f"last group ending at or before the calls shown ({where}).", "",
             "| arm | calls | seeds | " + " | ".join(label for _, label, _ in columns) + " |",
             "|---|---:|---:|" + "---|" * len(columns)]
    for r in rows:
        arm = r["arm"] + (" (part-way)" if r["part_way"] else "")
        lines.append(f"| {arm} | {r['budget']:,} | {len(r['seeds'])} | "
                     + " | ".join(_cell(r.get(k), spec) for k, _, spec in columns) + " |")
    lines += ["", "The evolve arms' schedule does not depend on the budget, so a row at fewer calls than the run is "
                  "that budget's run (up to its last group, which a run stopped there shortens). So is `search`'s, "
                  "once the budget fits all its seeds; a \"part-way\" row is a longer run read part-way at a budget "
                  "that would have scored fewer seeds, not a run of that budget. Trained rungs and best_of_n keep "
                  "no curve (comparison.md has them)."]
    return "\n".join(lines) + "\n"


def write_calls(results: Path, folders, budgets=BUDGETS) -> list[dict]:
    """calls.md and calls.png into each of `folders` from the curves kept in `results`; nothing (and []) when
    no kept arm has a curve."""
    curves = arm_curves(results)
    if not curves:
        return []
    rows = budget_rows(curves, budgets)
    text = calls_table(rows)
    for folder in folders:
        (Path(folder) / "calls.md").write_text(text, encoding="utf-8")
    _plot(curves, folders)
    return rows


def _seed_lines(seeds: dict, grid, key: str):
    """The mean over seeds of `key` at each grid point (None where no seed's curve has the key)."""
    import numpy as np
    if not any(key in r for c in seeds.values() for r in c):
        return None
    values = np.array([[np.nan if (r := at_calls(c, int(x))) is None or r.get(key) is None else float(r[key])
                        for x in grid] for c in seeds.values()])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)       # a point with no valid reading: NaN, a gap
        return np.nanmean(values, 0)


def _plot(curves, folders) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    keys = [("best_reward", "best train reward"), ("book_members", "run's own book: members"),
            ("effective_bets", "run's own book: effective bets")]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for i, (arm, seeds) in enumerate(curves.items()):
        end = min(c[-1]["calls"] for c in seeds.values())
        grid = np.unique(np.array([r["calls"] for c in seeds.values() for r in c if r["calls"] <= end]))
        colour = plt.cm.tab10(i % 10)
        for ax, (key, title) in zip(axes, keys):
            values = np.array([[np.nan if (r := at_calls(c, int(x))) is None or r[key] is None else float(r[key])
                                for x in grid] for c in seeds.values()])
            if np.isnan(values).all():
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)   # a grid point no seed has reached yet: NaN
                mean, lo, hi = np.nanmean(values, 0), np.nanmin(values, 0), np.nanmax(values, 0)
            ax.plot(grid, mean, color=colour, label=f"{arm} ({len(seeds)} seeds)")
            ax.fill_between(grid, lo, hi, color=colour, alpha=0.15, lw=0)
            ax.set_title(title)
        validation = _seed_lines(seeds, grid, VALIDATION_COLUMN[0])
        if validation is not None:       # a fold run: its best's validation score, dashed beside the train reward
            axes[0].plot(grid, validation, color=colour, ls="--", label=f"{arm}: best's validation score")
            axes[0].set_title("best train reward (dashed: its validation score)")
    reach = max(c[-1]["calls"] for seeds in curves.values() for c in seeds.values())
    for ax in axes:
        ax.set_xlabel("verifier calls")
        for b in BUDGETS:
            if b <= reach:
                ax.axvline(b, color="grey", lw=0.5, ls=":")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    for folder in folders:
        fig.savefig(Path(folder) / "calls.png", dpi=110)
    plt.close(fig)
