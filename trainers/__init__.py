"""Trainers: RL on the verifier (GRPO, DAPO, CISPO, REPO-R with GDPO advantages) and the TRL adapter.

Nothing is imported here (torch loads only where a module needs it). The modules, top to bottom:

    config       TrainConfig and the named recipes (and the [train] table of the settings file)
    losses       the policy losses, each beside its formula
    advantages   GDPO / GRPO advantages, the advantage floor and the guard
    repo_r       REPO-R's token shaping and entropy thermostat, ADAPO
    loop         the training loop (sample, score as a group, advantages, off-policy mini-batches)
    trl_adapter  the same recipes and reward on TRL's GRPOTrainer
    models       the policy model and its adapters; answers: greedy answers and checkpoint loading
    sft          the supervised warm start; difficulty: pass rates and the brief filter
    export_gguf  a model folder as a GGUF file for llama.cpp (`alpha-gym export-gguf`), and serving it
    cli          `alpha-gym train`, `alpha-gym export-gguf`
"""
