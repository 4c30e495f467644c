"""The trainer comparison (`alpha-gym compare`): the reference's ladder over several seeds, one probe and one
selection rule, with bootstrap intervals against model-free baselines.

Nothing is imported here. The modules, top to bottom:

    ladder      the scales, a rung's verifier-call budget and the pseudo-holdout cut
    stats       the statistics of a comparison: intervals over seeds and briefs, diversity of the answers
    runner      one rung with one seed: train, answer the probe at each checkpoint, choose the shipped one
    arms/       the arms in one folder: ARMS (one row an arm: RL rungs with their recipe, prompts, verifier
                settings and pairing, controls, their report words; eval folders as arms), the RunContext
                they run with, their runs (the best-of-N control's own module), the files each keeps, the
                stamps that guard the folders, and an `alpha-gym eval` folder's answers as a row
    run         run_comparison: the arms over the seeds, then the table from the kept files
    report      the table from the kept answers (any seeds, any session), comparison.md and report.json
    plots       curves.png, holdout_per_checkpoint.png and seeds.png
    calls       calls.md and calls.png: the arms kept with a curve along their verifier calls (1,600 / 4,800 / 10,000)
    walk_forward  the walk-forward table: each arm's choices on each fold's test window (walk-forward.md, and a
                section of comparison.md), from the rows kept in RESULTS/walk-forward/
    floor_trap  the advantage-floor trap of Environment B (`python -m trainers.compare.floor_trap`)

The `alpha-gym compare` command (its flags) is in `alpha_gym/commands/compare.py`.
"""
