"""Every mutation operator of `evolve`: the search's model-free rows (`alpha_gym.search.mutators.MUTATORS`:
tree, endpoint, random) and the two that sample a local model, which need torch:

    model       a local Hugging Face model folder (or the built-in start model), sampled as the training loop
                samples (`trainers.mutator.ModelMutator`)
    rl          the same, with LoRA adapters trained during the run on the rewards it pays for
                (`trainers.evolve_rl.TrainedMutator`)

`MUTATORS` is the table `alpha-gym evolve` and the comparison's evolve arms read specs with (`make_mutator(spec,
rows=MUTATORS)`). Importable without torch: a model row imports its module when it builds a mutator, and says
in one line that the train extra is missing where torch is.
"""

from __future__ import annotations

from alpha_gym.search.mutators import MUTATORS as MODEL_FREE
from alpha_gym.search.mutators import MutatorRow, MutatorSpecError
from alpha_gym.search.mutators import make_mutator as make_from_rows


def _needs_train_extra(row: str, err: ImportError) -> MutatorSpecError:
    return MutatorSpecError(f"the {row} mutator needs the train extra (pip install 'alpha-gym[train]'): {err}")


def _model(arg: str, **built):
    try:
        from trainers.mutator import from_spec
    except ImportError as err:
        raise _needs_train_extra("model", err) from None
    return from_spec(arg, **built)


def _rl(arg: str, **built):
    try:
        from trainers.evolve_rl import from_spec
    except ImportError as err:
        raise _needs_train_extra("rl", err) from None
    return from_spec(arg, **built)


MODEL_ROWS = (
    MutatorRow("model", _model, "model:PATH",
               doc="a local Hugging Face model folder ('model' alone: the start model), improve-task prompts "
                   "sampled in one batch as the training loop samples (needs the train extra)"),
    MutatorRow("rl", _rl, "rl:recipe=NAME,group=G,every=N,tokens=T,model=PATH",
               doc="the start model with LoRA adapters trained on the run's own rewards with a recipe's loss "
                   "(EvoTune's loop; G answers per parent set, an update every N groups; needs the train extra)"),
)

#: The whole table, in the order the help lists it: the model rows before the no-search floor (random).
MUTATORS: tuple[MutatorRow, ...] = (*(r for r in MODEL_FREE if r.name != "random"), *MODEL_ROWS,
                                    *(r for r in MODEL_FREE if r.name == "random"))


def make_mutator(spec: str, **built):
    """`alpha_gym.search.mutators.make_mutator` over the whole table (the model rows too)."""
    return make_from_rows(spec, rows=MUTATORS, **built)
