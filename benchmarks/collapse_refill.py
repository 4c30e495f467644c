"""Signal in collapsed groups (issue 39.3): the runs' log.jsonl side by side, as the BENCHMARKS.md table.

    python benchmarks/collapse_refill.py RUN_DIR [RUN_DIR ...]

Each RUN_DIR is an `alpha-gym train` run of the same seed and start model (BENCHMARKS.md, "Signal in
collapsed groups", gives the commands). Per step and arm: the share of answers with a non-zero advantage,
the distinct canonical forms a group (mean, fewest), the groups refilled (zero variance / collapse), the
answers swapped in, and the answers scored (`verifier_calls`, refills included); then each arm's means and
its verifier calls over the first arm's.
"""

from __future__ import annotations

import sys
from pathlib import Path

from trainers.run_log import read_log


def table(runs: list[Path]) -> str:
    logs = {run.name: read_log(run) for run in runs}
    missing = [name for name, log in logs.items() if not log]
    if missing:
        raise SystemExit(f"no log.jsonl lines in {missing}")
    lines = ["| arm | step | non-zero adv | forms mean | forms min | per group | zero-var refills | "
             "collapse refills | swaps | verifier calls | s/step |", "|---|---:|" + "---:|" * 9]
    for name, log in logs.items():
        for r in log:
            lines.append(f"| {name} | {r['step']} | {r['nonzero_adv_share']:.1%} | {r['distinct_forms_mean']:.2f} | "
                         f"{r['distinct_forms_min']} | {r['group_forms']} | {r['refills']} | {r['form_refills']} | "
                         f"{r['form_swaps']} | {r['verifier_calls']} | {r['seconds/total']:.0f} |")
    first = logs[runs[0].name][-1]["verifier_calls"]
    lines += ["", "| arm | steps | mean non-zero adv | mean forms | verifier calls | vs first arm |",
              "|---|---:|---:|---:|---:|---:|"]
    for name, log in logs.items():
        n = len(log)
        calls = log[-1]["verifier_calls"]
        lines.append(f"| {name} | {n} | {sum(r['nonzero_adv_share'] for r in log) / n:.1%} | "
                     f"{sum(r['distinct_forms_mean'] for r in log) / n:.2f} | {calls} | {calls / first:.2f}x |")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    print(table([Path(p) for p in sys.argv[1:]]))
