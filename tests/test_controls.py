"""The comparison's controls: model-free search (the evolution engine's GP setting) and best-of-N, at a rung's
verifier budget."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pytest

from alpha_gym.language import DEFAULT_LIMITS, Limits, canonical, parse
from alpha_gym.scoring.config import VerifierConfig
from alpha_gym.scoring.verifier import Verifier
from alpha_gym.errors import InputError
from alpha_gym.search.database import GP_SEARCH, DatabaseConfig, ProgramDatabase
from alpha_gym.search.evolution import TreeMutator, evolve
from trainers.compare.ladder import scale_budget

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
    assert scale_budget(_Scale(30, dict(prompts_per_step=2, num_generations=8))) == 480
    assert scale_budget(_Scale(100, dict(prompts_per_step=2, num_generations=8))) == 1600
    with pytest.raises(InputError, match="num_generations"):
        scale_budget(_Scale(30, dict(prompts_per_step=2)))
    for bad in (0, -3, True, 2.0):
        with pytest.raises(InputError, match="steps must be a positive integer"):
            scale_budget(_Scale(bad, dict(prompts_per_step=2, num_generations=8)))


def test_the_comparisons_cpu_scale_gives_480_calls():
    """The budget follows the comparison's own cpu Scale."""
    from trainers.compare.ladder import SCALES
    cpu = SCALES["cpu"]
    assert scale_budget(cpu) == cpu.steps * cpu.train["prompts_per_step"] * cpu.train["num_generations"] == 480


# ------------------------------------------------------- the search arm: the engine's genetic-programming setting
def _gp(verifier, budget: int, seed: int, seeds=WEAK_SEEDS, **database):
    """The `search` arm's run: the evolution engine, the tree mutator, the GP database (`GP_SEARCH`)."""
    config = replace(GP_SEARCH, **database)
    return evolve(verifier, TreeMutator(limits=verifier.config.limits), config, budget, seed=seed,
                  seed_formulas=list(seeds), group_size=4, progress=None, say=None)


@pytest.mark.parametrize("budget", [0, 1, 7, 33, 80])
def test_search_never_exceeds_its_budget(panels, budget):
    v = CountingVerifier(panels[0])
    v.archive  # seeded before counting starts (the seed books are not answers)
    result = _gp(v.fork(), budget, seed=3, island_capacity=6)
    assert v.counted[0] == result.calls == budget  # the run's own count is the verifier's
    assert len(result.database.scored_forms) == budget  # exact duplicates never spend a call


def test_search_is_deterministic_for_a_seed(verifier):
    runs = [_gp(verifier.fork(), 48, seed=s, island_capacity=8) for s in (5, 5, 6)]
    same = [r.database.to_dict() for r in runs]
    assert same[0] == same[1] and runs[0].history == runs[1].history
    assert same[0] != same[2]  # the seed matters


def test_search_does_not_touch_the_callers_archive_through_a_fork(verifier):
    before = len(verifier.archive)
    _gp(verifier.fork(), 32, seed=1)
    assert len(verifier.archive) == before


def test_search_keeps_the_best_mu_and_draws_parents_by_tournament(verifier):
    """Truncation survival: the one island holds the best `island_capacity` programs by reward, whatever the order
    they came in; the best never gets worse; every child's parents are programs of the run."""
    result = _gp(verifier.fork(), 96, seed=1, island_capacity=8)
    db = result.database
    assert db.config.n_islands == 1 and not db.config.cells and db.config.refresh == "none"
    best8 = sorted(db.programs, key=lambda p: (-p.reward, p.id))[:8]
    assert sorted(db.islands[0]) == sorted(p.id for p in best8)
    best = [h["best_reward"] for h in result.history]
    assert best == sorted(best)
    children = [p for p in db.programs if p.origin == "tree"]
    assert children and all(1 <= len(p.parents) <= 2 for p in children)
    assert db.island_best(0) == db.best()  # survival never loses the best


@pytest.mark.parametrize("tournament", [1, 2, 3, 50])
def test_a_tournament_takes_the_best_of_its_draws(tournament):
    """The tournament rule against its definition: over many draws from an island of 10 ranked programs, the
    first parent is rank r with probability ((10 - r) / 10)^t - ((9 - r) / 10)^t."""
    db = ProgramDatabase(DatabaseConfig(n_islands=1, parents_per_prompt=1, cells=False, refresh="none",
                                        selection="tournament", tournament=tournament))
    for k in range(10):
        text = f"ts_mean(close, {k + 2})"
        db.add(text, parse(text, DEFAULT_LIMITS), reward=float(k), core=0.0)
    rng = np.random.default_rng(0)
    draws = [s[1][0].reward for s in db.sample(20_000, rng)]
    counts = np.bincount([9 - int(r) for r in draws], minlength=10) / len(draws)  # rank 0: the best
    want = [((10 - r) / 10) ** tournament - ((9 - r) / 10) ** tournament for r in range(10)]
    assert np.allclose(counts, want, atol=0.015)


def test_the_softmax_rule_writes_no_new_setting():
    """A folder made before the database had a selection rule names neither key: it resumes with the same settings."""
    assert "selection" not in DatabaseConfig().to_dict() and "tournament" not in DatabaseConfig().to_dict()
    assert GP_SEARCH.to_dict()["selection"] == "tournament" and GP_SEARCH.to_dict()["tournament"] == 3
    assert DatabaseConfig.from_dict(GP_SEARCH.to_dict()) == GP_SEARCH
    assert DatabaseConfig.from_dict(DatabaseConfig().to_dict()) == DatabaseConfig()


# ----------------------------------------------------------------------------------- what it builds
def test_search_never_executes_anything(verifier, tmp_path):
    marker = tmp_path / "ran"
    hostile = [f"__import__('os').system('touch {marker}')", f"eval(\"open('{marker}', 'w')\")",
               "exec('x = 1')", "close.__class__", "rank(close)"]
    result = _gp(verifier.fork(), 24, seed=0, seeds=hostile)
    assert not marker.exists()
    # the one seed that parses was scored (invalid or not); the rest were dropped without a call
    assert canonical(parse("rank(close)", DEFAULT_LIMITS)) in result.database.scored_forms and result.calls == 24
    assert not any(word in p.text for p in result.database.programs for word in ("import", "eval", "exec", "__"))
    source = "\n".join(p.read_text() for p in (ROOT / "alpha_gym" / "search").glob("*.py"))
    for word in ("eval(", "exec(", "compile(", "__import__", "subprocess", "os.system", "pickle"):
        assert word not in source


def test_every_child_meets_the_limits(panels):
    limits = Limits(max_depth=5, max_tokens=24, max_lookback=60)
    v = Verifier(panels[0], VerifierConfig(limits=limits))
    from alpha_gym.alpha101 import formulas
    result = _gp(v.fork(), 64, seed=4, seeds=WEAK_SEEDS + list(formulas(industry_free=True).values()))
    assert result.calls == 64
    for p in result.database.programs:
        assert parse(p.text, limits)  # raises if any submitted formula broke a limit


# ---------------------------------------------------------------------------------------- best-of-N
def test_samples_per_brief_and_the_pick():
    from trainers.compare.arms.best_of_n import best_sample, samples_per_brief
    assert samples_per_brief(480, 50) == 9 and samples_per_brief(4, 2) == 2
    with pytest.raises(ValueError):
        samples_per_brief(3, 4)
    assert best_sample([-1.0, 2.0, 2.0, 0.5]) == 1


@pytest.mark.slow
def test_best_of_n_with_the_real_model_keeps_the_best_sample(panels, verifier, tmp_path, capsys):
    pytest.importorskip("transformers")
    from alpha_gym.tasks.sets import brief_set
    from trainers.compare.arms.best_of_n import run_best_of_n_rung
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


_BAD_SELECTIONS = [dict(selection=s) for s in ("Softmax", "TOURNAMENT", "tournament ", "", "best", None, 3,
                                               b"softmax", ["tournament"])]
_BAD_TOURNAMENTS = [dict(selection="tournament", tournament=t) for t in (0, -1, True, 1.5, "3", 10_001, None,
                                                                         float("nan"), float("inf"))]


@pytest.mark.parametrize("bad", _BAD_SELECTIONS + _BAD_TOURNAMENTS, ids=repr)
def test_a_bad_parent_rule_is_one_setting_error_naming_its_key(bad):
    from alpha_gym.ranges import SettingError
    key = "tournament" if "tournament" in bad else "selection"
    with pytest.raises(SettingError, match=rf"^DatabaseConfig\.{key} = "):
        DatabaseConfig(**bad)
