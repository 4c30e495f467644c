"""Evolution from a program database (issue 40, item 2): the database, the mutator bandit and `evolve`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from alpha_gym.language import canonical, parse
from alpha_gym.ranges import SettingError, unranged_numeric_fields
from alpha_gym.scoring.verifier import Verifier
from alpha_gym.search.bandit import BANDIT_RANGES, Bandit, BanditConfig
from alpha_gym.search.database import (DATABASE_RANGES, DatabaseConfig, DatabaseError, ProgramDatabase, family,
                                       horizon)
from alpha_gym.search.evolution import (PROPOSALS_LOG, STATE_FILE, EvolutionError, TreeMutator, evolve,
                                        read_answer)
from test_controls import CountingVerifier  # the real verifier, counting every answer it scores

SEEDS = ["rank(close)", "rank(-returns)", "ts_mean(volume, 5)", "rank(ts_std(returns, 20))",
         "ts_corr(close, volume, 10)"]


class FixedMutator:
    """A mutator that always answers the same text (a stuck model): every answer after the first is a duplicate."""

    def __init__(self, answer: str, name: str = "stuck"):
        self.answer, self.name = answer, name

    def propose(self, parent_sets, rng):
        return [self.answer for _ in parent_sets]


@pytest.fixture(scope="module")
def panel():
    from alpha_gym.market import synthetic_panel
    return synthetic_panel(n_stocks=20, n_days=800, seed=0)


@pytest.fixture(scope="module")
def verifier(panel):
    return Verifier(panel)


def _add(db: ProgramDatabase, text: str, reward: float, island: int | None = 0, parents=()):
    return db.add(text, parse(text), reward, reward / 3, parents=parents, island=island)


# ------------------------------------------------------------------------------------------ settings
def test_every_setting_has_a_range_and_bad_ones_name_their_key():
    assert unranged_numeric_fields(DatabaseConfig, DATABASE_RANGES) == []
    assert unranged_numeric_fields(BanditConfig, BANDIT_RANGES) == []
    with pytest.raises(SettingError, match=r"DatabaseConfig\.n_islands = 0: must be an integer in \[1, 256\]"):
        DatabaseConfig(n_islands=0)
    with pytest.raises(SettingError, match=r"DatabaseConfig\.temperature = -1"):
        DatabaseConfig(temperature=-1.0)
    with pytest.raises(SettingError, match=r"DatabaseConfig\.refresh = 'sometimes': must be one of reset"):
        DatabaseConfig(refresh="sometimes")
    with pytest.raises(SettingError, match=r"DatabaseConfig\.cells = 1: must be true or false"):
        DatabaseConfig(cells=1)
    with pytest.raises(SettingError, match=r"BanditConfig\.method = 'greedy'"):
        BanditConfig(method="greedy")
    with pytest.raises(SettingError, match=r"BanditConfig\.decay = 0\.0"):
        BanditConfig(decay=0.0)
    with pytest.raises(SettingError, match=r"TreeMutator\.crossover_rate = 2\.0"):
        TreeMutator(crossover_rate=2.0)
    from alpha_gym.search.mutators import RandomMutator
    with pytest.raises(SettingError, match=r"RandomMutator\.max_depth = 17: must be an integer in \[2, 16\]"):
        RandomMutator(max_depth=17)  # a random tree's size grows geometrically with its depth


# ------------------------------------------------------------------------------------------ database
def test_family_erases_windows_and_horizon_buckets_the_lookback():
    assert family(parse("ts_max(ts_std(volume, 12), 12)")) == family(parse("ts_max(ts_std(volume, 30), 7)"))
    assert family(parse("ts_max(ts_std(volume, 12), 12)")) == "ts_max(ts_std(volume))"
    assert family(parse("close + open")) == family(parse("open + close"))
    assert family(parse("rank(adv20)")) != family(parse("rank(adv60)"))
    assert horizon(parse("ts_max(ts_std(volume, 12), 12)")) == 21     # 11 + 11 past sessions
    assert horizon(parse("ts_max(ts_std(volume, 100), 100)")) == 252
    assert horizon(parse("(close - open) / (high - low)")) == 5


def test_a_cell_keeps_its_best_programs_so_one_idea_cannot_fill_an_island():
    db = ProgramDatabase(DatabaseConfig(n_islands=1, cell_capacity=2))
    for w, r in ((15, 0.1), (16, 0.5), (17, 0.3), (18, 0.9), (19, 0.2)):   # one family, one horizon bucket
        _add(db, f"ts_std(volume, {w})", r)
    _add(db, "rank(returns)", -1.0)                                          # another cell
    kept = db.island_programs(0)
    assert [p.text for p in kept] == ["ts_std(volume, 18)", "ts_std(volume, 16)", "rank(returns)"]
    assert db.cells(0) == {("ts_std(volume)", 21): 2, ("rank(returns)", 5): 1}
    assert len(db) == 6                                                      # the database keeps every program
    off = ProgramDatabase(DatabaseConfig(n_islands=1, cells=False))
    for w in range(10, 15):
        _add(off, f"ts_std(volume, {w})", 0.1 * w)
    assert len(off.islands[0]) == 5


def test_an_island_keeps_its_best_programs_up_to_its_capacity():
    db = ProgramDatabase(DatabaseConfig(n_islands=1, island_capacity=3, cells=False))
    for k, r in enumerate((0.4, 0.1, 0.9, 0.3, 0.7)):
        _add(db, f"rank(ts_mean(close, {k + 2}))", r)
    assert [p.reward for p in db.island_programs(0)] == [0.9, 0.7, 0.4]


def test_an_exact_canonical_duplicate_is_refused():
    db = ProgramDatabase()
    _add(db, "close + open", 0.1)
    assert not db.is_new(canonical(parse("open + close")))
    with pytest.raises(DatabaseError, match="scored before"):
        _add(db, "open+close", 0.2)
    db.note_scored("rank(volume)")
    assert not db.is_new("rank(volume)") and db.is_new("rank(close)")


def test_seeds_are_dealt_to_the_islands_in_turn_and_children_join_their_parents_island():
    db = ProgramDatabase(DatabaseConfig(n_islands=3))
    seeds = [_add(db, f"rank(ts_mean(close, {k + 2}))", 0.1 * k, island=None) for k in range(4)]
    assert [s.island for s in seeds] == [0, 1, 2, 0]
    child = _add(db, "rank(ts_max(close, 5))", 1.0, island=1, parents=[seeds[1].id])
    assert child.id in db.islands[1] and child.parents == (seeds[1].id,)


def _island_of_five(config: DatabaseConfig) -> ProgramDatabase:
    db = ProgramDatabase(config)
    for field, r in zip(("close", "volume", "open", "high", "low"), (0.2, 1.5, -0.3, 0.9, 0.4)):
        _add(db, f"rank(ts_delta({field}, 3))", r)                       # five cells
    return db


@pytest.mark.parametrize("temperature", [0.0, 1e-9])
def test_temperature_to_zero_picks_the_best(temperature):
    db = _island_of_five(DatabaseConfig(n_islands=1, temperature=temperature, parents_per_prompt=1))
    picks = [parents[0].reward for _, parents in db.sample(40, np.random.default_rng(0))]
    assert picks == [1.5] * 40
    db = _island_of_five(DatabaseConfig(n_islands=1, temperature=temperature, parents_per_prompt=2))
    assert [[p.reward for p in ps] for _, ps in db.sample(3, np.random.default_rng(0))] == [[1.5, 0.9]] * 3


def test_a_high_temperature_spreads_the_draws_and_the_offspring_penalty_evens_them():
    rng = np.random.default_rng(0)
    hot = _island_of_five(DatabaseConfig(n_islands=1, temperature=1e3, offspring_penalty=0.0, parents_per_prompt=1))
    hot.sample(500, rng)
    counts = sorted(p.offspring for p in hot.programs)
    assert counts[0] > 60 and sum(counts) == 500                       # about uniform: 100 each
    cold = _island_of_five(DatabaseConfig(n_islands=1, temperature=1.0, offspring_penalty=0.0, parents_per_prompt=1))
    cold.sample(500, rng)
    even = _island_of_five(DatabaseConfig(n_islands=1, temperature=1.0, offspring_penalty=3.0, parents_per_prompt=1))
    even.sample(500, rng)
    spread = [max(p.offspring for p in db.programs) - min(p.offspring for p in db.programs) for db in (cold, even)]
    assert spread[1] < spread[0] / 3                                   # many children: drawn less (ShinkaEvolve)
    assert max(even.programs, key=lambda p: p.offspring).reward == 1.5  # the best still leads


def test_reset_refounds_the_weakest_half_from_the_best_of_the_others():
    db = ProgramDatabase(DatabaseConfig(n_islands=4, cells=False))
    bests = {0: 0.5, 1: 2.0, 2: -0.4, 3: 1.0}
    for island, best in bests.items():
        for k in range(3):
            _add(db, f"rank(ts_mean(close, {10 * island + k + 2}))", best - 0.1 * k, island=island)
    before = {i: list(db.islands[i]) for i in (1, 3)}
    reset = db.reset_weakest(np.random.default_rng(0))
    assert reset == [0, 2]
    for i in (0, 2):
        assert len(db.islands[i]) == 1
        assert db.programs[db.islands[i][0]].reward in (2.0, 1.0)      # a surviving island's best
    assert {i: db.islands[i] for i in (1, 3)} == before
    founders = set()
    for seed in range(20):                                              # the founder's island is drawn at random
        other = _island_bests(seed)
        founders |= other
    assert founders == {2.0, 1.0}


def _island_bests(seed: int) -> set[float]:
    db = ProgramDatabase(DatabaseConfig(n_islands=4, cells=False))
    for island, best in {0: 0.5, 1: 2.0, 2: -0.4, 3: 1.0}.items():
        _add(db, f"rank(ts_mean(close, {island + 2}))", best, island=island)
    db.reset_weakest(np.random.default_rng(seed))
    return {db.programs[db.islands[i][0]].reward for i in (0, 2)}


def test_tick_refreshes_on_schedule_and_migration_moves_the_best_to_the_neighbours():
    db = ProgramDatabase(DatabaseConfig(n_islands=3, cells=False, refresh="migrate", refresh_interval=10,
                                        migration_share=0.3))
    for island in range(3):
        for k in range(3):
            _add(db, f"rank(ts_mean(close, {10 * island + k + 2}))", island + 0.1 * k, island=island)
    rng = np.random.default_rng(0)
    assert db.tick(9, rng) is None
    assert db.tick(10, rng) == "migrate" and db.refreshes == 1
    best_of = {i: max((p for p in db.programs if p.island == i), key=lambda p: p.reward).id for i in range(3)}
    for i in range(3):
        assert best_of[(i + 1) % 3] in db.islands[i] and best_of[(i - 1) % 3] in db.islands[i]
    assert db.tick(15, rng) is None and db.tick(20, rng) == "migrate"


def test_the_state_round_trips_through_json_and_samples_the_same():
    db = _island_of_five(DatabaseConfig(n_islands=2))
    _add(db, "rank(volume)", 0.3, island=1)
    db.note_scored("rank(open)")
    db.sample(7, np.random.default_rng(1))
    twin = ProgramDatabase.from_dict(json.loads(json.dumps(db.to_dict())))
    assert twin.to_dict() == db.to_dict()
    a, b = np.random.default_rng(5), np.random.default_rng(5)
    assert ([[p.id for p in ps] for _, ps in db.sample(9, a)] == [[p.id for p in ps] for _, ps in twin.sample(9, b)])
    with pytest.raises(DatabaseError, match="format"):
        ProgramDatabase.from_dict({"format": "other"})


# ------------------------------------------------------------------------------------------ bandit
@pytest.mark.parametrize("method", ["ucb1", "thompson"])
def test_the_bandit_converges_to_the_better_arm_of_a_rigged_pair(method):
    bandit = Bandit(["weak", "strong"], BanditConfig(method=method))
    rng, world = np.random.default_rng(0), np.random.default_rng(1)
    chosen = []
    for _ in range(150):                                  # groups of 4 proposals, paid after each group
        arms = bandit.choose(4, rng)
        chosen += arms
        for arm in arms:
            p = 0.6 if arm == "strong" else 0.15
            bandit.update(arm, float(world.random() < p) * world.uniform(0.1, 1.0))
    late = chosen[-200:]
    assert late.count("strong") / len(late) > 0.8
    assert bandit.shares()["strong"] > 0.7


def test_the_bandit_is_deterministic_and_its_state_round_trips():
    def run(bandit, seed):
        rng = np.random.default_rng(seed)
        out = []
        for k in range(30):
            arms = bandit.choose(3, rng)
            out += arms
            for arm in arms:
                bandit.update(arm, (k % 4) * 0.1 if arm == "a" else 0.05)
        return out
    b1, b2 = Bandit(["a", "b", "c"], BanditConfig(decay=0.95)), Bandit(["a", "b", "c"], BanditConfig(decay=0.95))
    assert run(b1, 3) == run(b2, 3)
    twin = Bandit.from_dict(json.loads(json.dumps(b1.to_dict())))
    assert twin.to_dict() == b1.to_dict()
    assert run(twin, 4) == run(b1, 4)
    assert Bandit(["a", "b"]).choose(2, np.random.default_rng(0)) == ["a", "b"]   # unseen arms first
    with pytest.raises(ValueError, match="distinct"):
        Bandit(["a", "a"])


# ------------------------------------------------------------------------------------------ evolve
def test_read_answer_takes_answers_and_plain_formulas_and_rejects_what_does_not_parse(verifier):
    limits = verifier.config.limits
    assert read_answer("rank(close)", limits)[0] == "<alpha>rank(close)</alpha>"
    assert read_answer("<think>x</think><alpha>rank( close )</alpha>", limits)[1] == "rank(close)"
    for bad in ("rank(close", "<alpha></alpha>", "<alpha>a</alpha><alpha>b</alpha>", "", None, 3):
        assert isinstance(read_answer(bad, limits), str)


@pytest.mark.parametrize("budget", [0, 3, 13, 29])
def test_the_budget_is_exact(panel, budget):
    v = CountingVerifier(panel)
    result = evolve(v, TreeMutator(v.config.limits), DatabaseConfig(n_islands=2), budget, seed=0,
                    seed_formulas=SEEDS, group_size=4, progress=None)
    assert v.counted[0] == result.calls == budget
    assert result.groups == (0 if budget == 0 else len(result.history))


def test_duplicates_and_unparseable_answers_spend_no_call(panel, tmp_path):
    v = CountingVerifier(panel)
    stuck = FixedMutator("<alpha>rank(close)</alpha>")          # a seed's form: always a duplicate
    broken = FixedMutator("rank(close", name="broken")
    result = evolve(v, [stuck, broken], DatabaseConfig(n_islands=2), 20, seed=0, out_dir=tmp_path,
                    seed_formulas=SEEDS, group_size=4, max_rounds=2, progress=None)
    assert v.counted[0] == result.calls == 20
    rows = [json.loads(line) for line in (tmp_path / PROPOSALS_LOG).read_text().splitlines()]
    scored = [r for r in rows if r["status"] == "scored"]
    rejected = [r for r in rows if r["status"] == "rejected"]
    assert len(scored) == 20 and result.rejected == len(rejected) > 0
    assert {r["origin"] for r in rejected} == {"stuck", "broken"}
    assert all(r["call"] is None for r in rejected)
    assert len({parse(r["formula"]) for r in scored}) == 20       # no form scored twice
    assert {r["origin"] for r in scored} == {"seed", "random"}     # the stuck mutators' places were filled
    assert result.bandit.paid.sum() == 0


def test_a_mutator_that_breaks_its_contract_is_named(panel):
    class Short(FixedMutator):
        def propose(self, parent_sets, rng):
            return []
    with pytest.raises(EvolutionError, match="'short' returned list of 0 answers for 4 parent sets"):
        evolve(Verifier(panel), Short("x", "short"), budget=12, seed_formulas=SEEDS, group_size=4, progress=None)
    with pytest.raises(EvolutionError, match="distinct names"):
        evolve(Verifier(panel), [TreeMutator(), TreeMutator()], budget=4, progress=None)


def test_evolve_is_deterministic_for_a_seed(verifier, tmp_path):
    def run(seed, out):
        return evolve(verifier.fork(), TreeMutator(verifier.config.limits), DatabaseConfig(n_islands=2), 40,
                      seed=seed, out_dir=out, seed_formulas=SEEDS, group_size=4, progress=None)
    a, b, c = run(0, tmp_path / "a"), run(0, tmp_path / "b"), run(1, tmp_path / "c")
    assert a.database.to_dict() == b.database.to_dict() and a.book.members == b.book.members
    assert (tmp_path / "a" / PROPOSALS_LOG).read_text() == (tmp_path / "b" / PROPOSALS_LOG).read_text()
    assert a.database.to_dict() != c.database.to_dict()


@pytest.mark.parametrize("every, kept_groups", [(1, 6), (4, 4)])
def test_a_killed_run_resumes_to_the_uninterrupted_result(verifier, tmp_path, every, kept_groups):
    """Killed after group 6: written every group, the checkpoint is group 6's; every 4th group, group 4's (the
    groups after it run again). Either way the resumed run is the uninterrupted one, logs included."""
    config = DatabaseConfig(n_islands=3, refresh_interval=12)
    kwargs = dict(seed_formulas=SEEDS, group_size=4, bandit_config=BanditConfig(decay=0.9))

    def mutators():
        return [TreeMutator(verifier.config.limits), TreeMutator(verifier.config.limits, crossover_rate=0.9,
                                                                name="crossover")]
    whole = evolve(verifier.fork(), mutators(), config, 60, seed=7, out_dir=tmp_path / "whole", progress=None,
                   **kwargs)

    class Killed(Exception):
        pass

    def kill_at_group_6(row):
        if row["group"] == 6:
            raise Killed
    with pytest.raises(Killed):
        evolve(verifier.fork(), mutators(), config, 60, seed=7, out_dir=tmp_path / "cut", progress=kill_at_group_6,
               checkpoint_every=every, **kwargs)
    state = json.loads((tmp_path / "cut" / STATE_FILE).read_text())
    assert (state["groups"], state["calls"]) == (kept_groups, 4 + 1 + 4 * (kept_groups - 2))  # 5 seeds: 4 + 1
    logged = [json.loads(x)["group"] for x in (tmp_path / "cut" / PROPOSALS_LOG).read_text().splitlines()]
    assert max(logged) == kept_groups                                  # the log goes no further than the state
    with open(tmp_path / "cut" / PROPOSALS_LOG, "a") as fh:               # a line written after the checkpoint
        fh.write(json.dumps({"group": kept_groups + 1, "status": "scored"}) + "\n")
    resumed = evolve(verifier.fork(), mutators(), config, 60, seed=7, out_dir=tmp_path / "cut", progress=None,
                     **kwargs)
    assert resumed.calls == whole.calls == 60
    assert resumed.database.to_dict() == whole.database.to_dict()
    assert resumed.bandit.to_dict() == whole.bandit.to_dict()
    assert resumed.book.members == whole.book.members and resumed.history == whole.history
    assert [dict(a, added=0) for a in resumed.admitted] == [dict(a, added=0) for a in whole.admitted]
    assert (tmp_path / "cut" / PROPOSALS_LOG).read_text() == (tmp_path / "whole" / PROPOSALS_LOG).read_text()
    assert whole.database.refreshes >= 4

    grown = evolve(verifier.fork(), mutators(), config, 68, seed=7, out_dir=tmp_path / "cut", progress=None,
                   **kwargs)                                               # a larger budget goes on
    assert grown.calls == 68 and grown.history[:len(whole.history)] == whole.history
    assert [p.text for p in grown.database.programs[:len(whole.database)]] == [p.text for p in whole.database.programs]
    with pytest.raises(EvolutionError, match="other settings \\(seed\\)"):
        evolve(verifier.fork(), mutators(), config, 68, seed=8, out_dir=tmp_path / "cut", progress=None, **kwargs)


def test_the_run_writes_its_archive_and_its_correlation_capped_book(verifier, tmp_path, capsys):
    from alpha_gym.evaluation.selection import Candidate, select_correlation_capped
    result = evolve(verifier.fork(), TreeMutator(verifier.config.limits), DatabaseConfig(n_islands=2), 48, seed=2,
                    out_dir=tmp_path, seed_formulas=SEEDS, group_size=8)
    lines = [json.loads(x) for x in (tmp_path / "archive.jsonl").read_text().splitlines()]
    assert lines == result.admitted and lines
    assert {"step", "formula", "form", "train_cpcv", "turnover", "added"} <= set(lines[0])
    again = select_correlation_capped([Candidate.from_evaluated(verifier.evaluate(x["formula"])) for x in lines])
    book = json.loads((tmp_path / "book.json").read_text())
    assert book["members"] == list(again.members) == list(result.book.members)
    assert book["n_admitted"] == len(lines)
    err = capsys.readouterr().err
    assert "calls 48/48" in err and "best reward" in err and "members" in err


def test_the_checkpoint_is_written_by_time_once_it_costs_more_than_a_share_of_the_run(monkeypatch):
    """checkpoint_every=None: due at once after the first group, then once the time since the last checkpoint
    is CHECKPOINT_RATIO times what it took (a clock set by hand)."""
    from alpha_gym.search import evolution
    now = [100.0]
    monkeypatch.setattr(evolution.time, "perf_counter", lambda: now[0])
    clock = evolution._CheckpointClock(None)
    assert clock.now(1)                                  # nothing measured yet: the first group writes
    with clock.timing():
        now[0] += 0.5                                    # a checkpoint that took 0.5 s
    for dt, due in ((1.0, False), (evolution.CHECKPOINT_RATIO * 0.5 - 0.01, False),
                    (evolution.CHECKPOINT_RATIO * 0.5, True)):
        now[0] = 100.5 + dt
        assert clock.now(7) is due, dt
    every = evolution._CheckpointClock(3)                # a fixed count ignores the clock
    assert [g for g in range(1, 10) if every.now(g)] == [3, 6, 9]


@pytest.mark.parametrize("bad", [0, -2, True, 2.5, "4"])
def test_a_bad_checkpoint_count_is_refused_before_the_run(panel, bad):
    with pytest.raises(EvolutionError, match="checkpoint_every must be an integer >= 1"):
        evolve(Verifier(panel), TreeMutator(), budget=4, progress=None, checkpoint_every=bad)
