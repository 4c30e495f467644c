"""The arms of the trainer comparison: one row each, in one table (ARMS), like the channel table.

An arm is what the comparison runs for one seed and keeps as a row of the table: an RL rung of the
ladder (`ladder.LADDER`), a control that trains nothing and spends a rung's verifier calls (`best_of_n`,
`search`, `evolve`, `random`, `evolve_model`), `evolve_rl` (an evolve run whose model mutator learns: an RL row
outside the ladder), or an `alpha-gym eval` folder (`eval_arm`: a model behind an endpoint, its samples in place
of seeds). Every arm is called the same way, `arm.run(context, seed) -> numbers`, with one `RunContext`
(the scale, the verifier, the panels, the start model, the briefs, the folders); an RL or control arm
writes the kept files (results/seed-S/NAME.jsonl and NAME.json, `alpha_gym.evaluation.kept.write_kept`),
which `--report-only` reads like every other arm's; an eval arm reads its folder and returns its row.

Adding an arm is one module with a `run(context, seed)` that writes the kept files, and one row here.
`run.run_comparison` runs the arms it is given, seed by seed, in table order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable

from trainers.compare.ladder import CONTROLS, LADDER, VERIFIER_CHANGES, Scale

#: The kinds of arm: trained by RL (paired with the rung before), a control (no weight updated, the same
#: verifier calls; every RL rung is paired against each), an eval folder (no rung before it to pair with).
KINDS = ("rl", "control", "eval")


@dataclass(frozen=True)
class RunContext:
    """Everything an arm runs with, for every seed: what used to be each run function's 10-14 parameters.

    `verifier()`, `train_briefs()` and `filtered_briefs()` are built on first use and shared by the arms
    (`--report-only` builds none of them unless an eval folder is re-scored). `step0_formulas` (the start
    model's probe formulas, which seed the search) and `brief_ids` (the probe briefs of the kept answers)
    are set by `run.run_comparison` before the arms run.
    """

    scale_name: str             # "smoke", "cpu", "gpu" (ladder.SCALES)
    scale: Scale                # its sizes, with --steps and the settings' [train] keys
    model: str | None           # the start model: a folder, a hub id, None for the built-in default
    data: str | None            # market data (None: the synthetic market)
    universe: str | None
    verifier_config: Any        # alpha_gym.scoring.config.VerifierConfig, R3's model made explicit
    train: Any                  # the train panel (the pseudo-holdout cut off)
    holdout: Any                # the pseudo-holdout panel (the last sessions of the train window)
    probe: tuple                # the probe briefs every arm answers
    out: Path                   # checkpoints, logs, run folders (OUT/seed-S/NAME)
    results: Path               # the kept files (small text files meant to be committed)
    identity: str | None = None  # the start model's content (trainers.models.model_identity); None: not loaded
    report_only: bool = False   # train nothing, load no model: the table from the kept files
    update_results: bool = False  # with report_only: rewrite the table kept in `results` too
    step0_formulas: tuple | None = None
    brief_ids: tuple | None = None
    evolve_mutators: tuple = ("tree",)  # the evolve arm's mutator specs (alpha_gym.search.mutators)
    mutator_model: str | None = None  # the evolve_model/evolve_rl arms' model (e.g. the improve-task warm start);
    #                                   None: `model`. The probe formulas seeding every evolve arm stay `model`'s.
    _built: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def budget(self) -> int:
        """The verifier calls of one rung's training: steps x prompts_per_step x num_generations."""
        from trainers.compare.ladder import scale_budget
        return scale_budget(self.scale)

    def run_dir(self, seed: int, name: str) -> Path:
        return self.out / f"seed-{seed}" / name

    def verifier(self, **changes):
        """The comparison's train verifier (the probe answers are scored with it), or one with `changes`
        (a rung trained against other settings, `ladder.VERIFIER_CHANGES`); each built once."""
        key = repr(sorted(changes.items()))  # a change may be a table (priorities): repr, not the items, is hashable
        if key not in self._built:
            from alpha_gym.scoring.verifier import Verifier
            if "priorities" in changes:  # merged into the comparison's priorities, as a reward recipe's are
                changes = {**changes, "priorities": {**self.verifier_config.priorities, **changes["priorities"]}}
            self._built[key] = Verifier(self.train, self.verifier_config.with_(**changes))
        return self._built[key]

    def train_briefs(self) -> list:
        """The training briefs (the scale's first `train_briefs`, all where it is 0)."""
        if "briefs" not in self._built:
            from alpha_gym.tasks.sets import brief_set
            briefs = list(brief_set("train"))
            self._built["briefs"] = briefs[: self.scale.train_briefs] if self.scale.train_briefs else briefs
        return self._built["briefs"]

    def filtered_briefs(self) -> list:
        """The difficulty filter's briefs (pass rates cached in out/filter.json and kept in results)."""
        if "filtered" not in self._built:
            from trainers.compare.runner import filtered_briefs
            self._built["filtered"] = filtered_briefs(self.model, self.scale, self.verifier(), self.train_briefs(),
                                                      self.out)
            # the filtered rungs' briefs and pass rates are part of what their answers rest on
            (self.results / "filter.json").write_text((self.out / "filter.json").read_text())
        return self._built["filtered"]


@dataclass(frozen=True)
class Arm:
    """One row of the table: `run(context, seed)` writes the kept files and returns the run's numbers."""

    name: str
    kind: str                                   # one of KINDS
    run: Callable[[RunContext, int], dict]
    about: str = ""                             # one line for the progress and the help

    def __post_init__(self):
        if self.kind not in KINDS:  # run, but shown nowhere in the table
            raise ValueError(f"arm {self.name!r}: kind {self.kind!r} is not one of {', '.join(KINDS)}")


# ------------------------------------------------------------------------------ the runs
def train_rung(name: str, recipe: str, prompts: str, context: RunContext, seed: int) -> dict:
    """An RL rung: train, answer the probe at each checkpoint, keep the shipped checkpoint's answers."""
    from trainers.compare.runner import keep_answers, run_rung
    briefs = context.train_briefs()
    filtered = context.filtered_briefs() if prompts == "filtered" else briefs
    changes = VERIFIER_CHANGES.get(name)
    result = run_rung(name, recipe, prompts, context.scale, seed, context.model, context.verifier(), context.train,
                      context.holdout, briefs, filtered, context.probe, context.out,
                      train_verifier=context.verifier(**changes) if changes else None)
    keep_answers(context.results, result, context.probe)
    return result


def best_of_n(context: RunContext, seed: int) -> dict:
    """The start model's best of k samples per probe brief (trainers/best_of_n.py)."""
    from trainers.best_of_n import run_best_of_n_rung
    return run_best_of_n_rung(context.scale, seed, context.model, context.verifier(), context.train, context.holdout,
                              context.probe, context.results, out=context.out)


def _evolve_run(context: RunContext, seed: int, name: str, mutators, seeded: bool = True, database=None) -> dict:
    """An `alpha-gym evolve` run as arm `name`: the context's budget, its group size, its folders. `seeded`: the
    database starts from the step-0 formulas and Alpha101 (else it starts empty). database: the program
    database's configuration (None: the evolution's default, `DatabaseConfig()`)."""
    from alpha_gym.alpha101 import formulas as paper
    from alpha_gym.search.database import DatabaseConfig
    from alpha_gym.search.evolve_arm import run_evolve
    seeds = ([f for f in (context.step0_formulas or ()) if isinstance(f, str)]
             + list(paper(industry_free=True).values())) if seeded else []
    return run_evolve(context.verifier(), context.train, context.holdout, context.probe,
                      mutators=tuple(mutators), budget=context.budget, seed=seed, name=name,
                      database=DatabaseConfig() if database is None else database,
                      out=context.run_dir(seed, name), results=context.results,
                      group_size=context.scale.train["num_generations"], seed_formulas=seeds, step=context.scale.steps,
                      about={"scale": context.scale_name, "data": context.data, "universe": context.universe})


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
    from trainers.compare.evaluated import read_eval
    return read_eval(folder, list(context.brief_ids or [b.id for b in context.probe]), context.verifier())


def eval_arm(folder) -> Arm:
    """An `--eval DIR` folder as an arm: its row is read, not run, so seeds do not apply."""
    return Arm(f"eval:{Path(folder).name}", "eval", partial(read_eval_folder, Path(folder)), f"--eval {folder}")


def rung_arm(name: str, recipe: str, prompts: str) -> Arm:
    """A row of the ladder as an arm."""
    return Arm(name, "rl", partial(train_rung, name, recipe, prompts), f"{recipe}, {prompts} prompts")


_ABOUT = dict(CONTROLS)

ARMS = (
    *(rung_arm(*row) for row in LADDER),
    Arm("best_of_n", "control", best_of_n, _ABOUT["best_of_n"]),
    Arm("search", "control", search, _ABOUT["search"]),
    Arm("evolve", "control", evolve, _ABOUT["evolve"]),
    Arm("random", "control", random_formulas, _ABOUT["random"]),
    Arm("evolve_model", "control", evolve_model, _ABOUT["evolve_model"]),
    # issue 40.3: RL on the mutation operator; trained, so a rung of the table (paired with evolve_model)
    Arm("evolve_rl", "rl", evolve_rl, "evolve with the start model trained on its own rewards (trainers/evolve_rl.py)"),
)


def arm_names(table=None) -> list[str]:
    """The names `--rungs` accepts: every RL rung and control of `table` (default ARMS), in table order."""
    return [a.name for a in (ARMS if table is None else table) if a.kind != "eval"]
