"""How the brief channel's (R13's) priority and the advantage floor shape the advantage, offline on a kept run's groups.

    python benchmarks/brief_advantage_offline.py [RUN_DIR] [--priorities 1 2 4 8]

RUN_DIR holds a training run's `completions.jsonl.gz` (default: the kept seed-44 `cispo_brief_book_forms` run of
compare-long). Each group (the rows of one step and brief, in file order) is scored again from its logged channels
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
DEFAULT_RUN = ROOT / "benchmarks" / "results" / "compare-long-run-folders" / "seed-44" / "cispo_brief_book_forms"
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


def measure(groups, priorities: dict, floor: float | None) -> dict:
    names = list(priorities)
    channels, valid, guarded = tensors(groups, names)
    w = torch.tensor([priorities[k] for k in names], dtype=torch.float64)
    core = channels[..., names.index("cpcv")]
    raw = gdpo_advantages(channels, w)
    final = compute_advantages(channels, w, valid, core, mode="gdpo", floor=floor, guarded=guarded)
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
    all_met = valid & (r13 >= 1.0 - 1e-12)
    return {"r13_share": share(b), "r1_share": share(names.index("cpcv")), "contested": contested,
            "top_wins": top_wins, "barred": barred, "all_met": int(all_met.sum()),
            "all_met_wins": int((final[all_met] > 0).sum()), "final": final}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", nargs="?", default=str(DEFAULT_RUN))
    ap.add_argument("--priorities", type=float, nargs="+", default=[1.0, 2.0, 4.0, 8.0])
    args = ap.parse_args()
    groups = read_groups(Path(args.run))
    logged = torch.tensor([[r["advantage"] for r in g] for g in groups], dtype=torch.float64)
    own = measure(groups, RUN_PRIORITIES, 0.0)["final"]
    gap = float((own - logged).abs().max())
    print(f"{len(groups)} groups of {len(groups[0])}; the run's own settings give back the logged advantages "
          f"within {gap:.2e}")
    if gap > 1e-3:
        raise SystemExit("the recomputed advantages do not match the logged ones: the rule read here is not the run's")
    names = list(RUN_PRIORITIES)
    channels = tensors(groups, names)[0].reshape(-1, len(names))
    varying = [k for j, k in enumerate(names) if float(channels[:, j].max()) != float(channels[:, j].min())]
    total = sum(RUN_PRIORITIES[k] for k in varying if k != "brief")  # channels constant in the whole log move nothing
    print(f"channels that vary in the log: {', '.join(varying)} (their priorities other than R13's sum to {total:g})")
    print("| R13 priority | share of the varying priorities | floor | R13 share of the advantage | R1 share | "
          "top-R13 valid answer gets A > 0 | barred by the projection | all-met answers with A > 0 |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for priority in args.priorities:
        for floor in (0.0, None):
            m = measure(groups, {**RUN_PRIORITIES, "brief": priority}, floor)
            print(f"| {priority:g} | {priority / (total + priority):.1%} | {'0' if floor == 0.0 else 'none'} | "
                  f"{m['r13_share']:.1%} | {m['r1_share']:.1%} | {m['top_wins']}/{m['contested']} "
                  f"({m['top_wins'] / m['contested']:.0%}) | "
                  f"{m['barred']}/{m['contested']} | {m['all_met_wins']}/{m['all_met']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
