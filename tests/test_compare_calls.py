"""The arms along their verifier calls (issue 40.5, `trainers/compare/calls.py`): curves read from the kept files,
rows at each budget a run reached, search's part-way rows marked, and the figure written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from alpha_gym.evaluation.kept import read_object
from trainers.compare.calls import arm_curves, at_calls, budget_rows, calls_table, write_calls

KEPT = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "compare-long"


def _curve(points):
    return [{"calls": c, "best_reward": r, "book_members": m, "effective_bets": None, "book_cpcv": None,
             "seconds": float(c) / 2, "rejected": 3 * c} for c, r, m in points]


def test_a_curve_is_read_at_its_last_row_ending_by_the_calls():
    curve = _curve([(116, 2.0, 3), (124, 2.5, 4), (1596, 3.0, 9), (1604, 3.1, 9)])
    assert at_calls(curve, 1600)["calls"] == 1596 and at_calls(curve, 124)["best_reward"] == 2.5
    assert at_calls(curve, 100) is None            # no group had ended by then
    assert at_calls(curve, 4800) is None           # the run never got there
    assert at_calls([], 10) is None


def test_rows_at_every_budget_all_seeds_reached_and_search_part_way():
    curves = {"evolve": {42: _curve([(8, 1.0, 1), (1600, 2.0, 5), (4800, 3.0, 8), (5000, 3.5, 9)]),
                         43: _curve([(8, 0.0, 1), (1600, 4.0, 7), (4800, 5.0, 10)])},
              "search": {42: _curve([(116, 1.0, None), (1600, 2.0, None), (4800, 2.5, None)])}}
    rows = {(r["arm"], r["budget"]): r for r in budget_rows(curves)}
    # evolve: 1,600 and 4,800 (both seeds got there); 10,000 not (no seed did), nor 5,000 (seed 43 stopped at 4,800)
    assert sorted(b for a, b in rows if a == "evolve") == [1600, 4800]
    assert rows[("evolve", 1600)]["best_reward"] == (3.0, 2.0, 4.0) and rows[("evolve", 4800)]["seeds"] == [42, 43]
    assert rows[("evolve", 1600)]["effective_bets"] is None and not rows[("evolve", 1600)]["part_way"]
    # 2 calls a second; 4 proposals a call (3 refused before a call for every one scored): 8 a second
    assert rows[("evolve", 1600)]["calls_per_s"] == (2.0, 2.0, 2.0)
    assert rows[("evolve", 1600)]["proposals_per_s"] == (8.0, 8.0, 8.0)
    # search sizes its generations from its budget: below its own end a row is a part-way reading
    assert rows[("search", 1600)]["part_way"] and not rows[("search", 4800)]["part_way"]
    text = calls_table(list(rows.values()))
    assert "| search (part-way) | 1,600 | 1 |" in text and "| evolve | 4,800 | 2 | +4.000 [+3.000, +5.000] |" in text


def test_the_kept_long_comparison_is_read_along_its_calls(tmp_path):
    if not (KEPT / "seed-42" / "evolve.json").exists():
        pytest.skip(f"{KEPT} holds no kept evolve arm")
    curves = arm_curves(KEPT)
    assert {"evolve", "random", "search"} <= set(curves) and "cispo" not in curves   # a trained rung keeps no curve
    rows = write_calls(KEPT, [tmp_path])
    assert (tmp_path / "calls.md").read_text() == calls_table(rows) and (tmp_path / "calls.png").stat().st_size > 0
    evolve = next(r for r in rows if r["arm"] == "evolve" and r["budget"] == 1600)
    finals = [read_object(KEPT / f"seed-{s}" / "evolve.json") for s in evolve["seeds"]]
    best = [f["best_reward"] for f in finals]
    assert evolve["best_reward"] == pytest.approx((sum(best) / len(best), min(best), max(best)))
    assert [f["curve"][-1]["calls"] for f in finals] == [1600] * len(finals)
    assert json.loads(json.dumps(rows))       # plain numbers, lists and strings
    # search keeps no book along its history: its last row carries the book chosen at its end and its wall time
    search = next(r for r in rows if r["arm"] == "search" and r["budget"] == 1600)
    books = [read_object(KEPT / f"seed-{s}" / "search.book.json") for s in search["seeds"]]
    members = [b["n_members"] for b in books]
    assert search["book_members"] == pytest.approx((sum(members) / len(members), min(members), max(members)))
    assert search["book_cpcv"] is None and search["seconds"] is not None
    assert search["proposals_per_s"] is None                  # search keeps no count of refused proposals
    end = read_object(KEPT / "seed-42" / "evolve.json")["curve"][-1]
    assert curves["evolve"][42][-1]["proposals_per_s"] == pytest.approx((end["calls"] + end["rejected"]) / end["seconds"])


def test_a_results_folder_without_curves_writes_nothing(tmp_path):
    assert write_calls(tmp_path, [tmp_path]) == [] and not (tmp_path / "calls.md").exists()


LONGER = KEPT.parent / "compare-10000"


@pytest.mark.parametrize("arm", ["evolve", "random", "search"])
def test_a_kept_10000_call_run_read_at_1600_is_the_kept_1600_call_run(arm):
    """The claim behind reading one run at three budgets, on the kept real-data runs: every group but the last
    of the 1,600-call run (which the budget may shorten) is the 10,000-call run's, number for number. (search:
    its generations, from its history; its 1,600-call runs were made again on 2026-12-07 with the verifier the
    10,000-call runs had, and this is what showed the 2026-12-03 ones were another verifier's.)"""
    keys = ("group", "calls", "best_reward", "programs", "book_members", "effective_bets", "book_cpcv", "admitted",
            "rejected") if arm != "search" else ("generation", "calls", "best_reward", "mean_reward", "valid_share")
    key = "history" if arm == "search" else "curve"
    pairs = [(read_object(LONGER / f"seed-{s}" / f"{arm}.json")[key],
              read_object(KEPT / f"seed-{s}" / f"{arm}.json")[key])
             for s in (42, 43, 44) if (LONGER / f"seed-{s}" / f"{arm}.json").exists()
             and (KEPT / f"seed-{s}" / f"{arm}.json").exists()]
    if not pairs:
        pytest.skip(f"no seed keeps {arm} at both 1,600 and 10,000 calls")
    for longer, short in pairs:
        assert short[-1]["calls"] == 1600 and longer[-1]["calls"] == 10000
        assert [{k: r[k] for k in keys} for r in longer[:len(short) - 1]] == [{k: r[k] for k in keys}
                                                                              for r in short[:-1]]


MIDDLE = KEPT.parent / "compare-4800"


@pytest.mark.parametrize("arm", ["evolve", "random", "search"])
def test_a_kept_10000_call_run_read_at_4800_is_the_kept_4800_call_run(arm):
    """The same claim at 4,800 calls, and for `search` too: its budget only caps the seeds it scores (at most
    half the budget), so once every seed fits, a longer search read at B is the search of budget B. Every row
    the 4,800-call run shares with the longer one (all but its last, which the budget may shorten) is equal."""
    pairs = [(read_object(LONGER / f"seed-{s}" / f"{arm}.json"), read_object(MIDDLE / f"seed-{s}" / f"{arm}.json"))
             for s in (42, 43, 44) if (LONGER / f"seed-{s}" / f"{arm}.json").exists()
             and (MIDDLE / f"seed-{s}" / f"{arm}.json").exists()]
    if not pairs:
        pytest.skip(f"no seed keeps {arm} at both 4,800 and 10,000 calls")
    key = "history" if arm == "search" else "curve"
    for longer, short in pairs:
        assert short["budget"] == 4800 and longer["budget"] == 10000
        a, b = longer[key], short[key]
        assert b[-1]["calls"] <= 4800 and len(b) > 100
        drop = ("seconds",)                                  # the one thing two runs of one schedule differ in
        assert [{k: v for k, v in r.items() if k not in drop} for r in a[:len(b) - 1]] == \
            [{k: v for k, v in r.items() if k not in drop} for r in b[:-1]]


def test_search_rows_are_part_way_only_below_the_budget_that_fits_its_seeds(tmp_path):
    """Read from kept files: the 10,000-call search runs (116 seeds, seed_share 0.5) are budget-B runs at 1,600
    and 4,800; the same runs with their seeds said to be 1,000 are part-way there (a 1,600-call search would have
    scored 800 of them). A run kept at 4,800 whose last group ends at 4,796 is read at 4,800."""
    if not (LONGER / "seed-42" / "search.json").exists() or not (MIDDLE / "seed-42" / "evolve.json").exists():
        pytest.skip("the kept 4,800- and 10,000-call comparisons are not here")
    rows = {(r["arm"], r["budget"]): r for r in budget_rows(arm_curves(LONGER))}
    assert not rows[("search", 1600)]["part_way"] and not rows[("search", 4800)]["part_way"]
    curves = arm_curves(LONGER)
    for c in curves["search"].values():
        c[-1]["exact_from"] = 2000                             # what 1,000 seeds at seed_share 0.5 would give
    rows = {(r["arm"], r["budget"]): r for r in budget_rows(curves)}
    assert rows[("search", 1600)]["part_way"] and not rows[("search", 4800)]["part_way"]
    middle = {(r["arm"], r["budget"]): r for r in budget_rows(arm_curves(MIDDLE))}
    ends = [read_object(MIDDLE / f"seed-{s}" / "evolve.json")["curve"][-1]["calls"] for s in (42, 43, 44)]
    assert max(ends) < 4800 and ("evolve", 4800) in middle and not any(b == max(ends) for a, b in middle)
    # and the reading is the same as the longer run's at 4,800
    assert middle[("evolve", 4800)]["best_reward"] == rows[("evolve", 4800)]["best_reward"]
    assert middle[("search", 4800)]["best_reward"] == rows[("search", 4800)]["best_reward"]
