"""The comparison's controls (issue 28.2): model-free search and best-of-N, at a rung's verifier budget."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from alpha_gym.evaluation.kept import read_object, read_rows
from alpha_gym.jsonable import json_dumps
from alpha_gym.language import DEFAULT_LIMITS, Limits, parse
from alpha_gym.scoring.config import VerifierConfig
from alpha_gym.scoring.verifier import Verifier
from alpha_gym.search import SearchConfig, SearchError, pick_answers, rung_budget, search
from alpha_gym.search.rung import run_search_rung, scale_budget
from alpha_gym.tasks.compliance import check_compliance

ROOT = Path(__file__).resolve().parents[1]
KEPT_KEYS = {"brief_id", "step", "answer", "formula", "train_cpcv", "train_valid"}
NUMBER_KEYS = {"rung", "recipe", "prompts", "seed", "n_prompts", "train_seconds", "selected_step", "checkpoints",
               "config", "clipped_share", "ratio_mean", "valid_share", "nonzero_adv_share", "kl_last", "steps"}
WEAK_SEEDS = ["rank(close)", "rank(volume)", "ts_mean(close, 5)", "rank(-returns)"]


@dataclass(frozen=True)
class _Scale:
    """What a control reads of the comparison's Scale: steps, the train fields, train_config."""

    steps: int
    train: dict = field(default_factory=dict)

    def train_config(self, recipe: str, **more):
        from trainers.config import RECIPES
        return RECIPES[recipe].with_(**{**self.train, **more})


class CountingVerifier(Verifier):
    """The real verifier, counting every answer and formula it is asked to score (forks count into the same list)."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.counted = [0]

    def _score_items(self, items, *args, **kwargs):
        # every score passes here: score_group, score_formula, and the scoring pool's prepared answers
        # (alpha_gym.pool.score_groups), whose parsing and books run in worker processes
        self.counted[0] += len(items)
        return super()._score_items(items, *args, **kwargs)


@pytest.fixture(scope="module")
def panels():
    from alpha_gym.market import synthetic_panel
    full = synthetic_panel(n_stocks=20, n_days=800, seed=0)
    cut = full.n_days - 120
    return full.window(end=full.dates[cut - 1]), full.window(start=full.dates[cut])


@pytest.fixture(scope="module")
def verifier(panels):
    return Verifier(panels[0])


@pytest.fixture(scope="module")
def probe():
    from alpha_gym.tasks.sets import brief_set
    return list(brief_set("probe"))[:6]


# ------------------------------------------------------------------------------------------- budget
def test_budget_is_the_rungs_calls():
    assert rung_budget(30, 2, 8) == 480
    assert scale_budget(_Scale(30, dict(prompts_per_step=2, num_generations=8))) == 480
    assert scale_budget(_Scale(100, dict(prompts_per_step=2, num_generations=8))) == 1600
    with pytest.raises(SearchError, match="num_generations"):
        scale_budget(_Scale(30, dict(prompts_per_step=2)))
    with pytest.raises(SearchError):
        rung_budget(0, 2, 8)


def test_the_comparisons_cpu_scale_gives_480_calls():
    """The budget follows the comparison's own cpu Scale."""
    from trainers.compare.ladder import SCALES
    cpu = SCALES["cpu"]
    assert scale_budget(cpu) == cpu.steps * cpu.train["prompts_per_step"] * cpu.train["num_generations"] == 480


@pytest.mark.parametrize("budget", [0, 1, 7, 33, 80])
def test_search_never_exceeds_its_budget(panels, budget):
    v = CountingVerifier(panels[0])
    v.archive  # seeded before counting starts (the seed books are not answers)
    result = search(v.fork(), WEAK_SEEDS, budget, SearchConfig(population=6), seed=3)
    assert v.counted[0] == result.calls == budget  # the search's own count is the verifier's
    assert len(result.candidates) == budget
    assert len({c.text for c in result.candidates}) == budget  # exact duplicates never spend a call


def test_search_seeds_spend_at_most_their_share(verifier):
    result = search(verifier.fork(), WEAK_SEEDS, 40, SearchConfig(seed_share=0.25), seed=0)
    assert len(result.seeds) == 10 and result.calls == 40  # 4 step-0 formulas, then 6 of Alpha101
    assert [c.origin for c in result.seeds[:4]] == ["step0"] * 4
    assert {c.origin for c in result.seeds[4:]} == {"alpha101"}


# ------------------------------------------------------------------------------------ determinism
def test_search_is_deterministic_for_a_seed(verifier):
    runs = [search(verifier.fork(), WEAK_SEEDS, 48, SearchConfig(population=8, alpha101=False), seed=s)
            for s in (5, 5, 6)]
    same = [[(c.text, c.reward, c.origin) for c in r.candidates] for r in runs]
    assert same[0] == same[1]
    assert [c.text for c in runs[0].population] == [c.text for c in runs[1].population]
    assert same[0] != same[2]  # the seed matters


def test_search_does_not_touch_the_callers_archive_through_a_fork(verifier):
    before = len(verifier.archive)
    search(verifier.fork(), WEAK_SEEDS, 32, SearchConfig(alpha101=False), seed=1)
    assert len(verifier.archive) == before


def test_search_grows_its_archive_as_training_does(panels):
    v = Verifier(panels[0]).fork()
    before = len(v.archive)
    search(v, WEAK_SEEDS, 64, SearchConfig(population=8, alpha101=False), seed=2)
    assert len(v.archive) > before  # good children are admitted after each group, so novelty sees them


# ----------------------------------------------------------------------------------- what it builds
def test_search_never_executes_anything(verifier, tmp_path):
    marker = tmp_path / "ran"
    hostile = [f"__import__('os').system('touch {marker}')", f"eval(\"open('{marker}', 'w')\")",
               "exec('x = 1')", "close.__class__", "rank(close)"]
    result = search(verifier.fork(), hostile, 24, SearchConfig(population=4, alpha101=False), seed=0)
    assert not marker.exists()
    assert [c.text for c in result.seeds] == ["rank(close)"]  # the rest never parse: dropped without a call
    source = "\n".join(p.read_text() for p in (ROOT / "alpha_gym" / "search").glob("*.py"))
    for word in ("eval(", "exec(", "compile(", "__import__", "subprocess", "os.system", "pickle"):
        assert word not in source


def test_every_child_meets_the_limits(panels):
    limits = Limits(max_depth=5, max_tokens=24, max_lookback=60)
    v = Verifier(panels[0], VerifierConfig(limits=limits))
    result = search(v.fork(), WEAK_SEEDS, 64, SearchConfig(population=8), seed=4)
    assert result.calls == 64
    for c in result.candidates:
        node = parse(c.text, limits)  # raises if any submitted formula broke a limit
        assert node == c.node
    # the Alpha101 seeds that break the tight limits never got in
    assert all(parse(c.text, limits) for c in result.seeds)


def test_search_improves_the_reward_over_its_seeds(verifier):
    result = search(verifier.fork(), WEAK_SEEDS, 96, SearchConfig(population=8, alpha101=False), seed=1)
    seeds = [c.reward for c in result.seeds]
    final = [c.reward for c in result.population]
    assert max(final) > max(seeds)
    assert np.mean(final) > np.mean(seeds) + 1.0
    best = [h["best_reward"] for h in result.history]
    assert best == sorted(best)  # (mu + lambda): the best never gets worse


def test_pick_answers_prefers_complying_formulas(verifier, probe):
    result = search(verifier.fork(), WEAK_SEEDS, 64, SearchConfig(population=16), seed=0)
    for pool in ("population", "scored"):
        picks = pick_answers(result, probe, pool)
        members = result.population if pool == "population" else result.candidates
        for brief, (c, complies) in zip(probe, picks):
            ok = [m for m in members if all(check_compliance(brief, m.node).values())]
            assert complies == bool(ok)
            if complies:  # the best complying member (valid before invalid, then reward)
                assert c is min(ok, key=lambda m: (not m.valid, -m.reward, m.text))
            else:
                assert c is min(members, key=lambda m: (not m.valid, -m.reward, m.text))
    with pytest.raises(SearchError):
        pick_answers(result, probe, "everything")


def test_search_rung_writes_the_kept_format(panels, verifier, probe, tmp_path):
    train, holdout = panels
    scale = _Scale(4, dict(prompts_per_step=2, num_generations=4))  # 32 calls
    results, out = tmp_path / "results", tmp_path / "out"
    numbers = run_search_rung(scale, 42, verifier, train, holdout, probe, [None, "rank(close)", "nonsense(("],
                              results, out=out, config=SearchConfig(population=12, group_size=4,
                                                                    groups_per_generation=2))
    rows = read_rows(results / "seed-42" / "search.jsonl")  # each row checked against its content hash
    assert [r["brief_id"] for r in rows] == [b.id for b in probe]
    saved = read_object(results / "seed-42" / "search.json")
    assert saved == json.loads(json_dumps(numbers)) and NUMBER_KEYS <= set(saved)
    assert saved["verifier_calls"] == saved["budget"] == 32 and saved["selected_step"] == 4
    assert {c["step"] for c in saved["checkpoints"]} == {4}
    for brief, r in zip(probe, rows):
        assert KEPT_KEYS | {"complies"} <= set(r) and r["step"] == 4
        node = parse(r["formula"], DEFAULT_LIMITS)
        assert r["answer"] == f"<alpha>{r['formula']}</alpha>"
        assert r["complies"] == all(check_compliance(brief, node).values())
        if r["train_valid"]:  # the kept train CPCV is the R1 a rung's probe scoring reports
            assert r["train_cpcv"] == pytest.approx(verifier.score_formula(r["formula"]).channels["cpcv"])
    assert (out / "seed-42" / "search" / "holdout-step-4.json").exists()
    grown = verifier.fork()
    grown.load_archive(out / "seed-42" / "search" / "archive.npz")
    assert len(grown.archive) >= len(verifier.archive)
    from alpha_gym.evaluation.answers_file import read_formulas
    assert read_formulas(results / "seed-42" / "search.jsonl") == [r["formula"] for r in rows]
    # a rerun reuses the saved search and writes the same answers
    trace = (out / "seed-42" / "search" / "search.json").read_text()
    run_search_rung(scale, 42, verifier, train, holdout, probe, [None, "rank(close)", "nonsense(("], results, out=out,
                    config=SearchConfig(population=12, group_size=4, groups_per_generation=2))
    assert (out / "seed-42" / "search" / "search.json").read_text() == trace
    assert read_rows(results / "seed-42" / "search.jsonl") == rows
    # ... and reports the search's own wall time, not the moment it took to read it back
    # (train_seconds is kept to 0.1 s, search.json's seconds to 1 ms: compare at the coarser one, or 3.1 < 3.122)
    searched = json.loads(trace)["seconds"]
    assert searched > 0 and read_object(results / "seed-42" / "search.json")["train_seconds"] >= round(searched, 1)


def test_search_settings_are_checked():
    for bad in (dict(population=0), dict(tournament=-1), dict(crossover_rate=1.5), dict(seed_share=-0.1)):
        with pytest.raises(SearchError):
            SearchConfig(**bad)
    with pytest.raises(SearchError, match="budget"):
        search(None, [], -1)


# ---------------------------------------------------------------------------------------- best-of-N
def test_samples_per_brief_and_the_pick():
    from trainers.best_of_n import best_sample, samples_per_brief
    assert samples_per_brief(480, 50) == 9 and samples_per_brief(4, 2) == 2
    with pytest.raises(ValueError):
        samples_per_brief(3, 4)
    assert best_sample([-1.0, 2.0, 2.0, 0.5]) == 1


@pytest.mark.slow
def test_best_of_n_with_the_real_model_keeps_the_best_sample(panels, verifier, tmp_path, capsys):
    pytest.importorskip("transformers")
    from alpha_gym.tasks.sets import brief_set
    from trainers.best_of_n import run_best_of_n_rung
    train, holdout = panels
    probe = list(brief_set("probe"))[:2]
    # 2 steps x 1 prompt x 2 answers = 4 calls: k = 2 samples on each of 2 briefs, 16 tokens
    scale = _Scale(2, dict(prompts_per_step=1, num_generations=2, max_completion_length=16, temperature=1.0))
    results, out = tmp_path / "results", tmp_path / "out"
    numbers = run_best_of_n_rung(scale, 42, None, verifier, train, holdout, probe, results, out=out)
    assert numbers["k"] == 2 and numbers["verifier_calls"] == 4 <= numbers["budget"] == 4
    rows = [json.loads(x) for x in (results / "seed-42" / "best_of_n.jsonl").read_text().splitlines()]
    saved = json.loads((results / "seed-42" / "best_of_n.json").read_text())
    assert NUMBER_KEYS <= set(saved) and saved["selected_step"] == 2
    samples = json.loads((out / "seed-42" / "best_of_n" / "samples.json").read_text())["briefs"]
    assert [r["brief_id"] for r in rows] == [b.id for b in probe] == [s["brief_id"] for s in samples]
    for r, s in zip(rows, samples):
        assert KEPT_KEYS <= set(r) and len(s["answers"]) == 2
        assert r["reward"] == max(s["rewards"]) and r["answer"] == s["answers"][int(np.argmax(s["rewards"]))]
        if r["train_valid"]:
            assert r["train_cpcv"] == pytest.approx(verifier.score(r["answer"]).channels["cpcv"])
        else:
            assert r["train_cpcv"] is None and not verifier.score(r["answer"]).valid
    assert (out / "seed-42" / "best_of_n" / "holdout-step-2.json").exists()
    assert (out / "seed-42" / "best_of_n" / "archive.npz").exists()
    run_dir = out / "seed-42" / "best_of_n"
    assert not (run_dir / "samples.partial.jsonl").exists()  # finished: the partial file is gone
    # a rerun reuses samples.json and reports the sampling's own wall time, not the reading's
    # (train_seconds is kept to 0.1 s, samples.json's seconds to 1 ms: compare at the coarser one)
    sampled = round(json.loads((run_dir / "samples.json").read_text())["seconds"], 1)
    assert sampled > 0 and numbers["train_seconds"] >= sampled
    assert run_best_of_n_rung(scale, 42, None, verifier, train, holdout, probe, results, out=out)[
        "train_seconds"] >= sampled

    # interrupted after brief 1 (its line kept, brief 2's cut mid-write): the rerun samples brief 2 only and
    # gives the uninterrupted run's records, rows and grown archive
    archive = (run_dir / "archive.npz").read_bytes()
    head = json.dumps({"settings": json.loads((run_dir / "samples.json").read_text())["settings"]})
    (run_dir / "samples.partial.jsonl").write_text(f"{head}\n{json.dumps(samples[0])}\n{json.dumps(samples[1])[:40]}")
    (run_dir / "samples.json").unlink()
    kept_rows = (results / "seed-42" / "best_of_n.jsonl").read_text()
    capsys.readouterr()
    again = run_best_of_n_rung(scale, 42, None, verifier, train, holdout, probe, results, out=out)
    assert "resuming after 1 of 2 briefs" in capsys.readouterr().out
    assert json.loads((run_dir / "samples.json").read_text())["briefs"] == samples
    assert (results / "seed-42" / "best_of_n.jsonl").read_text() == kept_rows
    assert again["verifier_calls"] == numbers["verifier_calls"] and (run_dir / "archive.npz").read_bytes() == archive
    # a kept sample that no longer scores as it did is an error, not a blend of two experiments
    bad = {**samples[0], "rewards": [r + 1.0 for r in samples[0]["rewards"]]}
    (run_dir / "samples.partial.jsonl").write_text(f"{head}\n{json.dumps(bad)}\n")
    (run_dir / "samples.json").unlink()
    with pytest.raises(RuntimeError, match="do not score as they did"):
        run_best_of_n_rung(scale, 42, None, verifier, train, holdout, probe, results, out=out)


# ------------------------------------------------------------------------------------- the variations
def test_variations_keep_kind_and_arity_and_move_one_thing():
    from alpha_gym.language.nodes import Field, Op, walk
    from alpha_gym.language.operators import OPERATORS
    from alpha_gym.search.tree import crossover, mutate_field, mutate_number, mutate_operator, subtrees
    a = parse("rank(ts_corr(close, volume, 10)) - ts_mean(returns, 5) * 2")
    b = parse("ts_std(vwap, 21)")
    rng = np.random.default_rng(0)
    shape = [(p, type(n), n.name if isinstance(n, Op) else None) for p, n in subtrees(a)]
    for _ in range(50):
        child = mutate_operator(a, rng)
        diff = [(p, n, m) for (p, n), (_, m) in zip(subtrees(a), subtrees(child)) if n != m]
        changed = [(n, m) for _, n, m in diff if isinstance(n, Op) and n.name != m.name]
        assert len(changed) == 1  # one operator swapped, nothing else moved
        old, new = changed[0]
        assert (OPERATORS[old.name].kind, OPERATORS[old.name].n_series) == (OPERATORS[new.name].kind,
                                                                             OPERATORS[new.name].n_series)
        assert old.args == new.args and old.window == new.window
        f = mutate_field(a, rng)
        assert [(p, t) for p, t, _ in shape] == [(p, type(n)) for p, n in subtrees(f)]
        assert sum(isinstance(n, Field) and n != m for (_, n), (_, m) in zip(subtrees(a), subtrees(f))) == 1
        w = mutate_number(a, rng)
        assert [o for _, _, o in shape] == [n.name if isinstance(n, Op) else None for _, n in subtrees(w)]
        assert w != a
        x = crossover(a, b, rng)
        assert x != a and any(n in set(walk(b)) for n in walk(x))
