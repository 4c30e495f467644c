"""Tasks: the design briefs the model answers."""

from alpha_gym.tasks.briefs import ANSWER_CONTRACT, DSL_REFERENCE, FIXED_BRIEFS, Brief, dsl_reference

__all__ = ["ANSWER_CONTRACT", "Brief", "DSL_REFERENCE", "FIXED_BRIEFS", "dsl_reference"]
