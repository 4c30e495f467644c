"""An `alpha-gym eval` folder: its stamp, the answered items scored into kept rows, the endpoint's errors counted.

    stamp = eval_stamp(base_url=..., model=..., ..., briefs=briefs, messages=messages, train=train, holdout=None)
    claim_eval_dir(out, stamp, asking, answered)      # eval-settings.json; a folder made otherwise is refused
    rows = score_rows(read_raw(out / "endpoint.jsonl"), briefs, samples, verifier)   # answers.jsonl's rows

The command (`alpha_gym/commands/evaluation.py`) reads the flags, asks the endpoint (`endpoint.run_requests`)
and prints; what the folder holds and how it is scored is here.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from alpha_gym.errors import InputError
from alpha_gym.evaluation.answers_file import universe_record
from alpha_gym.folder_stamp import claim_stamp
from alpha_gym.jsonable import json_dumps


def _prompt_hash(messages) -> str:
    import hashlib
    return hashlib.sha256(json_dumps(messages).encode()).hexdigest()[:16]


def eval_stamp(*, base_url: str | None, model: str, temperature: float, max_tokens: int, seed: int | None,
               extra_body: dict | None, data, universe, briefs, messages, train, holdout) -> dict:
    """What an eval folder's answers and scores depend on (eval-settings.json): the endpoint (redacted),
    model, sampling, extra request fields (`extra_body`, parsed), the data file, universe (the --universe value:
    None, a ticker list or a file), the panels' fingerprints and each brief's prompt hash."""
    from alpha_gym.evaluation.endpoint import redact_url
    data = str(data) if data else None
    return {"endpoint": redact_url(base_url) if base_url else None, "model": model,
            "temperature": temperature, "max_tokens": max_tokens, "seed": seed,
            "extra_body": extra_body,
            "data": Path(data).name if data else "the embedded synthetic market",
            "universe": universe_record(universe, train, data or "the synthetic market"),
            "train": f"{train.dates[0]}..{train.dates[-1]}", "panel": train.fingerprint()[:16],
            "holdout": None if holdout is None else {"window": f"{holdout.dates[0]}..{holdout.dates[-1]}",
                                                     "panel": holdout.fingerprint()[:16]},
            "briefs": {b.id: _prompt_hash(m) for b, m in zip(briefs, messages)}}


def _shown(value) -> str:
    text = json_dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


#: The folder's stamp: what its answers and scores depend on (`eval_stamp`).
EVAL_STAMP = "eval-settings.json"


def read_eval_stamp(path: Path) -> dict:
    """The stamp an earlier run wrote (InputError for a damaged one: what to do instead)."""
    try:
        before = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise InputError(f"{path} is damaged (not JSON): pass another --out or delete the folder") from None
    if not isinstance(before, dict):
        raise InputError(f"{path} is damaged (not an object): pass another --out or delete the folder")
    return before


def other_eval_settings(out: Path, before: dict, stamp: dict, asking: bool) -> InputError | None:
    """The error naming what differs between the stamp `before` and this run's `stamp`, or None where they agree.

    A key the earlier stamp lacks (an older alpha-gym's) is no difference; the endpoint counts only when this run
    asks it something; briefs are compared by id (more briefs or samples add to the folder)."""
    changed = []
    for k, now in stamp.items():
        if k not in before or (k == "endpoint" and (not asking or now is None)):
            continue
        if k == "briefs":
            old = before[k] if isinstance(before[k], dict) else {}
            other = [i for i, h in now.items() if i in old and old[i] != h]
            if other:
                changed.append(f"the prompt of brief {other[0]}" + (f" and {len(other) - 1} more" if len(other) > 1
                                                                   else "") + " differs")
        elif before[k] != now:
            changed.append(f"{k}: {_shown(before[k])} before, {_shown(now)} now")
    if not changed:
        return None
    return InputError(f"{out} holds answers made with other settings ({'; '.join(changed)}); "
                      "pass another --out or delete the folder")


def claim_eval_dir(out: Path, stamp: dict, asking: bool, answered: bool = True) -> dict:
    """Refuse a folder whose answers were made or scored with other settings; else write the stamp.

    The stamp binds once the folder holds an answer (`answered`: before that nothing can be mixed, and a
    run that failed at once, say on a URL without /v1, can be rerun with the fix). The endpoint counts
    only when this run asks it something (a finished folder re-scores without one); briefs are compared
    by id (a run with more briefs or samples adds to the folder). A stamp written by an older alpha-gym
    lacks some keys: they are added, not refused. Returns the stamp written: the earlier one's briefs and
    keys merged with this run's (`folder_stamp.claim_stamp` checks with `other_eval_settings` and writes).
    """
    path = out / EVAL_STAMP
    before = read_eval_stamp(path) if answered and path.is_file() else {}
    merged = {**before, **stamp}
    if not asking or stamp["endpoint"] is None:
        merged["endpoint"] = before.get("endpoint", stamp["endpoint"])
    old_briefs = before.get("briefs")
    merged["briefs"] = {**(old_briefs if isinstance(old_briefs, dict) else {}), **stamp["briefs"]}
    claim_stamp(path, json_dumps(merged, indent=1), lambda _: other_eval_settings(out, before, stamp, asking),
                check=answered, replace=merged != before)
    return merged


def score_rows(raw: dict, briefs, samples: int, verifier) -> list[dict]:
    """The answered items in brief, then sample, order: kept rows scored on the train window, each with its
    compliance with its brief ("brief": `compliance_report`, the extended checks R13 pays, each met or not; an
    answer invalid on the train window meets none)."""
    from alpha_gym.language.answer import formula_or_none
    from alpha_gym.tasks.compliance import compliance_report
    rows = []
    for b in briefs:
        for s in range(samples):
            r = raw.get(f"{b.id}#{s}")
            if r is None or not r.get("ok") or not isinstance(r.get("completion"), str):
                continue  # missing or failed: counted, never scored
            score = verifier.score(r["completion"], brief=b)
            cpcv = score.channels.get("cpcv") if score.valid else None
            formula = formula_or_none(r["completion"])
            rows.append({"brief_id": b.id, "sample": s, "step": None, "answer": r["completion"],
                         "formula": formula, "train_cpcv": cpcv,
                         "train_valid": bool(score.valid), "reward": score.reward, "reason": score.reason,
                         "brief": compliance_report(b, formula, score.valid)})
    return rows


def answered_briefs(rows, briefs) -> list:
    """The brief of each scored row (`score_rows`' order), for compliance in the summary and the holdout."""
    by_id = {b.id: b for b in briefs}
    return [by_id[r["brief_id"]] for r in rows]


def error_counts(raw: dict, keys) -> tuple[Counter, Counter]:
    """(failed attempts by kind over every item, failed items by their last error)."""
    attempts, items = Counter(), Counter()
    for k in keys:
        r = raw.get(k)
        if r is None:
            continue
        attempts.update(r.get("attempt_errors") or [])
        if not r.get("ok"):
            items[r.get("error") or "unknown"] += 1
    return attempts, items


def mean(xs):
    xs = [x for x in xs if x is not None]
    return float(sum(xs) / len(xs)) if xs else None
