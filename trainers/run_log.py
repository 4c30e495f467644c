"""A training run's log: one JSON line a step (log.jsonl), every answer (completions.jsonl), and their reading.

`step_record` builds a log.jsonl line from a step's scores and statistics; `completion_rows` the step's
completions.jsonl lines. Resuming drops the lines past the restart point (`truncate_jsonl`), so a resumed
run's files are the uninterrupted run's. `alpha-gym report` reads them (`alpha_gym.evaluation.report`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from alpha_gym.jsonable import json_dumps
from alpha_gym.scoring.config import CHANNELS

#: Every key of a log.jsonl line (channel means are "rewards/<channel>").
#: "clipped_share": share of answer tokens where the trust region acted: clipped (grpo/dapo: the ratio left
#: the band in the direction of its advantage) or capped (cispo: ratio above the cap, either sign).
LOG_FIELDS = ("step", "reward", "reward_std", *(f"rewards/{c}" for c in CHANNELS), "core", "valid_share",
              "guarded_share", "families", "archive_size", "nonzero_adv_share", "distinct_forms_mean",
              "distinct_forms_min", "kl", "entropy", "zeta", "epsilon_high", "refills", "form_refills", "form_swaps",
              "verifier_calls", "loss", "clip_ratio", "clipped_share", "ratio_mean",
              "learning_rate", "completion_length", "seconds/generation", "seconds/scoring", "seconds/update",
              "seconds/total")
#: "distinct_forms_*": distinct canonical forms of a group's answers (`trainers.refill.distinct_forms`: every
#: unreadable answer is the one form "invalid"), over the step's groups as trained (after any refill);
#: "form_refills" / "form_swaps": groups given fresh forms / answers swapped in by the collapse refill;
#: "verifier_calls": answers scored since the run began, refills included (cumulative, kept across a resume).
#: Labels a log.jsonl line also carries: "world_model", the identity of the world model R3 used ("off": none).
LOG_LABELS = ("world_model",)
#: Per-group lists a line also carries, in the order of the step's briefs: "group_forms" (distinct forms) and
#: "group_nonzero_adv_share" (the share of the group's answers with a non-zero advantage).
LOG_GROUPS = ("group_forms", "group_nonzero_adv_share")


def step_record(step: int, scores, verifier, nonzero_adv_share: float, stats: dict, seconds: dict,
                group_forms: list[int], group_nonzero: list[float]) -> dict:
    """The log.jsonl line of a step: reward and channel means over the step's answers, validity and the
    archive, the update's statistics (`stats`: kl, entropy, zeta, epsilon_high, refills, form_refills,
    form_swaps, verifier_calls, loss, clip_ratio, clipped_share, ratio_mean, learning_rate, completion_length),
    the seconds of each phase, and per group its distinct forms and non-zero-advantage share."""
    rewards = np.concatenate([s.rewards for s in scores])
    matrix = np.concatenate([s.matrix for s in scores])
    return {
        "step": step,
        "reward": float(rewards.mean()),
        "reward_std": float(rewards.std(ddof=1)) if rewards.size > 1 else 0.0,
        **{f"rewards/{c}": float(matrix[:, k].mean()) for k, c in enumerate(CHANNELS)},
        "core": float(np.concatenate([s.core for s in scores]).mean()),
        "valid_share": float(np.concatenate([s.valid for s in scores]).mean()),
        "guarded_share": float(np.concatenate([s.guarded for s in scores]).mean()),
        # distinct formula families (canonical form, windows bucketed) among the step's valid answers
        "families": len({ev.form for s in scores for ev, ok in zip(s.evaluated, s.valid) if ok and ev}),
        "archive_size": len(verifier.archive),
        "nonzero_adv_share": nonzero_adv_share,
        "distinct_forms_mean": float(np.mean(group_forms)),
        "distinct_forms_min": int(min(group_forms)),
        **{k: stats[k] for k in ("kl", "entropy", "zeta", "epsilon_high", "refills", "form_refills", "form_swaps",
                                 "verifier_calls", "loss", "clip_ratio", "clipped_share", "ratio_mean",
                                 "learning_rate", "completion_length")},
        **{f"seconds/{k}": seconds[k] for k in ("generation", "scoring", "update", "total")},
        "world_model": verifier.world_model,  # what R3 used: a content hash, or "off"
        "group_forms": [int(n) for n in group_forms],
        "group_nonzero_adv_share": [float(x) for x in group_nonzero],
    }


def completion_rows(step: int, groups, scores, advantages) -> list[dict]:
    """The completions.jsonl lines of a step: every answer with its brief, validity, reward, advantage, channels."""
    return [{"step": step, "brief_id": g.brief_id, "answer": text, "valid": sc.valid, "reason": sc.reason,
             "reward": sc.reward, "advantage": ai, "channels": sc.channels}
            for g, s, a in zip(groups, scores, advantages) for text, sc, ai in zip(g.texts, s.scores, a.tolist())]


def append_jsonl(path: Path, record: dict) -> None:
    with open(path, "a") as f:
        f.write(json_dumps(record) + "\n")


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json_dumps(r) + "\n" for r in records))


def truncate_jsonl(path: Path, last_step: int) -> None:
    """Keep the lines of steps <= last_step (0: none)."""
    if not path.exists():
        return
    keep = [ln for ln in path.read_text().splitlines() if ln.strip() and json.loads(ln).get("step", 0) <= last_step]
    path.write_text("".join(ln + "\n" for ln in keep))


def read_log(out_dir) -> list[dict]:
    """The log.jsonl records of a run."""
    path = Path(out_dir) / "log.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()] if path.exists() else []
