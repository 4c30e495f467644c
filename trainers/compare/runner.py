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
        d = read_probe_file(cached)
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


def read_probe_file(path: Path) -> dict:
    """A checkpoint's kept probe answers (probe-step-N.json, `probe_records`); a damaged one (not JSON, not an
    object, without its train scores) is a CompareError naming it and saying what to do."""
    again = "delete it and the checkpoint's probe is answered again"
    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as err:   # not JSON, not UTF-8, nested past the parser
        raise CompareError(f"{path} is damaged ({type(err).__name__}): {again}") from None
    if not isinstance(d, dict) or not isinstance(d.get("train_cpcv"), list) or not isinstance(d.get("summary"), dict):
        raise CompareError(f"{path} is not a checkpoint's probe answers (no train_cpcv list and summary): {again}")
    return d


def probe_formulas(path: Path, n: int) -> list:
    """The formulas of a checkpoint's kept probe answers (probe-step-N.json), `n` of them; a damaged file is a
    CompareError naming it."""
    formulas = read_probe_file(path).get("formulas")
    if not isinstance(formulas, list) or len(formulas) != n or not all(f is None or isinstance(f, str)
                                                                        for f in formulas):
        raise CompareError(f"{path} holds no list of {n} probe formulas: delete it and the checkpoint's probe is "
                           "answered again")
    return formulas


def checkpoint_readings(records, probe_files: dict, scorer) -> dict[int, list]:
    """On a walk-forward fold, each checkpoint's probe answers scored on the fold's validation window (`scorer`, a
    `ValidationScorer`; an answer the search window refused has no reading), kept beside its probe file in
    validation.jsonl: {step: [validation score per probe answer]}, what `selection.checkpoint_table` chooses on."""
    from alpha_gym.evaluation.validation import kept_readings
    out = {}
    for r in records:
        path = Path(probe_files[r.step])
        formulas = probe_formulas(path, len(r.probe_train_cpcv))
        out[r.step] = kept_readings(path.parent, scorer, formulas, [c is not None for c in r.probe_train_cpcv])
    return out


def fold_checkpoints(records, probe_files: dict, reports: dict, log: list, scorer) -> dict:
    """A fold run's checkpoints.json (`selection.checkpoint_table` with validation readings): the train CPCV
    admits, the validation score chooses; each row with the train reward logged at its step (None at step 0)
    and its pseudo-holdout (the purge after the search window), reported only."""
    from alpha_gym.evaluation.selection import checkpoint_table
    rewards = {x["step"]: x.get("reward") for x in log if isinstance(x.get("step"), int)}
    shown = {step: {"train_reward": rewards.get(step), "holdout_score": s["mean_score"], "n_valid": s["n_valid"],
                    "n_answers": s["n_answers"], "n_families": s["n_families"], "book_return": s["book_return"],
                    "book_sharpe": s["book_sharpe"]} for step, s in reports.items()}
    return checkpoint_table(records, shown, validation=checkpoint_readings(records, probe_files, scorer))


def run_rung(name, recipe, prompts, scale, seed, start_model, verifier, train, holdout, briefs, filtered,
             probe, out: Path, train_verifier=None, validation=None) -> dict:
    """Train one rung with one seed in out/seed-{seed}/{name}; answer the probe at every checkpoint.

    The policy trains against a fork of `train_verifier` (default: `verifier`, the comparison's); the probe
    answers are scored with `verifier`, the same for every rung. The shipped checkpoint: the highest mean train
    CPCV of its probe answers; on a walk-forward fold (`validation`, a `ValidationScorer` there), the highest
    mean validation score among the checkpoints the train CPCV admits (`fold_checkpoints`, written to the run's
    checkpoints.json for `alpha-gym report`; each checkpoint row gains its validation score)."""
    from alpha_gym.evaluation.selection import TrainRecord, save_checkpoints, select_checkpoint
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
    log = read_log(run_dir)
    table = None
    if validation is None:
        selected = select_checkpoint(records).step  # train CPCV only; the holdout below is reported, never consulted
    else:   # train admits, validation chooses; the test window is read by no one here
        table = fold_checkpoints(records, answers, reports, log, validation)
        save_checkpoints(run_dir, table)
        selected = table["selected_step"]

    def row(step):
        s, rec = reports[step], next(r for r in records if r.step == step)
        on_fold = {} if table is None else {k: next(r for r in table["rows"] if r["step"] == step)[k] for k in
                                            ("validation_score", "n_valid_validation", "train_selected")}
        return {"step": step, "train_cpcv": rec.mean_train_cpcv, "train_valid": len(rec.valid_values),
                "holdout_score": s["mean_score"], "valid": s["n_valid"], "n": s["n_answers"],
                "families": s["n_families"], "book_return": s["book_return"], "book_sharpe": s["book_sharpe"],
                **on_fold}
    # the steps' own times, so a rung resumed across processes (or already finished) reports its whole training
    train_s = sum(x.get("seconds/total") or 0.0 for x in log)
    calls = next((x["verifier_calls"] for x in reversed(log) if "verifier_calls" in x), None)
    return {"rung": name, "recipe": recipe, "prompts": prompts, "seed": seed, "n_prompts": len(rung_briefs),
            "config": config.to_dict(), "train_seconds": round(train_s, 1), "selected_step": selected,
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
