"""The comparison's arms (trainers/compare/arms/): one table, one run context, and adding an arm is one
function that writes the kept files plus one table row (issue 38, "the comparison as one wing")."""

from __future__ import annotations

import json

import pytest

from alpha_gym.commands.main import main
from alpha_gym.evaluation.kept import answer_row, checkpoint_row, control_numbers, probe_scores, write_kept, write_rows
from trainers.compare import arms
from trainers.compare.arms import CONTROL_NAMES, LADDER
from trainers.compare.ladder import SCALES


def test_the_table_holds_every_rung_and_control_once_in_ladder_order():
    names = [a.name for a in arms.ARMS]
    assert names == [r[0] for r in LADDER] + list(CONTROL_NAMES) + ["evolve_rl"]
    assert len(set(names)) == len(names)
    assert {a.kind for a in arms.ARMS} <= set(arms.KINDS)
    assert [a.kind for a in arms.ARMS] == ["rl"] * len(LADDER) + ["control"] * len(CONTROL_NAMES) + ["rl"]
    assert arms.eval_arm("runs/eval-x").name == "eval:eval-x" and arms.eval_arm("runs/eval-x").kind == "eval"


#: The tiny arm's one formula: every probe brief is answered with it.
TINY_FORMULA = "rank(-ts_delta(close, 5))"


def tiny(context: arms.RunContext, seed: int) -> dict:
    """A control that answers every probe brief with one fixed formula: the whole of a new arm's module."""
    formulas = [TINY_FORMULA] * len(context.probe)
    cpcvs = probe_scores(context.verifier(), formulas)
    step = context.scale.steps
    rows = [answer_row(b.id, step, f"<alpha>{f}</alpha>", f, c) for b, f, c in zip(context.probe, formulas, cpcvs)]
    checkpoint = checkpoint_row(step, cpcvs, context.train, context.holdout, context.verifier(), formulas,
                                context.run_dir(seed, "tiny"), label="tiny")
    numbers = control_numbers("tiny", "tiny", seed, 0.0, step, checkpoint, {"formula": TINY_FORMULA}, steps=0)
    write_kept(context.results, seed, "tiny", rows, numbers)
    return numbers


def test_an_arm_added_by_one_table_row_runs_and_its_kept_files_are_read_by_the_report(tmp_path, monkeypatch, capsys):
    """Register a tiny control in the table (nothing else changes), run it for two seeds on the smoke scale's
    synthetic market, and rebuild the table from the kept files alone (--report-only)."""
    from alpha_gym.tasks.sets import brief_set
    grown = (*arms.ARMS, arms.Arm("tiny", "control", tiny, "one fixed formula"))
    monkeypatch.setattr(arms.table, "ARMS", grown)   # the table, and the name the package hands it on by
    monkeypatch.setattr(arms, "ARMS", grown)
    results, out = tmp_path / "results", tmp_path / "out"
    probe = list(brief_set("probe"))[: SCALES["smoke"].probe]
    # a kept step 0 (the table's first row): no model is loaded for a control alone
    write_rows(results / "step-0.jsonl", [answer_row(b.id, 0, "<alpha>rank(close)</alpha>", "rank(close)", 0.0)
                                          for b in probe])
    assert main(["compare", "--scale", "smoke", "--rungs", "tiny", "--seeds", "42,43", "--out", str(out),
                 "--results", str(results)]) == 0
    assert "=== seed 43, control tiny" in capsys.readouterr().out
    for seed in (42, 43):
        rows = [json.loads(x) for x in (results / f"seed-{seed}" / "tiny.jsonl").read_text().splitlines()]
        assert [r["formula"] for r in rows] == [TINY_FORMULA] * len(probe)
        assert [r["brief_id"] for r in rows] == [b.id for b in probe]
    report_out = tmp_path / "report"
    assert main(["compare", "--scale", "smoke", "--report-only", "--out", str(report_out),
                 "--results", str(results)]) == 0
    report = json.loads((report_out / "report.json").read_text())
    row = report["rows"]["tiny"]
    assert row["kind"] == "control" and row["seeds"] == [42, 43] and row["valid"] == len(probe)
    assert "| tiny | 2 |" in (report_out / "comparison.md").read_text()
    # the same kept files with the row unregistered: the table does not know the arm, and says nothing of it
    monkeypatch.undo()
    assert main(["compare", "--scale", "smoke", "--report-only", "--out", str(tmp_path / "plain"),
                 "--results", str(results)]) == 0
    assert "tiny" not in json.loads((tmp_path / "plain" / "report.json").read_text())["rows"]


def test_an_unknown_arm_is_refused_and_the_error_names_the_table(tmp_path, capsys):
    assert main(["compare", "--scale", "smoke", "--rungs", "tiny", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "unknown rungs tiny" in err and "search" in err


def test_the_run_context_builds_the_verifier_once_per_setting():
    from alpha_gym.scoring.config import VerifierConfig
    from alpha_gym.tasks.sets import brief_set
    from trainers.compare.ladder import panels
    train, holdout = panels("smoke")
    context = arms.RunContext("smoke", SCALES["smoke"], None, None, None, VerifierConfig(), train, holdout,
                              tuple(list(brief_set("probe"))[:2]), None, None)
    assert context.verifier() is context.verifier()
    gated = context.verifier(self_corr_gate=0.7)
    assert gated is context.verifier(self_corr_gate=0.7) and gated is not context.verifier()
    assert gated.config.self_corr_gate == 0.7
    assert context.budget == SCALES["smoke"].steps * 1 * 2
    assert len(context.train_briefs()) == SCALES["smoke"].train_briefs


def test_an_arm_of_another_kind_is_refused_when_declared():
    """A kind outside KINDS would be run but shown nowhere in the table: the row is refused at once."""
    with pytest.raises(ValueError, match="kind 'baseline'"):
        arms.Arm("x", "baseline", tiny)


def test_the_evolve_arm_writes_kept_files_the_report_reads(tmp_path, capsys):
    """The `evolve` row of the table (issue 40): run at the smoke scale's budget for one seed, its kept files
    rebuild the table with --report-only, and its curve reads the run at a smaller budget."""
    from alpha_gym.evaluation.kept import read_object, read_rows
    from alpha_gym.search.evolve_arm import curve_at
    from alpha_gym.tasks.sets import brief_set
    results, out = tmp_path / "results", tmp_path / "out"
    probe = list(brief_set("probe"))[: SCALES["smoke"].probe]
    write_rows(results / "step-0.jsonl", [answer_row(b.id, 0, "<alpha>rank(close)</alpha>", "rank(close)", 0.0)
                                          for b in probe])
    assert main(["compare", "--scale", "smoke", "--rungs", "evolve", "--seeds", "42", "--out", str(out),
                 "--results", str(results)]) == 0
    captured = capsys.readouterr()
    budget = SCALES["smoke"].steps * 1 * 2
    assert "=== seed 42, control evolve" in captured.out and f"calls {budget}/{budget}" in captured.err
    rows = read_rows(results / "seed-42" / "evolve.jsonl")
    numbers = read_object(results / "seed-42" / "evolve.json")
    assert [r["brief_id"] for r in rows] == [b.id for b in probe] and all(r["formula"] for r in rows)
    assert numbers["verifier_calls"] == budget and numbers["selected_step"] == SCALES["smoke"].steps
    assert curve_at(numbers["curve"], budget)["calls"] == budget
    assert read_object(results / "seed-42" / "evolve.book.json")["rung"] == "evolve"
    assert main(["compare", "--scale", "smoke", "--report-only", "--out", str(tmp_path / "report"),
                 "--results", str(results)]) == 0
    row = json.loads((tmp_path / "report" / "report.json").read_text())["rows"]["evolve"]
    assert row["kind"] == "control" and row["seeds"] == [42] and row["valid"] == len(probe)


def test_the_random_control_spends_its_budget_on_random_formulas_only(tmp_path):
    """`random` (issue 40.5): no seeds, no search; every call a formula the random mutator drew, the best kept per
    brief, its curve and book like evolve's; the same seed draws the same formulas."""
    from alpha_gym.evaluation.kept import read_object, read_rows
    from alpha_gym.scoring.config import VerifierConfig
    from alpha_gym.tasks.sets import brief_set
    from trainers.compare.ladder import panels
    train, holdout = panels("smoke")
    probe = tuple(list(brief_set("probe"))[: SCALES["smoke"].probe])

    def run(folder):
        context = arms.RunContext("smoke", SCALES["smoke"], None, None, None, VerifierConfig(), train, holdout,
                                  probe, folder / "out", folder / "results")
        numbers = arms.runs.random_formulas(context, 7)
        calls = [json.loads(x) for x in (folder / "out" / "seed-7" / "random" / "proposals.jsonl").read_text()
                 .splitlines()]
        return numbers, [c for c in calls if c.get("status") != "rejected"], folder / "results"

    numbers, scored, results = run(tmp_path / "a")
    budget = SCALES["smoke"].steps * 1 * 2
    assert numbers["verifier_calls"] == budget and len(scored) == budget
    assert {c["origin"] for c in scored} == {"random"}            # no seed, no tree child, no fill
    rows = read_rows(results / "seed-7" / "random.jsonl")
    assert [r["brief_id"] for r in rows] == [b.id for b in probe]
    assert {r["formula"] for r in rows} <= {c["formula"] for c in scored}
    assert read_object(results / "seed-7" / "random.book.json")["rung"] == "random"
    _, again, _ = run(tmp_path / "b")
    assert [c["formula"] for c in again] == [c["formula"] for c in scored]


def test_a_rung_paired_with_a_control_is_paired_with_it_in_the_report(tmp_path):
    """evolve_rl is an RL row but pairs with evolve_model, a control whose row the report reads after the rungs':
    its vs_previous names evolve_model, not the rung before it."""
    from trainers.compare.report import build_report
    from trainers.compare.ladder import panels
    from alpha_gym.tasks.sets import brief_set
    train, holdout = panels("smoke")
    probe = list(brief_set("probe"))[: SCALES["smoke"].probe]
    results = tmp_path / "results"
    write_rows(results / "step-0.jsonl", [answer_row(b.id, 0, "<alpha>rank(close)</alpha>", "rank(close)", 0.0)
                                          for b in probe])
    from alpha_gym.scoring.config import VerifierConfig
    from alpha_gym.scoring.verifier import Verifier
    verifier = Verifier(train, VerifierConfig())
    for name, formula in (("evolve_model", "rank(-ts_delta(close, 5))"), ("evolve_rl", "rank(volume)")):
        formulas = [formula] * len(probe)
        cpcvs = probe_scores(verifier, formulas)
        rows = [answer_row(b.id, 2, f"<alpha>{f}</alpha>", f, c) for b, f, c in zip(probe, formulas, cpcvs)]
        checkpoint = checkpoint_row(2, cpcvs, train, holdout, verifier, formulas, tmp_path / name, label=name)
        write_kept(results, 42, name, rows, control_numbers(name, name, 42, 0.0, 2, checkpoint, {}, steps=0))
    report = build_report(results, [("evolve_rl", "rl", "")], train, holdout, brief_ids=[b.id for b in probe],
                          controls=["evolve_model"])
    assert report["rows"]["evolve_rl"]["vs_previous"]["rung"] == "evolve_model"
    assert report["rows"]["evolve_rl"]["vs_controls"]["evolve_model"]["seeds"] == 1


def test_the_model_evolve_arms_run_with_the_start_model_and_evolve_rl_pairs_with_evolve_model(tmp_path, capsys):
    """`evolve_model` (frozen) and `evolve_rl` (trained) through `alpha-gym compare` at the smoke scale with the real
    start model: each run's stamp names its mutator, both keep an arm's files, and the table pairs evolve_rl with
    evolve_model. (The smoke budget goes to the seeds; the mutators' own proposals and updates are tested in
    test_evolve_rl.py and test_improve_task.py.)"""
    pytest.importorskip("torch")
    from alpha_gym.evaluation.kept import read_object, read_rows
    from trainers.models import materialise_default_model, model_identity
    results, out = tmp_path / "results", tmp_path / "out"
    # --mutator-model names the evolve arms' own model (here the start model's folder by path: the step-0 probe,
    # which seeds them, stays --model's, the built-in default)
    mutator = str(materialise_default_model())
    assert main(["compare", "--scale", "smoke", "--rungs", "evolve_model,evolve_rl", "--seeds", "42",
                 "--out", str(out), "--results", str(results), "--mutator-model", mutator]) == 0
    captured = capsys.readouterr().out
    assert "=== seed 42, control evolve_model" in captured and "=== seed 42, rung evolve_rl" in captured
    kept = read_object(results / "settings.json")
    assert kept["model"] is None and kept["mutator_model"] == mutator
    assert kept["mutator_model_identity"] == model_identity(mutator)
    for name, spec in (("evolve_model", f"model:{mutator}"), ("evolve_rl", f"rl:model={mutator}")):
        stamp = json.loads((out / "seed-42" / name / "evolve-settings.json").read_text())
        assert stamp["mutators"] == [spec] and stamp["name"] == name
        assert read_object(results / "seed-42" / f"{name}.json")["verifier_calls"] == SCALES["smoke"].steps * 2
        assert len(read_rows(results / "seed-42" / f"{name}.jsonl")) == SCALES["smoke"].probe
    report = json.loads((out / "report.json").read_text())
    assert report["rows"]["evolve_rl"]["vs_previous"]["rung"] == "evolve_model"
    assert report["rows"]["evolve_model"]["kind"] == "control"
    # another mutator model for more rows of these arms would mix two mutators in one table: refused up front
    other = tmp_path / "other-model"
    other.mkdir()
    (other / "config.json").write_text("{}")
    assert main(["compare", "--scale", "smoke", "--rungs", "evolve_model", "--seeds", "43", "--out", str(out),
                 "--results", str(results), "--mutator-model", str(other)]) == 2
    assert "would mix two mutators" in capsys.readouterr().err
    assert not (results / "seed-43").exists()


def test_the_model_evolve_arms_mutate_with_the_mutator_model_and_refuse_a_name_their_spec_would_misread():
    from types import SimpleNamespace
    from trainers.compare.arms.runs import _model_arg
    from trainers.compare.runner import CompareError
    assert _model_arg(SimpleNamespace(model=None, mutator_model=None)) == ""          # the built-in start model
    assert _model_arg(SimpleNamespace(model="runs/sft/model", mutator_model=None)) == "runs/sft/model"
    assert _model_arg(SimpleNamespace(model="runs/sft/model", mutator_model="runs/improve/model")) == "runs/improve/model"
    for bad in ("runs/a,b", "runs/lr=1e-3"):
        with pytest.raises(CompareError, match="cannot name a start model"):
            _model_arg(SimpleNamespace(model="runs/sft/model", mutator_model=bad))


def test_a_mutator_model_for_no_model_arm_or_with_a_misreadable_path_is_refused_up_front(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["compare", "--scale", "smoke", "--rungs", "search", "--mutator-model", "runs/improve/model",
                 "--out", str(out)]) == 2
    assert "runs neither" in capsys.readouterr().err and not out.exists()
    assert main(["compare", "--scale", "smoke", "--rungs", "evolve_model", "--mutator-model", "runs/a,b",
                 "--out", str(out)]) == 2
    assert "',' or '='" in capsys.readouterr().err and not out.exists()
