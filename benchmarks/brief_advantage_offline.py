"""How the brief channel's (R13's) priority and the advantage floor shape the advantage, offline on a kept run's groups.

    python benchmarks/brief_advantage_offline.py [RUN_DIR ...] [--priorities 1 2 4 8]
    python benchmarks/brief_advantage_offline.py --all-seeds --priorities 1 2 3 4 6 8 \
        --brief-floors off all -0.5 -0.25 -0.1 --planted

RUN_DIR holds a training run's `completions.jsonl.gz` (default: the kept seed-44 `cispo_brief_book_forms` run of
compare-long; `--all-seeds`: its seeds 42, 43 and 44, their groups pooled). Each group (the rows of one step and brief, in file order) is scored again from its logged channels
with the training loop's own rule (`trainers.advantages.compute_advantages`, GDPO, the run's priorities with
R14 at 3 and R13 at each priority given; an answer R10 guarded is one whose motif_guard channel is below 0), first
at the run's own settings, where it must give back the logged advantages, then at each priority with the floor at
0 (the recipe's) and without a floor. Printed per setting:

    R13 share    sum_i (w_13 z_13,i) A_i / sum_i A_i^2 over every answer, A the GDPO advantage before the
                 projection (z: the channel standardised in its group): the part of the advantage's size R13
                 accounts for (the shares of all channels add to 1); R1's the same way
    top wins     groups where a valid answer with the group's highest R13 among valid answers gets A > 0, over
                 the groups whose valid answers differ in R13
    barred       of those groups, the ones where every such answer is kept at A <= 0 by the projection (the floor,
                 R10's guard, or the shift that re-zeroes the group's sum) although its GDPO advantage was positive
    all-met wins valid answers meeting every check (R13 = 1) with A > 0, of all such answers
    CPCV <= 0 won answers whose train CPCV (R1) is <= 0 with A > 0 (of them, exempted: ones the floor alone
                 would bar, let win by the brief exemption): the cost of an exemption

`--brief-floors` adds, beside the floor at 0, the brief exemption (`TrainConfig.brief_floor`,
`alpha_gym.scoring.advantage_rule.answers_may_win`): "off" none; a number: an answer meeting every check of its
brief, valid and not guarded, may win when its CPCV is above that number; "all": at any CPCV.

`--planted`: the kept runs' answers almost never meet every check, so the exemption is also measured on planted
groups: each valid, unguarded answer that does not meet its brief is taken in turn, its R13 set to 1 (every other
channel as logged, its group's other answers unchanged), and the group scored again. Printed per R13 priority and
exemption: the share of planted answers with A > 0 by their CPCV band, the largest A a planted answer with
CPCV <= 0 gets (GDPO's advantage is bounded: sum_k w_k sqrt(G - 1) at most), and the mean A of the planted answers
that win, at CPCV <= 0 and above.

No recipe is changed: this reads a log.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import torch

from alpha_gym.scoring.config import VerifierConfig
from trainers.advantages import _standardise, compute_advantages, gdpo_advantages

ROOT = Path(__file__).resolve().parents[1]
KEPT = ROOT / "benchmarks" / "results" / "compare-long-run-folders"
DEFAULT_RUN = KEPT / "seed-44" / "cispo_brief_book_forms"
ALL_SEEDS = [KEPT / f"seed-{seed}" / "cispo_brief_book_forms" for seed in (42, 43, 44)]
#: CPCV bands of the planted table: strongly negative, negative, about zero (a dead book earns ~0), positive.
BANDS = ((-float("inf"), -0.5), (-0.5, -0.1), (-0.1, 0.0), (0.0, float("inf")))
#: The rung's verifier change (trainers/compare/ladder.py VERIFIER_CHANGES["cispo_brief_book_forms"]).
RUN_PRIORITIES = {**VerifierConfig().priorities, "brief": 1.0, "book": 3.0}


def read_groups(run: Path) -> list[list[dict]]:
    groups: list[list[dict]] = []
    with gzip.open(run / "completions.jsonl.gz", "rt") as fh:
        for line in fh:
            row = json.loads(line)
            if groups and (groups[-1][0]["step"], groups[-1][0]["brief_id"]) == (row["step"], row["brief_id"]):
                groups[-1].append(row)
            else:
                groups.append([row])
    if len({len(g) for g in groups}) != 1:
        raise SystemExit(f"{run}: groups of different sizes {sorted({len(g) for g in groups})}")
    return groups


def tensors(groups, names):
    channels = torch.tensor([[[r["channels"][k] for k in names] for r in g] for g in groups], dtype=torch.float64)
    valid = torch.tensor([[r["valid"] for r in g] for g in groups])
    guarded = torch.tensor([[r["channels"]["motif_guard"] < 0 for r in g] for g in groups])
    return channels, valid, guarded


def meets_brief(channels: torch.Tensor, valid: torch.Tensor, names: list[str]) -> torch.Tensor:
    """As `GroupScore.meets_brief`: valid answers whose R13 is exactly 1."""
    return valid & (channels[..., names.index("brief")] == 1.0)


def advantages(channels, valid, guarded, names, priorities: dict, floor, brief_floor):
    w = torch.tensor([priorities[k] for k in names], dtype=torch.float64)
    core = channels[..., names.index("cpcv")]
    return compute_advantages(channels, w, valid, core, mode="gdpo", floor=floor, guarded=guarded,
                              meets_brief=meets_brief(channels, valid, names), brief_floor=brief_floor)


def measure(groups, priorities: dict, floor: float | None, brief_floor: float | None = None) -> dict:
    names = list(priorities)
    channels, valid, guarded = tensors(groups, names)
    w = torch.tensor([priorities[k] for k in names], dtype=torch.float64)
    core = channels[..., names.index("cpcv")]
    raw = gdpo_advantages(channels, w)
    final = advantages(channels, valid, guarded, names, priorities, floor, brief_floor)
    floor_only = advantages(channels, valid, guarded, names, priorities, floor, None)
    b = names.index("brief")

    def share(k: int) -> float:
        part = _standardise(channels[..., k], dim=1, eps=1e-4) * w[k]
        return float((part * raw).sum() / (raw * raw).sum())
    r13 = channels[..., b]
    contested = top_wins = barred = 0
    for p in range(len(groups)):
        v = valid[p]
        if v.sum() < 1:
            continue
        vals = r13[p][v]
        if float(vals.max()) == float(vals.min()):
            continue
        contested += 1
        top = v & (r13[p] == vals.max())
        top_wins += bool((final[p][top] > 0).any())
        barred += bool(not (final[p][top] > 0).any() and (raw[p][top] > 0).any())
    all_met = meets_brief(channels, valid, names)
    losing_wins = (core <= 0) & (final > 0)
    return {"r13_share": share(b), "r1_share": share(names.index("cpcv")), "contested": contested,
            "top_wins": top_wins, "barred": barred, "all_met": int(all_met.sum()),
            "all_met_wins": int((final[all_met] > 0).sum()), "losing_wins": int(losing_wins.sum()),
            "exempted": int((losing_wins & ~(floor_only > 0)).sum()), "final": final}


def planted(groups, priorities: dict, floor, brief_floor) -> dict:
    """Each valid, unguarded answer that misses a check of its brief, in turn with R13 = 1 (see the docstring)."""
    names = list(priorities)
    channels, valid, guarded = tensors(groups, names)
    b, c = names.index("brief"), names.index("cpcv")
    free = valid & ~guarded & (channels[..., b] < 1.0)
    rows, cols = torch.nonzero(free, as_tuple=True)
    copies = channels[rows].clone()                      # one group per planted answer
    copies[torch.arange(len(rows)), cols, b] = 1.0
    adv = advantages(copies, valid[rows], guarded[rows], names, priorities, floor, brief_floor)
    mine = adv[torch.arange(len(rows)), cols]
    core = channels[rows, cols, c]
    bands = []
    for lo, hi in BANDS:
        inside = (core > lo) & (core <= hi)
        bands.append((int((mine[inside] > 0).sum()), int(inside.sum())))
    losing = core <= 0

    def mean_won(where):
        won = mine[where & (mine > 0)]
        return float(won.mean()) if len(won) else float("nan")
    return {"bands": bands, "max_losing": float(mine[losing].max()) if losing.any() else 0.0,
            "mean_losing": mean_won(losing), "mean_paying": mean_won(~losing),
            "bound": sum(priorities.values()) * (len(groups[0]) - 1) ** 0.5}


def parse_brief_floor(text: str) -> float | None:
    """"off" -> None (no exemption), "all" -> -inf (any CPCV), else a number."""
    if text == "off":
        return None
    if text == "all":
        return -float("inf")
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a brief floor is 'off', 'all' or a number, got {text!r}") from None
    if value != value or value >= 0:
        raise argparse.ArgumentTypeError(f"a brief floor must be below the floor (0), got {text!r}")
    return value


def label(brief_floor: float | None) -> str:
    return "off" if brief_floor is None else "all" if brief_floor == -float("inf") else f"CPCV > {brief_floor:g}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="*", help="run folders (default: the kept seed-44 run)")
    ap.add_argument("--all-seeds", action="store_true", help="the kept runs of seeds 42, 43 and 44, pooled")
    ap.add_argument("--priorities", type=float, nargs="+", default=[1.0, 2.0, 4.0, 8.0])
    ap.add_argument("--brief-floors", type=parse_brief_floor, nargs="+", default=[None],
                    help="exemptions beside the floor at 0: off, all, or a CPCV below 0 (default: off)")
    ap.add_argument("--planted", action="store_true", help="also the planted groups (see above)")
    args = ap.parse_args()
    runs = ALL_SEEDS if args.all_seeds else [Path(r) for r in args.runs] or [DEFAULT_RUN]
    groups = []
    for run in runs:
        own_groups = read_groups(run)
        logged = torch.tensor([[r["advantage"] for r in g] for g in own_groups], dtype=torch.float64)
        own = measure(own_groups, RUN_PRIORITIES, 0.0)["final"]
        gap = float((own - logged).abs().max())
        print(f"{run.parent.name}/{run.name}: {len(own_groups)} groups of {len(own_groups[0])}; the run's own "
              f"settings give back the logged advantages within {gap:.2e}")
        if gap > 1e-3:
            raise SystemExit("the recomputed advantages do not match the logged ones: the rule read here is not the "
                             "run's")
        groups += own_groups
    if len({len(g) for g in groups}) != 1:
        raise SystemExit(f"the runs' groups differ in size {sorted({len(g) for g in groups})}")
    names = list(RUN_PRIORITIES)
    channels = tensors(groups, names)[0].reshape(-1, len(names))
    varying = [k for j, k in enumerate(names) if float(channels[:, j].max()) != float(channels[:, j].min())]
    total = sum(RUN_PRIORITIES[k] for k in varying if k != "brief")  # channels constant in the whole log move nothing
    print(f"channels that vary in the log: {', '.join(varying)} (their priorities other than R13's sum to {total:g})")
    settings = [(0.0, bf) for bf in args.brief_floors] + [(None, None)]
    print("| R13 priority | share of the varying priorities | floor | brief exemption | R13 share of the advantage | "
          "R1 share | top-R13 valid answer gets A > 0 | barred by the projection | all-met answers with A > 0 | "
          "CPCV <= 0 answers with A > 0 (exempted) |")
    print("|---:|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for priority in args.priorities:
        for floor, brief_floor in settings:
            m = measure(groups, {**RUN_PRIORITIES, "brief": priority}, floor, brief_floor)
            print(f"| {priority:g} | {priority / (total + priority):.1%} | {'0' if floor == 0.0 else 'none'} | "
                  f"{label(brief_floor) if floor is not None else '-'} | "
                  f"{m['r13_share']:.1%} | {m['r1_share']:.1%} | {m['top_wins']}/{m['contested']} "
                  f"({m['top_wins'] / m['contested']:.0%}) | "
                  f"{m['barred']}/{m['contested']} | {m['all_met_wins']}/{m['all_met']} | "
                  f"{m['losing_wins']} ({m['exempted']}) |")
    if args.planted:
        heads = " | ".join(f"CPCV in ({lo:g}, {hi:g}]" for lo, hi in BANDS)
        print("\nplanted: each valid, unguarded answer that misses a check, in turn with R13 = 1; share with A > 0")
        print(f"| R13 priority | floor | brief exemption | {heads} | largest A at CPCV <= 0 (bound) | "
              "mean A of the winners at CPCV <= 0 / > 0 |")
        print("|---:|---|---|" + "---:|" * len(BANDS) + "---:|---:|")
        for priority in args.priorities:
            for floor, brief_floor in settings:
                m = planted(groups, {**RUN_PRIORITIES, "brief": priority}, floor, brief_floor)
                cells = " | ".join(f"{won}/{n} ({won / max(n, 1):.0%})" for won, n in m["bands"])
                print(f"| {priority:g} | {'0' if floor == 0.0 else 'none'} | "
                      f"{label(brief_floor) if floor is not None else '-'} | {cells} | "
                      f"{m['max_losing']:.2f} ({m['bound']:.1f}) | {m['mean_losing']:.2f} / {m['mean_paying']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
