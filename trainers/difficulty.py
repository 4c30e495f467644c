"""Difficulty filter: keep the briefs a model solves in some but not all tries.

A brief the model always solves, or never does, gives every answer in its
group the same reward: zero variance, zero advantage, no learning signal.
The reference kept 226 of 500 briefs this way (worth +0.47 on holdout).

    solved(answer) = valid and core score (R1, CPCV) > 0
    pass_rate      = solved tries / tries
    keep           = 0 < pass_rate < 1   (and pass_rate <= upper, when an upper cut such as 0.75 is set)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence


@dataclass(frozen=True)
class BriefPassRate:
    brief_id: str
    family: str
    tries: int
    solved: int
    valid: int

    @property
    def pass_rate(self) -> float:
        return self.solved / self.tries if self.tries else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "pass_rate": self.pass_rate}


def keep(rate: float, upper: float | None = None) -> bool:
    """The filter rule: solved sometimes, not always (and not above `upper`)."""
    return 0.0 < rate < 1.0 and (upper is None or rate <= upper)


def pass_rates(model, tokenizer, verifier, briefs: Sequence, tries: int = 8, temperature: float = 1.0,
               max_new_tokens: int = 128, batch_size: int = 4, seed: int = 0, progress: bool = True
               ) -> list[BriefPassRate]:
    """Sample `tries` answers per brief and count how many are solved."""
    from alpha_gym.tasks.task import render_prompt
    from trainers.rollout import generate_answers
    iterator = range(0, len(briefs), batch_size)
    if progress:
        from tqdm import tqdm
        iterator = tqdm(iterator, desc="difficulty filter", unit="batch")
    out = []
    for start in iterator:
        chunk = briefs[start:start + batch_size]
        prompts = [render_prompt(b, verifier.config.limits) for b in chunk]
        answers = generate_answers(model, tokenizer, prompts, n=tries, temperature=temperature,
                                   max_new_tokens=max_new_tokens, batch_size=batch_size, seed=seed + start)
        for brief, group in zip(chunk, answers):
            scores = [verifier.score(a, brief=brief) for a in group]
            out.append(BriefPassRate(brief.id, brief.family, len(scores),
                                     solved=sum(s.valid and s.channels["cpcv"] > 0 for s in scores),
                                     valid=sum(s.valid for s in scores)))
    return out


def filter_briefs(briefs: Sequence, rates: Sequence[BriefPassRate], upper: float | None = None) -> list:
    """The briefs whose pass rate passes `keep`, in their original order."""
    by_id = {r.brief_id: r for r in rates}
    return [b for b in briefs if b.id in by_id and keep(by_id[b.id].pass_rate, upper)]
