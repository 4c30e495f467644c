"""Brief compliance of the kept probe answers, with the brief's own checks and with the extended ones (issue 39).

    python benchmarks/brief_compliance_kept.py [benchmarks/results/compare-long]

Reads every kept answer file of a comparison (`step-0.jsonl`, `seed-S/RUNG.jsonl`; not the `.archive.jsonl`
files), finds the brief each answer answered (`alpha_gym.tasks.sets.brief_by_id`), and counts, per file,
the answers meeting every constraint of their brief and the mean share of constraints met, first with the
brief's constraints (`check_compliance(brief, formula)`), then with the extended checks
(`check_compliance(..., extended=True)`). An answer without a formula, or whose formula does not parse,
meets nothing.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from alpha_gym.evaluation.kept import read_rows
from alpha_gym.language import FormulaError, parse
from alpha_gym.tasks.compliance import check_compliance, compliance_share
from alpha_gym.tasks.sets import brief_by_id

ROOT = Path(__file__).resolve().parents[1]


def measure(path: Path) -> dict:
    rows = read_rows(path)  # the kept reader: an edited or torn row is refused
    out = {"file": str(path), "n": 0, "all": [0, 0], "share": [0.0, 0.0], "distinct": set()}
    for row in rows:
        brief = brief_by_id(row["brief_id"])
        if brief is None:
            raise SystemExit(f"{path}: unknown brief {row['brief_id']!r}")
        out["n"] += 1
        try:
            node = parse(row["formula"]) if row.get("formula") else None
        except FormulaError:
            node = None
        if node is None:
            continue
        out["distinct"].add(row["formula"])
        for k, extended in enumerate((False, True)):
            checks = check_compliance(brief, node, extended=extended)
            out["all"][k] += all(checks.values())
            out["share"][k] += compliance_share(checks)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="?", default=str(ROOT / "benchmarks" / "results" / "compare-long"))
    args = ap.parse_args()
    root = Path(args.results)
    files = [root / "step-0.jsonl"] + sorted(p for p in root.glob("seed-*/*.jsonl") if ".archive." not in p.name)
    print("| answers | n | distinct formulas | meet every constraint: own checks | extended | "
          "mean share: own | extended |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    total = {"n": 0, "all": [0, 0]}
    for path in files:
        m = measure(path)
        total["n"] += m["n"]
        total["all"] = [a + b for a, b in zip(total["all"], m["all"])]
        print(f"| {path.relative_to(root)} | {m['n']} | {len(m['distinct'])} | {m['all'][0]} | {m['all'][1]} | "
              f"{m['share'][0] / m['n']:.2f} | {m['share'][1] / m['n']:.2f} |")
    print(f"| all files | {total['n']} | | {total['all'][0]} | {total['all'][1]} | | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
