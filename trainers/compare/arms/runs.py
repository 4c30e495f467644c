"""The arms' runs: each `run(context, seed)` trains or searches for one seed, writes the kept files
(results/seed-S/NAME.jsonl and NAME.json, `kept`) and returns the run's numbers.
The table (`arms.table.ARMS`) says which run each arm is, with what settings."""

from __future__ import annotations

from pathlib import Path

from trainers.compare.arms.context import RunContext


def train_rung(name: str, recipe: str, prompts: str, changes: dict | None, context: RunContext, seed: int) -> dict:
    """An RL rung: train (against a verifier with `changes`, where given), answer the probe at each checkpoint,
    keep the shipped checkpoint's answers (on a fold, the checkpoint chosen on its validation window)."""
    from trainers.compare.arms.kept import keep_answers
    from trainers.compare.runner import run_rung
    briefs = context.train_briefs()
    filtered = context.filtered_briefs() if prompts == "filtered" else briefs
    result = run_rung(name, recipe, prompts, context.scale, seed, context.model, context.verifier(), context.train,
                      context.holdout, briefs, filtered, context.probe, context.out,
                      train_verifier=context.verifier(**changes) if changes else None,
                      validation=_validation_scorer(context))
    keep_answers(context.results, result, context.probe)
    return result


def best_of_n(context: RunContext, seed: int) -> dict:
    """The start model's best of k samples per probe brief (`best_of_n.run_best_of_n_rung`); on a fold, the best
    by validation among those the train window admits."""
    from trainers.compare.arms.best_of_n import run_best_of_n_rung
    return run_best_of_n_rung(context.scale, seed, context.model, context.verifier(), context.train, context.holdout,
                              context.probe, context.results, out=context.out, validation=_validation_scorer(context))


def _evolve_run(context: RunContext, seed: int, name: str, mutators, seeded: bool = True, database=None) -> dict:
    """An `alpha-gym evolve` run as arm `name`: the context's budget, its group size, its folders. `seeded`: the
    database starts from the step-0 formulas and Alpha101 (else it starts empty). database: the program
    database's configuration (None: the evolution's default, `DatabaseConfig()`)."""
    from alpha_gym.alpha101 import formulas as paper
    from alpha_gym.search.database import DatabaseConfig
    from alpha_gym.search.evolve_arm import run_evolve
    from trainers.compare.arms.kept import keep_evolve
    from trainers.mutators import MUTATORS
    seeds = ([f for f in (context.step0_formulas or ()) if isinstance(f, str)]
             + list(paper(industry_free=True).values())) if seeded else []
    return run_evolve(context.verifier(), context.train, context.holdout, context.probe,
                      mutators=tuple(mutators), rows=MUTATORS, budget=context.budget, seed=seed, name=name,
                      database=DatabaseConfig() if database is None else database,
                      out=context.run_dir(seed, name), results=context.results,
                      group_size=context.scale.train["num_generations"], seed_formulas=seeds, step=context.scale.steps,
                      about={"scale": context.scale_name, "data": context.data, "universe": context.universe},
                      keep=keep_evolve, validation=_validation_scorer(context))


def _validation_scorer(context: RunContext):
    """On a fold, the scorer of the fold's validation window: the curves' validation column (the best's score
    there), best-of-N's pick and the rungs' checkpoint choice; None in a plain comparison, which stays as it was."""
    if context.fold_panels is None:
        return None
    from alpha_gym.evaluation.validation import ValidationScorer
    return ValidationScorer(context.fold_panels, context.verifier())


def search(context: RunContext, seed: int) -> dict:
    """Model-free genetic programming: the evolution engine with the tree mutator and the GP database
    (`alpha_gym.search.database.GP_SEARCH`: the best 32 by reward, parents by tournament), seeded with the step-0
    formulas and Alpha101."""
    from alpha_gym.search.database import GP_SEARCH
    return _evolve_run(context, seed, "search", ("tree",), database=GP_SEARCH)


def evolve(context: RunContext, seed: int) -> dict:
    """Evolution from a program database (alpha_gym/search/evolution.py), seeded as `search` is, with the context's
    mutators; its curve in the kept NAME.json reads it at any smaller budget (`evolve_arm.curve_at`)."""
    return _evolve_run(context, seed, "evolve", context.evolve_mutators)


def random_formulas(context: RunContext, seed: int) -> dict:
    """No search: random formulas from the grammar for the whole budget, unseeded; the best kept per brief."""
    return _evolve_run(context, seed, "random", ("random",), seeded=False)


def _model_arg(context: RunContext) -> str:
    """The mutator's model (`--mutator-model`, else the start model) as a mutator spec's argument ("" for the
    built-in one). The rl spec splits on "," and "=": a folder whose name holds either cannot be named there,
    and is refused rather than misread."""
    chosen = context.mutator_model if context.mutator_model is not None else context.model
    model = "" if chosen is None else str(chosen)
    if "," in model or "=" in model:
        from trainers.compare.runner import CompareError
        raise CompareError(f"the evolve_model/evolve_rl arms cannot name a start model whose path holds ',' or '=': "
                           f"{model!r} (move or link the folder)")
    return model


def evolve_model(context: RunContext, seed: int) -> dict:
    """`evolve` with the frozen start model as the only mutator (improve-task prompts), seeded as `evolve` is."""
    model = _model_arg(context)
    return _evolve_run(context, seed, "evolve_model", (f"model:{model}" if model else "model",))


def evolve_rl(context: RunContext, seed: int) -> dict:
    """`evolve` with the start model trained during the run on the rewards it earns (EvoTune's loop with the
    project's CISPO loss, `trainers.evolve_rl`), seeded as `evolve` is: paired with `evolve_model`."""
    model = _model_arg(context)
    return _evolve_run(context, seed, "evolve_rl", (f"rl:model={model}" if model else "rl",))


def read_eval_folder(folder: Path, context: RunContext, seed: int | None = None) -> dict:
    """An `alpha-gym eval` folder's answers re-scored on the comparison's train window (`evaluated.read_eval`)."""
    from trainers.compare.arms.evaluated import read_eval
    return read_eval(folder, list(context.brief_ids or [b.id for b in context.probe]), context.verifier())
