"""The comparison's arms (trainers/compare/arms.py): one table, one run context, and adding an arm is one
function that writes the kept files plus one table row (issue 38, "the comparison as one wing")."""

from __future__ import annotations

import json

import pytest

from alpha_gym.commands.main import main
from alpha_gym.evaluation.kept import answer_row, checkpoint_row, control_numbers, probe_scores, write_kept, write_rows
from trainers.compare import arms
from trainers.compare.ladder import CONTROL_NAMES, LADDER, SCALES


def test_the_table_holds_every_rung_and_control_once_in_ladder_order():
    names = [a.name for a in arms.ARMS]
    assert names == [r[0] for r in LADDER] + list(CONTROL_NAMES)
    assert len(set(names)) == len(names)
    assert {a.kind for a in arms.ARMS} <= set(arms.KINDS)
    assert [a.kind for a in arms.ARMS] == ["rl"] * len(LADDER) + ["control"] * len(CONTROL_NAMES)
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
    monkeypatch.setattr(arms, "ARMS", (*arms.ARMS, arms.Arm("tiny", "control", tiny, "one fixed formula")))
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
