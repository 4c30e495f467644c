"""Tasks: the design briefs the model answers, their named sets (`sets`) and the `briefs` commands (`cli`)."""

from alpha_gym.tasks.briefs import ANSWER_CONTRACT, DSL_REFERENCE, FIXED_BRIEFS, Brief, dsl_reference

__all__ = ["ANSWER_CONTRACT", "Brief", "DSL_REFERENCE", "FIXED_BRIEFS", "dsl_reference"]
