"""The page of a trainer comparison folder (`alpha-gym compare --out OUT`).

Reads, all optional but at least one run or the table:

report.json                   the rung table with intervals and the baselines (trainers.compare.report):
                              {"seeds", "briefs", "rows": {rung: {"label", "score", "lo", "hi", "valid",
                              "families", "effective_bets", "vs_previous", "above_baselines",
                              "alpha_tests_pass": {test: share of valid answers passing, "all"},
                              "brief_share", "brief_met_all" (compliance with the probe briefs), ...}},
                              "baselines": [{"name", "kind", "score", "lo", "hi", "book", ...}]};
                              an `alpha-gym eval` folder's row (`--eval DIR`) is keyed "eval:NAME"
                              (the folder's name), with "kind": "eval" and its samples in "seeds"
seed-S/RUNG/                  one training run per rung and seed (log.jsonl, probe-step-N.json, ...)
step-0/probe-step-0.json      the start model's probe answers
seeds.png                     each seed's shipped score per rung, and train CPCV against pseudo-holdout
overfitting.json              the kept archives' PBO, effective trials and deflated Sharpe (`alpha-gym overfitting`;
                              report.json carries it too once the table is rebuilt with it)
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np

from alpha_gym.evaluation.report_html import arr, esc, fmt, img, mpl, png, table
from alpha_gym.evaluation.report_overfitting import html_section, read_overfitting
from alpha_gym.evaluation.report_training import read_jsonl

STYLES = ["-", "--", ":", "-."]
KIND_COLORS = {"motif": "0.45", "reference": "tab:orange", "alpha101": "tab:purple"}


def run_folders(out: Path) -> list[tuple[int, str, Path]]:
    """(seed, rung, folder) of every run under out/seed-S/, in seed then name order."""
    found = []
    for seed_dir in sorted(out.glob("seed-*")):
        tail = seed_dir.name.split("-", 1)[1]
        if not (seed_dir.is_dir() and tail.isdigit()):
            continue
        for run in sorted(p for p in seed_dir.iterdir() if p.is_dir()):
            if (run / "log.jsonl").is_file() or any(run.glob("probe-step-*.json")):
                found.append((int(tail), run.name, run))
    return found


def is_comparison(out: Path) -> bool:
    return (out / "report.json").is_file() or bool(run_folders(out))


def _probe_points(run: Path) -> list[tuple[int, float | None, float | None]]:
    """(step, mean train CPCV of the valid probe answers, pseudo-holdout mean score) per answered checkpoint."""
    pts = []
    for p in run.glob("probe-step-*.json"):
        try:
            d = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        cp = [x for x in d.get("train_cpcv", []) if x is not None]
        pts.append((int(d.get("step", 0)), float(np.mean(cp)) if cp else None,
                    (d.get("summary") or {}).get("mean_score")))
    return sorted(pts)


def plot_intervals(report: dict) -> str | None:
    """Each rung's pseudo-holdout mean with its 95% interval; the baselines as grey diamonds below."""
    rows = [r for r in report.get("rows", {}).values() if r.get("score") is not None]
    base = [b for b in report.get("baselines", []) if b.get("score") is not None]
    if not rows:
        return None
    plt = mpl()
    labels = [r["label"] for r in rows] + [b["name"] for b in base]
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.33 * len(labels)))
    y = np.arange(len(labels))[::-1]
    for k, r in enumerate(rows):
        lo, hi = r.get("lo"), r.get("hi")
        if lo is not None and hi is not None:
            ax.plot([lo, hi], [y[k]] * 2, color="tab:blue", lw=2)
        ax.plot([r["score"]], [y[k]], "o", color="tab:blue")
    for k, b in enumerate(base, start=len(rows)):
        if b.get("lo") is not None:
            ax.plot([b["lo"], b["hi"]], [y[k]] * 2, color="0.6", lw=2)
        ax.plot([b["score"]], [y[k]], "D", color=KIND_COLORS.get(b["kind"], "0.45"))
    if base:
        best = max(b["score"] for b in base)
        ax.axvline(best, color="tab:orange", ls="--", lw=1, label=f"best baseline {best:+.2f}")
        ax.legend(loc="lower right", fontsize=8)
    ax.axvline(0, color="0.7", lw=0.8)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel("pseudo-holdout score (mean of valid answers, 95% bootstrap interval)")
    ax.set_title("Rungs (blue) against model-free baselines\n(grey: motifs, orange: the reference's answers, "
                 "purple: Alpha101)", fontsize=10)
    ax.grid(alpha=0.3, axis="x")
    return png(fig)


def plot_checkpoints(runs, step0: list) -> str | None:
    """Train-window CPCV (selects the checkpoint) and pseudo-holdout score (reported) per checkpoint."""
    series = [(seed, rung, _probe_points(path)) for seed, rung, path in runs]
    series = [s for s in series if s[2]]
    if not series:
        return None
    plt = mpl()
    rungs = sorted({r for _, r, _ in series})
    colors = {r: plt.cm.tab10(k % 10) for k, r in enumerate(rungs)}
    seeds = sorted({s for s, _, _ in series})
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for seed, rung, pts in series:
        pts = step0 + pts
        ls = STYLES[seeds.index(seed) % len(STYLES)]
        for ax, k in zip(axes, (1, 2)):
            ax.plot([p[0] for p in pts], arr([p[k] for p in pts]), marker="o", ls=ls, color=colors[rung],
                    label=f"{rung} s{seed}")
    axes[0].set_title("probe answers: train-window CPCV (selects the checkpoint)", fontsize=10)
    axes[1].set_title("probe answers: pseudo-holdout score (reported, never consulted)", fontsize=10)
    for ax in axes:
        ax.set_xlabel("step")
        ax.axhline(0, color="0.7", lw=0.8)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return png(fig)


def plot_training(runs) -> str | None:
    """Training diagnostics of every run overlaid: colour = rung, line style = seed."""
    keys = (("reward", "reward"), ("valid_share", "valid share"), ("families", "families"),
            ("nonzero_adv_share", "non-zero advantages"), ("kl", "KL to start"), ("entropy", "entropy"))
    logs = [(seed, rung, read_jsonl(path / "log.jsonl")) for seed, rung, path in runs]
    logs = [x for x in logs if x[2]]
    keys = [(k, t) for k, t in keys if any(r.get(k) is not None for _, _, log in logs for r in log)]
    if not logs or not keys:
        return None
    plt = mpl()
    rungs = sorted({r for _, r, _ in logs})
    colors = {r: plt.cm.tab10(k % 10) for k, r in enumerate(rungs)}
    seeds = sorted({s for s, _, _ in logs})
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5), squeeze=False)
    for ax, (k, title) in zip(axes.flat, keys):
        for seed, rung, log in logs:
            pts = [(r["step"], r[k]) for r in log if r.get(k) is not None and r.get("step") is not None]
            ax.plot([p[0] for p in pts], arr([p[1] for p in pts]), ls=STYLES[seeds.index(seed) % len(STYLES)],
                    color=colors[rung], lw=1.2, label=f"{rung} s{seed}")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    axes[0][0].legend(fontsize=6, ncol=2)
    fig.tight_layout()
    return png(fig)


def rung_table(report: dict) -> str:
    verdict = {True: "yes", False: "no", None: "n/a"}
    rows = []
    for name, r in report.get("rows", {}).items():
        vs = r.get("vs_previous")
        vs_text = "" if not vs else (f"{fmt(vs.get('diff'), '+.2f')} [{fmt(vs.get('lo'), '+.2f')}, "
                                     f"{fmt(vs.get('hi'), '+.2f')}]"
                                     + (" *" if vs.get("outside_noise") else ""))
        rows.append([esc(r.get("label", name)), str(len(r.get("seeds", []))) if name != "step-0" else "-",
                     fmt(r.get("valid"), ".1f"),
                     f"{fmt(r.get('score'), '+.2f')} [{fmt(r.get('lo'), '+.2f')}, {fmt(r.get('hi'), '+.2f')}]",
                     vs_text, verdict[r.get("above_baselines")], verdict[r.get("above_motifs")],
                     fmt(r.get("families"), ".1f"), fmt(r.get("effective_bets"), ".1f"),
                     fmt(r.get("mean_abs_corr"), ".2f"), fmt(r.get("clipped_share"), ".3f"),
                     fmt(r.get("book_sharpe"), "+.2f"), fmt(r.get("book_beta"), "+.2f"),
                     fmt(r.get("book_max_drawdown"), ".1%"), fmt((r.get("alpha_tests_pass") or {}).get("all"), ".0%"),
                     fmt(r.get("brief_share"), ".2f"), fmt(r.get("brief_met_all"), ".1f")])
    return table(["rung", "seeds", "valid", "pseudo-holdout [95% CI]", "vs previous [95% CI]", "above all baselines",
                  "above motifs", "families", "eff. bets", "mean |corr|", "clipped/capped", "book Sharpe", "beta",
                  "max DD", "pass alpha tests", "brief share", "every brief check met"], rows, left={0})


def baseline_table(report: dict) -> str:
    rows = []
    for b in report.get("baselines", []):
        what = f"<code>{esc(b['formulas'][0])}</code>" if b.get("n") == 1 else f"{b.get('n_valid')} of {b.get('n')}"
        ci = f" [{fmt(b.get('lo'), '+.2f')}, {fmt(b.get('hi'), '+.2f')}]" if b.get("lo") is not None else ""
        book = b.get("book") or {}
        rows.append([esc(b["name"]), what, fmt(b.get("score"), "+.2f") + ci, fmt(book.get("sharpe"), "+.2f"),
                     fmt(book.get("beta"), "+.2f"), fmt(book.get("max_drawdown"), ".1%")])
    return table(["baseline", "formula (valid)", "score [95% CI]", "book Sharpe", "beta", "max DD"], rows, left={0, 1})


def comparison_section(out: Path, links: dict[Path, Path], page_dir: Path | None = None) -> list[str]:
    """The comparison page's parts; `links`: run folder -> its own report page (links relative to `page_dir`,
    the comparison page's folder, default `out`)."""
    report = {}
    if (out / "report.json").is_file():
        report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    runs = run_folders(out)
    parts = [f"<h1>alpha-gym trainer comparison: {esc(out.name)}</h1>"]
    if report:
        seeds = ", ".join(map(str, report.get("seeds", []))) or "none"
        parts += ["<h2>Rungs</h2>",
                  f'<p class="note">Seeds {esc(seeds)}; {report.get("briefs")} probe briefs; pseudo-holdout = the '
                  "last year of the train window. Intervals resample briefs and seeds; * = the paired difference "
                  "with the rung before excludes 0. A rung counts as learning only where its interval lies above "
                  "the best baseline. Pass alpha tests: the share of valid answers passing every WorldQuant BRAIN "
                  "submission test that ran on the pseudo-holdout (docs/alpha_tests.md; a diagnostic, never a "
                  "reward; n/a for a table built before it existed).</p>", rung_table(report), img(plot_intervals(report), "rung intervals")]
        if report.get("baselines"):
            parts += ["<h3>Baselines on the same window and costs (no model)</h3>", baseline_table(report)]
    # the kept archives' overfitting report: in report.json once the table was rebuilt with it, else its own file
    parts += html_section(report.get("overfitting") or read_overfitting(out))
    if (out / "seeds.png").is_file():  # drawn by the comparison itself, from the kept answers
        parts += ["<h3>Seeds</h3>", '<p class="note">Left: each seed\'s shipped checkpoint per rung, beside the '
                  "rung's mean and interval and the baselines. Right: the train-window CPCV that picked each "
                  "checkpoint against its pseudo-holdout score.</p>",
                  img(base64.b64encode((out / "seeds.png").read_bytes()).decode("ascii"),
                      "each seed's shipped score per rung; train CPCV against pseudo-holdout")]
    step0 = []
    s0 = out / "step-0"
    if s0.is_dir():
        step0 = _probe_points(s0)
    # a folder of kept answers alone (`--report-only --out`) has no runs: no empty sections then
    checkpoints, training = plot_checkpoints(runs, step0), plot_training(runs)
    if checkpoints is not None:
        parts += ["<h2>Checkpoints</h2>", img(checkpoints, "per-checkpoint probe scores")]
    if training is not None:
        parts += ["<h2>Training</h2>", img(training, "training diagnostics of every run")]
    if runs:
        items = []
        for seed, rung, path in runs:
            page = links.get(path)
            name = f"seed {seed}, {rung}"
            items.append(f'<li><a href="{esc(page.relative_to(page_dir or out).as_posix())}">{esc(name)}</a></li>'
                         if page is not None else f"<li>{esc(name)}</li>")
        parts += ["<h2>Runs</h2>", f"<ul>{''.join(items)}</ul>"]
    return parts
