"""One rung with one seed: train, answer the probe at every checkpoint, choose the shipped checkpoint.

A stopped comparison resumes from what its --out folder holds: each rung's checkpoints, each
checkpoint's probe answers (`probe-step-N.json`) and the difficulty filter's pass rates
(`filter.json`); `arms.stamps.claim_out_dir` refuses a folder made with other settings, so two experiments
are never blended. The arm keeps the shipped answers (`arms.kept.keep_answers`).
"""

from __future__ import annotations

import json
from pathlib import Path

from alpha_gym.errors import InputError
from alpha_gym.evaluation.kept import probe_scores
from alpha_gym.jsonable import json_dumps


class CompareError(InputError):
    """A comparison that cannot run as asked: a folder made with other settings, answers for other briefs."""


def probe_records(model_path, verifier, train, holdout, briefs, scale, step, run_dir):
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
    from trainers.answers import load_for_inference
    from trainers.rollout import generate_answers
    prompts = probe_prompts(verifier, briefs, scale.train_config("dapo").task)
    model, tokenizer = load_for_inference(model_path)
    answers = [a[0] for a in generate_answers(model, tokenizer, prompts,
                                              max_new_tokens=scale.train_config("dapo").max_completion_length)]
    del model
    formulas = [formula_or_none(a) for a in answers]
    train_cpcv = probe_scores(verifier, formulas)
    report = evaluate_holdout(formulas, train, holdout, train_verifier=verifier, label=run_dir.name, step=step)
    report.save(run_dir, name=f"holdout-step-{step}.json")
    summary = {**report.summary(), "book_return": report.book.total_return, "book_sharpe": report.book.sharpe}
    tmp = cached.with_name(cached.name + ".tmp")
    tmp.write_text(json_dumps({"step": step, "model": str(model_path), "answers": answers, "formulas": formulas,
                               "train_cpcv": train_cpcv, "summary": summary}, indent=1))
    tmp.replace(cached)
    return train_cpcv, summary


def probe_prompts(verifier, briefs, task: str = "write") -> list[str]:
    """The probe's prompts: the scale's task under the verifier's limits, brief i's the Gym env's after
    `reset(seed=prompt_seed(i))` (one probe for every rung and seed)."""
    from alpha_gym.search.task_prompts import task_prompts
    return task_prompts(task, verifier, owner="TrainConfig").prompts(briefs)


def run_rung(name, recipe, prompts, scale, seed, start_model, verifier, train, holdout, briefs, filtered,
             probe, out: Path, train_verifier=None) -> dict:
    """Train one rung with one seed in out/seed-{seed}/{name}; answer the probe at every checkpoint.

    The policy trains against a fork of `train_verifier` (default: `verifier`, the comparison's); the probe
    answers are scored with `verifier`, the same for every rung."""
    from alpha_gym.evaluation.selection import TrainRecord, select_checkpoint
    from trainers.checkpoints import latest_checkpoint
    from trainers.loop import train as train_policy
    from trainers.run_log import read_log
    config = scale.train_config(recipe, save_steps=scale.eval_every, seed=seed)
    if config.refill_rounds:  # refills are verifier calls too: the rung spends the controls' budget, not more
        from trainers.compare.ladder import scale_budget
        config = config.with_(max_verifier_calls=scale_budget(scale))
    run_dir = out / f"seed-{seed}" / name
    run_dir.mkdir(parents=True, exist_ok=True)
    rung_briefs = filtered if prompts == "filtered" else briefs
    # each rung grows its own novelty archive from the seeded one; resume wherever a checkpoint exists (a
    # run stopped before its first checkpoint starts again: its log lines are dropped, not resumed)
    train_policy(config, (train_verifier or verifier).fork(), rung_briefs, run_dir, model=start_model, steps=scale.steps,
                 resume=latest_checkpoint(run_dir) is not None, progress=True)
    # the last checkpoint is the last step trained: `scale.steps`, or earlier where the call budget ran out
    last = int(latest_checkpoint(run_dir).name.split("-")[1])
    checkpoints = {0: start_model}
    for step in range(scale.eval_every, last + 1, scale.eval_every):
        checkpoints[step] = str(run_dir / f"checkpoint-{step}")
    checkpoints[last] = str(run_dir / f"checkpoint-{last}")
    records, reports, answers = [], {}, {}
    for step, path in sorted(checkpoints.items()):
        # step 0 is the same start model for every rung and seed (greedy): answer the probe once
        where = out / "step-0" if step == 0 else run_dir
        cpcvs, summary = probe_records(path, verifier, train, holdout, probe, scale, step, where)
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
    calls = next((x["verifier_calls"] for x in reversed(log) if "verifier_calls" in x), None)
    return {"rung": name, "recipe": recipe, "prompts": prompts, "seed": seed, "n_prompts": len(rung_briefs),
            "config": config.to_dict(), "train_seconds": round(train_s, 1), "selected_step": choice.step,
            "steps_trained": last, "verifier_calls": calls,
            "checkpoints": [row(s) for s in sorted(reports)], "log": log, "probe_files": {
                k: str(v) for k, v in answers.items()}}


def filtered_briefs(model, scale, verifier, briefs, out: Path):
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
        policy, tokenizer = load_for_inference(model)
        rates = pass_rates(policy, tokenizer, verifier, pool, tries=scale.filter_tries,
                           max_new_tokens=sampling.max_completion_length, temperature=sampling.temperature,
                           seed=scale.seeds[0])
        del policy
    filtered = filter_briefs(pool, rates) or pool  # nothing in the band: keep the pool, and say so
    cached.write_text(json_dumps({"pool": len(pool), "kept": len(filtered),
                                  "fell_back_to_pool": not filter_briefs(pool, rates),
                                  "rates": [r.to_dict() for r in rates]}, indent=2))
    print(f"difficulty filter: kept {len(filtered)} of {len(pool)} briefs", flush=True)
    return filtered
