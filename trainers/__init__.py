"""Trainers: RL on the verifier (GRPO, DAPO, CISPO, REPO-R with GDPO advantages) and the TRL adapter.

Nothing is imported here (torch loads only where a module needs it). The modules, top to bottom:

    config       TrainConfig, the named recipes (and the [train] table of the settings file), and LOSS_TABLE: one
                 row per policy loss (its formula, options, default clip, averaging, clip and its metrics)
    losses       the policy losses, each beside its formula
    update       one policy update on a batch of groups, the loop's and the RL mutator's (a row's loss, AdamW steps)
    advantages   GDPO / GRPO advantages, the advantage floor and the guard
    repo_r       REPO-R's token shaping and entropy thermostat, ADAPO
    loop         the training loop (sample, score as a group, advantages, off-policy mini-batches)
    rollout      sampling (groups of answers, greedy answers) and the one chat template (`chat_prompt`)
    logprobs     log-probs and entropies of answers under the policy
    run_log      the run's log.jsonl and completions (LOG_FIELDS, read_log)
    checkpoints  saving, finding and loading checkpoints
    trl_adapter  the same recipes and reward on TRL's GRPOTrainer
    models       the policy model and its adapters; answers: checkpoint loading for inference, valid share
    sft          the supervised warm start; difficulty: pass rates and the brief filter
    export_gguf  a model folder as a GGUF file for llama.cpp (`alpha-gym export-gguf`), and serving it

`alpha-gym train` and `alpha-gym export-gguf` are in `alpha_gym/commands/train.py`.
"""
