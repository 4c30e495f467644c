"""Search over the formula language: the model-free `search` control and evolution from a program database.

    tree       variation operators on parsed trees (operator, field, window/constant and subtree mutation, crossover)
    evolve     the (mu + lambda) search driven by the verifier's reward and archive, under a verifier-call budget
    rung       the control as a rung of the comparison: same budget, same kept files
    database   the program database of an evolution run: islands, cells, parents drawn by score (FunSearch shape)
    bandit     shares an evolution run's proposals among its mutation operators (UCB1 or Thompson)
    evolution  `evolve`: mutators propose children of the database's parents, under an exact call budget, resumable
    mutators   the mutation operators as a table (tree, an OpenAI-compatible endpoint, a local model) and their specs
    evolve_arm an evolution run in a stamped folder: its curve, the kept files of the comparison's `evolve` arm

Importable without torch; nothing here evaluates a formula itself (the verifier does).
"""

from alpha_gym.search.evolve import (Candidate, SearchConfig, SearchError, SearchResult, pick_answers, rung_budget,
                                     search)

__all__ = ["Candidate", "SearchConfig", "SearchError", "SearchResult", "pick_answers", "rung_budget", "search"]
