"""Search over the formula language: one evolution engine, under a verifier-call budget.

    tree       variation operators on parsed trees (operator, field, window/constant and subtree mutation, crossover)
    database   the program database of an evolution run: islands, cells, parents drawn by score (FunSearch shape) or
               by tournament; `GP_SEARCH`, its genetic-programming configuration (the comparison's `search` arm)
    bandit     shares an evolution run's proposals among its mutation operators (UCB1 or Thompson)
    evolution  the engine, `evolve`: mutators propose children of the database's parents, under an exact call
               budget, resumable from its checkpoint (state.json, `run_state`)
    run_state  the checkpoint's format: written, read back and checked field by field
    mutators   the mutation operators as a table (tree, random, an OpenAI-compatible endpoint) and their specs
    evolve_arm an evolution run in a stamped folder (`alpha-gym evolve`, the comparison's evolve arms): its curve,
               what it found for the walk-forward scoring; the arm's kept files are the comparison's
    improve_pairs  improve-task training pairs read from a run's checkpoint

Nothing is imported here. Importable without torch; nothing here evaluates a formula itself (the verifier does).
"""
