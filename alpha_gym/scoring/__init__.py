"""Scoring: the verifier that turns an answer into 14 reward channels and their weighted sum.

    config     VerifierConfig: every threshold, channel constant and priority (`weighted_sum`)
    holdout_config  HoldoutConfig: how the holdout is scored, its shared rules copied from a VerifierConfig
    channels   one small pure function per channel, with its formula
    cpcv       combinatorial purged cross-validation of a P&L series (R1, R2)
    factors    the five known factors and residual Sharpe (R4)
    archive    the novelty archive (R8, R9, and R2 for a lone answer); seeds / seed_cache fill it
    book_gain  what an answer adds to the run's correlation-capped book (R14)
    verifier   Verifier: parse, evaluate, build the book, score a group; Score and GroupScore
    report     the text report of one score

Import from the modules (`from alpha_gym.scoring.verifier import Verifier`) or from `alpha_gym`.
"""
