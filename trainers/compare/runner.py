"""One rung with one seed: train, answer the probe at every checkpoint, keep the shipped answers.

A stopped comparison resumes from what its --out folder holds: each rung's checkpoints, each
checkpoint's probe answers (`probe-step-N.json`) and the difficulty filter's pass rates
(`filter.json`); `claim_out_dir` refuses a folder made with other settings, so two experiments are
never blended. The kept answers (`keep_answers`) are small text files meant to be committed: the
table is rebuilt from them alone (`report.build_report`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from alpha_gym.errors import InputError
from alpha_gym.folder_stamp import claim_stamp
from alpha_gym.evaluation.kept import (answer_row, probe_scores, read_json, read_object, read_rows, write_kept,
                                      write_object)
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


# ------------------------------------------------------------------------------ answers kept
def answer_rows(probe_file: Path, probe_briefs, step: int) -> list[dict]:
    """The probe answers of one checkpoint as kept rows (`kept.answer_row`): brief id, raw answer, formula,
    train-window score."""
    d = json.loads(Path(probe_file).read_text())
    return [answer_row(b.id, step, a, f, c) for b, a, f, c in zip(probe_briefs, d["answers"], d["formulas"],
                                                                  d["train_cpcv"])]


def keep_answers(results: Path, result: dict, probe_briefs) -> None:
    """results/seed-S/RUNG.jsonl (the shipped checkpoint's probe answers) and RUNG.json (its numbers)."""
    seed, name, step = result["seed"], result["rung"], result["selected_step"]
    log = result["log"]

    def mean(key):
        vals = [x[key] for x in log if x.get(key) is not None]
        return round(float(sum(vals) / len(vals)), 6) if vals else None
    summary = {k: result[k] for k in ("rung", "recipe", "prompts", "seed", "n_prompts", "train_seconds",
                                      "selected_step", "checkpoints")}
    summary.update(config=result["config"], clipped_share=mean("clipped_share"), ratio_mean=mean("ratio_mean"),
                   valid_share=mean("valid_share"), nonzero_adv_share=mean("nonzero_adv_share"),
                   kl_last=log[-1].get("kl") if log else None, steps=len(log),
                   distinct_forms_mean=mean("distinct_forms_mean"), verifier_calls=result.get("verifier_calls"))
    write_kept(results, seed, name, answer_rows(Path(result["probe_files"][step]), probe_briefs, step), summary)


def with_added_defaults(before: dict, now: dict) -> dict:
    """The stamp `before` with each verifier setting it lacks taken from `now` where `now` holds the default:
    a setting added to the code since (at its default, the behaviour before it existed) is no difference."""
    from alpha_gym.scoring.config import VerifierConfig
    from alpha_gym.settings import to_dict
    defaults = json.loads(json_dumps(to_dict(VerifierConfig())))
    missing = {k: v for k, v in now.get("verifier", {}).items()
               if k not in before.get("verifier", {}) and v == defaults.get(k)}
    return {**before, "verifier": {**before["verifier"], **missing}} if missing and "verifier" in before else before


def _with_model_identity(before: dict, now: dict, where: Path) -> dict:
    """`before` as it compares with `now` on the start model's content identity (`model_identity`).

    --report-only loads no model and stamps none: identities are not compared. A stamp written before
    identities existed names only the model's path; the run goes on (it cannot be checked) and says so.
    """
    if "model_identity" not in now:
        return {k: v for k, v in before.items() if k != "model_identity"}
    if "model_identity" not in before:
        print(f"warning: {where} predates model identities: the start model's content cannot be checked "
              f"against the one its runs began from (now {now['model_identity']})", file=sys.stderr, flush=True)
        return {**before, "model_identity": now["model_identity"]}
    return before


def check_kept_model(results: Path, identity: str | None, step0_answers=None) -> str | None:
    """Refuse to add rows to kept results that another start model produced (their step-0 row and every
    rung start from it); kept results from before identities existed are named, not refused. Returns the
    identity the kept results go on being stamped with (None where nothing is kept or no model is loaded).

    A start model rebuilt from the same recipe on another CPU has other last bits, so another identity
    (SFT sums in the CPU's own order, see trainers/sft.py). It joins the kept results only as an
    equivalent: `step0_answers()` (called only then) gives its greedy step-0 rows, and every raw answer
    must equal the kept step-0.jsonl's character for character, brief by brief; the caller then lists it
    in settings.json's `equivalent_model_identities`. Anything short of that is refused, naming how many
    answers differ.
    """
    kept = results / "settings.json"
    if identity is None or not kept.exists():
        return identity
    stamp = read_object(kept)
    before = stamp.get("model_identity")
    if before is None:
        print(f"warning: {kept} names no model identity: the rows added now may start from another model "
              f"than its step-0 row (now {identity})", file=sys.stderr, flush=True)
        return identity
    if identity == before or identity in stamp.get("equivalent_model_identities", []):
        return before
    why = "no kept step-0 answers to compare with"
    if step0_answers is not None and (results / "step-0.jsonl").exists():
        kept_rows, now = read_rows(results / "step-0.jsonl"), step0_answers()
        differ = sum((k["brief_id"], k["answer"]) != (n["brief_id"], n["answer"]) for k, n in zip(kept_rows, now))
        differ += abs(len(kept_rows) - len(now))
        if not differ:
            print(f"note: start model {identity} is not {before}, the one {results} was made from, but its "
                  f"greedy answers to all {len(now)} probe briefs are the kept step-0 answers, character for "
                  "character: kept as an equivalent (settings.json, equivalent_model_identities)",
                  file=sys.stderr, flush=True)
            return before
        why = f"{differ} of {len(kept_rows)} of its greedy step-0 answers differ from the kept ones"
    raise CompareError(f"{results} was made from start model {before}, not {identity} (the --model given; {why}): "
                       "its step-0 row and rungs would be mixed with another model's; pass another --results")


def claim_out_dir(out: Path, settings: dict) -> None:
    """Stamp `out` with what its results depend on; refuse to resume into a folder made with other settings.

    A rerun reuses checkpoints, probe records and filter rates from `out`, so mixing settings there
    would silently blend two experiments. `--rungs` and `--seeds` may differ between runs: each rung
    and seed has its own folder.
    """
    now = json.loads(json_dumps(settings))

    def refusal(stamp: Path):
        before = _with_model_identity(with_added_defaults(read_json(stamp), now), now, stamp)
        if before == now:
            return None
        changed = sorted(k for k in now if before.get(k) != now[k])
        return CompareError(f"{out} holds a comparison made with other settings ({', '.join(changed)} "
                            f"{'differs' if len(changed) == 1 else 'differ'}); pass another --out or delete the folder")
    claim_stamp(out / "settings.json", json_dumps(settings, indent=2), refusal, replace=False)


def out_settings(args, scale, verifier_settings: dict, identity: str | None = None) -> dict:
    """What a comparison's --out folder depends on (the stamp `claim_out_dir` writes and checks); `identity`
    is the start model's content (`trainers.models.model_identity`), None where no model is loaded."""
    stamp = {"scale": args.scale, "scale_settings": {k: v for k, v in asdict(scale).items() if k != "seeds"},
             "model": args.model, "data": args.data, "universe": args.universe, "verifier": verifier_settings}
    return stamp if identity is None else {**stamp, "model_identity": identity}


# ------------------------------------------------------------------------------ the run's own book
def keep_run_book(results: Path, seed: int, name: str, run_dir: Path, verifier) -> dict | None:
    """results/seed-S/NAME.archive.jsonl (the formulas the run's archive admitted: formula, step, train CPCV,
    turnover) and NAME.book.json (the correlation-capped book chosen from them on the train window, seed
    section 8: |corr| < 0.5, turnover >= 2%). A training run writes its archive.jsonl as it goes
    (`trainers.run_book`); a control's grown archive (archive.npz) is written out here, its entries unattributed
    to a step. None for a folder that is neither."""
    from trainers.run_book import ARCHIVE_LOG, append_admitted, build_run_book
    run_dir = Path(run_dir)
    log = run_dir / ARCHIVE_LOG
    if not log.exists():
        if (run_dir / "archive.npz").exists():  # a control: its grown archive, written out once
            grown = verifier.fork()
            grown.load_archive(run_dir / "archive.npz")
            append_admitted(log, grown.archive, 0)
        elif not (run_dir / "log.jsonl").exists():
            return None
        if not log.exists():  # nothing admitted: an empty book, kept as such
            log.write_text("", encoding="utf-8")
    folder = Path(results) / f"seed-{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.archive.jsonl").write_text(log.read_text(encoding="utf-8"), encoding="utf-8")
    # the comparison's verifier arrives with the seeds only, so an entry without a step was admitted during
    # this run (a control's, or a run resumed from before it kept the file): it counts
    book = build_run_book(log, verifier, include_unattributed=True)
    d = {"rung": name, "seed": int(seed), **book.to_dict()}
    write_object(folder / f"{name}.book.json", d)
    return d
