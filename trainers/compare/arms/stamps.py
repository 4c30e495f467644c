"""The stamps that guard a comparison's folders, so two experiments are never blended: --out's settings.json
(`claim_out_dir` with `out_settings`: a rerun resumes only into a folder made with the same settings) and the kept
results' start model (`check_kept_model`: rows are added only to results made from the same model, or one whose
greedy step-0 answers are the kept ones)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from alpha_gym.evaluation.kept import read_json, read_object, read_rows
from alpha_gym.folder_stamp import claim_stamp
from alpha_gym.jsonable import json_dumps
from trainers.compare.runner import CompareError


def with_added_defaults(before: dict, now: dict) -> dict:
    """The stamp `before` with each verifier setting it lacks taken from `now` where `now` holds the default:
    a setting added to the code since (at its default, the behaviour before it existed) is no difference."""
    from alpha_gym.scoring.config import VerifierConfig
    from alpha_gym.settings import to_dict
    defaults = json.loads(json_dumps(to_dict(VerifierConfig())))
    missing = {k: v for k, v in now.get("verifier", {}).items()
               if k not in before.get("verifier", {}) and v == defaults.get(k)}
    return {**before, "verifier": {**before["verifier"], **missing}} if missing and "verifier" in before else before


def _with_model_identity(before: dict, now: dict, where: Path) -> dict:
    """`before` as it compares with `now` on the start model's content identity (`model_identity`).

    --report-only loads no model and stamps none: identities are not compared. A stamp written before
    identities existed names only the model's path; the run goes on (it cannot be checked) and says so.
    """
    if "model_identity" not in now:
        return {k: v for k, v in before.items() if k != "model_identity"}
    if "model_identity" not in before:
        print(f"warning: {where} predates model identities: the start model's content cannot be checked "
              f"against the one its runs began from (now {now['model_identity']})", file=sys.stderr, flush=True)
        return {**before, "model_identity": now["model_identity"]}
    return before


def check_kept_model(results: Path, identity: str | None, step0_answers=None) -> str | None:
    """Refuse to add rows to kept results that another start model produced (their step-0 row and every
    rung start from it); kept results from before identities existed are named, not refused. Returns the
    identity the kept results go on being stamped with (None where nothing is kept or no model is loaded).

    A start model rebuilt from the same recipe on another CPU has other last bits, so another identity
    (SFT sums in the CPU's own order, see trainers/sft.py). It joins the kept results only as an
    equivalent: `step0_answers()` (called only then) gives its greedy step-0 rows, and every raw answer
    must equal the kept step-0.jsonl's character for character, brief by brief; the caller then lists it
    in settings.json's `equivalent_model_identities`. Anything short of that is refused, naming how many
    answers differ.
    """
    kept = results / "settings.json"
    if identity is None or not kept.exists():
        return identity
    stamp = read_object(kept)
    before = stamp.get("model_identity")
    if before is None:
        print(f"warning: {kept} names no model identity: the rows added now may start from another model "
              f"than its step-0 row (now {identity})", file=sys.stderr, flush=True)
        return identity
    if identity == before or identity in stamp.get("equivalent_model_identities", []):
        return before
    why = "no kept step-0 answers to compare with"
    if step0_answers is not None and (results / "step-0.jsonl").exists():
        kept_rows, now = read_rows(results / "step-0.jsonl"), step0_answers()
        differ = sum((k["brief_id"], k["answer"]) != (n["brief_id"], n["answer"]) for k, n in zip(kept_rows, now))
        differ += abs(len(kept_rows) - len(now))
        if not differ:
            print(f"note: start model {identity} is not {before}, the one {results} was made from, but its "
                  f"greedy answers to all {len(now)} probe briefs are the kept step-0 answers, character for "
                  "character: kept as an equivalent (settings.json, equivalent_model_identities)",
                  file=sys.stderr, flush=True)
            return before
        why = f"{differ} of {len(kept_rows)} of its greedy step-0 answers differ from the kept ones"
    raise CompareError(f"{results} was made from start model {before}, not {identity} (the --model given; {why}): "
                       "its step-0 row and rungs would be mixed with another model's; pass another --results")


def claim_out_dir(out: Path, settings: dict) -> None:
    """Stamp `out` with what its results depend on; refuse to resume into a folder made with other settings.

    A rerun reuses checkpoints, probe records and filter rates from `out`, so mixing settings there
    would silently blend two experiments. `--rungs` and `--seeds` may differ between runs: each rung
    and seed has its own folder.
    """
    now = json.loads(json_dumps(settings))

    def refusal(stamp: Path):
        before = _with_model_identity(with_added_defaults(read_json(stamp), now), now, stamp)
        if before == now:
            return None
        changed = sorted(k for k in now if before.get(k) != now[k])
        return CompareError(f"{out} holds a comparison made with other settings ({', '.join(changed)} "
                            f"{'differs' if len(changed) == 1 else 'differ'}); pass another --out or delete the folder")
    claim_stamp(out / "settings.json", json_dumps(settings, indent=2), refusal, replace=False)


def out_settings(args, scale, verifier_settings: dict, identity: str | None = None) -> dict:
    """What a comparison's --out folder depends on (the stamp `claim_out_dir` writes and checks); `identity`
    is the start model's content (`trainers.models.model_identity`), None where no model is loaded."""
    stamp = {"scale": args.scale, "scale_settings": {k: v for k, v in asdict(scale).items() if k != "seeds"},
             "model": args.model, "data": args.data, "universe": args.universe, "verifier": verifier_settings}
    return stamp if identity is None else {**stamp, "model_identity": identity}
