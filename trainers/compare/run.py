"""One comparison, top to bottom: claim the folders, answer the probe at step 0, run every arm for every seed,
keep what the table rests on, then build the table from the kept files (`report.build_report`).

`run_comparison(context, arms, seeds)` is what `alpha-gym compare` calls once it has read its flags; the
arms are rows of `arms.ARMS` (and `arms.eval_arm` for each `--eval` folder), the context an
`arms.RunContext`. With `context.report_only` nothing is trained and no model is loaded.
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from types import SimpleNamespace

from alpha_gym.evaluation.kept import read_object, read_rows, write_object, write_rows
from alpha_gym.jsonable import json_dumps
from trainers.compare.arms import RunContext
from trainers.compare.runner import CompareError


def kept_arms(results: Path) -> set[str]:
    """The names of the arms whose answers are kept in results/seed-S/NAME.jsonl."""
    return {p.name[:-len(".jsonl")] for p in results.glob("seed-*/*.jsonl") if not p.name.endswith(".archive.jsonl")}


def kept_brief_ids(results: Path) -> list[str] | None:
    """The probe briefs of the kept step-0 answers (None when there are none); kept settings.json, where there
    is one, must name the same briefs."""
    step0 = results / "step-0.jsonl"
    ids = [r.get("brief_id") for r in read_rows(step0)] if step0.exists() else None
    stamp = results / "settings.json"
    if ids is not None and stamp.exists():
        named = read_object(stamp).get("probe_briefs")
        if named is not None and named != ids:
            raise CompareError(f"{step0} answers {len(ids)} probe briefs, not those its settings.json names "
                               f"({len(named) if isinstance(named, list) else named!r}): rows are missing or the "
                               "files are from two comparisons")
    return ids


def _equivalent_identities(results: Path, kept_identity: str | None, identity: str | None) -> list[str]:
    """The start models kept results accept besides the one they were made from (`check_kept_model`)."""
    kept = results / "settings.json"
    before = read_object(kept).get("equivalent_model_identities", []) if kept.exists() else []
    now = set(before) | ({identity} if identity not in (None, kept_identity) else set())
    return sorted(now)


def _mutator_model(results: Path, context: RunContext, arms) -> dict:
    """settings.json's record of the model the arms that mutate with one use (`--mutator-model`, the rows'
    `mutator_model`), by path and content, kept from an earlier run when this one runs none of them (each arm's
    stamp names its path too)."""
    ran = {a.name for a in arms if a.mutator_model}
    if context.mutator_model is None or not ran:
        kept = results / "settings.json"
        before = read_object(kept) if kept.exists() else {}
        return {k: before[k] for k in ("mutator_model", "mutator_model_identity") if k in before}
    from trainers.models import model_identity
    return {"mutator_model": context.mutator_model, "mutator_model_identity": model_identity(context.mutator_model)}


def _check_mutator_model(results: Path, context: RunContext, arms) -> None:
    """Refuse to add rows of the arms that mutate with a model made with another mutator model than their kept rows
    (settings.json's `mutator_model_identity`, else the start model's, which they mutated with before)."""
    ran = sorted(a.name for a in arms if a.mutator_model)
    kept = [p for name in ran for p in results.glob(f"seed-*/{name}.jsonl")]
    if not kept or not (results / "settings.json").exists():
        return
    from trainers.models import model_identity
    before = read_object(results / "settings.json")
    was = before.get("mutator_model_identity") or before.get("model_identity")
    now = context.identity if context.mutator_model is None else model_identity(context.mutator_model)
    if was is not None and now != was:
        raise CompareError(f"{results} keeps {', '.join(ran)} rows ({kept[0].parent.name}/{kept[0].name}, ...) made "
                           f"with mutator model {was}, not {now} (the --mutator-model given, else --model): the rows "
                           "would mix two mutators; pass another --results")


def _out_stamp(context: RunContext) -> dict:
    """What the --out folder depends on (`arms.stamps.out_settings`, the stamp `claim_out_dir` checks)."""
    from alpha_gym.settings import to_dict
    from trainers.compare.arms.stamps import out_settings
    named = SimpleNamespace(scale=context.scale_name, model=context.model, data=context.data,
                            universe=context.universe)
    return out_settings(named, context.scale, to_dict(context.verifier_config), context.identity)


def _step0_formulas(context: RunContext, answer: bool) -> list:
    """The start model's probe formulas: answered now (`answer`, or nothing kept to take them from), else the
    kept step-0 answers (a control added to a kept comparison does not answer the probe again)."""
    from trainers.compare.runner import probe_records
    step0_file = context.out / "step-0" / "probe-step-0.json"
    kept_step0 = context.results / "step-0.jsonl"
    if answer or step0_file.exists() or not kept_step0.exists():
        probe_records(context.model, context.verifier(), context.train, context.holdout, context.probe,
                      context.scale, 0, context.out / "step-0")
        return json.loads(step0_file.read_text())["formulas"]
    rows0 = read_rows(kept_step0)
    if [r.get("brief_id") for r in rows0] != [b.id for b in context.probe]:
        raise CompareError(f"{kept_step0} answers other probe briefs than this scale's")
    return [r["formula"] for r in rows0]


def run_comparison(context: RunContext, arms, seeds, table=None) -> tuple[str, Path]:
    """Run `arms` (RL rungs and controls for each seed; eval arms read once) and write the table.

    The table shows every arm of `table` (the registered arms, e.g. `arms.ARMS`) that ran now or is kept
    in `context.results` (long runs go one rung a process); `table=None` narrows it to `arms`
    (`--report-only --rungs`). Returns (the table's text, the report page).
    """
    from alpha_gym.evaluation.report import write_report
    from trainers.compare.calls import write_calls
    from trainers.compare.plots import write_plots, write_seed_plot
    from trainers.compare.report import build_report, report_json, write_table
    from trainers.compare.arms.kept import answer_rows, keep_run_book
    from trainers.compare.arms.stamps import check_kept_model, claim_out_dir
    from trainers.compare.runner import probe_records
    from trainers.compare.walk_forward import FOLDER, write_walk_forward_table
    out, results = context.out, context.results
    write_results = not context.report_only or context.update_results  # kept results change only when asked
    out.mkdir(parents=True, exist_ok=True)
    if write_results:
        results.mkdir(parents=True, exist_ok=True)
    claim_out_dir(out, _out_stamp(context))
    step0_file = out / "step-0" / "probe-step-0.json"

    def step0_answers():  # only where another start model's identity must be shown equivalent to the kept one
        probe_records(context.model, context.verifier(), context.train, context.holdout, context.probe,
                      context.scale, 0, out / "step-0")
        return answer_rows(step0_file, context.probe, 0)
    kept_identity = check_kept_model(results, context.identity, step0_answers)
    runs_arms = [a for a in arms if a.kind != "eval"]
    if not context.report_only:
        _check_mutator_model(results, context, runs_arms)
    runs = []
    if not context.report_only:
        # step 0 first: every rung starts from it and the seeded controls start from its answers
        context = replace(context, step0_formulas=tuple(_step0_formulas(
            context, any(a.kind == "rl" for a in runs_arms))))
        for seed in seeds:
            for arm in runs_arms:
                what = (f"rung {arm.name} ({arm.about})" if arm.kind == "rl"
                        else f"{arm.kind} {arm.name} ({context.budget} verifier calls)")
                print(f"=== seed {seed}, {what}", flush=True)
                numbers = arm.run(context, seed)
                keep_run_book(results, seed, arm.name, context.run_dir(seed, arm.name), context.verifier())
                if arm.kind == "rl" and "log" in numbers:  # a trained rung's curves (an evolve run keeps a curve)
                    runs.append(numbers)
                    (out / "comparison.json").write_text(json_dumps({
                        "scale": context.scale_name, "scale_settings": asdict(context.scale), "model": context.model,
                        "seeds": list(seeds), "train_end": str(context.train.dates[-1]),
                        "pseudo_holdout": [str(context.holdout.dates[0]), str(context.holdout.dates[-1])],
                        "runs": [{k: v for k, v in x.items() if k != "probe_files"} for x in runs]},
                        indent=2, default=str))
        equivalents = _equivalent_identities(results, kept_identity, context.identity)
        if step0_file.exists() and not equivalents:  # an equivalent's answers are the kept ones already
            write_rows(results / "step-0.jsonl", answer_rows(step0_file, context.probe, 0))
        from alpha_gym.settings import to_dict
        write_object(results / "settings.json", {
            "scale": context.scale_name, "scale_settings": asdict(context.scale), "model": context.model,
            "data": context.data, "model_identity": kept_identity,
            **({"equivalent_model_identities": equivalents} if equivalents else {}),
            "universe": context.universe, "train_window": [str(context.train.dates[0]), str(context.train.dates[-1])],
            "pseudo_holdout": [str(context.holdout.dates[0]), str(context.holdout.dates[-1])],
            "probe_briefs": [b.id for b in context.probe], "verifier": to_dict(context.verifier_config),
            **_mutator_model(results, context, arms)})
        write_plots(runs, out)
    brief_ids = kept_brief_ids(results)
    evals_arms = [a for a in arms if a.kind == "eval"]
    if brief_ids is None and not evals_arms and not kept_arms(results):
        raise CompareError(f"{results} holds no step-0.jsonl: nothing to report (train first, or give --eval DIR)")
    # without step-0.jsonl (a control run on its own, by its own command) the rows answer the scale's probe
    context = replace(context, brief_ids=None if brief_ids is None else tuple(brief_ids))
    evals = [a.run(context, None) for a in evals_arms]
    named, kept = {a.name for a in arms}, kept_arms(results)
    shown = list(arms) if table is None else [a for a in table if a.name in named or a.name in kept]
    report = build_report(results, [(a.name, a.kind, a.about) for a in shown if a.kind == "rl"], context.train,
                          context.holdout, evals=evals, brief_ids=[b.id for b in context.probe],
                          controls=[a.name for a in shown if a.kind == "control"], verifier=context.verifier())
    text = write_table(report, context.scale_name, out)
    folders = {out, results} if write_results else {out}
    walk_forward = write_walk_forward_table(results / FOLDER, folders)   # the kept walk-forward rows, where any
    if walk_forward:
        text += "\n".join(walk_forward) + "\n"
        (out / "comparison.md").write_text(text)
    if write_results:
        (results / "comparison.md").write_text(text)
    write_seed_plot(report, results, folders)
    write_calls(results, folders)            # the arms kept with a curve, along their verifier calls
    for folder in folders:
        (folder / "report.json").write_text(json_dumps(report_json(report), indent=1))
    return text, write_report(out)
