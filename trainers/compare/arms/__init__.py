"""The arms of the trainer comparison, in one folder: the table (`table.ARMS`, one row an arm: its run, recipe,
prompts, verifier settings, pairing and report words), the context every arm runs with (`context.RunContext`),
the runs (`runs`; the best-of-N control in `best_of_n`), the files each keeps (`kept`), the stamps that guard the
comparison's folders (`stamps`) and an `alpha-gym eval` folder read as a row (`evaluated`).

The names the comparison, its command and its report use are handed on here.
"""

from trainers.compare.arms.context import RunContext
from trainers.compare.arms.table import (ARMS, CONTROL_NAMES, CONTROLS, KINDS, LADDER, PAIRED_WITH, VERIFIER_CHANGES,
                                         Arm, arm_names, eval_arm)

__all__ = ["ARMS", "Arm", "CONTROL_NAMES", "CONTROLS", "KINDS", "LADDER", "PAIRED_WITH", "RunContext",
           "VERIFIER_CHANGES", "arm_names", "eval_arm"]
