"""Evaluation: holdout scoring, model-free baselines, checkpoint and book selection, HTML reports, and the
R3 scenarios' validation.

Exports the holdout evaluator and the selection rules; `baselines`, `report` (the page; its parts in
`report_html`, `report_training`, `report_comparison`), `stress_validation` (scenario AUCs) and
`endpoint` (a model behind an OpenAI-compatible endpoint; `alpha-gym eval` in `alpha_gym/commands/evaluation.py`) are imported
where used.
"""

from alpha_gym.evaluation.holdout import (BookStats, FormulaHoldout, HoldoutError, HoldoutEvaluator,
                                         HoldoutOverlapError, HoldoutReport, evaluate_holdout, holdout_score,
                                         load_holdout)
from alpha_gym.scoring.holdout_config import HoldoutConfig
from alpha_gym.evaluation.selection import (BookSelection, Candidate, CheckpointChoice, TrainRecord,
                                           checkpoint_table, compare_selectors, effective_bets, select_checkpoint,
                                           select_correlation_capped, select_top_k)

__all__ = ["BookSelection", "BookStats", "Candidate", "CheckpointChoice", "FormulaHoldout", "HoldoutConfig",
           "HoldoutError", "HoldoutEvaluator", "HoldoutOverlapError", "HoldoutReport", "TrainRecord",
           "checkpoint_table", "compare_selectors", "effective_bets", "evaluate_holdout", "holdout_score",
           "load_holdout", "select_checkpoint", "select_correlation_capped", "select_top_k"]
