"""The improve task's warm start (issue 40.4): parents -> better child SFT pairs from an evolve run's records.

A tiny real evolve run (tree mutator, synthetic market, 56 calls) is made once; its pairs are checked against its
state.json, the improve task's own render, and the language's parser; folders that are not runs give the typed
error; the CLI writes the file; one real SFT step on SmolLM2 trains on a handful of pairs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from alpha_gym import Verifier
from alpha_gym.commands.main import main as cli_main
from alpha_gym.language import canonical, extract, parse
from alpha_gym.search.database import DatabaseConfig, ProgramDatabase
from alpha_gym.search.evolution import TreeMutator, evolve
from alpha_gym.search.improve_pairs import (ImprovePairsError, build_improve_dataset, improve_pairs, load_run,
                                            pairs_from_programs)
from alpha_gym.tasks.improve import NO_BRIEF_REQUEST
from alpha_gym.tasks.task import render_prompt

KEPT = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "evolve-tree-1600"
SEEDS = ["rank(close - delay(close, 5))", "-1 * ts_corr(rank(volume), rank(close), 10)", "rank(ts_mean(returns, 20))",
         "rank(vwap - close)", "-1 * ts_delta(close, 3)", "rank(high - low) * -1"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, small_synthetic):
    out = tmp_path_factory.mktemp("evolve") / "run"
    verifier = Verifier(small_synthetic)
    evolve(verifier, TreeMutator(limits=verifier.config.limits), DatabaseConfig(n_islands=2), budget=56, seed=1,
           out_dir=out, seed_formulas=SEEDS, group_size=8, progress=None)
    return out


def _programs(run_dir):
    state = json.loads((run_dir / "state.json").read_text())
    return ProgramDatabase.from_dict(state["database"]).programs


def test_pairs_are_better_children_with_the_tasks_prompt_and_a_parseable_answer(run_dir):
    programs = _programs(run_dir)
    rows = improve_pairs(run_dir, max_pairs=None, per_prompt=None)
    better = [p for p in programs if p.parents and p.reward > max(programs[q].reward for q in p.parents)]
    assert rows and len(rows) == len(better)      # no cap: every better child, once
    run_limits = load_run(run_dir)[1]
    for row in rows:
        child = programs[row["child"]]
        parents = [programs[q] for q in row["parents"]]
        assert row["parents"] == list(child.parents) and row["formula"] == child.text
        assert child.reward > max(p.reward for p in parents) == row["parent_reward"]
        assert row["improvement"] == pytest.approx(child.reward - row["parent_reward"]) and row["improvement"] > 0
        # the prompt is the improve task's own render of these parents with the numbers the database holds
        context = {"parents": [{"formula": p.text, "reward": p.reward, "cpcv": p.cpcv, "turnover": p.turnover,
                                "ic": p.ic, "max_corr": p.max_corr} for p in parents]}
        prompt = row["prompt"][0]["content"]
        assert row["prompt"][0]["role"] == "user" and prompt == render_prompt(None, run_limits, context,
                                                                             task="improve")
        assert NO_BRIEF_REQUEST in prompt and f"{parents[0].reward:+.3f}" in prompt
        # the completion is the child in the <alpha> contract, and the language reads it back to the child
        answer = row["completion"][0]["content"]
        assert row["completion"][0]["role"] == "assistant" and answer.startswith("<alpha>")
        assert canonical(parse(extract(answer).formula, run_limits)) == child.form
        assert child.form not in {p.form for p in parents}       # a pair never teaches a copy
    gains = [r["improvement"] for r in rows]
    assert gains == sorted(gains, reverse=True)


def test_pairs_are_deterministic_deduplicated_and_capped(run_dir):
    rows = improve_pairs(run_dir, max_pairs=None, per_prompt=None)
    assert improve_pairs(run_dir, max_pairs=None, per_prompt=None) == rows
    assert len({(r["prompt"][0]["content"], r["completion"][0]["content"]) for r in rows}) == len(rows)
    assert improve_pairs(run_dir, max_pairs=3, per_prompt=None) == rows[:3]
    one = improve_pairs(run_dir, max_pairs=None, per_prompt=1)
    assert len({r["prompt"][0]["content"] for r in one}) == len(one) == len({tuple(r["parents"]) for r in rows})
    programs, limits, brief = load_run(run_dir)
    doubled = pairs_from_programs(programs, limits, brief, max_pairs=None, per_prompt=None)
    assert doubled == rows
    assert improve_pairs(run_dir, max_pairs=None, per_prompt=None, min_improvement=1e9) == []
    with pytest.raises(ImprovePairsError, match="max_pairs"):
        improve_pairs(run_dir, max_pairs=0)


def test_the_runs_brief_is_in_every_prompt(run_dir, tmp_path):
    from alpha_gym.tasks.sets import brief_set
    brief = brief_set("probe")[0]
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    (copy / "evolve-settings.json").write_text(json.dumps({"format": "alpha-gym/evolve-run/v1", "brief": brief.id}))
    rows = improve_pairs(copy, max_pairs=2)
    assert rows and all(brief.request in r["prompt"][0]["content"] for r in rows)


def test_folders_that_are_not_runs_give_the_typed_error(run_dir, tmp_path):
    with pytest.raises(ImprovePairsError, match="kept comparison files"):
        improve_pairs(KEPT)                       # the kept run: answers and numbers, no parents
    with pytest.raises(ImprovePairsError, match="not a folder"):
        improve_pairs(tmp_path / "missing")
    with pytest.raises(ImprovePairsError, match="state.json is missing"):
        improve_pairs(tmp_path)
    state = json.loads((run_dir / "state.json").read_text())
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "state.json").write_text("{not json")
    with pytest.raises(ImprovePairsError, match="not JSON"):
        improve_pairs(bad)
    (bad / "state.json").write_text(json.dumps({**state, "format": "alpha-gym/search/v1"}))
    with pytest.raises(ImprovePairsError, match="not an evolve state"):
        improve_pairs(bad)
    no_parents = json.loads(json.dumps(state))
    for p in no_parents["database"]["programs"]:
        del p["parents"]
    (bad / "state.json").write_text(json.dumps(no_parents))
    with pytest.raises(ImprovePairsError, match="no parent ids"):
        improve_pairs(bad)
    forward = json.loads(json.dumps(state))
    forward["database"]["programs"][0]["parents"] = [1]
    (bad / "state.json").write_text(json.dumps(forward))
    with pytest.raises(ImprovePairsError, match="not earlier programs"):
        improve_pairs(bad)


def test_cli_writes_the_pairs_and_refuses_mixed_flags(run_dir, tmp_path, capsys):
    out = tmp_path / "improve.jsonl"
    assert cli_main(["sft-data", "--task", "improve", "--from", str(run_dir), "--out", str(out),
                     "--max-pairs", "4"]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rows == json.loads(json.dumps(improve_pairs(run_dir, max_pairs=4)))
    assert json.loads(capsys.readouterr().out)["rows"] == len(rows)
    assert cli_main(["sft-data", "--task", "improve", "--out", str(out)]) == 2
    assert "--from" in capsys.readouterr().err
    assert cli_main(["sft-data", "--from", str(run_dir), "--out", str(out)]) == 2
    assert "--task improve" in capsys.readouterr().err
    assert cli_main(["sft-data", "--task", "improve", "--from", str(KEPT), "--out", str(out)]) == 2
    assert "kept comparison files" in capsys.readouterr().err


def test_pairs_from_several_runs_each_under_the_caps_without_repeats(run_dir, tmp_path, small_synthetic, capsys):
    other = tmp_path / "other"
    verifier = Verifier(small_synthetic)
    evolve(verifier, TreeMutator(limits=verifier.config.limits), DatabaseConfig(n_islands=2), budget=56, seed=2,
           out_dir=other, seed_formulas=SEEDS, group_size=8, progress=None)
    first, second = improve_pairs(run_dir, max_pairs=3), improve_pairs(other, max_pairs=3)
    keys = {(json.dumps(r["prompt"]), json.dumps(r["completion"])) for r in first}
    fresh = [r for r in second if (json.dumps(r["prompt"]), json.dumps(r["completion"])) not in keys]
    out = tmp_path / "both.jsonl"
    assert cli_main(["sft-data", "--task", "improve", "--from", str(run_dir), "--from", str(other), "--out", str(out),
                     "--max-pairs", "3"]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rows == json.loads(json.dumps(first + fresh))       # each run capped at 3, the first run's pairs first
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows"] == len(rows) and [r["rows"] for r in summary["runs"]] == [len(first), len(fresh)]
    # the same run twice adds nothing: its pairs are already in
    assert build_improve_dataset([run_dir, run_dir], tmp_path / "twice.jsonl", max_pairs=3)["rows"] == len(first)
    with pytest.raises(ImprovePairsError, match="no evolve run given"):
        build_improve_dataset([], tmp_path / "none.jsonl")


def test_the_write_task_output_is_unchanged(small_synthetic, tmp_path, write_market_csv):
    from alpha_gym.tasks.generator import save_briefs
    from alpha_gym.tasks.sets import brief_set
    from alpha_gym.tasks.sft_data import build_sft_dataset
    csv = write_market_csv(small_synthetic, tmp_path / "market.csv.gz")
    briefs = brief_set("train")[:24]     # a slice of the training briefs: the search per brief is what costs
    save_briefs(briefs, tmp_path / "briefs.jsonl")
    out = tmp_path / "write.jsonl"
    assert cli_main(["sft-data", "--out", str(out), "--pool", "60", "--seed", "2", "--data", str(csv),
                     "--briefs", str(tmp_path / "briefs.jsonl")]) == 0
    from alpha_gym.market.resolve import resolve_panel
    build_sft_dataset(Verifier(resolve_panel(data=str(csv))), briefs, tmp_path / "lib.jsonl",
                      pool_size=60, seed=2)
    assert out.read_bytes() == (tmp_path / "lib.jsonl").read_bytes() and out.stat().st_size > 0


@pytest.mark.slow
def test_sft_on_improve_pairs_refuses_cut_answers_and_trains(run_dir, tmp_path, capsys):
    pytest.importorskip("trl")
    from transformers import AutoTokenizer
    from trainers.models import materialise_default_model
    from trainers.sft import SFTLengthError, SFTSettings, row_length, run_sft
    data = tmp_path / "pairs.jsonl"
    summary = build_improve_dataset(run_dir, data, max_pairs=4)
    assert summary["rows"] == 4
    tokenizer = AutoTokenizer.from_pretrained(str(materialise_default_model()))
    longest = max(row_length(tokenizer, json.loads(x)) for x in data.read_text().splitlines())
    # one token short of the longest row: TRL would keep its start and cut the answer, so it is refused (the CLI too)
    with pytest.raises(SFTLengthError, match=f"--max-length {longest}"):
        run_sft(None, data, tmp_path / "short", SFTSettings(max_steps=1, batch_size=2, max_length=longest - 1,
                                                            threads=1))
    assert cli_main(["sft", "--data", str(data), "--out", str(tmp_path / "cli"), "--max-length", "300"]) == 2
    assert "--max-length" in capsys.readouterr().err
    done = run_sft(None, data, tmp_path / "sft", SFTSettings(max_steps=1, batch_size=2, max_length=longest, threads=1))
    assert done["steps"] == 1 and done["train_loss"] > 0 and done["longest_row"] == longest
    assert (Path(done["model_dir"]) / "config.json").exists()
    assert list(Path(done["model_dir"]).glob("*.safetensors"))
