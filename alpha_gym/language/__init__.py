"""The formula language: grammar, immutable nodes, parser with limits, printers and the evaluator."""

from alpha_gym.language.answer import Answer, extract
from alpha_gym.language.cost import cost
from alpha_gym.language.errors import (MODEL_FAULTS, AnswerError, FormulaArgumentError, FormulaError,
                                       FormulaLimitError, FormulaSyntaxError, UnknownNameError, is_model_fault)
from alpha_gym.language.evaluate import DataUnavailableError
from alpha_gym.language.nodes import Field, Node, Num, Op, depth, size, walk
from alpha_gym.language.parser import DEFAULT_LIMITS, Limits, count_tokens, lookback, parse
from alpha_gym.language.printer import WINDOW_BUCKETS, bucket_window, canonical, normalize, to_text

__all__ = [
    "Answer", "AnswerError", "DataUnavailableError", "DEFAULT_LIMITS", "Field", "FormulaArgumentError", "FormulaError",
    "FormulaLimitError", "FormulaSyntaxError", "Limits", "MODEL_FAULTS", "Node", "Num", "Op", "UnknownNameError",
    "WINDOW_BUCKETS", "bucket_window", "canonical", "cost", "count_tokens", "depth", "extract", "is_model_fault",
    "lookback", "normalize", "parse", "size", "to_text", "walk",
]
