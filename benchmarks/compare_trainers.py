"""Trainer comparison: the reference's ladder over several seeds, one probe and one selection rule.

    python benchmarks/compare_trainers.py --scale smoke --out runs/compare-smoke     # minutes, CI-sized
    python benchmarks/compare_trainers.py --scale cpu --model runs/sft/model \
        --results benchmarks/results/compare-cpu                                    # ~80 min a seed on 2 cores
    python benchmarks/compare_trainers.py --scale cpu --report-only --results benchmarks/results/compare-cpu
    python benchmarks/compare_trainers.py --scale gpu --model Qwen/Qwen2.5-32B-Instruct  # reference settings

Seeds (`--seeds`, cpu default 42,43,44) run one after another, each rung in OUT/seed-S/RUNG; a stopped
run resumes from its checkpoints, and seeds run in different sessions add up: the table is built from
the answers kept under --results, whichever session wrote them.

Rungs: DAPO; CISPO; CISPO + REPO-R; the same on the filtered prompts; DoRA instead of LoRA.
For each rung: train, checkpoint every `eval_every` steps; at step 0 and every checkpoint answer
the probe briefs greedily; score the answers on the TRAIN window (the selection rule: best mean
train CPCV of the valid probe answers) and, afterwards, on a pseudo-holdout (the last 252
sessions of the train window, cut off before training: the sealed real holdout is never read).

Writes into --out: `comparison.md` (the table), `comparison.json` (every step's log and every
checkpoint's numbers), `curves.png` (training curves), `holdout_per_checkpoint.png`, `seeds.png` (each
seed's shipped score per rung, and train CPCV against pseudo-holdout per run), and one run
folder per seed and rung with `log.jsonl`, checkpoints and `holdout-step-N.json` files for
`alpha-gym report`. Into --results (small text files meant to be committed): `step-0.jsonl` and
`seed-S/RUNG.jsonl`, the probe answers of the start model and of each shipped checkpoint (brief id,
raw answer, formula, train-window CPCV); `seed-S/RUNG.json`, that run's numbers; `settings.json`;
`comparison.md` and `seeds.png`. Re-score any of them on another window with
`alpha-gym holdout-formulas --formulas seed-42/cispo.jsonl ...`.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))  # comparison_stats, also when this file is loaded by path

from alpha_gym.cli_args import add_settings_args, settings_from_args  # noqa: E402
import trainers.config  # noqa: E402,F401  (registers the [train] table)

LADDER = (
    # (rung, recipe, prompts)
    ("dapo", "dapo", "all"),
    ("cispo", "cispo", "all"),
    ("cispo_repo_r", "cispo_repo_r", "all"),
    ("cispo_repo_r_filtered", "cispo_repo_r", "filtered"),
    ("cispo_repo_r_dora_filtered", "cispo_repo_r_dora", "filtered"),
)


@dataclass(frozen=True)
class Scale:
    """The comparison's own sizes; `train` holds the TrainConfig fields every rung's recipe gets changed."""

    steps: int
    eval_every: int
    probe: int                 # probe briefs answered at each checkpoint
    train_briefs: int          # 0 = all training briefs
    filter_briefs: int         # briefs the difficulty filter looks at
    filter_tries: int
    pseudo_holdout: int        # sessions at the end of the train window held out of training
    train: dict = field(default_factory=dict)  # TrainConfig fields (sampling settings also used by the filter)
    seeds: tuple = (42,)       # training seeds per rung (the probe answers are greedy: step 0 needs one)

    def train_config(self, recipe: str, **more):
        """The recipe with this scale's training fields (and `more`) changed."""
        from trainers.config import RECIPES
        return RECIPES[recipe].with_(**{**self.train, **more})


SCALES = {
    "smoke": Scale(steps=2, eval_every=1, probe=2, train_briefs=8, filter_briefs=4, filter_tries=2,
                   pseudo_holdout=120,
                   train=dict(prompts_per_step=1, num_generations=2, max_completion_length=16, learning_rate=1e-5)),
    # sized so the five rungs, the filter and 16 probe evaluations fit in one sitting (81 min on 2 cores)
    "cpu": Scale(steps=30, eval_every=10, probe=50, train_briefs=0, filter_briefs=48, filter_tries=4,
                 pseudo_holdout=252, seeds=(42, 43, 44),
                 # the warm-started 135M model writes valid answers at T=1.0 only 3% of the time (0.7: 36%, 0.5: 58%)
                 train=dict(prompts_per_step=2, num_generations=8, max_completion_length=64, learning_rate=5e-5,
                            temperature=0.5)),
    "gpu": Scale(steps=600, eval_every=100, probe=50, train_briefs=0, filter_briefs=500, filter_tries=8,
                 pseudo_holdout=252,
                 train=dict(prompts_per_step=4, num_generations=12, max_completion_length=128, learning_rate=1e-5)),
}


def _panels(args, scale: Scale):
    """(train panel, pseudo-holdout panel): the last `pseudo_holdout` sessions are cut off before training."""
    from alpha_gym.env import resolve_panel
    from alpha_gym.market import synthetic_panel
    if args.data:
        full = resolve_panel(data=args.data, universe=args.universe)
    else:
        full = synthetic_panel(n_stocks=20, n_days=800, seed=0) if args.scale == "smoke" else synthetic_panel()
    cut = full.n_days - scale.pseudo_holdout
    return full.window(end=full.dates[cut - 1]), full.window(start=full.dates[cut])


def _probe_records(model_path, verifier, train, holdout, briefs, scale, step, run_dir):
    """Greedy probe answers of one checkpoint: train-window CPCV per answer, then the pseudo-holdout summary.

    Written to `run_dir/probe-step-{step}.json` and read back from there on a rerun, so an interrupted
    comparison resumes without answering the probe again.
    """
    cached = run_dir / f"probe-step-{step}.json"
    if cached.exists():
        d = json.loads(cached.read_text())
        return d["train_cpcv"], d["summary"]
    from alpha_gym.evaluation.holdout import evaluate_holdout
    from alpha_gym.language.answer import formula_or_none
    from trainers.answers import generate_answers, load_for_inference
    model, tokenizer = load_for_inference(model_path)
    answers = [a[0] for a in generate_answers(model, tokenizer, [b.prompt() for b in briefs],
                                              max_new_tokens=scale.train_config("dapo").max_completion_length)]
    del model
    formulas = [formula_or_none(a) for a in answers]
    train_cpcv = []
    for f in formulas:
        s = verifier.score_formula(f) if f is not None else None
        train_cpcv.append(s.channels["cpcv"] if s is not None and s.valid else None)
    report = evaluate_holdout(formulas, train, holdout, train_verifier=verifier, label=run_dir.name, step=step)
    report.save(run_dir, name=f"holdout-step-{step}.json")
    summary = {**report.summary(), "book_return": report.book.total_return, "book_sharpe": report.book.sharpe}
    tmp = cached.with_name(cached.name + ".tmp")
    tmp.write_text(json.dumps({"step": step, "model": str(model_path), "answers": answers, "formulas": formulas,
                               "train_cpcv": train_cpcv, "summary": summary}, indent=1))
    tmp.replace(cached)
    return train_cpcv, summary


def run_rung(name, recipe, prompts, scale, args, seed, start_model, verifier, train, holdout, briefs, filtered,
             probe, out: Path) -> dict:
    """Train one rung with one seed in out/seed-{seed}/{name}; answer the probe at every checkpoint."""
    from alpha_gym.evaluation.selection import TrainRecord, select_checkpoint
    from trainers.loop import latest_checkpoint, read_log, train as train_policy
    config = scale.train_config(recipe, save_steps=scale.eval_every, seed=seed)
    run_dir = out / f"seed-{seed}" / name
    run_dir.mkdir(parents=True, exist_ok=True)
    rung_briefs = filtered if prompts == "filtered" else briefs
    # each rung grows its own novelty archive from the seeded one; resume wherever a checkpoint exists (a
    # run stopped before its first checkpoint starts again: its log lines are dropped, not resumed)
    train_policy(config, verifier.fork(), rung_briefs, run_dir, model=start_model, steps=scale.steps,
                 resume=latest_checkpoint(run_dir) is not None, progress=True)
    checkpoints = {0: start_model}
    for step in range(scale.eval_every, scale.steps + 1, scale.eval_every):
        checkpoints[step] = str(run_dir / f"checkpoint-{step}")
    checkpoints[scale.steps] = str(run_dir / f"checkpoint-{scale.steps}")
    records, reports, answers = [], {}, {}
    for step, path in sorted(checkpoints.items()):
        # step 0 is the same start model for every rung and seed (greedy): answer the probe once
        where = out / "step-0" if step == 0 else run_dir
        cpcvs, summary = _probe_records(path, verifier, train, holdout, probe, scale, step, where)
        records.append(TrainRecord(step, tuple(cpcvs)))
        reports[step] = summary
        answers[step] = where / f"probe-step-{step}.json"
    choice = select_checkpoint(records)  # train CPCV only; the holdout below is reported, never consulted

    def row(step):
        s, rec = reports[step], next(r for r in records if r.step == step)
        return {"step": step, "train_cpcv": rec.mean_train_cpcv, "train_valid": len(rec.valid_values),
                "holdout_score": s["mean_score"], "valid": s["n_valid"], "n": s["n_answers"],
                "families": s["n_families"], "book_return": s["book_return"], "book_sharpe": s["book_sharpe"]}
    log = read_log(run_dir)
    # the steps' own times, so a rung resumed across processes (or already finished) reports its whole training
    train_s = sum(x.get("seconds/total") or 0.0 for x in log)
    return {"rung": name, "recipe": recipe, "prompts": prompts, "seed": seed, "n_prompts": len(rung_briefs),
            "config": config.to_dict(), "train_seconds": round(train_s, 1), "selected_step": choice.step,
            "checkpoints": [row(s) for s in sorted(reports)], "log": log, "probe_files": {
                k: str(v) for k, v in answers.items()}}


# ------------------------------------------------------------------------------ answers kept
def answer_rows(probe_file: Path, probe_briefs, step: int) -> list[dict]:
    """The probe answers of one checkpoint as JSONL rows: brief id, raw answer, formula, train-window score."""
    d = json.loads(Path(probe_file).read_text())
    return [{"brief_id": b.id, "step": step, "answer": a, "formula": f, "train_cpcv": c, "train_valid": c is not None}
            for b, a, f, c in zip(probe_briefs, d["answers"], d["formulas"], d["train_cpcv"])]


def _write_jsonl(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(path)


def keep_answers(results: Path, result: dict, probe_briefs) -> None:
    """results/seed-S/RUNG.jsonl (the shipped checkpoint's probe answers) and RUNG.json (its numbers)."""
    seed, name, step = result["seed"], result["rung"], result["selected_step"]
    _write_jsonl(results / f"seed-{seed}" / f"{name}.jsonl",
                 answer_rows(Path(result["probe_files"][step]), probe_briefs, step))
    log = result["log"]

    def mean(key):
        vals = [x[key] for x in log if x.get(key) is not None]
        return round(float(sum(vals) / len(vals)), 6) if vals else None
    summary = {k: result[k] for k in ("rung", "recipe", "prompts", "seed", "n_prompts", "train_seconds",
                                      "selected_step", "checkpoints")}
    summary.update(config=result["config"], clipped_share=mean("clipped_share"), ratio_mean=mean("ratio_mean"),
                   valid_share=mean("valid_share"), nonzero_adv_share=mean("nonzero_adv_share"),
                   kl_last=log[-1].get("kl") if log else None, steps=len(log))
    (results / f"seed-{seed}" / f"{name}.json").write_text(json.dumps(summary, indent=1))


# ------------------------------------------------------------------------------ the report
def _rescore(rows, train, holdout):
    """Per-brief pseudo-holdout scores (NaN: invalid), the valid answers' daily net P&L, the book, and the
    share of valid answers passing each industry test that ran (docs/alpha_tests.md) and all of them."""
    import numpy as np
    from alpha_gym.evaluation.holdout import evaluate_holdout
    report = evaluate_holdout([r["formula"] for r in rows], train, holdout)
    scores = np.array([a.score if a.valid and a.score is not None else np.nan for a in report.answers])
    nets = [a.net for a in report.answers if a.valid and a.net is not None]
    families = len({a.form for a in report.answers if a.valid})
    from alpha_gym.evaluation.alpha_tests import TESTS
    tests = [a.alpha_tests for a in report.answers if a.valid and a.alpha_tests]
    shares = {t: float(np.mean([x[t]["pass"] for x in tests])) if tests and all(x[t]["pass"] is not None
                                                                            for x in tests) else None
              for t in TESTS}
    shares["all"] = float(np.mean([x["passed"] for x in tests])) if tests else None
    return scores, nets, families, report.book, shares


def build_report(results: Path, ladder, train, holdout, n_boot: int = 2000) -> dict:
    """Every rung over every seed found under `results` (seeds may come from several sessions)."""
    import numpy as np
    from comparison_stats import bootstrap_interval, mean_pairwise_corr, paired_difference, valid_mean
    from alpha_gym.evaluation.baselines import beats, score_baselines
    from alpha_gym.evaluation.holdout import HoldoutEvaluator
    from alpha_gym.evaluation.selection import effective_bets

    def read(path):
        return [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]

    step0 = read(results / "step-0.jsonl")
    briefs = [r["brief_id"] for r in step0]
    seeds = sorted(int(p.name.split("-")[1]) for p in results.glob("seed-*") if p.is_dir())
    rows = {}

    def summarise(label, per_seed):
        """per_seed: {seed: answer rows in brief order}."""
        tables, valid, families, corrs, bets, books, tests, extra = [], [], [], [], [], [], [], {}
        for seed, rs in per_seed.items():
            if [r["brief_id"] for r in rs] != briefs:
                raise SystemExit(f"{label} seed {seed}: the answers are not for the same probe briefs as step 0")
            scores, nets, fams, book, shares = _rescore(rs, train, holdout)
            tests.append(shares)
            tables.append(scores)
            valid.append(sum(bool(r["train_valid"]) for r in rs))
            families.append(fams)
            if len(nets) >= 2:
                corrs.append(mean_pairwise_corr(np.array(nets)))
            bets.append(effective_bets(np.array(nets)) if nets else 0.0)
            books.append(book)
        table = np.array(tables)
        lo, hi = bootstrap_interval(table, n_boot)

        def avg(xs):
            xs = [x for x in xs if x is not None and np.isfinite(x)]
            return float(np.mean(xs)) if xs else None
        return {"label": label, "seeds": list(per_seed), "table": table, "score": valid_mean(table), "lo": lo,
                "hi": hi, "valid": avg(valid), "families": avg(families), "mean_abs_corr": avg(corrs),
                "effective_bets": avg(bets), "book_beta": avg([b.beta for b in books]),
                "book_market_corr": avg([b.market_correlation for b in books]),
                "book_max_drawdown": avg([b.max_drawdown for b in books]),
                "book_down_day": avg([b.down_day_return for b in books]),
                "book_sharpe": avg([b.sharpe for b in books]),
                "alpha_tests_pass": {k: avg([s[k] for s in tests]) for k in tests[0]} if tests else {}, **extra}

    rows["step-0"] = summarise("step 0", {s: step0 for s in (seeds or [0])})
    previous = "step-0"
    for name, _recipe, _prompts in ladder:
        have = [s for s in seeds if (results / f"seed-{s}" / f"{name}.jsonl").exists()]
        if not have:
            continue
        r = summarise(name, {s: read(results / f"seed-{s}" / f"{name}.jsonl") for s in have})
        sums = [json.loads((results / f"seed-{s}" / f"{name}.json").read_text()) for s in have]
        r["clipped_share"] = float(np.mean([x["clipped_share"] for x in sums if x["clipped_share"] is not None]
                                           or [np.nan]))
        r["selected_steps"] = [x["selected_step"] for x in sums]
        prev = rows[previous]
        common = [i for i, s in enumerate(have) if s in prev["seeds"]]
        prev_idx = [prev["seeds"].index(have[i]) for i in common]
        if common:
            r["vs_previous"] = {"rung": previous, **paired_difference(r["table"][common], prev["table"][prev_idx],
                                                                      n_boot)}
        rows[name] = r
        previous = name
    # a rung counts as learning only where its interval lies above every model-free baseline
    baselines = score_baselines(HoldoutEvaluator(train, holdout), n_boot=n_boot)
    motifs = [b for b in baselines if b["kind"] == "motif"]
    for r in rows.values():
        r["above_baselines"] = beats(r["lo"], baselines)
        r["above_motifs"] = beats(r["lo"], motifs)
    return {"seeds": seeds, "briefs": len(briefs), "rows": rows, "baselines": baselines}


def report_json(report) -> dict:
    """The report without its score tables, JSON-safe (NaN as null)."""
    from alpha_gym.jsonable import jsonable
    return jsonable({"seeds": report["seeds"], "briefs": report["briefs"],
                     "rows": {k: {kk: vv for kk, vv in v.items() if kk != "table"}
                              for k, v in report["rows"].items()},
                     "baselines": report.get("baselines", [])})


def _fmt(x, spec):
    return "n/a" if x is None or x != x else format(x, spec)


def write_table(report, scale_name, out: Path) -> str:
    """comparison.md: each rung's shipped answers over all seeds, against step 0 and the rung before.

    valid = answers the train verifier accepts (parse, evaluate, turnover >= 2%), mean over seeds;
    pseudo-holdout = mean score of the valid answers on the held-out last year of the train window,
    with a 95% bootstrap interval resampling briefs and seeds; vs previous = the paired difference;
    above all baselines / motifs = the interval's lower end lies above the best model-free baseline's
    score (all of `alpha_gym.evaluation.baselines`, or its one-motif formulas only).
    """
    from alpha_gym.evaluation.baselines import best_baseline
    seeds = report["seeds"]
    baselines = report.get("baselines", [])
    best = best_baseline(baselines)
    lines = [f"Trainer comparison, scale `{scale_name}`, seeds {', '.join(map(str, seeds)) or 'none'}, "
             f"{report['briefs']} probe briefs (pseudo-holdout: the last year of the train window).", "",
             "| rung | seeds | valid | pseudo-holdout [95% CI] | vs previous rung [95% CI] | above all baselines | "
             "above motifs | "
             "families | eff. bets | mean abs corr | clipped/capped | book Sharpe | beta | mkt corr | max DD | "
             "down days |",
             "|---|---:|---:|---|---|:-:|:-:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    verdict = {True: "yes", False: "no", None: "n/a"}
    for name, r in report["rows"].items():
        vs = r.get("vs_previous")
        vs_text = "" if not vs else (f"{vs['diff']:+.2f} [{vs['lo']:+.2f}, {vs['hi']:+.2f}]"
                                     + (" *" if vs["outside_noise"] else ""))
        lines.append(f"| {r['label']} | {len(r['seeds']) if name != 'step-0' else '-'} | {_fmt(r['valid'], '.1f')} | "
                     f"{_fmt(r['score'], '+.2f')} [{_fmt(r['lo'], '+.2f')}, {_fmt(r['hi'], '+.2f')}] | {vs_text} | "
                     f"{verdict[r.get('above_baselines')]} | {verdict[r.get('above_motifs')]} | "
                     f"{_fmt(r['families'], '.1f')} | {_fmt(r['effective_bets'], '.1f')} | "
                     f"{_fmt(r['mean_abs_corr'], '.2f')} | {_fmt(r.get('clipped_share'), '.3f')} | "
                     f"{_fmt(r['book_sharpe'], '+.2f')} | {_fmt(r['book_beta'], '+.2f')} | "
                     f"{_fmt(r['book_market_corr'], '+.2f')} | {_fmt(r['book_max_drawdown'], '.1%')} | "
                     f"{_fmt(r['book_down_day'], '+.2%')} |")
    lines += ["", "`*`: the paired interval excludes 0 (outside the noise of briefs and seeds)."]
    if best is not None:
        lines += ["", f"Baselines on the same pseudo-holdout and costs (no model). Best: {best['name']} "
                      f"({best['score']:+.2f}); a rung is above them when its interval's lower end is higher. The reference's "
                      "formulas were chosen on data through 2025-08, which may include this window: a high bar, "
                      "not an ex-ante one; the motifs are ex-ante.",
                  "", "| baseline | formulas (valid) | score [95% CI] | families | turnover/day (median) | book Sharpe | beta | "
                  "max DD |", "|---|---|---|---:|---:|---:|---:|---:|"]
        for b in baselines:
            what = f"`{b['formulas'][0]}`" if b["n"] == 1 else f"{b['n_valid']} of {b['n']}"
            ci = f" [{_fmt(b['lo'], '+.2f')}, {_fmt(b['hi'], '+.2f')}]" if b["lo"] is not None else ""
            bk = b["book"]
            lines.append(f"| {b['name']} | {what} | {_fmt(b['score'], '+.2f')}{ci} | {b['n_families']} | "
                         f"{_fmt(b.get('median_turnover'), '.0%')} | "
                         f"{_fmt(bk['sharpe'], '+.2f')} | {_fmt(bk['beta'], '+.2f')} | {_fmt(bk['max_drawdown'], '.1%')} |")
    text = "\n".join(lines) + "\n"
    (out / "comparison.md").write_text(text)
    return text


def write_plots(results, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    styles = ["-", "--", ":", "-.", (0, (5, 1))]  # rungs that coincide stay visible
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for i, r in enumerate(results):
        steps = [x["step"] for x in r["log"]]
        for ax, key in zip(axes, ("reward", "core", "valid_share")):
            ax.plot(steps, [x.get(key) for x in r["log"]], marker=".", ls=styles[i % len(styles)],
                    label=f"{r['rung']} s{r['seed']}")
            ax.set_title(key.replace("_", " "))
            ax.set_xlabel("step")
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=110)
    plt.close(fig)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for i, r in enumerate(results):
        steps = [c["step"] for c in r["checkpoints"]]
        ls = styles[i % len(styles)]
        label = f"{r['rung']} s{r['seed']}"
        axes[0].plot(steps, [c["train_cpcv"] for c in r["checkpoints"]], marker="o", ls=ls, label=label)
        axes[1].plot(steps, [c["holdout_score"] for c in r["checkpoints"]], marker="o", ls=ls, label=label)
    axes[0].set_title("probe answers: train-window CPCV (selects the checkpoint)")
    axes[1].set_title("probe answers: pseudo-holdout score (reported only)")
    for ax in axes:
        ax.set_xlabel("step")
        ax.axhline(0, color="grey", lw=0.5)
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "holdout_per_checkpoint.png", dpi=110)
    plt.close(fig)


def write_seed_plot(report, results: Path, folders) -> None:
    """seeds.png: what a seed does to a rung, and whether the checkpoint choice could have seen it.

    Left: each seed's shipped score per rung (dots) beside the rung's mean and 95% interval, with step 0
    and the best one-motif and overall baselines as lines. Right: train-window CPCV (which picks the
    checkpoint) against the pseudo-holdout score (which is only reported), one point per run.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from scipy.stats import spearmanr
    from comparison_stats import valid_mean
    from alpha_gym.evaluation.baselines import best_baseline
    rungs = [(k, r) for k, r in report["rows"].items() if k != "step-0"]
    if not rungs:
        return
    seeds = report["seeds"]
    colours = {s: plt.cm.tab10(i % 10) for i, s in enumerate(seeds)}
    markers = "osD^v<>ph"
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    cpcv, score = [], []
    for x, (name, r) in enumerate(rungs):
        if all(v is not None and np.isfinite(v) for v in (r["score"], r["lo"], r["hi"])):
            left.errorbar([x], [r["score"]], yerr=[[r["score"] - r["lo"]], [r["hi"] - r["score"]]], fmt="_",
                          color="black", ms=18, capsize=6, zorder=3)
        for j, seed in enumerate(r["seeds"]):
            s = valid_mean(r["table"][j])
            left.scatter([x + 0.12 * (j - (len(r["seeds"]) - 1) / 2)], [s], color=colours[seed], s=30, zorder=4,
                         label=f"seed {seed}" if x == 0 else None)
            run = json.loads((results / f"seed-{seed}" / f"{name}.json").read_text())
            shipped = {c["step"]: c for c in run["checkpoints"]}[run["selected_step"]]
            c = np.nan if shipped["train_cpcv"] is None else float(shipped["train_cpcv"])  # None: no valid answer
            right.scatter([c], [s], color=colours[seed], marker=markers[x % len(markers)], s=45)
            cpcv.append(c)
            score.append(s)
    lines = [("step 0", report["rows"]["step-0"]["score"], "grey")]
    motifs = best_baseline([b for b in report.get("baselines", []) if b["kind"] == "motif"])
    best = best_baseline(report.get("baselines", []))
    if motifs is not None:
        lines.append((f"{motifs['name']} (best motif)", motifs["score"], "tab:green"))
    if best is not None and best is not motifs:
        lines.append((f"{best['name']} (best baseline)", best["score"], "tab:red"))
    for label, y, colour in lines:
        if y is None or not np.isfinite(y):
            continue
        left.axhline(y, color=colour, ls="--", lw=1)
        left.annotate(f"{label} {y:+.2f}", (len(rungs) - 0.5, y), fontsize=7, color=colour, ha="right", va="bottom")
    left.set_xticks(range(len(rungs)), [r["label"] for _, r in rungs], rotation=15, fontsize=8)
    left.set_xlim(-0.5, len(rungs) - 0.5)
    left.set_ylabel("pseudo-holdout score (valid answers)")
    left.set_title("each seed's shipped checkpoint; bars: mean and 95% interval")
    left.legend(fontsize=7, loc="lower left")
    cpcv, score = np.array(cpcv), np.array(score)
    ok = np.isfinite(cpcv) & np.isfinite(score)
    rho = spearmanr(cpcv[ok], score[ok])[0] if ok.sum() >= 3 else float("nan")
    right.set_xlabel("train-window CPCV (picks the checkpoint)")
    right.set_ylabel("pseudo-holdout score")
    right.set_title(f"one point per run: rank correlation {rho:+.2f}")
    right.axhline(0, color="grey", lw=0.5)
    from matplotlib.lines import Line2D  # marker = rung, colour = seed (as on the left)
    right.legend(handles=[Line2D([], [], marker=markers[x % len(markers)], ls="", color="grey", label=name)
                          for x, (name, _) in enumerate(rungs)], fontsize=7, loc="best")
    fig.tight_layout()
    for folder in folders:
        fig.savefig(Path(folder) / "seeds.png", dpi=110)
    plt.close(fig)


def _with_added_defaults(before: dict, now: dict) -> dict:
    """The stamp `before` with each verifier setting it lacks taken from `now` where `now` holds the default:
    a setting added to the code since (at its default, the behaviour before it existed) is no difference."""
    from alpha_gym.scoring.config import VerifierConfig
    from alpha_gym.settings import to_dict
    defaults = to_dict(VerifierConfig())
    missing = {k: v for k, v in now.get("verifier", {}).items()
               if k not in before.get("verifier", {}) and v == json.loads(json.dumps(defaults.get(k)))}
    return {**before, "verifier": {**before["verifier"], **missing}} if missing and "verifier" in before else before


def _claim_out_dir(out: Path, args, scale: Scale, verifier_settings: dict) -> None:
    """Stamp `out` with what its results depend on; refuse to resume into a folder made with other settings.

    A rerun reuses checkpoints, probe records and filter rates from `out`, so mixing settings there
    would silently blend two experiments. `--rungs` and `--seeds` may differ between runs: each rung
    and seed has its own folder.
    """
    settings = {"scale": args.scale, "scale_settings": {k: v for k, v in asdict(scale).items() if k != "seeds"},
                "model": args.model, "data": args.data, "universe": args.universe, "verifier": verifier_settings}
    stamp = out / "settings.json"
    if stamp.exists():
        before = _with_added_defaults(json.loads(stamp.read_text()), json.loads(json.dumps(settings)))
        if before != json.loads(json.dumps(settings)):
            changed = sorted(k for k in settings if before.get(k) != json.loads(json.dumps(settings[k])))
            raise SystemExit(f"{out} holds a comparison made with other settings ({', '.join(changed)} differ); "
                             "pass another --out or delete the folder")
    else:
        stamp.write_text(json.dumps(settings, indent=2))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=sorted(SCALES), default="smoke")
    ap.add_argument("--model", help="starting policy: a model folder (e.g. the SFT warm start) or hub id; "
                                    "default: SmolLM2-135M-Instruct")
    ap.add_argument("--data", help="market data (default: the synthetic market)")
    ap.add_argument("--universe", help="a ticker file, or tickers separated by commas")
    ap.add_argument("--out", default="runs/compare", help="output folder (checkpoints, logs, probe answers)")
    ap.add_argument("--results", help="folder for the kept answers and the table (small text files to commit); "
                                      "default: OUT/results")
    ap.add_argument("--rungs", help="comma-separated subset of: " + ", ".join(r[0] for r in LADDER))
    ap.add_argument("--seeds", help="comma-separated training seeds (default: the scale's, cpu: 42,43,44)")
    ap.add_argument("--steps", type=int, help="override the scale's steps per rung")
    ap.add_argument("--report-only", action="store_true",
                    help="no training: the table from the answers already under --results (any seeds, any session)")
    ap.add_argument("--stress-checkpoint", metavar="DIR|auto|none",
                    help="R3's world model for every rung (default: the settings', 'auto': the model `alpha-gym "
                         "stress fit` registered for the train panel)")
    add_settings_args(ap)
    args = ap.parse_args(argv)

    from alpha_gym.env import brief_set
    from alpha_gym.scoring.config import ConfigError
    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.settings import to_dict
    try:
        flags = {} if args.stress_checkpoint is None else {"verifier": {"stress_checkpoint": args.stress_checkpoint}}
        settings = settings_from_args(args, flags)
    except ConfigError as err:
        raise SystemExit(f"compare_trainers: {err}") from None
    given_train = dict(settings.given.get("train", {}))
    if "recipe" in given_train:
        raise SystemExit("compare_trainers: each rung has its own recipe; give [train] keys without train.recipe")
    scale = SCALES[args.scale] if args.steps is None else replace(SCALES[args.scale], steps=args.steps)
    scale = replace(scale, train={**scale.train, **given_train})  # --config/--set [train] keys change every rung
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else list(scale.seeds)
    out = Path(args.out)
    results = Path(args.results) if args.results else out / "results"
    out.mkdir(parents=True, exist_ok=True)
    results.mkdir(parents=True, exist_ok=True)
    train, holdout = _panels(args, scale)
    # R3's model made explicit ("auto": the one registered for the train panel, else none), so the stamp and
    # every rung name the model they use, and a model registered later cannot change a resumed comparison
    from alpha_gym.stress.registry import resolve
    verifier_config = settings.verifier.with_(stress_checkpoint=resolve(settings.verifier.stress_checkpoint, train))
    _claim_out_dir(out, args, scale, to_dict(verifier_config))
    wanted = set(args.rungs.split(",")) if args.rungs else {r[0] for r in LADDER}
    ladder = [r for r in LADDER if r[0] in wanted]
    probe = list(brief_set("probe"))[: scale.probe]
    runs = []
    if not args.report_only:
        verifier = Verifier(train, verifier_config)
        briefs = list(brief_set("train"))
        if scale.train_briefs:
            briefs = briefs[: scale.train_briefs]
        filtered = briefs
        if any(p == "filtered" for _, _, p in ladder):
            filtered = _filtered_briefs(args, scale, verifier, briefs, out)
            # the filtered rungs' briefs and pass rates are part of what their answers rest on
            (results / "filter.json").write_text((out / "filter.json").read_text())
        for seed in seeds:
            for name, recipe, prompts in ladder:
                print(f"=== seed {seed}, rung {name} ({recipe}, {prompts} prompts)", flush=True)
                r = run_rung(name, recipe, prompts, scale, args, seed, args.model, verifier, train, holdout, briefs,
                             filtered, probe, out)
                runs.append(r)
                keep_answers(results, r, probe)
                (out / "comparison.json").write_text(json.dumps({
                    "scale": args.scale, "scale_settings": asdict(scale), "model": args.model, "seeds": seeds,
                    "train_end": str(train.dates[-1]),
                    "pseudo_holdout": [str(holdout.dates[0]), str(holdout.dates[-1])],
                    "runs": [{k: v for k, v in x.items() if k != "probe_files"} for x in runs]},
                    indent=2, default=str))
        _write_jsonl(results / "step-0.jsonl", answer_rows(out / "step-0" / "probe-step-0.json", probe, 0))
        (results / "settings.json").write_text(json.dumps({
            "scale": args.scale, "scale_settings": asdict(scale), "model": args.model, "data": args.data,
            "universe": args.universe, "train_window": [str(train.dates[0]), str(train.dates[-1])],
            "pseudo_holdout": [str(holdout.dates[0]), str(holdout.dates[-1])],
            "probe_briefs": [b.id for b in probe], "verifier": to_dict(verifier_config)}, indent=1))
        write_plots(runs, out)
    if not (results / "step-0.jsonl").exists():
        raise SystemExit(f"{results} holds no step-0.jsonl: nothing to report")
    report = build_report(results, ladder, train, holdout)
    text = write_table(report, args.scale, out)
    (results / "comparison.md").write_text(text)
    write_seed_plot(report, results, {results, out})
    for folder in {results, out}:
        (folder / "report.json").write_text(json.dumps(report_json(report), indent=1))
    from alpha_gym.evaluation.report import write_report
    print(text)
    print(f"report page: {write_report(out)}")
    return 0


def _filtered_briefs(args, scale, verifier, briefs, out: Path):
    """The difficulty filter's briefs (pass rates cached in out/filter.json, reused on a rerun)."""
    from trainers.difficulty import BriefPassRate, filter_briefs, pass_rates
    pool = briefs[: scale.filter_briefs]
    cached = out / "filter.json"
    if cached.exists():  # a rerun reuses the pass rates rather than sampling the pool again
        rates = [BriefPassRate(**{k: v for k, v in r.items() if k != "pass_rate"})
                 for r in json.loads(cached.read_text())["rates"]]
    else:
        from trainers.answers import load_for_inference
        sampling = scale.train_config("dapo")  # every rung samples with the scale's settings
        model, tokenizer = load_for_inference(args.model)
        rates = pass_rates(model, tokenizer, verifier, pool, tries=scale.filter_tries,
                           max_new_tokens=sampling.max_completion_length, temperature=sampling.temperature,
                           seed=scale.seeds[0])
        del model
    filtered = filter_briefs(pool, rates) or pool  # nothing in the band: keep the pool, and say so
    cached.write_text(json.dumps({"pool": len(pool), "kept": len(filtered),
                                  "fell_back_to_pool": not filter_briefs(pool, rates),
                                  "rates": [r.to_dict() for r in rates]}, indent=2))
    print(f"difficulty filter: kept {len(filtered)} of {len(pool)} briefs", flush=True)
    return filtered


if __name__ == "__main__":
    sys.exit(main())
