"""The candidate reward measures of benchmarks/reward_candidates.py do what their names say, on planted series and a
synthetic market, and --table-only rebuilds the table from the kept per-formula values."""

from __future__ import annotations

import json

import numpy as np
import pytest

from alpha_gym.scoring import cpcv
from alpha_gym.scoring.config import VerifierConfig
from alpha_gym.scoring.factors import residual_sharpe
from benchmarks.reward_candidates import (CANDIDATE_KEYS, TABLE_FILE, VALUES_FILE, block_weights, candidate_values,
                                          deflated_cpcv, deflated_z, factor_residual, fold_stats, lexicographic, main,
                                          node_budget, residual_books, settled_reward, weighted_cpcv)

CFG = cpcv.CPCVConfig()


@pytest.fixture(scope="module")
def verifier():
    from alpha_gym.market import synthetic_panel
    from alpha_gym.scoring.verifier import Verifier
    return Verifier(synthetic_panel(n_stocks=20, n_days=400, seed=3),
                    VerifierConfig(stress_checkpoint=None, archive_seed=False))   # no seed books: fast


def _edge_series(n: int, edge_from: int, edge_to: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(0.0, 0.01, n)
    x[edge_from:edge_to] += 0.004
    return x


def test_the_residual_of_a_known_book_is_flat_and_an_edge_beside_the_books_stays():
    rng = np.random.default_rng(1)
    books = rng.normal(0.0, 0.01, (600, 7))
    copy = 2.0 * books[:, 1] - 0.5 * books[:, 6]
    assert np.abs(factor_residual(copy, books)).max() < 1e-12          # a mix of the books: nothing left
    edge = rng.normal(0.0005, 0.005, 600)
    residual = factor_residual(copy + edge, books)
    assert np.corrcoef(residual, edge)[0, 1] > 0.99                     # the edge survives the regression
    # with R4's five factors as the books, the residual's Sharpe is the one R4 reads
    five = books[:, :5]
    assert np.isclose(residual_sharpe(copy + edge, five),
                      np.mean(factor_residual(copy + edge, five)) / np.std(factor_residual(copy + edge, five),
                                                                          ddof=1) * np.sqrt(252))


def test_residual_cpcv_of_a_level_book_is_near_zero_and_its_train_cpcv_is_not(verifier):
    ev = verifier.evaluate("rank(volume)")                              # one of the residual's books
    values = candidate_values(verifier._score_items([ev]).scores[0], ev, residual_books(verifier), 100.0,
                              verifier.config)
    assert abs(values["residual_cpcv"]) < 1e-6 < abs(values["train_cpcv"])


def test_recent_weighting_ranks_a_recent_edge_above_the_same_edge_long_ago():
    old = _edge_series(1200, 0, 400)
    recent = old[::-1].copy()                        # the same days reversed: the same slices, the same CPCV
    plain = [cpcv.cpcv_score(cpcv.slice_sharpes(x, CFG)[0]) for x in (old, recent)]
    assert np.isclose(plain[0], plain[1])
    for kind in ("linear", "last_double"):
        w = block_weights(kind, CFG.n_blocks)
        assert weighted_cpcv(recent, w, CFG) > weighted_cpcv(old, w, CFG) + 0.1
    # equal weights are the plain CPCV
    assert np.isclose(weighted_cpcv(old, np.ones(CFG.n_blocks), CFG), plain[0])
    with pytest.raises(ValueError):
        block_weights("newest", 6)


def test_deflation_charges_more_trials_and_keeps_a_real_edge_above_noise():
    noise = np.random.default_rng(2).normal(0.0, 0.01, 1500)
    edge = noise + 0.004                             # a daily Sharpe of about 0.4
    assert deflated_z(noise, 1000) < deflated_z(noise, 10) < deflated_z(noise, 1)
    assert deflated_cpcv(noise, 1000, CFG) < 0 < deflated_cpcv(edge, 1000, CFG)
    assert np.isnan(deflated_z(np.zeros(100), 10))                    # no Sharpe to deflate: nan, not a crash


def test_parsimony_measures_refuse_and_order_by_nodes():
    invalid = VerifierConfig().invalid_reward("invalid_book")
    assert node_budget(1.5, 20, 20, invalid) == 1.5
    assert node_budget(1.5, 21, 20, invalid) == invalid < VerifierConfig().valid_reward_bound()
    assert lexicographic(1.2, 5) > lexicographic(1.3, 9) > lexicographic(0.9, 2)   # one bucket: fewer nodes wins


def test_candidate_values_on_a_real_verifier(verifier):
    """settled_reward with the verifier's priorities is its reward bit for bit (guard settled or not); the
    complexity candidates charge only nodes beyond the free 24; the node budgets refuse long formulas."""
    formulas = ["rank(ts_delta(close, 3)) * rank(volume)", "ts_mean(returns, 5)", "-1 * ts_delta(close, 2)",
                "rank(ts_delta(close, 3) * volume + ts_sum(returns, 7) - ts_mean(high - low, 5) * (open - close) / "
                "(vwap + 1) + ts_std(returns, 20) * volume / (adv20 + 1))"]        # 30 nodes
    books = residual_books(verifier)
    seen_fired = False
    for f in formulas:
        ev = verifier.evaluate(f)
        score = verifier._score_items([ev]).scores[0]
        assert settled_reward(score.channels, verifier.config.priorities) == score.reward
        seen_fired |= score.channels["motif_guard"] < 0
        values = candidate_values(score, ev, books, 50.0, verifier.config)
        assert set(values) == set(CANDIDATE_KEYS)
        nodes = score.diagnostics["nodes"]
        extra = max(0, nodes - 24)
        if score.channels["motif_guard"] == 0:
            assert np.isclose(values["complexity_x10"], score.reward - 9 * 0.2 * 0.02 * extra)
            # free up to 12 nodes: R11 bites from the 13th node, at ten times its priority
            assert np.isclose(values["complexity_free12_x10"],
                              score.reward + 0.2 * 0.02 * extra - 10 * 0.2 * 0.02 * max(0, nodes - 12))
        assert (values["node_budget_12"] == verifier.config.invalid_reward("invalid_book")) == (nodes > 12)
        assert values["train_cpcv"] == ev.cpcv and values["reward"] == score.reward
    assert nodes > 24                                           # the last formula is one the complexity charges
    assert seen_fired, "no formula fired the motif guard: the settle path went untested"


def test_fold_stats_read_a_perfect_candidate_as_rank_one():
    rows = [{"formula": f"f{i}", "values": {k: float(i) for k in CANDIDATE_KEYS}, "validation": float(i),
             "test": float(i) if i % 7 else None} for i in range(150)]
    s = fold_stats(rows)
    assert s["reward"]["validation"] == pytest.approx(1.0) and s["reward"]["test"] == pytest.approx(1.0)
    top = [i for i in range(149, 129, -1) if i % 7]                     # members valid on the test window
    assert s["reward"]["top20"] == pytest.approx(np.mean(top))
    assert s["pool"]["top20"] == pytest.approx(np.mean([i for i in range(150) if i % 7]))


@pytest.fixture(scope="module")
def market_csv(tmp_path_factory, write_market_csv):
    from alpha_gym.market import synthetic_panel
    return write_market_csv(synthetic_panel(n_stocks=20, n_days=800, seed=0),
                            tmp_path_factory.mktemp("market") / "smoke.csv.gz")


def test_the_benchmark_keeps_rows_resumes_and_table_only_rebuilds_the_table(market_csv, tmp_path, capsys):
    pools = tmp_path / "pools.jsonl"
    formulas = ["rank(ts_delta(close, 3)) * rank(volume)", "-1 * ts_delta(close, 2)", "rank(volume)",
                "ts_rank(volume, 10) - rank(close)", "this is not a formula"]
    pools.write_text("".join(json.dumps({"fold": 5, "arm": a, "formula": f}) + "\n"
                             for a in ("evolve", "random") for f in formulas))
    results = tmp_path / "kept"
    args = ["--data", str(market_csv), "--universe", "", "--pools", str(pools), "--folds", "5", "--sessions", "60",
            "--results", str(results)]
    assert main(args) == 0
    rows = [json.loads(line) for line in (results / VALUES_FILE).read_text().splitlines()]
    assert [r["formula"] for r in rows] == formulas                      # one row per distinct formula
    assert rows[0]["arms"] == ["evolve", "random"] and rows[0]["n_trials"] == 5.0
    assert not rows[-1]["valid"] and "values" not in rows[-1]
    table = (results / TABLE_FILE).read_text()
    assert "| reward |" in table and "| residual_cpcv |" in table
    capsys.readouterr()
    assert main(args) == 0                                               # every row kept: nothing scored again
    assert "===" not in capsys.readouterr().out
    assert len((results / VALUES_FILE).read_text().splitlines()) == len(formulas)
    (results / TABLE_FILE).unlink()
    assert main(["--table-only", "--results", str(results)]) == 0
    assert (results / TABLE_FILE).read_text() == table


def _pool_lines():
    """Lines a pools file must refuse: not JSON, not an object, a key missing, a fold that is not an integer >= 1,
    an arm or formula that is not a string."""
    good = {"fold": 1, "arm": "evolve", "formula": "rank(volume)"}
    lines = ["{", "fold 1, evolve, rank(volume)", "[1, \"evolve\", \"rank(volume)\"]", "null", "5", "\"rank(volume)\""]
    lines += [json.dumps({k: v for k, v in good.items() if k != drop}) for drop in good]
    lines += [json.dumps({**good, "fold": bad}) for bad in ("1", 1.5, True, 0, -2, None, [1])]
    lines += [json.dumps({**good, key: bad}) for key in ("arm", "formula") for bad in (5, None, ["x"], {"a": 1})]
    return lines


def _value_lines():
    good = {"fold": 5, "formula": "rank(volume)", "valid": True, "nodes": 2, "validation": 0.1, "test": -0.2,
            "values": {k: 0.5 for k in CANDIDATE_KEYS}}
    lines = ["{\"fold\": 5", "[]", "null"]
    lines += [json.dumps({k: v for k, v in good.items() if k != drop}) for drop in ("fold", "formula", "valid",
                                                                                 "validation", "test", "values")]
    lines += [json.dumps({**good, "fold": bad}) for bad in ("5", 5.0, True)]
    lines += [json.dumps({**good, w: bad}) for w in ("validation", "test") for bad in ("0.1", True, [0.1])]
    lines += [json.dumps({**good, "values": {**good["values"], "reward": bad}}) for bad in ("1", True, [1], {})]
    lines += [json.dumps({**good, "values": {k: 0.5 for k in CANDIDATE_KEYS[1:]}}), json.dumps({**good, "values": 3})]
    return lines


@pytest.mark.parametrize("line", _pool_lines())
def test_a_bad_pools_row_is_a_one_line_error_naming_its_line(tmp_path, line):
    from benchmarks.reward_candidates import read_pools
    path = tmp_path / "pools.jsonl"
    path.write_text(json.dumps({"fold": 1, "arm": "random", "formula": "close"}) + "\n\n" + line + "\n")
    with pytest.raises(SystemExit, match=r"pools\.jsonl line 3: ") as e:
        read_pools(path)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("line", _value_lines())
def test_a_bad_kept_row_is_a_one_line_error_for_table_only(tmp_path, line):
    (tmp_path / VALUES_FILE).write_text(line + "\n")
    with pytest.raises(SystemExit, match=r"values\.jsonl line 1: ") as e:
        main(["--table-only", "--results", str(tmp_path)])
    assert "\n" not in str(e.value)


def test_a_pools_file_that_is_not_utf8_is_a_one_line_error(tmp_path):
    from benchmarks.reward_candidates import read_pools
    path = tmp_path / "pools.jsonl"
    path.write_bytes(b"\xff\xfe{\"fold\": 1}\n")
    with pytest.raises(SystemExit, match="cannot read"):
        read_pools(path)
