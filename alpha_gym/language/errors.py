"""Typed errors for everything a model can get wrong in a formula or an answer."""

from __future__ import annotations

from alpha_gym.errors import InputError


class FormulaError(InputError):
    """Base class: the formula cannot be scored. `column` is 1-based where known."""

    kind = "formula"

    def __init__(self, message: str, column: int | None = None):
        self.message = message
        self.column = column
        super().__init__(f"{message} (column {column})" if column is not None else message)


class FormulaSyntaxError(FormulaError):
    """The text is not a well-formed expression."""

    kind = "syntax"


class UnknownNameError(FormulaError):
    """A field or function the language does not have (or the data does not carry)."""

    kind = "unknown_name"


class FormulaArgumentError(FormulaError):
    """Wrong number or kind of arguments, or a window outside 1..252."""

    kind = "argument"


class FormulaLimitError(FormulaError):
    """Over a size limit: tokens, depth, nested lookback or length."""

    kind = "limit"


class AnswerError(InputError):
    """The model's answer holds no usable `<alpha>...</alpha>` block."""

    kind = "answer"


#: The exceptions that mean "the model's answer failed", never a bug of ours: the single definition the
#: verifier, the holdout, the stress worlds and the seed cache share. A FormulaError (also raised while
#: evaluating: data a panel lacks) or any ValueError (every InputError is one); a FloatingPointError where
#: numpy is set to raise; a MemoryError from a formula whose arrays do not fit.
MODEL_FAULTS: tuple[type[BaseException], ...] = (FormulaError, ValueError, FloatingPointError, MemoryError)


def is_model_fault(err: BaseException) -> bool:
    """Whether `err` is the model's fault (an invalid answer) rather than a bug to raise."""
    return isinstance(err, MODEL_FAULTS)
