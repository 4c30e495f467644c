"""The arms of the trainer comparison, one row each (`ARMS`), like the channel table: what an arm runs, with
which recipe, prompts and verifier settings, the rung it is paired with, and the words the report and the help
show for it.

An arm is what the comparison runs for one seed and keeps as a row of the table: an RL rung (a recipe of
`trainers.config.RECIPES` on "all" prompts or the difficulty filter's "filtered" briefs), a control that
trains nothing and spends a rung's verifier calls, or an `alpha-gym eval` folder (`eval_arm`: a model behind an
endpoint, its samples in place of seeds). Every arm is called the same way, `arm.run(context, seed) -> numbers`,
with one `RunContext`; an RL or control arm writes the kept files, which `--report-only` reads like every other
arm's; an eval arm reads its folder and returns its row.

The table and the report follow the rows' order. Each RL rung is compared with the row before it, or with its
`paired_with` where it changes one thing of another rung, and with each control (no training, the same
verifier calls). Adding an arm is one row here (and a run in `runs` where none fits).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

from trainers.compare.arms.context import RunContext
from trainers.compare.arms.runs import (best_of_n, evolve, evolve_model, evolve_rl, random_formulas, read_eval_folder,
                                        search, train_rung)

#: The kinds of arm: trained by RL (paired with the rung before), a control (no weight updated, the same
#: verifier calls; every RL rung is paired against each), an eval folder (no rung before it to pair with).
KINDS = ("rl", "control", "eval")


@dataclass(frozen=True)
class Arm:
    """One row of the table: `run(context, seed)` writes the kept files and returns the run's numbers.

    about             one line for the progress, the help and the report's legend
    recipe, prompts   an RL rung's recipe (`trainers.config.RECIPES`) and prompts ("all" or "filtered")
    verifier_changes  settings of the verifier a rung trains against (the probe answers are still scored on the
                      comparison's own train verifier: R1, the selection rule, does not read these settings)
    paired_with       the rung this one is compared with when it is not the row before it
    mutator_model     the arm mutates with a model: `--mutator-model`, else the start model (settings.json keeps
                      which, and rows made with another are refused)
    """

    name: str
    kind: str                                   # one of KINDS
    run: Callable[[RunContext, int], dict]
    about: str = ""
    recipe: str | None = None
    prompts: str | None = None
    verifier_changes: dict | None = None
    paired_with: str | None = None
    mutator_model: bool = False

    def __post_init__(self):
        if self.kind not in KINDS:  # run, but shown nowhere in the table
            raise ValueError(f"arm {self.name!r}: kind {self.kind!r} is not one of {', '.join(KINDS)}")


def rung(name: str, recipe: str, prompts: str, verifier_changes: dict | None = None,
         paired_with: str | None = None) -> Arm:
    """An RL rung of the ladder as a row."""
    return Arm(name, "rl", partial(train_rung, name, recipe, prompts, verifier_changes), f"{recipe}, {prompts} prompts",
               recipe=recipe, prompts=prompts, verifier_changes=verifier_changes, paired_with=paired_with)


def eval_arm(folder) -> Arm:
    """An `--eval DIR` folder as an arm: its row is read, not run, so seeds do not apply."""
    return Arm(f"eval:{Path(folder).name}", "eval", partial(read_eval_folder, Path(folder)), f"--eval {folder}")


ARMS = (
    rung("dapo", "dapo", "all"),
    rung("cispo", "cispo", "all"),
    rung("cispo_repo_r", "cispo_repo_r", "all"),
    rung("cispo_repo_r_filtered", "cispo_repo_r", "filtered"),
    rung("cispo_repo_r_dora_filtered", "cispo_repo_r_dora", "filtered"),
    # the gate: WorldQuant BRAIN's rule, |P&L corr| >= 0.7 with an archived alpha refused unless 10% better,
    # against the rung it gates
    rung("cispo_repo_r_gate", "cispo_repo_r", "all", {"self_corr_gate": 0.7, "self_corr_margin": 0.10},
         paired_with="cispo_repo_r"),
    # CISPO with the collapse refill (4 forms a group), trained against R13 (brief) and R14 (book) on (the
    # "brief_book" reward recipe, alpha_gym.scoring.config.REWARD_RECIPES, priorities merged); its refills are paid
    # for out of the same verifier-call budget (`max_verifier_calls`), so it runs fewer steps
    rung("cispo_brief_book_forms", "cispo_distinct_forms", "all", {"priorities": {"brief": 1.0, "book": 3.0}},
         paired_with="cispo"),
    # the controls: what the same verifier finds with the same number of verifier calls as a rung's training
    # (steps x prompts_per_step x num_generations) and no weight updated; they keep the same files as a rung, so
    # the table, its intervals and `alpha-gym holdout-formulas` treat them alike
    Arm("best_of_n", "control", best_of_n,
        "the start model's best of k samples per probe brief by train reward (trainers/compare/arms/best_of_n.py)"),
    Arm("search", "control", search,
        "model-free evolutionary search over formula trees, seeded with Alpha101 and step 0 (alpha_gym/search/)"),
    Arm("evolve", "control", evolve,
        "evolution from a program database (islands, cells, parents by score) with the tree mutator, seeded as "
        "search is (alpha-gym evolve, alpha_gym/search/evolution.py)"),
    Arm("random", "control", random_formulas,
        "random formulas from the grammar (alpha_gym/language/sample.py), unseeded, the best by train reward kept: "
        "no search at all"),
    Arm("evolve_model", "control", evolve_model,
        "evolve with the frozen start model as the mutator (improve-task prompts), seeded as evolve is "
        "(trainers/mutator.py)", mutator_model=True),
    # RL on the mutation operator: trained, so a rung of the table, paired with the same run's model frozen
    Arm("evolve_rl", "rl", evolve_rl, "evolve with the start model trained on its own rewards (trainers/evolve_rl.py)",
        paired_with="evolve_model", mutator_model=True),
)

# The tables the report and the tests read, each a view of the rows.
#: (rung, recipe, prompts) of every RL rung of the ladder.
LADDER = tuple((a.name, a.recipe, a.prompts) for a in ARMS if a.recipe is not None)
#: The rungs that train against other verifier settings.
VERIFIER_CHANGES = {a.name: a.verifier_changes for a in ARMS if a.verifier_changes}
#: The rung a row is paired with when it is not the row before it.
PAIRED_WITH = {a.name: a.paired_with for a in ARMS if a.paired_with}
#: (name, what it is) of every control.
CONTROLS = tuple((a.name, a.about) for a in ARMS if a.kind == "control")
CONTROL_NAMES = tuple(name for name, _ in CONTROLS)


def arm_names(table=None) -> list[str]:
    """The names `--rungs` accepts: every RL rung and control of `table` (default ARMS), in table order."""
    return [a.name for a in (ARMS if table is None else table) if a.kind != "eval"]
