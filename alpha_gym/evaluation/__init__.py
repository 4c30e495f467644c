"""Evaluation: holdout scoring, model-free baselines, checkpoint and book selection, HTML reports, and the
R3 scenarios' validation.

Exports the holdout evaluator and the selection rules; `baselines`, `report` (the page; its parts in
`report_html`, `report_training`, `report_comparison`), `stress_validation` (scenario AUCs), `answers_file`
(the formulas and briefs of a file of answers), `endpoint` (a model behind an OpenAI-compatible endpoint),
`eval_folder` (an `alpha-gym eval` folder: its stamp, its answers scored) and `overfitting` (PBO, deflated Sharpe,
effective trials; its tables in `report_overfitting`) are imported where used; the
commands are in `alpha_gym/commands/evaluation.py`.
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
