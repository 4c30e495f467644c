"""The served start model's kept evals (benchmarks/results/eval-*, made by benchmarks/served_eval.py): a model
exported to GGUF, served by llama.cpp and asked through `alpha-gym eval` (issue 43.3).

Cheap: each folder's numbers agree with its kept answers, and each answer's formula is the one in its raw
completion. Thorough (real data): `alpha-gym eval --report-only` on the kept raw completions alone, with the
kept command, gives back the kept answers, holdout report and numbers.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from alpha_gym.commands.main import main
from alpha_gym.evaluation.endpoint import read_raw
from alpha_gym.tasks.compliance import compliance_record
from alpha_gym.tasks.sets import brief_by_id
from conftest import REAL_DATA_DIR, _require_real_data
from test_kept_results import _assert_same_numbers

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

#: The kept evals: folder, briefs x samples at least, what the model is.
KEPT = {"eval-smollm2-start": (5, 3, "SmolLM2-135M-Instruct, the built-in default start model, f32 GGUF"),
        "eval-sft-start": (50, 3, "the SFT start model (alpha-gym sft, 40 steps), f32 GGUF")}
each_kept = pytest.mark.parametrize("name", sorted(KEPT))
#: eval.json's numbers a re-score must give back (what it asked and reused this run, and where, differ).
NUMBERS = ("format", "model", "briefs", "samples", "temperature", "max_tokens", "seed", "extra_body", "items",
           "answered", "failed", "missing", "train", "holdout")


def _load(name: str):
    folder = RESULTS / name
    rows = [json.loads(x) for x in (folder / "answers.jsonl").read_text().splitlines()]
    return folder, json.loads((folder / "eval.json").read_text()), rows, json.loads((folder / "run.json").read_text())


@each_kept
def test_the_kept_numbers_agree_with_the_kept_answers(name):
    from alpha_gym.language.answer import formula_or_none
    folder, summary, rows, run = _load(name)
    briefs, samples, _ = KEPT[name]
    assert summary["briefs"] >= briefs and summary["samples"] >= samples
    assert summary["answered"] == summary["items"] == len(rows) == summary["briefs"] * summary["samples"]
    assert summary["failed"] == summary["missing"] == 0
    assert summary["extra_body"] == {"repeat_penalty": 1.0}  # llama.cpp samples from the model's own distribution
    valid = [r for r in rows if r["train_valid"]]
    assert summary["train"]["n_valid"] == len(valid)
    assert summary["train"]["valid_share"] == pytest.approx(len(valid) / len(rows), rel=1e-12)
    raw = read_raw(folder / "endpoint.jsonl")
    assert sorted(raw) == sorted(f"{r['brief_id']}#{r['sample']}" for r in rows)
    for r in rows:
        completion = raw[f"{r['brief_id']}#{r['sample']}"]["completion"]
        assert r["answer"] == completion and r["formula"] == formula_or_none(completion)
    holdout = json.loads((folder / "holdout.json").read_text())
    assert holdout["summary"]["n_answers"] == len(rows) and holdout["summary"] == summary["holdout"]
    # compliance with each answer's brief (what R13 pays), from the rows alone: the train summary counts an answer
    # invalid on train as meeting nothing, the holdout an answer invalid there
    records = [compliance_record(brief_by_id(r["brief_id"]), r["formula"], r["train_valid"]) for r in rows]
    assert summary["train"]["n_briefs"] == len(rows)
    assert summary["train"]["brief_share"] == pytest.approx(sum(c["share"] for c in records) / len(rows), abs=1e-12)
    assert summary["train"]["brief_met_all"] == sum(c["met_all"] for c in records)
    assert [a["brief"]["id"] for a in holdout["answers"]] == [r["brief_id"] for r in rows]
    assert holdout["summary"]["brief_met_all"] == sum(a["brief"]["met_all"] for a in holdout["answers"])
    assert all(a["brief"]["share"] == 0.0 for a in holdout["answers"] if not a["valid"])
    assert run["export"]["outtype"] == "f32" and run["export"]["sha256"].startswith("sha256:")
    command = run["eval_command"]
    for flag, key in (("--samples", "samples"), ("--temperature", "temperature"), ("--max-tokens", "max_tokens")):
        assert float(command[command.index(flag) + 1]) == summary[key]


@pytest.mark.real_data
@each_kept
def test_the_kept_eval_is_rescored_from_its_raw_answers(name, tmp_path):
    _require_real_data()
    folder, summary, rows, run = _load(name)
    out = tmp_path / "eval"
    out.mkdir()
    shutil.copyfile(folder / "endpoint.jsonl", out / "endpoint.jsonl")  # the model's answers, nothing scored
    command = list(run["eval_command"])
    command[command.index("--out") + 1] = str(out)
    for flag in ("--data", "--universe"):  # the kept command's paths, at this machine's copy of the data
        command[command.index(flag) + 1] = str(REAL_DATA_DIR / Path(command[command.index(flag) + 1]).name)
    assert main([*command, "--report-only"]) == 0
    assert (out / "answers.jsonl").read_text() == (folder / "answers.jsonl").read_text()
    _assert_same_numbers(json.loads((out / "holdout.json").read_text()),
                         json.loads((folder / "holdout.json").read_text()), "holdout.json")
    again = json.loads((out / "eval.json").read_text())
    _assert_same_numbers({k: again[k] for k in NUMBERS}, {k: summary[k] for k in NUMBERS}, "eval.json")
