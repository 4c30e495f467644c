"""The one advantage rule every trainer applies to the verifier's verdicts (numpy: the env imports no torch).

    an answer that may not win (invalid, R10-guarded, under a floor) never gets a positive advantage,
    and the advantages of each group (the answers to one prompt) still sum to zero.

Who may win is `answers_may_win` (an answer that meets every check of its brief can be exempted from the floor);
the projection is `project_advantages`.

Our loop (`trainers.advantages`), the TRL adapter (through it) and the verl guard
(`alpha_gym.integrations.verl.install_guard`) all call `project_advantages`, so a user of any of them
trains under the same rule.
"""

from __future__ import annotations

import numpy as np


def answers_may_win(valid, guarded, core, meets_brief=None, floor=None, brief_floor=None) -> np.ndarray:
    """Which answers may get a positive advantage: the one rule every path that projects advantages reads.

        may_win = valid & ~guarded & (core > floor  |  meets_brief & (core > brief_floor))

    `floor` None: no floor term. `brief_floor` None (the default): no exemption, so today's rule exactly. A number:
    an answer that meets every check of its brief (R13 = 1, read on the live tree) may win above that lower core
    score instead, so a compliant valid answer the floor would bar can still be pushed up; invalid and R10-guarded
    answers never win. The exemption needs a floor above it (`TrainConfig` checks), else it changes nothing.
    All arguments broadcast to one shape; returns a new bool array.
    """
    out = np.asarray(valid, dtype=bool) & ~np.asarray(guarded, dtype=bool)
    if floor is None:
        return out
    core = np.asarray(core)  # its own dtype: a float32 core compares with the floor in float32, as torch does
    above = core > floor
    if brief_floor is not None:
        if meets_brief is None:
            raise ValueError("an exemption for answers that meet their brief (brief_floor) needs meets_brief")
        above = above | (np.asarray(meets_brief, dtype=bool) & (core > brief_floor))
    return out & above


def project_advantages(adv, may_win, groups=None) -> np.ndarray:
    """Projection onto {A_i <= 0 where not may_win, sum_g A = 0}, moving only the answers that may win.

        step 1: A_i <- min(A_i, 0)                for every i that may not win
        step 2: A_i <- A_i - S / n                for every i that may win,
                S = sum_g A (after step 1), n = number of answers in the group that may win
        if n = 0: every A in the group <- 0

    Step 2 is the least-squares smallest change to the free answers that zeroes the sum; the answers that
    may not win are never raised, so rule 1 holds. When n = 0 every answer is <= 0 and the sum must be 0,
    which leaves only all zeros: a group with no admissible answer carries no learning signal.

    adv, may_win: (P, G) (each row a group) or (B,) (one group, or the groups `groups` names);
    groups: None, or (B,) group labels of a flat batch (verl's `uid` index), any hashable values.
    Returns a new array of `adv`'s float dtype and shape; the input is not edited.
    """
    a = np.array(adv, copy=True)
    if not np.issubdtype(a.dtype, np.floating):
        a = a.astype(np.float64)
    free = np.broadcast_to(np.asarray(may_win, dtype=bool), a.shape)
    if groups is not None:
        if a.ndim != 1:
            raise ValueError(f"group labels go with a flat batch of advantages, got shape {a.shape}")
        labels = np.asarray(groups)
        if labels.shape != a.shape:
            raise ValueError(f"{labels.shape[0] if labels.ndim else 0} group labels for {a.shape[0]} advantages")
        _, inverse = np.unique(labels, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        counts = np.bincount(inverse)
        out = np.empty_like(a)
        start = 0
        for n in counts:  # one group at a time, each as a row of the (P, G) rule
            idx = order[start:start + n]
            out[idx] = project_advantages(a[idx], free[idx])
            start += n
        return out
    rows = a.reshape(1, -1) if a.ndim == 1 else a
    f = free.reshape(rows.shape)
    rows = np.where(f, rows, np.minimum(rows, 0.0))
    n = f.sum(axis=1, keepdims=True)
    shift = (rows.sum(axis=1, keepdims=True) / np.maximum(n, 1)).astype(rows.dtype)
    rows = np.where(f, rows - shift, rows)
    rows = np.where(n == 0, 0.0, rows).astype(a.dtype, copy=False)
    return rows.reshape(a.shape)
