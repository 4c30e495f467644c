"""What every arm runs with: one `RunContext` (the scale, the verifier, the panels, the start model, the briefs,
the folders), built once by `alpha-gym compare` and passed to each arm's `run(context, seed)`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RunContext:
    """Everything an arm runs with, for every seed: what used to be each run function's 10-14 parameters.

    `verifier()`, `train_briefs()` and `filtered_briefs()` are built on first use and shared by the arms
    (`--report-only` builds none of them unless an eval folder is re-scored). `step0_formulas` (the start
    model's probe formulas, which seed the search) and `brief_ids` (the probe briefs of the kept answers)
    are set by `run.run_comparison` before the arms run.
    """

    scale_name: str             # "smoke", "cpu", "gpu" (ladder.SCALES)
    scale: Any                  # its sizes (ladder.Scale), with --steps and the settings' [train] keys
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
    mutator_model: str | None = None  # the model of the arms that mutate with one (e.g. the improve-task warm start);
    #                                   None: `model`. The probe formulas seeding every evolve arm stay `model`'s.
    fold_panels: Any = None     # on a walk-forward fold (compare --fold): its panels, for the evolve arms' curves'
    #                             validation readings (alpha_gym.evaluation.validation); None: a plain comparison
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
        (a rung trained against other settings, its row's `verifier_changes`); each built once."""
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
