"""Model-free search over the formula language: the `search` control of the trainer comparison.

    tree    variation operators on parsed trees (operator, field, window/constant and subtree mutation, crossover)
    evolve  the (mu + lambda) search driven by the verifier's reward and archive, under a verifier-call budget
    rung    the control as a rung of the comparison: same budget, same kept files

Importable without torch; nothing here evaluates a formula itself (the verifier does).
"""

from alpha_gym.search.evolve import (Candidate, SearchConfig, SearchError, SearchResult, pick_answers, rung_budget,
                                     search)

__all__ = ["Candidate", "SearchConfig", "SearchError", "SearchResult", "pick_answers", "rung_budget", "search"]
