"""The `best_of_n` control of the trainer comparison: the start model, sampled, with the verifier picking.

No weight is updated. The budget is a rung's training calls (`trainers.compare.ladder.scale_budget`: steps x
prompts_per_step x num_generations, 480 at `--scale cpu`), spent as k = budget // n_probe samples on each
probe brief's own prompt, each brief's k samples scored on the train window as one group (the archive updated
after it, as in training); the brief is answered with its best sample by reward (the first of equal ones).
At `--scale cpu`: k = 480 // 50 = 9, 450 calls (the 30 left over would not give every brief one more sample).

Why samples on the probe brief's own prompt, not on the training briefs: the issue asks that "each probe
brief is answered with the start model's best-of-k sample", and a sample written for another brief is not an
answer to this one; what training buys is then compared with the same calls spent directly on the question
asked. The start model's answers to the training briefs, pooled and matched to the probe briefs by
compliance, is the `search` control's rule over model-free formulas (`alpha_gym.search`).

Sampling as a rung samples (`trainers.rollout.sample_group`): the scale's temperature and max_completion_length,
plain multinomial (top_k=0, top_p=1), seeded per brief from the run's seed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from alpha_gym.evaluation.kept import answer_row, checkpoint_row, control_numbers, write_kept
from alpha_gym.jsonable import json_dumps
from alpha_gym.language.answer import formula_or_none
from alpha_gym.search.task_prompts import task_prompts
from alpha_gym.tasks.prompts import TaskPrompts
from alpha_gym.tasks.task import DEFAULT_TASK
from trainers.compare.ladder import scale_budget


@dataclass(frozen=True)
class Sampling:
    """The sampling settings `sample_group` reads: k answers a prompt, at the rung's temperature and length."""

    num_generations: int
    temperature: float
    max_completion_length: int
    # transformers' generate, every row run to the longest answer (`sample_groups(drop_finished=False)`): the
    # kept control's samples were drawn so, and a rerun or a resume draws them again draw for draw (the
    # shrinking batch draws other numbers)
    drop_finished: bool = False


def samples_per_brief(budget: int, n_briefs: int) -> int:
    """k = budget // n_briefs: the most samples per brief with k x n_briefs <= budget (ValueError below one)."""
    if n_briefs < 1:
        raise ValueError("best_of_n needs at least one probe brief")
    if budget < n_briefs:
        raise ValueError(f"a budget of {budget} verifier calls cannot sample each of {n_briefs} briefs once")
    return budget // n_briefs


def best_sample(rewards: Sequence[float]) -> int:
    """The index of the highest reward (the first of equal ones)."""
    return int(np.argmax(np.asarray(rewards, dtype=np.float64)))


def sample_and_pick(model, tokenizer, verifier, briefs: Sequence, sampling: Sampling, seed: int,
                    done: Sequence[dict] = (), on_brief=None, task: TaskPrompts | None = None) -> list[dict]:
    """Per brief: k sampled answers, their rewards (scored as one group, archive updated after it), the best.

    Returns one dict a brief: brief_id, answers, rewards, valid, cpcv (R1 when valid, else None), best.
    `done`: the records of the first briefs from an interrupted run; their answers are scored again in order
    (the archive grows as it did; a reward that differs is an error, not a silent blend), and sampling goes on
    from the next brief with its own seed, so a resumed run gives the uninterrupted one's records.
    `on_brief(record)` is called after each newly sampled brief (the caller keeps it on disk).
    `task`: the prompts (default: the write task under the verifier's limits); brief i's is
    `task.prompts(briefs, seed)[i]`, the Gym env's for that task and seed.
    """
    from alpha_gym.pool import score_group
    from trainers.rollout import end_token_ids as _eos_ids, prompt_ids as _prompt_ids, sample_group
    out = []
    for brief, record in zip(briefs, done):
        group = score_group(verifier, record["answers"], brief)  # on every core (alpha_gym.pool)
        verifier.update_archive(group)
        if record["brief_id"] != brief.id or group.rewards.tolist() != record["rewards"]:
            raise RuntimeError(f"the kept samples of brief {record['brief_id']} do not score as they did: "
                               "other verifier settings or data; delete the partial samples to start again")
        out.append(record)
    if len(out) == len(briefs):
        return out
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    device = next(model.parameters()).device
    eos_ids = _eos_ids(model, tokenizer)
    was_training = model.training
    model.eval()
    prompts = (task or TaskPrompts(limits=verifier.config.limits)).prompts(briefs, seed)
    try:
        for i, brief in enumerate(briefs):
            if i < len(out):
                continue
            torch.manual_seed(int(np.random.SeedSequence([seed, i]).generate_state(1)[0]))
            _, _, texts = sample_group(model, tokenizer, _prompt_ids(tokenizer, prompts[i], device), sampling,
                                       eos_ids, drop_finished=sampling.drop_finished)
            group = score_group(verifier, texts, brief)  # on every core, the same scores (alpha_gym.pool)
            verifier.update_archive(group)
            out.append({"brief_id": brief.id, "answers": list(texts), "rewards": group.rewards.tolist(),
                        "valid": group.valid.tolist(),
                        "cpcv": [float(s.channels["cpcv"]) if s.valid else None for s in group.scores],
                        "best": best_sample(group.rewards)})
            if on_brief is not None:
                on_brief(out[-1])
    finally:
        model.train(was_training)
    return out


def sampling_settings(scale, seed: int, start_model, probe: Sequence) -> tuple[int, int, Sampling, dict]:
    """(budget, k, the sampling, the settings samples.json records) of one seed's run at a comparison scale."""
    budget = scale_budget(scale)
    k = samples_per_brief(budget, len(probe))
    config = scale.train_config("dapo")
    sampling = Sampling(k, float(config.temperature), int(config.max_completion_length))
    settings = {"budget": budget, "k": k, "seed": int(seed), "model": None if start_model is None else str(start_model),
                "temperature": sampling.temperature, "max_completion_length": sampling.max_completion_length,
                "briefs": [b.id for b in probe],
                # the kept samples were drawn on the write task's prompts: only another task is recorded
                **({"task": config.task} if config.task != DEFAULT_TASK else {})}
    return budget, k, sampling, settings


def picks_on_validation(picked: Sequence[dict], scorer, run_dir: Path | None) -> list:
    """Each brief's `selection.SampleChoice` on a walk-forward fold: the train CPCV admits its samples, their
    validation score (`scorer`, a `ValidationScorer` on the fold; each formula scored once, kept in
    run_dir/validation.jsonl) chooses. The samples, rewards and train CPCV are the run's, unchanged."""
    from alpha_gym.evaluation.selection import select_sample_on_validation
    from alpha_gym.evaluation.validation import kept_readings
    out = []
    for p in picked:
        scores = kept_readings(run_dir, scorer, [formula_or_none(a) for a in p["answers"]], p["valid"])
        out.append(select_sample_on_validation(p["rewards"], p["cpcv"], scores))
    return out


def run_best_of_n_rung(scale, seed: int, start_model, verifier, train, holdout, probe: Sequence, results: Path,
                       out: Path | None = None, name: str = "best_of_n", validation=None) -> dict:
    """Run the best-of-N control for one seed and keep its answers as a rung's.

    Inputs as a rung gets them: the comparison's `scale` (budget and sampling settings: `scale.train_config`
    of any recipe, as the difficulty filter reads them), the training `seed` (seeds the sampling), the start
    model (a folder, hub id or None for the built-in default), the comparison's train `verifier` (forked here,
    so the control grows its own archive from the seeded one), the train and pseudo-holdout panels and the
    `probe` briefs. k = budget // len(probe) samples per probe brief; see the module docstring.

    Writes `results/seed-S/NAME.jsonl` (brief_id, step, answer, formula, train_cpcv, train_valid, and k,
    reward, sample: the chosen sample's index) and `results/seed-S/NAME.json` (a rung's numbers; selected_step
    is the scale's steps: the calls of that many training steps), and, when `out` is given,
    `out/seed-S/NAME/samples.json` (every sample and reward), `archive.npz` (the novelty archive the
    samples grew) and `holdout-step-N.json`. A rerun with the same
    settings reuses samples.json instead of sampling again; an interrupted one resumes after the last brief
    it kept in samples.partial.jsonl. Returns the numbers written to NAME.json.
    validation: on a walk-forward fold, a `ValidationScorer` there: each brief's answer is then chosen by
    `picks_on_validation` (the rows gain train_sample, chosen_by and validation_score, NAME.json the rule and its
    counts; the samples and their rewards are the same); None: the best reward, as before.
    """
    budget, k, sampling, settings = sampling_settings(scale, seed, start_model, probe)
    config = scale.train_config("dapo")
    run_dir = None if out is None else Path(out) / f"seed-{seed}" / name
    t0 = time.perf_counter()
    picked, sampled = _cached(run_dir, settings)
    if picked is None:
        from trainers.answers import load_for_inference
        model, tokenizer = load_for_inference(start_model)
        grown = verifier.fork()
        done, keep = _partial(run_dir, settings)
        if done:
            print(f"best_of_n seed {seed}: resuming after {len(done)} of {len(probe)} briefs", flush=True)

        ids = [b.id for b in probe]

        def kept(record: dict) -> None:  # on disk first, then the progress line
            if keep is not None:
                keep(record)
            n = ids.index(record["brief_id"]) + 1
            print(f"best_of_n seed {seed}: brief {n}/{len(probe)} ({record['brief_id']}), best reward "
                  f"{max(record['rewards']):+.3f}, {sum(record['valid'])}/{len(record['valid'])} valid, "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
        picked = sample_and_pick(model, tokenizer, grown, probe, sampling, seed, done=done, on_brief=kept,
                                 task=task_prompts(config.task, grown, owner="TrainConfig"))
        del model
        sampled = time.perf_counter() - t0      # this process's sampling (a resumed run's earlier part not counted)
        if run_dir is not None:
            grown.save_archive(run_dir / "archive.npz")  # the archive the samples grew, as a checkpoint keeps it
            tmp = run_dir / "samples.json.tmp"
            tmp.write_text(json_dumps({"settings": settings, "seconds": round(sampled, 3), "briefs": picked},
                                      indent=1), encoding="utf-8")
            tmp.replace(run_dir / "samples.json")
            (run_dir / PARTIAL).unlink(missing_ok=True)
    # a rerun reports the sampling's own wall time, not the moment it took to read it back (samples.json saved
    # before the time was kept: the reading, as before)
    t0 = time.perf_counter() - (sampled if sampled is not None else 0.0)
    step = scale.steps
    choices = None if validation is None else picks_on_validation(picked, validation, run_dir)
    rows, formulas, cpcvs = [], [], []
    for i, (brief, p) in enumerate(zip(probe, picked)):
        b = p["best"] if choices is None else choices[i].index
        formula, cpcv = formula_or_none(p["answers"][b]), p["cpcv"][b]
        formulas.append(formula)
        cpcvs.append(cpcv)
        on_fold = {} if choices is None else {"train_sample": choices[i].train_index, "chosen_by": choices[i].rule,
                                              "validation_score": choices[i].validation}
        rows.append(answer_row(brief.id, step, p["answers"][b], formula, cpcv, k=k, reward=p["rewards"][b], sample=b,
                               **on_fold))
    checkpoint = checkpoint_row(step, cpcvs, train, holdout, verifier, formulas, run_dir, label=name)
    n_samples = sum(len(p["answers"]) for p in picked)
    numbers = control_numbers(
        name, "best_of_n", seed, time.perf_counter() - t0, step, checkpoint,
        {"k": k, "temperature": sampling.temperature, "max_completion_length": sampling.max_completion_length,
         "model": settings["model"]},
        steps=0, budget=budget, verifier_calls=n_samples, k=k,
        valid_share=sum(sum(p["valid"]) for p in picked) / n_samples if n_samples else None,
        **({} if choices is None else {"pick": PICK_ON_VALIDATION,
                                       "chosen_on_validation": sum(c.rule == "validation" for c in choices),
                                       "differs_from_train_pick": sum(c.index != c.train_index for c in choices)}))
    write_kept(results, seed, name, rows, numbers)
    return numbers


#: How a brief's sample is chosen on a walk-forward fold (the kept NAME.json says it; a plain run: the best reward).
PICK_ON_VALIDATION = ("the train window admits (a valid sample with a positive train CPCV), the validation score "
                      "chooses among the admitted; none admitted: the best train reward (each row's chosen_by, and "
                      "train_sample: the sample the train reward alone picks)")

#: One JSON line per brief sampled so far (the first line: the settings), so an interrupted run resumes.
PARTIAL = "samples.partial.jsonl"


def _partial(run_dir: Path | None, settings: dict):
    """(the records an interrupted run with these settings kept, a callback that appends one more). A partial
    file made with other settings is started again (the comparison's stamp refuses other settings first)."""
    if run_dir is None:
        return [], None
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / PARTIAL
    want = json.loads(json_dumps(settings))
    done = []
    if path.exists():
        rows = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by the interruption: keep the whole ones before it
                break
        if rows and rows[0].get("settings") == want:
            done = rows[1:]
    with open(path, "w", encoding="utf-8") as fh:  # rewritten whole: a cut last line does not survive
        fh.write(json_dumps({"settings": want}) + "\n")
        fh.writelines(json_dumps(r) + "\n" for r in done)

    def keep(record: dict) -> None:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json_dumps(record) + "\n")
            fh.flush()

    return done, keep


def _cached(run_dir: Path | None, settings: dict) -> tuple[list[dict] | None, float | None]:
    """(the saved samples, their sampling's wall seconds or None where not kept) when run_dir/samples.json was
    made with these settings, else (None, None)."""
    path = None if run_dir is None else run_dir / "samples.json"
    if path is None or not path.exists():
        return None, None
    d = json.loads(path.read_text(encoding="utf-8"))
    return (d["briefs"], d.get("seconds")) if d["settings"] == json.loads(json_dumps(settings)) else (None, None)
