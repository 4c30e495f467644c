"""Glue between alpha-gym's verifier and the libraries people train and analyse with.

One small module per library; none is imported here, so `import alpha_gym.integrations`
costs nothing and each module needs only its own library:

    frames     an evaluated formula's weights, P&L and turnover as pandas / polars objects
    alphalens  alphalens-reloaded input with alpha-gym's open(t+1)->open(t+2) timing
    verl       `compute_score` for verl's reward manager, and an invalid-answer advantage guard
    verifiers  `load_environment()` for verifiers.v1 (12 weighted async rewards, briefs as data)
    openenv    an OpenEnv server whose episodes live in sessions, and its client
    skyrl      a skyrl-gym env class sharing one Verifier per process
    prompts    the dataset rows' prompts: a task's, under the limits of the verifier the reward function uses

Each takes its Verifier from the process's pool, `alpha_gym.pool` (one per panel and config), and
every path returns exactly what `Verifier.score` returns for the same answer.
"""
