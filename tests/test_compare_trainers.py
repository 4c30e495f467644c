"""The trainer comparison (`alpha-gym compare`, trainers/compare/): an end-to-end smoke run of every rung (2 steps,
real SmolLM2-135M, tiny settings), its statistics, the seed plot, the floor-trap benchmark, and an
`alpha-gym eval` folder's answers as a row of the table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from alpha_gym.commands.main import main
from alpha_gym.evaluation.kept import write_object, write_rows
from alpha_gym.jsonable import json_dumps
from trainers.compare import floor_trap, stats as st
from trainers.compare.arms import LADDER, stamps

from chat_endpoint import ChatEndpoint  # a real chat server on 127.0.0.1

ROOT = Path(__file__).resolve().parents[1]


#: The RL rungs the smoke run below leaves out, and where what is their own runs instead. Each trains through the
#: same `runs.train_rung` as the rungs it runs; what differs is the recipe, the prompts and the verifier changes:
#: every recipe trains two real steps in tests/test_training.py::test_two_steps_of_each_recipe, the filtered
#: prompts and a verifier change run here (cispo_repo_r_filtered, cispo_brief_book_forms), and
#: test_every_rung_builds_its_training_settings_and_verifier_at_the_smoke_scale builds each left-out rung's
#: settings and verifier. (Every rung ran here before: 460-520 s of one core, about half of it in these four.)
SMOKE_LEAVES_OUT = {
    "cispo": "recipe cispo: test_two_steps_of_each_recipe[cispo]",
    "cispo_repo_r": "recipe cispo_repo_r: test_two_steps_of_each_recipe[cispo_repo_r], and here as "
                    "cispo_repo_r_filtered",
    "cispo_repo_r_dora_filtered": "recipe cispo_repo_r_dora: test_two_steps_of_each_recipe[cispo_repo_r_dora]; "
                                  "a DoRA checkpoint answering as the probe does: test_training.py::"
                                  "test_a_dora_checkpoint_answers_over_its_base; filtered prompts: here",
    "cispo_repo_r_gate": "recipe cispo_repo_r: here as cispo_repo_r_filtered; a rung's verifier changes: here as "
                         "cispo_brief_book_forms; the gated verifier: test_compare_arms.py::"
                         "test_the_run_context_builds_the_verifier_once_per_setting",
}


@pytest.mark.slow
def test_compare_trainers_smoke_produces_table_plots_and_json(tmp_path, capsys):
    """Three RL rungs (the first, a filtered one, one with verifier changes and refills) and every control,
    end to end with the real model; SMOKE_LEAVES_OUT says where the other rungs' own code runs."""
    pytest.importorskip("trl")
    from trainers.compare.arms import arm_names
    out = tmp_path / "compare"
    rungs = [name for name, _, _ in LADDER if name not in SMOKE_LEAVES_OUT]
    run = [name for name in arm_names() if name not in SMOKE_LEAVES_OUT]
    assert main(["compare", "--scale", "smoke", "--out", str(out), "--rungs", ",".join(run)]) == 0
    table = (out / "comparison.md").read_text()
    for name in ["step 0", *rungs]:
        assert f"| {name} |" in table
    data = json.loads((out / "comparison.json").read_text())
    assert [r["rung"] for r in data["runs"]] == rungs and {r["seed"] for r in data["runs"]} == {42}
    from trainers.config import RECIPES
    for r in data["runs"]:
        steps = [c["step"] for c in r["checkpoints"]]
        if RECIPES[r["recipe"]].refill_rounds:  # refills come out of the 2 x 1 x 2 calls: it may stop at step 1
            assert r["verifier_calls"] <= 4 and steps in ([0, 1], [0, 1, 2]) and r["steps_trained"] == steps[-1]
        else:
            assert steps == [0, 1, 2] and r["verifier_calls"] == 4 and r["steps_trained"] == 2
        assert r["selected_step"] in steps
        assert len(r["log"]) == steps[-1] and all("reward" in x and "core" in x for x in r["log"])
        assert (out / "seed-42" / r["rung"] / f"holdout-step-{steps[-1]}.json").exists()
    assert data["pseudo_holdout"][0] > data["train_end"]
    assert "| rung | steps | verifier calls | forms a group | non-zero advantage |" in table
    assert all(f"| {name} | " in table.split("| rung | steps | verifier calls")[1] for name in rungs)
    for png in ("curves.png", "holdout_per_checkpoint.png"):
        assert (out / png).stat().st_size > 10_000
    # the start model answers the probe once, for every rung
    assert (out / "step-0" / "probe-step-0.json").exists()
    assert not any((out / "seed-42" / name / "probe-step-0.json").exists() for name in rungs)
    assert len({json.dumps(r["checkpoints"][0], sort_keys=True) for r in data["runs"]}) == 1
    for r in data["runs"]:
        assert all(0 <= c["train_valid"] <= c["n"] for c in r["checkpoints"])

    # the answers behind the table are kept as small text files, readable by holdout-formulas
    results = out / "results"
    step0 = [json.loads(x) for x in (results / "step-0.jsonl").read_text().splitlines()]
    assert len(step0) == 2 and {"brief_id", "answer", "formula", "train_cpcv", "train_valid"} <= set(step0[0])
    for name in rungs:
        rows = [json.loads(x) for x in (results / "seed-42" / f"{name}.jsonl").read_text().splitlines()]
        assert [r["brief_id"] for r in rows] == [r["brief_id"] for r in step0]
        numbers = json.loads((results / "seed-42" / f"{name}.json").read_text())
        assert numbers["selected_step"] == rows[0]["step"] and 0 <= numbers["clipped_share"] <= 1
    from alpha_gym.evaluation.answers_file import read_formulas
    assert read_formulas(results / "seed-42" / "dapo.jsonl") == [
        json.loads(x)["formula"] for x in (results / "seed-42" / "dapo.jsonl").read_text().splitlines()]
    assert (results / "comparison.md").read_text() == table
    # each seed's shipped score per rung, drawn where the answers are kept and where the runs are
    assert (results / "seeds.png").stat().st_size > 10_000 and (out / "seeds.png").is_file()

    # a rerun resumes from what is on disk: no retraining, no new probe answers, the same rows
    probe_file = out / "seed-42" / rungs[0] / "probe-step-2.json"
    before = probe_file.stat().st_mtime_ns
    assert main(["compare", "--scale", "smoke", "--out", str(out), "--rungs", rungs[0]]) == 0
    assert probe_file.stat().st_mtime_ns == before
    again = json.loads((out / "comparison.json").read_text())["runs"][0]
    assert again["checkpoints"] == data["runs"][0]["checkpoints"]
    assert len(again["log"]) == 2
    # training time is the steps' own time, also when nothing was trained in this process
    assert again["train_seconds"] == data["runs"][0]["train_seconds"] > 0
    assert again["train_seconds"] == round(sum(x["seconds/total"] for x in again["log"]), 1)
    # the report alone, from the kept answers
    assert main(["compare", "--scale", "smoke", "--out", str(out), "--report-only"]) == 0
    assert (out / "comparison.md").read_text() == table
    # a model-free baseline table, and the verdict per rung
    assert "| volume level | `rank(volume)` |" in table and "| Alpha101 equal-weight book (82) |" in table
    report = json.loads((results / "report.json").read_text())
    assert len(report["baselines"]) == 10 and all(r["above_baselines"] in (True, False, None)
                                                   for r in report["rows"].values())
    # the comparison's page links every run's page; those show the answers with their channels
    page = (out / "report.html").read_text()
    assert "above all baselines" in page and page.count("data:image/png") >= 3 and "src=\"http" not in page
    assert "<h3>Seeds</h3>" in page
    for name in rungs:
        assert f'href="seed-42/{name}/report.html"' in page
        run_page = (out / "seed-42" / name / "report.html").read_text()
        assert "Best and worst answers" in run_page and "Reward channels" in run_page

    # a rung stopped before its first checkpoint (log lines on disk, no checkpoint) trains again from step 0
    import shutil
    stopped = out / "seed-42" / rungs[0]
    for p in [*stopped.glob("checkpoint-*"), *stopped.glob("probe-step-*.json")]:
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    assert main(["compare", "--scale", "smoke", "--out", str(out), "--rungs", rungs[0]]) == 0
    again = json.loads((out / "comparison.json").read_text())["runs"][0]
    assert [x["step"] for x in again["log"]] == [1, 2]
    assert again["checkpoints"] == data["runs"][0]["checkpoints"]   # seeded per step: the same run again
    # ... but not into a folder made with other settings
    capsys.readouterr()
    assert main(["compare", "--scale", "smoke", "--out", str(out), "--steps", "3"]) == 2
    assert "scale_settings" in capsys.readouterr().err


def test_every_rung_builds_its_training_settings_and_verifier_at_the_smoke_scale():
    """What every RL rung starts from, the ones the smoke run leaves out too: its recipe at the smoke sizes, asked
    for as `runner.run_rung` asks (refills within the rung's verifier-call budget), and the verifier it trains
    against, with its row's changes; each rung is run by the smoke test or named in SMOKE_LEAVES_OUT."""
    from alpha_gym.scoring.config import VerifierConfig
    from alpha_gym.tasks.sets import brief_set
    from trainers.compare.arms import ARMS, RunContext
    from trainers.compare.ladder import SCALES, panels, scale_budget
    scale = SCALES["smoke"]
    names = [name for name, _, _ in LADDER]
    assert set(SMOKE_LEAVES_OUT) < set(names)
    train, holdout = panels("smoke")
    context = RunContext("smoke", scale, None, None, None, VerifierConfig(), train, holdout,
                         tuple(list(brief_set("probe"))[:scale.probe]), None, None)
    for arm in (a for a in ARMS if a.name in names):
        config = scale.train_config(arm.recipe, save_steps=scale.eval_every, seed=42)
        assert {k: getattr(config, k) for k in scale.train} == scale.train, arm.name
        if config.refill_rounds:
            assert config.with_(max_verifier_calls=scale_budget(scale)).max_verifier_calls == 2 * 1 * 2
        changes = arm.verifier_changes or {}
        verifier = context.verifier(**changes)
        assert (verifier is context.verifier()) == (not changes), arm.name
        for key, value in changes.items():
            got = getattr(verifier.config, key)
            assert ({c: got[c] for c in value} if key == "priorities" else got) == value, (arm.name, key)


def test_bootstrap_interval_and_paired_difference():
    import numpy as np
    rng = np.random.default_rng(0)
    a = rng.normal(0.5, 1.0, (3, 50))
    b = a - 0.4 + rng.normal(0, 0.05, (3, 50))     # the same briefs, 0.4 lower: a clear paired difference
    noise = a + rng.normal(0, 0.05, (3, 50))      # the same up to noise
    lo, hi = st.table_interval(a, n_boot=500)
    assert lo < st.valid_mean(a) < hi and hi - lo < 1.0
    d = st.paired_difference(a, b, n_boot=500)
    assert d["outside_noise"] and d["lo"] > 0.3 and abs(d["diff"] - 0.4) < 0.05
    assert not st.paired_difference(a, noise, n_boot=500)["outside_noise"]
    a_nan = a.copy()
    a_nan[:, :10] = np.nan                          # invalid answers are left out, not scored 0
    assert st.valid_mean(a_nan) == np.nanmean(a_nan)
    assert np.isnan(st.valid_mean(np.full((2, 3), np.nan)))
    assert st.paired_difference(a, b, n_boot=200, seed=1) == st.paired_difference(a, b, n_boot=200, seed=1)


def test_mean_pairwise_corr():
    import numpy as np
    x = np.random.default_rng(1).normal(size=(1, 300))
    assert st.mean_pairwise_corr(np.vstack([x, 2 * x, -x])) > 0.999
    independent = np.random.default_rng(2).normal(size=(4, 5000))
    assert st.mean_pairwise_corr(independent) < 0.05
    assert st.mean_pairwise_corr(np.vstack([x, np.zeros((1, 300))])) == 0.0
    assert np.isnan(st.mean_pairwise_corr(x))


@pytest.mark.slow
def test_floor_trap_benchmark_smoke(tmp_path):
    """Environment B with and without the advantage floor: one tiny step each, the table and plot written."""
    pytest.importorskip("trl")
    out = tmp_path / "trap"
    assert floor_trap.main(["--out", str(out), "--steps", "1", "--prompts", "1", "--generations", "2",
                        "--tokens", "8"]) == 0
    result = json.loads((out / "floor_trap.json").read_text())
    assert result["costs_bps"] == pytest.approx(4.0 * 19)
    floor, free = (result["arms"][name] for name, _ in floor_trap.ARMS)
    assert len(floor) == len(free) == 1
    # the floor only ever removes positive advantages: never more answers with a signal than without it
    assert floor[0]["nonzero_adv_share"] <= free[0]["nonzero_adv_share"]
    assert "| mean |" in (out / "floor_trap.md").read_text()
    assert (out / "floor_trap.png").stat().st_size > 10_000


def test_seed_plot_draws_runs_without_valid_answers(tmp_path):
    """seeds.png from a report whose runs include one with no valid answer and no train CPCV (None/NaN)."""
    import numpy as np
    from trainers.compare.plots import write_seed_plot
    nan = float("nan")
    for seed, cpcv in ((1, 0.4), (2, None)):
        (tmp_path / f"seed-{seed}").mkdir()
        (tmp_path / f"seed-{seed}" / "dapo.json").write_text(json.dumps(
            {"selected_step": 0, "checkpoints": [{"step": 0, "train_cpcv": cpcv}]}))
    row = {"label": "dapo", "seeds": [1, 2], "table": np.array([[0.5, nan], [nan, nan]]),
           "score": 0.5, "lo": nan, "hi": nan}
    report = {"seeds": [1, 2], "rows": {"step-0": {"label": "step 0", "score": nan}, "dapo": row},
              "baselines": [{"name": "volume level", "kind": "motif", "score": 0.2}]}
    write_seed_plot(report, tmp_path, [tmp_path])
    assert (tmp_path / "seeds.png").stat().st_size > 5_000


def test_a_kept_comparison_resumes_across_a_verifier_setting_added_since():
    """A stamp written before verifier.self_corr_gate existed: at its default it is the same comparison, set it is not."""
    stamp = json.loads((ROOT / "benchmarks" / "results" / "compare-cpu" / "settings.json").read_text())
    # the stamp as code older than the gate wrote it: the same settings without the two gate keys
    kept = {**stamp, "verifier": {k: v for k, v in stamp["verifier"].items()
                                  if k not in ("self_corr_gate", "self_corr_margin")}}
    now = {**kept, "verifier": {**kept["verifier"], "self_corr_gate": "none", "self_corr_margin": 0.1}}
    assert stamps.with_added_defaults(kept, now) == now
    gated = {**kept, "verifier": {**kept["verifier"], "self_corr_gate": 0.7, "self_corr_margin": 0.1}}
    assert stamps.with_added_defaults(kept, gated) != gated
    assert stamps.with_added_defaults(kept, {**now, "model": "other"}) != {**now, "model": "other"}


def test_one_bootstrap_and_one_standardisation_for_the_package():
    """The comparison's intervals are the package's bootstrap, its P&L standardisation the archive's."""
    import numpy as np
    from alpha_gym.evaluation import baselines, bootstrap
    from alpha_gym.scoring.archive import standardise
    assert st.table_interval is bootstrap.table_interval and st.paired_difference is bootstrap.paired_difference
    assert st.valid_mean is bootstrap.valid_mean and baselines.mean_interval is bootstrap.mean_interval
    x = np.random.default_rng(3).normal(size=(3, 200))
    z = np.array([standardise(r) for r in x])
    c = np.abs(z @ z.T) / 200
    assert st.mean_pairwise_corr(x) == float(c[np.triu_indices(3, k=1)].mean())
    # a one-row table resamples briefs only: its interval brackets the mean like a flat list's does
    lo, hi = st.table_interval(x[:1], n_boot=400)
    flat = bootstrap.mean_interval(list(x[0]), n_boot=400)
    assert lo < x[0].mean() < hi and flat[0] < x[0].mean() < flat[1]


# ------------------------------------------------------------------------------ an eval folder as a row
def _eval(url, out, *more):
    """`alpha-gym eval` on the embedded market's early years (the comparison re-scores on its own windows)."""
    return main(["eval", "--base-url", url, "--model", "tiny-model", "--out", str(out), "--no-progress",
                 "--concurrency", "1", "--end", "2016-12-30", *more])


def test_an_eval_folder_is_a_row_of_the_comparison(tmp_path, capsys):
    """`alpha-gym compare --report-only --eval DIR`: a model behind an endpoint beside step 0 and the baselines.

    The endpoint answers each probe brief as the kept step-0 answers do, so its row must score what step 0
    scores (its two samples in place of seeds); a folder missing a brief, or not an eval folder, is refused.
    """
    from alpha_gym.tasks.sets import brief_set
    from alpha_gym.evaluation.kept import write_rows as write_jsonl
    probe = list(brief_set("probe"))[:2]               # the smoke scale's probe briefs
    answers = {probe[0].prompt(): "<alpha>rank(-ts_delta(close, 5))</alpha>",
               probe[1].prompt(): "momentum, I think: rank(returns)"}   # no tag: invalid
    server = ChatEndpoint(lambda body: answers.get(body["messages"][-1]["content"], "no idea"))
    try:
        assert _eval(server.url, tmp_path / "eval", "--limit", "2", "--samples", "2") == 0
        assert len(server.requests) == 4
        assert _eval(server.url, tmp_path / "eval-short", "--limit", "1") == 0
    finally:
        server.close()
    capsys.readouterr()

    # the eval folder alone: no training results, the probe briefs of the scale
    out = tmp_path / "cmp"
    assert main(["compare", "--scale", "smoke", "--report-only", "--out", str(out), "--eval",
                 str(tmp_path / "eval")]) == 0
    report = json.loads((out / "report.json").read_text())
    assert list(report["rows"]) == ["eval:eval"]
    row = report["rows"]["eval:eval"]
    assert row["kind"] == "eval" and row["model"] == "tiny-model" and row["samples"] == 2 and row["valid"] == 1.0
    table = (out / "comparison.md").read_text()
    assert not (out / "results").exists()  # --report-only writes into --out, never into the kept results
    assert "| eval: tiny-model | 2 | 1.0 |" in table and "`eval` rows:" in table
    assert len(report["baselines"]) == 10 and row["above_baselines"] in (True, False, None)

    # beside the kept step-0 answers (the same answers): the same score, and step 0's row unchanged by it
    results = tmp_path / "kept"
    write_jsonl(results / "step-0.jsonl", [
        {"brief_id": b.id, "step": 0, "answer": answers[b.prompt()], "formula": f, "train_cpcv": None,
         "train_valid": f is not None}
        for b, f in zip(probe, ("rank(-ts_delta(close, 5))", None))])
    alone = tmp_path / "alone"
    assert main(["compare", "--scale", "smoke", "--report-only", "--out", str(alone), "--results",
                 str(results)]) == 0
    step0_alone = json.loads((alone / "report.json").read_text())["rows"]["step-0"]
    assert main(["compare", "--scale", "smoke", "--report-only", "--out", str(out), "--results", str(results),
                 "--eval", str(tmp_path / "eval")]) == 0
    rows = json.loads((out / "report.json").read_text())["rows"]
    assert not (results / "report.json").exists() and not (results / "comparison.md").exists()
    assert list(rows) == ["step-0", "eval:eval"] and rows["step-0"] == step0_alone
    assert rows["step-0"]["score"] is not None
    assert rows["eval:eval"]["score"] == pytest.approx(rows["step-0"]["score"], rel=1e-12)  # 2 samples vs 1 seed
    assert rows["eval:eval"]["families"] == rows["step-0"]["families"] == 1.0
    page = (out / "report.html").read_text()
    assert "eval: tiny-model" in page

    # a sample that lacks a probe brief is refused, never counted as an invalid answer; so is a non-eval folder
    capsys.readouterr()
    assert main(["compare", "--scale", "smoke", "--report-only", "--out", str(out), "--results", str(results),
                 "--eval", str(tmp_path / "eval-short")]) == 2
    assert "no answer to 1 of the 2 probe briefs" in capsys.readouterr().err
    assert main(["compare", "--scale", "smoke", "--report-only", "--out", str(out), "--results", str(results),
                 "--eval", str(results)]) == 2
    assert "not an `alpha-gym eval` folder" in capsys.readouterr().err


# ------------------------------------------------------------------------------ controls and run books
def _kept_step0(results, formulas):
    """A kept step-0.jsonl for the smoke scale's probe briefs (the table's step-0 row)."""
    from alpha_gym.tasks.sets import brief_set
    from trainers.compare.ladder import SCALES
    from alpha_gym.evaluation.kept import write_rows as write_jsonl
    probe = list(brief_set("probe"))[: SCALES["smoke"].probe]
    write_jsonl(results / "step-0.jsonl", [
        {"brief_id": b.id, "step": 0, "answer": f"<alpha>{f}</alpha>", "formula": f, "train_cpcv": 0.0,
         "train_valid": True} for b, f in zip(probe, formulas)])
    return probe


def test_the_search_control_is_a_row_with_its_own_book_and_the_rungs_are_paired_against_it(tmp_path, capsys):
    """A control added to a kept comparison: seeded from the kept step-0 answers (no model loaded), it keeps
    a rung's files and its run book; a rung with the very same answers is paired against it at exactly 0."""
    results, out = tmp_path / "results", tmp_path / "out"
    _kept_step0(results, ["rank(-ts_delta(close, 5))", "rank(ts_std(returns, 20))"])
    assert main(["compare", "--scale", "smoke", "--steps", "20", "--rungs", "search", "--out", str(out),
                 "--results", str(results)]) == 0
    kept = results / "seed-42"
    rows = [json.loads(x) for x in (kept / "search.jsonl").read_text().splitlines()]
    numbers = json.loads((kept / "search.json").read_text())
    assert len(rows) == 2 and numbers["verifier_calls"] <= numbers["budget"] == 20 * 1 * 2
    book = json.loads((kept / "search.book.json").read_text())
    admitted = [json.loads(x) for x in (kept / "search.archive.jsonl").read_text().splitlines()]
    assert book["n_admitted"] == len(admitted) and book["n_members"] <= max(1, len(admitted))
    assert set(book["members"]) <= {a["formula"] for a in admitted}
    assert not (out / "step-0").exists()  # the kept step 0 seeded the search: the probe was not answered again
    # a rung whose answers are the control's: every paired difference is exactly 0
    (kept / "cispo.jsonl").write_text((kept / "search.jsonl").read_text())
    write_object(kept / "cispo.json", {**numbers, "rung": "cispo", "clipped_share": 0.0})
    assert main(["compare", "--scale", "smoke", "--steps", "20", "--out", str(out), "--results", str(results),
                 "--report-only", "--update-results"]) == 0
    report = json.loads((results / "report.json").read_text())
    assert report["rows"]["search"]["kind"] == "control" and "vs_previous" not in report["rows"]["search"]
    vs = report["rows"]["cispo"]["vs_controls"]["search"]
    assert vs["diff"] == 0.0 and vs["lo"] <= 0.0 <= vs["hi"] and not vs["outside_noise"]
    table = (results / "comparison.md").read_text()
    assert "| cispo | minus search |" not in table and "| rung | minus search |" in table
    # the legend names the controls the table shows, and only those
    legend = next(line for line in table.splitlines() if line.startswith("Controls:"))
    assert "`search`: model-free evolutionary search" in legend and "`best_of_n`" not in legend
    assert "Each run's own book" in table and "| search | 1 |" in table
    # a run of one rung (long runs go one a process) reports every rung kept, not only its own ...
    assert main(["compare", "--scale", "smoke", "--steps", "20", "--rungs", "search", "--out", str(out),
                 "--results", str(results)]) == 0
    assert set(json.loads((results / "report.json").read_text())["rows"]) >= {"cispo", "search"}
    assert (results / "comparison.md").read_text() == table
    # ... and --report-only --rungs narrows the table to those named
    assert main(["compare", "--scale", "smoke", "--steps", "20", "--rungs", "search", "--out", str(out),
                 "--results", str(results), "--report-only"]) == 0
    assert "cispo" not in json.loads((out / "report.json").read_text())["rows"]
    assert "cispo" in json.loads((results / "report.json").read_text())["rows"]  # kept results untouched


def test_the_gated_rung_pairs_with_the_rung_it_gates_or_else_with_the_row_before_and_says_which(tmp_path, capsys):
    """The gated rung's 'vs previous' is its difference against cispo_repo_r (the rung it changes); in a
    comparison that did not run that rung (the long runs keep cispo), against the row before, named as such."""
    from alpha_gym.evaluation.kept import write_rows as write_jsonl
    results, out = tmp_path / "results", tmp_path / "out"
    step0 = ["rank(-ts_delta(close, 5))", "rank(ts_std(returns, 20))"]
    gated = ["rank(ts_mean(volume, 10))", "rank(-ts_std(close, 10))"]
    probe = _kept_step0(results, step0)
    kept = results / "seed-42"
    kept.mkdir()

    def keep(name, formulas):
        write_jsonl(kept / f"{name}.jsonl", [
            {"brief_id": b.id, "step": 20, "answer": f"<alpha>{f}</alpha>", "formula": f, "train_cpcv": 0.0,
             "train_valid": True} for b, f in zip(probe, formulas)])
        write_object(kept / f"{name}.json", {"rung": name, "clipped_share": 0.0, "selected_step": 20,
                                             "checkpoints": [{"step": 20, "train_cpcv": 0.0}]})

    def report():
        assert main(["compare", "--scale", "smoke", "--steps", "20", "--out", str(out), "--results", str(results),
                     "--report-only"]) == 0
        return (json.loads((out / "report.json").read_text())["rows"]["cispo_repo_r_gate"]["vs_previous"],
                (out / "comparison.md").read_text())

    keep("cispo", step0)
    keep("cispo_repo_r_gate", gated)
    vs, table = report()
    assert vs["rung"] == "cispo" and vs["seeds"] == 1 and vs["diff"] != 0.0
    assert "cispo_repo_r_gate with cispo (cispo_repo_r, the rung it changes, is not in this comparison" in table
    keep("cispo_repo_r", gated)  # the rung it gates, with the very same answers: exactly 0
    vs, table = report()
    assert vs["rung"] == "cispo_repo_r" and vs["diff"] == 0.0
    assert "Paired with the rung it changes rather than the row before: cispo_repo_r_gate with cispo_repo_r." in table


def test_a_start_model_rebuilt_with_other_weights_is_another_comparison(tmp_path, capsys):
    """The stamp names the start model by content: the same path with other weights is refused, in the run
    folder and in the kept results; a stamp or kept folder from before identities goes on and says so."""
    from trainers.models import model_identity
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, weights in ((a, b"\x00" * 64), (b, b"\x00" * 63 + b"\x01")):
        folder.mkdir()
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(weights)
    ida, idb = model_identity(a), model_identity(b)
    assert ida.startswith("sha256:") and ida != idb
    (tmp_path / "copy").mkdir()
    for f in a.iterdir():
        (tmp_path / "copy" / f.name).write_bytes(f.read_bytes())
    assert model_identity(tmp_path / "copy") == ida  # content, not place

    class Args:
        scale, model, data, universe = "smoke", "runs/sft/model", None, None
    from trainers.compare.ladder import SCALES
    scale, out = SCALES["smoke"], tmp_path / "out"
    out.mkdir()
    stamps.claim_out_dir(out, stamps.out_settings(Args, scale, {}, ida))
    stamps.claim_out_dir(out, stamps.out_settings(Args, scale, {}, ida))      # the same model: a resume
    stamps.claim_out_dir(out, stamps.out_settings(Args, scale, {}))           # --report-only loads none
    with pytest.raises(stamps.CompareError, match="model_identity"):
        stamps.claim_out_dir(out, stamps.out_settings(Args, scale, {}, idb))
    old = tmp_path / "old"
    old.mkdir()
    (old / "settings.json").write_text(json_dumps(stamps.out_settings(Args, scale, {})))
    capsys.readouterr()
    stamps.claim_out_dir(old, stamps.out_settings(Args, scale, {}, idb))
    assert "predates model identities" in capsys.readouterr().err

    results = tmp_path / "results"
    results.mkdir()
    stamps.check_kept_model(results, ida)                                     # nothing kept yet
    write_object(results / "settings.json", {"model": "runs/sft/model"})
    stamps.check_kept_model(results, ida)
    assert "names no model identity" in capsys.readouterr().err
    write_object(results / "settings.json", {"model": "runs/sft/model", "model_identity": ida})
    stamps.check_kept_model(results, ida)
    stamps.check_kept_model(results, None)
    with pytest.raises(stamps.CompareError, match="start model"):
        stamps.check_kept_model(results, idb)
    # through the command: a control added to kept results of another start model is refused before it runs
    _kept_step0(results, ["rank(-ts_delta(close, 5))", "rank(ts_std(returns, 20))"])
    write_object(results / "settings.json", {"model_identity": "sha256:0123456789abcdef"})
    capsys.readouterr()
    assert main(["compare", "--scale", "smoke", "--steps", "2", "--rungs", "search", "--out", str(tmp_path / "o2"),
                 "--results", str(results)]) == 2
    assert "sha256:0123456789abcdef" in capsys.readouterr().err
    assert not (results / "seed-42").exists()


@pytest.mark.slow
def test_a_start_model_rebuilt_elsewhere_joins_kept_results_only_if_it_answers_step_0_as_the_kept_one(tmp_path,
                                                                                                     capsys):
    """Another identity (SFT rebuilt on another CPU: other last bits) is admitted to kept results as an
    equivalent only when its greedy step-0 answers are the kept ones character for character; the kept
    stamp keeps the model the results were made from and lists the equivalent; one answer off is refused."""
    pytest.importorskip("transformers")
    from trainers.models import materialise_default_model, model_identity
    original = materialise_default_model()
    rebuilt = tmp_path / "rebuilt"  # the same weights behind another identity: one more file in the folder
    rebuilt.mkdir()
    for f in original.iterdir():
        if f.is_file():
            (rebuilt / f.name).symlink_to(f)
    (rebuilt / "NOTE.txt").write_text("rebuilt on another machine")
    assert model_identity(rebuilt) != model_identity(original)
    results = tmp_path / "results"

    def compare(model, seed, out):
        return main(["compare", "--scale", "smoke", "--steps", "2", "--rungs", "search", "--seeds", str(seed),
                     "--model", str(model), "--out", str(tmp_path / out), "--results", str(results)])

    assert compare(original, 42, "o1") == 0
    step0 = (results / "step-0.jsonl").read_text()
    capsys.readouterr()
    assert compare(rebuilt, 43, "o2") == 0
    assert "kept as an equivalent" in capsys.readouterr().err
    stamp = json.loads((results / "settings.json").read_text())
    assert stamp["model_identity"] == model_identity(original)
    assert stamp["equivalent_model_identities"] == [model_identity(rebuilt)]
    assert (results / "step-0.jsonl").read_text() == step0 and (results / "seed-43" / "search.jsonl").exists()
    # a third identity whose answers are not the kept ones (here the kept answer was edited) is refused
    other = tmp_path / "other"
    other.mkdir()
    for f in rebuilt.iterdir():
        (other / f.name).symlink_to(f.resolve())
    (other / "NOTE.txt").unlink()
    (other / "NOTE2.txt").write_text("another rebuild")
    rows = [json.loads(x) for x in step0.splitlines()]
    rows[0]["answer"] += " "
    write_rows(results / "step-0.jsonl", rows)  # sealed again: the answer differs, not the hash
    assert compare(other, 44, "o3") == 2
    assert f"1 of {len(rows)} of its greedy step-0 answers differ" in capsys.readouterr().err
    assert not (results / "seed-44").exists()


def test_unknown_rungs_are_refused_before_anything_runs(tmp_path, capsys):
    assert main(["compare", "--scale", "smoke", "--rungs", "cispo,serach", "--out", str(tmp_path / "o")]) == 2
    assert "unknown rungs serach" in capsys.readouterr().err
    assert not (tmp_path / "o" / "seed-42").exists()


def test_the_gated_rung_trains_against_the_gate():
    from alpha_gym.scoring.config import VerifierConfig
    from trainers.compare.arms import PAIRED_WITH, VERIFIER_CHANGES
    names = [r[0] for r in LADDER]
    assert set(VERIFIER_CHANGES) <= set(names)
    assert VerifierConfig().with_(**VERIFIER_CHANGES["cispo_repo_r_gate"]).self_corr_gate == 0.7
    from trainers.compare.arms import arm_names
    arms = arm_names()  # a pair is two rows of the table (evolve_rl, outside the ladder, pairs with a control)
    assert all(a in arms and b in arms and a != b for a, b in PAIRED_WITH.items())
    assert all(a in names and b in names for a, b in PAIRED_WITH.items() if a in names)


def test_the_brief_book_rung_trains_on_r13_r14_merged_into_the_comparisons_priorities():
    """The issue-39 rung's verifier is the comparison's with brief 1 and book 3 added (the "brief_book" reward
    recipe), a changed priority of the comparison kept; its recipe refills, so run_rung caps its calls."""
    from alpha_gym.market import synthetic_panel
    from alpha_gym.scoring.config import VerifierConfig
    from trainers.compare.arms import RunContext
    from trainers.compare.arms import VERIFIER_CHANGES
    from trainers.compare.ladder import SCALES
    from trainers.config import RECIPES
    panel = synthetic_panel(n_stocks=20, n_days=300, seed=0)
    context = RunContext("smoke", SCALES["smoke"], None, None, None,
                         VerifierConfig(priorities={"ic": 0.5}, stress_checkpoint=None), panel, panel, (),
                         Path("."), Path("."))
    changed = context.verifier(**VERIFIER_CHANGES["cispo_brief_book_forms"]).config.priorities
    assert changed == {**context.verifier().config.priorities, "brief": 1.0, "book": 3.0} and changed["ic"] == 0.5
    assert changed == VerifierConfig.recipe("brief_book", priorities={"ic": 0.5}).priorities
    assert context.verifier(**VERIFIER_CHANGES["cispo_brief_book_forms"]) is \
        context.verifier(**VERIFIER_CHANGES["cispo_brief_book_forms"])  # built once
    recipe = dict((r[0], r[1]) for r in LADDER)["cispo_brief_book_forms"]
    assert RECIPES[recipe].refill_rounds and RECIPES[recipe].min_distinct_forms == 4
    assert SCALES["cpu"].train_config(recipe).min_distinct_forms == 4
    assert SCALES["smoke"].train_config(recipe).min_distinct_forms == 2  # its groups hold 2 answers


def test_training_signal_of_kept_runs_counts_calls_kept_before_the_count():
    """The kept long runs predate the verifier-call count: with no refill their calls are steps x prompts x
    answers (100 x 2 x 8); a run that refilled and kept no count has none to show."""
    from alpha_gym.evaluation.kept import read_object
    from trainers.compare.report import training_signal
    kept = ROOT / "benchmarks" / "results" / "compare-long"
    sums = [read_object(kept / f"seed-{s}" / "cispo.json") for s in (42, 43, 44)]
    t = training_signal(sums)
    assert t["steps"] == 100 and t["verifier_calls"] == 1600 and t["distinct_forms"] is None
    assert 0.5 < t["nonzero_adv_share"] < 1
    refilled = {**sums[0], "config": {**sums[0]["config"], "refill_rounds": 2}}
    assert training_signal([refilled])["verifier_calls"] is None
    assert training_signal([{**refilled, "verifier_calls": 1598}])["verifier_calls"] == 1598


def test_checkpoint_signal_reads_a_run_folders_probe_answers_and_log(tmp_path):
    """benchmarks/checkpoint_signal.py on a run folder holding the kept step-0 answers as its checkpoint 10 and two
    log lines: compliance as the table computes it, the valid and distinct answers, the log's means since the
    checkpoint before; a probe file for other briefs is refused."""
    from alpha_gym.evaluation.kept import read_rows
    from benchmarks import checkpoint_signal as mod
    from trainers.compare.report import brief_compliance_of
    rows = read_rows(ROOT / "benchmarks" / "results" / "compare-long" / "step-0.jsonl")
    ids = [r["brief_id"] for r in rows]
    cpcv = [r["train_cpcv"] if r["train_valid"] else None for r in rows]
    (tmp_path / "probe-step-10.json").write_text(json.dumps(
        {"step": 10, "answers": [r["answer"] for r in rows], "formulas": [r["formula"] for r in rows],
         "train_cpcv": cpcv}))
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(
        {"step": s, "nonzero_adv_share": v, "distinct_forms_mean": f, "refills": 1, "form_refills": 2,
         "verifier_calls": 16 * s + 3}) + "\n" for s, v, f in ((9, 0.5, 6.0), (10, 0.25, 4.0))))
    [got] = mod.checkpoint_rows(tmp_path, ids)
    want = brief_compliance_of(rows, [r["train_valid"] for r in rows])
    assert (got["met_all"], got["share"]) == (want["brief_met_all"], want["brief_share"])
    assert got["valid"] == sum(c is not None for c in cpcv) == sum(bool(r["train_valid"]) for r in rows)
    assert got["distinct"] == len({r["formula"] for r in rows if r["train_valid"]})
    assert (got["nonzero"], got["forms"], got["refills"], got["calls"]) == (0.375, 5.0, 6, 163)
    with pytest.raises(SystemExit, match="50 answers for 49 probe briefs"):
        mod.checkpoint_rows(tmp_path, ids[:-1])
