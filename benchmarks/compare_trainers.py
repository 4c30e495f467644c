"""Trainer comparison: the reference's ladder with one seed, one probe and one selection rule.

    python benchmarks/compare_trainers.py --scale smoke --out runs/compare-smoke     # minutes, CI-sized
    python benchmarks/compare_trainers.py --scale cpu --model runs/sft/model          # ~80 min on 2 cores
    python benchmarks/compare_trainers.py --scale gpu --model Qwen/Qwen2.5-32B-Instruct  # reference settings

Rungs: DAPO; CISPO; CISPO + REPO-R; the same on the filtered prompts; DoRA instead of LoRA.
For each rung: train, checkpoint every `eval_every` steps; at step 0 and every checkpoint answer
the probe briefs greedily; score the answers on the TRAIN window (the selection rule: best mean
train CPCV of the valid probe answers) and, afterwards, on a pseudo-holdout (the last 252
sessions of the train window, cut off before training: the sealed real holdout is never read).

Writes into --out: `comparison.md` (the table), `comparison.json` (every step's log and every
checkpoint's numbers), `curves.png` (training curves), `holdout_per_checkpoint.png`, and one run
folder per rung with `log.jsonl`, checkpoints and `holdout-step-N.json` files for `alpha-gym report`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

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
                 pseudo_holdout=252,
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


def run_rung(name, recipe, prompts, scale, args, start_model, verifier, train, holdout, briefs, filtered, probe,
             out: Path) -> dict:
    from alpha_gym.evaluation.selection import TrainRecord, select_checkpoint
    from trainers.loop import latest_checkpoint, read_log, train as train_policy
    config = scale.train_config(recipe, save_steps=scale.eval_every, seed=args.seed)
    run_dir = out / name
    run_dir.mkdir(parents=True, exist_ok=True)
    rung_briefs = filtered if prompts == "filtered" else briefs
    t0 = time.perf_counter()
    # each rung grows its own novelty archive from the seeded one; resume wherever a checkpoint exists
    train_policy(config, verifier.fork(), rung_briefs, run_dir, model=start_model, steps=scale.steps,
                 resume=latest_checkpoint(run_dir) is not None, progress=True)
    train_s = time.perf_counter() - t0
    checkpoints = {0: start_model}
    for step in range(scale.eval_every, scale.steps + 1, scale.eval_every):
        checkpoints[step] = str(run_dir / f"checkpoint-{step}")
    checkpoints[scale.steps] = str(run_dir / f"checkpoint-{scale.steps}")
    records, reports = [], {}
    for step, path in sorted(checkpoints.items()):
        # step 0 is the same start model for every rung: answer the probe once, in a shared folder
        where = out / "step-0" if step == 0 else run_dir
        cpcvs, summary = _probe_records(path, verifier, train, holdout, probe, scale, step, where)
        records.append(TrainRecord(step, tuple(cpcvs)))
        reports[step] = summary
    choice = select_checkpoint(records)  # train CPCV only; the holdout below is reported, never consulted

    def row(step):
        s, rec = reports[step], next(r for r in records if r.step == step)
        return {"step": step, "train_cpcv": rec.mean_train_cpcv, "train_valid": len(rec.valid_values),
                "holdout_score": s["mean_score"], "valid": s["n_valid"], "n": s["n_answers"],
                "families": s["n_families"], "book_return": s["book_return"], "book_sharpe": s["book_sharpe"]}
    return {"rung": name, "recipe": recipe, "prompts": prompts, "n_prompts": len(rung_briefs),
            "config": config.to_dict(), "train_seconds": round(train_s, 1), "selected_step": choice.step,
            "checkpoints": [row(s) for s in sorted(reports)], "log": read_log(run_dir)}


def _fmt(x, spec):
    return "n/a" if x is None else format(x, spec)


def write_table(results, scale_name, out: Path) -> str:
    """comparison.md: each rung at step 0 and at its shipped step.

    valid = answers the train verifier accepts (parse, evaluate, turnover >= 2%), the gym's own rule;
    holdout = mean pseudo-holdout score over the answers the holdout evaluator scores (no turnover
    floor there, as in the reference probe), with that count in brackets.
    """
    lines = [f"Trainer comparison, scale `{scale_name}` (pseudo-holdout: the last sessions of the train window).",
             "", "| rung | prompts | step-0 valid | step-0 train CPCV | step-0 holdout (scored) | shipped step "
             "| valid | train CPCV | holdout (scored) | families | book return | book Sharpe |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        first = r["checkpoints"][0]
        ship = next(c for c in r["checkpoints"] if c["step"] == r["selected_step"])

        def valid(c):
            return f"{c.get('train_valid', 'n/a')}/{c['n']}"

        def holdout(c):
            return f"{_fmt(c['holdout_score'], '+.2f')} ({c['valid']})"
        lines.append(f"| {r['rung']} | {r['n_prompts']} | {valid(first)} | {_fmt(first['train_cpcv'], '+.2f')} | "
                     f"{holdout(first)} | {ship['step']} | {valid(ship)} | {_fmt(ship['train_cpcv'], '+.2f')} | "
                     f"{holdout(ship)} | {ship['families']} | {_fmt(ship['book_return'], '+.1%')} | "
                     f"{_fmt(ship['book_sharpe'], '+.2f')} |")
    text = "\n".join(lines) + "\n"
    (out / "comparison.md").write_text(text)
    return text


def write_plots(results, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    styles = ["-", "--", ":", "-.", (0, (5, 1))]  # rungs that coincide (DAPO and CISPO on-policy) stay visible
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for i, r in enumerate(results):
        steps = [x["step"] for x in r["log"]]
        for ax, key in zip(axes, ("reward", "core", "valid_share")):
            ax.plot(steps, [x.get(key) for x in r["log"]], marker=".", ls=styles[i % len(styles)], label=r["rung"])
            ax.set_title(key.replace("_", " "))
            ax.set_xlabel("step")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=110)
    plt.close(fig)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for i, r in enumerate(results):
        steps = [c["step"] for c in r["checkpoints"]]
        ls = styles[i % len(styles)]
        axes[0].plot(steps, [c["train_cpcv"] for c in r["checkpoints"]], marker="o", ls=ls, label=r["rung"])
        axes[1].plot(steps, [c["holdout_score"] for c in r["checkpoints"]], marker="o", ls=ls, label=r["rung"])
    axes[0].set_title("probe answers: train-window CPCV (selects the checkpoint)")
    axes[1].set_title("probe answers: pseudo-holdout score (reported only)")
    for ax in axes:
        ax.set_xlabel("step")
        ax.axhline(0, color="grey", lw=0.5)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "holdout_per_checkpoint.png", dpi=110)
    plt.close(fig)


def _claim_out_dir(out: Path, args, scale: Scale, verifier_settings: dict) -> None:
    """Stamp `out` with what its results depend on; refuse to resume into a folder made with other settings.

    A rerun reuses checkpoints, probe records and filter rates from `out`, so mixing settings there
    would silently blend two experiments. `--rungs` may differ between runs: each rung has its own folder.
    """
    settings = {"scale": args.scale, "scale_settings": asdict(scale), "model": args.model, "data": args.data,
                "universe": args.universe, "seed": args.seed, "verifier": verifier_settings}
    stamp = out / "settings.json"
    if stamp.exists():
        before = json.loads(stamp.read_text())
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
    ap.add_argument("--out", default="runs/compare", help="output folder")
    ap.add_argument("--rungs", help="comma-separated subset of: " + ", ".join(r[0] for r in LADDER))
    ap.add_argument("--steps", type=int, help="override the scale's steps per rung")
    ap.add_argument("--seed", type=int, default=42)
    add_settings_args(ap)
    args = ap.parse_args(argv)

    from alpha_gym.env import brief_set
    from alpha_gym.scoring.config import ConfigError
    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.settings import to_dict
    try:
        settings = settings_from_args(args)
    except ConfigError as err:
        raise SystemExit(f"compare_trainers: {err}") from None
    given_train = dict(settings.given.get("train", {}))
    if "recipe" in given_train:
        raise SystemExit("compare_trainers: each rung has its own recipe; give [train] keys without train.recipe")
    scale = SCALES[args.scale] if args.steps is None else replace(SCALES[args.scale], steps=args.steps)
    scale = replace(scale, train={**scale.train, **given_train})  # --config/--set [train] keys change every rung
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    _claim_out_dir(out, args, scale, to_dict(settings.verifier))
    train, holdout = _panels(args, scale)
    verifier = Verifier(train, settings.verifier)
    briefs = list(brief_set("train"))
    if scale.train_briefs:
        briefs = briefs[: scale.train_briefs]
    probe = list(brief_set("probe"))[: scale.probe]
    wanted = set(args.rungs.split(",")) if args.rungs else {r[0] for r in LADDER}
    ladder = [r for r in LADDER if r[0] in wanted]
    filtered = briefs
    if any(p == "filtered" for _, _, p in ladder):
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
                               seed=args.seed)
            del model
        filtered = filter_briefs(pool, rates) or pool  # nothing in the band: keep the pool, and say so
        cached.write_text(json.dumps({"pool": len(pool), "kept": len(filtered),
                                      "fell_back_to_pool": not filter_briefs(pool, rates),
                                      "rates": [r.to_dict() for r in rates]}, indent=2))
        print(f"difficulty filter: kept {len(filtered)} of {len(pool)} briefs", flush=True)
    results = []
    for name, recipe, prompts in ladder:
        print(f"=== rung {name} ({recipe}, {prompts} prompts)", flush=True)
        results.append(run_rung(name, recipe, prompts, scale, args, args.model, verifier, train, holdout, briefs,
                                filtered, probe, out))
        (out / "comparison.json").write_text(json.dumps({"scale": args.scale, "scale_settings": asdict(scale),
                                                         "model": args.model, "seed": args.seed,
                                                         "train_end": str(train.dates[-1]),
                                                         "pseudo_holdout": [str(holdout.dates[0]),
                                                                            str(holdout.dates[-1])],
                                                         "rungs": results}, indent=2, default=str))
    print(write_table(results, args.scale, out))
    write_plots(results, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
