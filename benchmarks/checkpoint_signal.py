"""What a comparison rung's run did at every checkpoint: its probe answers against their briefs, and its groups.

    python benchmarks/checkpoint_signal.py runs/compare-long/seed-42/cispo_brief_book_forms [RUN_DIR ...] \
        [--step0 benchmarks/results/compare-long/step-0.jsonl]

For each checkpoint N a run folder answered the probe at (`probe-step-N.json`, written by `alpha-gym compare`):
the answers the train verifier accepts, the distinct formulas among them, the answers meeting every check of
their brief and the mean share of checks met (`trainers.compare.report.brief_compliance_of`, what R13 pays), the
mean train CPCV; then, from `log.jsonl`, the steps since the checkpoint before: mean non-zero-advantage share,
mean distinct canonical forms a group, refill draws, and the verifier calls spent so far. The probe briefs are
those of the kept step-0 answers (`--step0`), in the order the run answered them.

Reads run folders only (they are not kept: a comparison's `--out`); the kept table holds the shipped step.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def checkpoint_rows(run_dir: Path, brief_ids: list[str]) -> list[dict]:
    """One dict per probe-step-N.json of `run_dir`, in step order (see the module docstring)."""
    from trainers.compare.report import brief_compliance_of
    from trainers.run_log import read_log
    log = read_log(run_dir) if (run_dir / "log.jsonl").exists() else []
    files = sorted(run_dir.glob("probe-step-*.json"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
    out, previous = [], 0
    for f in files:
        d = json.loads(f.read_text())
        step = d["step"]
        if len(d["formulas"]) != len(brief_ids):
            raise SystemExit(f"{f}: {len(d['formulas'])} answers for {len(brief_ids)} probe briefs")
        rows = [{"brief_id": b, "formula": x, "train_valid": c is not None}
                for b, x, c in zip(brief_ids, d["formulas"], d["train_cpcv"])]
        comp = brief_compliance_of(rows, [r["train_valid"] for r in rows]) or {}  # the run's own verdicts
        valid = [c for c in d["train_cpcv"] if c is not None]
        window = [x for x in log if previous < x["step"] <= step]
        previous = step

        def mean(key):
            vals = [x[key] for x in window if x.get(key) is not None]
            return sum(vals) / len(vals) if vals else None
        out.append({"step": step, "valid": len(valid), "distinct": len({r["formula"] for r in rows if r["train_valid"]}),
                    "met_all": comp.get("brief_met_all"), "share": comp.get("brief_share"),
                    "train_cpcv": sum(valid) / len(valid) if valid else None,
                    "nonzero": mean("nonzero_adv_share"), "forms": mean("distinct_forms_mean"),
                    "refills": sum((x.get("refills") or 0) + (x.get("form_refills") or 0) for x in window),
                    "calls": window[-1].get("verifier_calls") if window else None})
    return out


def _fmt(x, spec):
    return "" if x is None else format(x, spec)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="run folders of one rung and seed (OUT/seed-S/RUNG)")
    ap.add_argument("--step0", default=str(ROOT / "benchmarks" / "results" / "compare-long" / "step-0.jsonl"),
                    help="the kept step-0 answers: their brief ids are the probe briefs, in order")
    args = ap.parse_args()
    from alpha_gym.evaluation.kept import read_rows
    brief_ids = [r["brief_id"] for r in read_rows(Path(args.step0))]
    for run in args.runs:
        run_dir = Path(run)
        if not run_dir.is_dir():
            raise SystemExit(f"{run_dir}: not a folder")
        print(f"\n{run_dir}\n")
        print("| step | valid | distinct formulas | every check met | brief share | train CPCV | non-zero advantage "
              "| forms a group | refill draws | verifier calls |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in checkpoint_rows(run_dir, brief_ids):
            print(f"| {r['step']} | {r['valid']} | {r['distinct']} | {_fmt(r['met_all'], '.0f')} | "
                  f"{_fmt(r['share'], '.2f')} | {_fmt(r['train_cpcv'], '+.3f')} | {_fmt(r['nonzero'], '.1%')} | "
                  f"{_fmt(r['forms'], '.1f')} | {r['refills']} | {_fmt(r['calls'], ',')} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
