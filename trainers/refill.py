"""Dynamic sampling (step 3 of the loop): give a group that carries no signal fresh answers.

Two rules, both bounded by `config.refill_rounds` (one bound for all resampling of a step; 0 = neither runs):

  * zero variance (DAPO): a group whose rewards are all equal gets all-zero advantages; it is sampled again,
    whole, each round while it stays flat.
  * collapse (`config.min_distinct_forms` = m > 0): a group whose answers hold fewer than m distinct canonical
    forms (`distinct_forms`) is drawn a fresh group for the same prompt, and its duplicate answers are swapped,
    one at a time, for fresh answers of a form the group lacks, until it holds m forms or the fresh draw has
    no new form left; the rest of the group stays. Why swap and not resample the whole group: the policy that
    collapsed once mostly collapses again, and the forms the group already holds are kept, so the rounds add up.
    A group that is flat in a round takes the first rule that round (it is replaced whole anyway).

Forms: an answer's form is the canonical text of its formula (`alpha_gym.language.canonical`: spacing and the
order of commutative arguments do not count; windows do). An answer whose formula cannot be read (no
`<alpha>` block, a syntax error, over the limits) has the one form `INVALID_FORM`: twelve unreadable answers
are one collapsed group. An answer that parses but fails a later validity rule (turnover, rounding noise)
keeps its formula's form. Only answers that parse can come in as a swap: an unreadable answer is no new formula.

The loop passes in `sample(indices)` (fresh groups for those groups' prompts, with the sampler's log-probs)
and `score(indices, groups)` (their `GroupScore`s): this module holds the rule and the bookkeeping, not the
model. A group changed by a swap is scored again whole (channels compare a group's answers with each other):
every answer scored counts in `verifier_calls`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from alpha_gym.language import DEFAULT_LIMITS, MODEL_FAULTS, Limits, canonical, extract, parse

INVALID_FORM = "invalid"


def answer_form(text: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """The canonical form of an answer's formula, or INVALID_FORM when it has none that parses under `limits`."""
    try:
        return canonical(parse(extract(text).formula, limits))
    except MODEL_FAULTS:  # the model's fault (AnswerError, FormulaError...): an unreadable answer
        return INVALID_FORM


def distinct_forms(texts: Sequence[str], limits: Limits = DEFAULT_LIMITS) -> int:
    """How many distinct canonical forms the answers hold (all unreadable ones together count as one)."""
    return len({answer_form(t, limits) for t in texts})


@dataclass
class RefillCounts:
    """What a step's refill did: groups resampled whole (zero variance), groups given swaps (collapse), answers
    swapped in, and answers scored (the first scoring included)."""

    flat: int = 0
    collapsed: int = 0
    swapped: int = 0
    scored: int = 0


def refill(groups: list, scores: list, rounds: int, min_forms: int, limits: Limits, pad_id: int,
           sample: Callable[[list[int]], list], score: Callable[[list[int], list], list],
           counts: RefillCounts, max_scored: int | None = None) -> None:
    """Apply both rules for up to `rounds` rounds, in place on `groups` and `scores`; adds to `counts`.
    pad_id: the token the sampler pads answers with (a swapped-in answer is padded to the group's length).
    max_scored: the most answers `counts.scored` may reach (the run's verifier-call cap, `max_verifier_calls`):
    a round takes only the groups whose fresh answers still fit, flat ones first; None: no cap."""
    for _ in range(rounds):
        flat = [i for i, s in enumerate(scores) if np.ptp(s.rewards) == 0]
        collapsed = [i for i, g in enumerate(groups)
                     if min_forms and i not in flat and distinct_forms(g.texts, limits) < min_forms]
        if max_scored is not None and (flat or collapsed):
            fit = max(max_scored - counts.scored, 0) // len(groups[0].texts)  # groups of fresh answers that fit
            flat = flat[:fit]
            collapsed = collapsed[:max(fit - len(flat), 0)]
            if not flat and not collapsed:
                break
        if flat:
            again = sample(flat)
            for i, group, sc in zip(flat, again, score(flat, again)):
                groups[i], scores[i] = group, sc
            counts.scored += sum(len(g.texts) for g in again)
        if collapsed:
            fresh = sample(collapsed)
            changed, merged = [], []
            for i, f in zip(collapsed, fresh):
                new, n = swap_duplicates(groups[i], f, min_forms, pad_id, limits)
                if n:
                    changed.append(i)
                    merged.append(new)
                    counts.swapped += n
            for i, group, sc in zip(changed, merged, score(changed, merged) if changed else []):
                groups[i], scores[i] = group, sc
            counts.scored += sum(len(g.texts) for g in merged)
        counts.flat += len(flat)
        counts.collapsed += len(collapsed)
        if not flat and not collapsed:
            break


def swap_duplicates(group, fresh, min_forms: int, pad_id: int, limits: Limits = DEFAULT_LIMITS):
    """(group with duplicates swapped for fresh answers of new forms, number swapped).

    A swap replaces the last copy of the group's most common form (ties: the form seen first) with the next
    fresh answer whose form parses and is not yet in the group; it stops at `min_forms` forms. The answers are
    `trainers.rollout.Group`s of one prompt and one policy, so a fresh row carries its sampler's log-probs."""
    forms = [answer_form(t, limits) for t in group.texts]
    new_rows = []  # (fresh row, its form): fresh answers that would add a form, first of each
    for j, t in enumerate(fresh.texts):
        f = answer_form(t, limits)
        if f != INVALID_FORM and f not in forms and f not in (g for _, g in new_rows):
            new_rows.append((j, f))
    swaps = []  # (row of group, row of fresh)
    for j, f in new_rows:
        tally = Counter(forms)
        if len(tally) >= min_forms:
            break
        common, n = max(tally.items(), key=lambda kv: (kv[1], -forms.index(kv[0])))
        if n < 2:  # every answer already has its own form: nothing left to swap out
            break
        row = max(r for r, g in enumerate(forms) if g == common)
        forms[row] = f
        swaps.append((row, j))
    if not swaps:
        return group, 0
    # both groups right-padded to the longer one (ids with pad_id, mask / log-probs / entropies with 0)
    T = max(group.completion_ids.shape[1], fresh.completion_ids.shape[1])
    out, texts = {}, list(group.texts)
    for name, value in (("completion_ids", pad_id), ("mask", 0.0), ("old_logp", 0.0), ("entropy", 0.0)):
        mine, theirs = (F.pad(getattr(g, name), (0, T - getattr(g, name).shape[1]), value=value)
                        for g in (group, fresh))
        mine = mine.clone()  # the caller's group stays as it was
        for row, j in swaps:
            mine[row] = theirs[j]
        out[name] = mine
    for row, j in swaps:
        texts[row] = fresh.texts[j]
    return replace(group, texts=texts, **out), len(swaps)


def nonzero_by_group(adv: torch.Tensor, atol: float = 1e-8) -> list[float]:
    """Each group's share of answers with a non-zero advantage (adv: (P, G)), the per-group `nonzero_share`."""
    return (adv.abs() > atol).float().mean(dim=1).tolist()
