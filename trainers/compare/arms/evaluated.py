"""An `alpha-gym eval` folder's answers as a row of the comparison (issue 30: a model behind an endpoint
beside the trained rungs, on the same probe briefs, pseudo-holdout and baselines).

The folder's answers.jsonl is already in the comparison's kept format (brief_id, step, answer,
formula, train_cpcv, train_valid; plus sample). Its samples take the place of seeds (the interval
resamples them, then briefs). Its answers' validity is re-scored on the comparison's train window, as
the rungs' were: the eval may have been scored on another window. An item the endpoint never
answered has no row there; a sample missing a probe brief is refused, never counted as invalid.
"""

from __future__ import annotations

from pathlib import Path

from alpha_gym.evaluation.endpoint import EVAL_FORMAT
from alpha_gym.evaluation.kept import probe_scores, read_json, read_jsonl
from trainers.compare.runner import CompareError


#: The most samples an eval folder's row may hold (a sane limit: each is one resample of the table).
MAX_SAMPLES = 10_000


def read_eval(folder, brief_ids, verifier) -> dict:
    """{"key", "label", "model", "folder", "per_sample": {sample: kept rows in `brief_ids` order}}.

    `verifier` is the comparison's train-window verifier: each row's train_cpcv and train_valid are its.
    """
    folder = Path(folder)
    meta_path, answers_path = folder / "eval.json", folder / "answers.jsonl"
    if not (meta_path.is_file() and answers_path.is_file()):
        raise CompareError(f"--eval {folder}: not an `alpha-gym eval` folder (no eval.json and answers.jsonl)")
    meta = read_json(meta_path)
    if meta.get("format") != EVAL_FORMAT:
        raise CompareError(f"--eval {folder}: eval.json is of format {meta.get('format')!r}, not {EVAL_FORMAT!r}")
    samples = meta.get("samples")
    if type(samples) is not int or not 1 <= samples <= MAX_SAMPLES:
        raise CompareError(f"--eval {folder}: eval.json's samples is {samples!r}, not an integer in [1, {MAX_SAMPLES}]")
    by_sample: dict[int, dict[str, dict]] = {s: {} for s in range(samples)}
    for n, row in enumerate(read_jsonl(answers_path), start=1):
        sample = row.get("sample", 0)
        if (type(sample) is not int or sample not in by_sample or not isinstance(row.get("brief_id"), str)
                or not isinstance(row.get("answer"), str) or not isinstance(row.get("formula"), (str, type(None)))):
            raise CompareError(f"--eval {folder}: answers.jsonl row {n} is not an answer row of one of its "
                               f"{samples} samples (brief_id, answer, formula, sample)")
        by_sample[sample][row["brief_id"]] = row
    per_sample = {}
    for s, answered in sorted(by_sample.items()):
        missing = [b for b in brief_ids if b not in answered]
        if missing:
            raise CompareError(f"--eval {folder}: sample {s} has no answer to {len(missing)} of the {len(brief_ids)} "
                               f"probe briefs (first: {missing[0]}); rerun `alpha-gym eval` into that folder to "
                               "ask again for failed items, or answer the probe briefs")
        formulas = [answered[b].get("formula") for b in brief_ids]
        per_sample[s] = [{"brief_id": b, "step": None, "answer": answered[b]["answer"], "formula": f,
                          "train_cpcv": c, "train_valid": c is not None}
                         for b, f, c in zip(brief_ids, formulas, probe_scores(verifier, formulas))]
    model = str(meta.get("model"))
    return {"key": f"eval:{folder.name}", "label": f"eval: {model}", "model": model, "folder": str(folder),
            "per_sample": per_sample}
