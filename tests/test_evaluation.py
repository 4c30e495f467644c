"""Holdout scoring, checkpoint and book selection, reports and the evaluation CLI."""

from __future__ import annotations

import argparse
import base64
import json
import math
from itertools import combinations

import numpy as np
import pytest

from alpha_gym.book import metrics
from alpha_gym.evaluation import (Candidate, HoldoutConfig, HoldoutEvaluator, HoldoutOverlapError, TrainRecord,
                                  checkpoint_table, compare_selectors, effective_bets, evaluate_holdout,
                                  holdout_score, load_holdout, select_checkpoint, select_correlation_capped,
                                  select_top_k)
from alpha_gym.commands.evaluation import register
from alpha_gym.commands.briefs import register as register_briefs
from alpha_gym.evaluation.holdout import holdout_formula_score
from alpha_gym.evaluation.report import write_report
from alpha_gym.evaluation.selection import save_books, save_checkpoints
from alpha_gym.market import Panel
from alpha_gym.scoring.verifier import Verifier

N_TRAIN, N_HOLD, N_STOCKS = 260, 40, 5


def hand_panel(seed: int = 0, n_days: int = N_TRAIN + N_HOLD) -> Panel:
    """5 stocks whose price ORDER never changes (levels 20, 40, ... 100, moves within +-6%), and whose volume
    ORDER flips every day."""
    rng = np.random.default_rng(seed)
    base = 20.0 * np.arange(1, N_STOCKS + 1)
    wiggle = 0.03 * np.sin(np.arange(n_days)[:, None] / 7.0 + np.arange(N_STOCKS)) + rng.uniform(-0.03, 0.03,
                                                                                              (n_days, N_STOCKS))
    close = base * (1 + wiggle)
    open_ = close * (1 + rng.uniform(-0.002, 0.002, close.shape))
    high = np.maximum(open_, close) * 1.01
    low = np.minimum(open_, close) * 0.99
    up = np.arange(1, N_STOCKS + 1, dtype=float)
    volume = np.where((np.arange(n_days) % 2 == 0)[:, None], up, up[::-1]) * 1e7
    dates = np.datetime64("2020-01-01") + np.arange(n_days)
    return Panel({"open": open_, "high": high, "low": low, "close": close, "volume": volume}, dates,
                 tuple(f"S{i}" for i in range(N_STOCKS)), source="hand")


def split(panel: Panel, n_train: int = N_TRAIN):
    return panel.head(n_train), panel.window(start=panel.dates[n_train])


def hand_cpcv(net: np.ndarray) -> float:
    n = len(net)
    edges = np.linspace(0, n, 7).round().astype(int)
    blocks = [np.arange(edges[b], edges[b + 1]) for b in range(6)]
    sharpes = []
    for a, b in combinations(range(6), 2):
        x = net[np.concatenate([blocks[a], blocks[b]])]
        sharpes.append(x.mean() / x.std(ddof=1) * math.sqrt(252))
    sharpes = np.array(sharpes)
    assert len(sharpes) == 15
    return sharpes.mean() - 0.5 * sharpes.std(ddof=0)


def _open_returns(p: Panel):
    o = p.field("open")
    return o[2:] / o[1:-1] - 1.0     # row t: decision at close(t)


# ----------------------------------------------------------------------------- holdout, by hand
def test_holdout_score_static_book_by_hand():
    p = hand_panel()
    train, hold = split(p)
    res = holdout_score("close", train, hold)
    assert res.valid and res.n_days == N_HOLD - 2
    w = np.array([-2, -1, 0, 1, 2]) / 6.0                 # rank -> centre -> gross 1
    r = _open_returns(p)[N_TRAIN:N_TRAIN + N_HOLD - 2]
    borrow = 50e-4 / 252 * 0.5                             # the short half of the book, every day
    net = r @ w - borrow
    assert res.turnover == 0.0                              # same weights as on the last training day
    assert res.mean_cost == pytest.approx(borrow, rel=1e-12)
    np.testing.assert_allclose(res.net, net, rtol=1e-10, atol=1e-15)
    assert res.cpcv == pytest.approx(hand_cpcv(net), rel=1e-9)
    assert res.score == pytest.approx(np.clip(hand_cpcv(net), -5, 5), rel=1e-9)
    assert res.total_return == pytest.approx(np.prod(1 + net) - 1, rel=1e-9)


def test_holdout_score_flipping_book_with_costs_and_turnover_penalty_by_hand():
    p = hand_panel(seed=1)
    train, hold = split(p)
    res = holdout_score("volume", train, hold)
    assert res.valid
    w0 = np.array([-2, -1, 0, 1, 2]) / 6.0
    rows = np.arange(N_TRAIN, N_TRAIN + N_HOLD - 2)
    sign = np.where(rows % 2 == 0, 1.0, -1.0)               # volume order flips every day
    W = sign[:, None] * w0
    r = _open_returns(p)[rows]
    # trailing 20-session liquidity, by hand
    vwap = (p.field("high") + p.field("low") + p.field("close")) / 3
    dv = vwap * p.field("volume")
    c = p.field("close")
    ret = np.full(c.shape, np.nan)
    ret[1:] = c[1:] / c[:-1] - 1
    cost = np.zeros(len(rows))
    for k, t in enumerate(rows):
        V = dv[t - 19:t + 1].mean(axis=0)
        sigma = ret[t - 19:t + 1].std(axis=0)
        q = np.abs(W[k] - (-W[k]))                          # yesterday's weights were the opposite
        part = q * 1e6 / V
        impact = q * (3e-4 + sigma * np.sqrt(part))
        capacity = q * np.maximum(0.0, part - 0.01)
        cost[k] = impact.sum() + capacity.sum() + 50e-4 / 252 * np.maximum(0, -W[k]).sum()
    net = (W * r).sum(axis=1) - cost
    assert res.turnover == pytest.approx(2.0)               # a full flip of a gross-1 book every day
    np.testing.assert_allclose(res.net, net, rtol=1e-9, atol=1e-14)
    assert res.cpcv == pytest.approx(hand_cpcv(net), rel=1e-9)
    assert res.score == pytest.approx(np.clip(hand_cpcv(net) - 2 * (2.0 - 0.5), -5, 5), rel=1e-9)


def test_score_formula_clips_and_penalises():
    assert holdout_formula_score(1.0, 0.5) == 1.0
    assert holdout_formula_score(1.0, 0.75) == pytest.approx(0.5)
    assert holdout_formula_score(9.0, 0.1) == 5.0
    assert holdout_formula_score(-1.0, 3.0) == -5.0


def test_refuses_a_holdout_that_overlaps_training():
    p = hand_panel()
    train = p.head(N_TRAIN)
    for start in (p.dates[N_TRAIN - 1], p.dates[100]):     # shares the last training day / starts inside it
        with pytest.raises(HoldoutOverlapError, match="overlaps the training window"):
            holdout_score("close", train, p.window(start=start))
    with pytest.raises(HoldoutOverlapError):
        evaluate_holdout(["close"], train, p)
    _, hold = split(p)
    with pytest.raises(HoldoutOverlapError):               # a training verifier that reaches the holdout
        evaluate_holdout(["close"], train, hold, train_verifier=Verifier(p))


def test_invalid_answers_and_families():
    train, hold = split(hand_panel())
    rep = evaluate_holdout(["ts_mean(close, 20)", "ts_mean(close, 21)", "rank(close -)", None,
                            "<alpha>rank(volume)</alpha>", "ts_mean(close, 252) - ts_mean(close, 252)"],
                           train, hold)
    s = rep.summary()
    assert s["n_answers"] == 6 and s["n_valid"] == 3
    assert s["n_families"] == 2                             # windows 20 and 21 bucket to the same family
    assert [a.valid for a in rep.answers] == [True, True, False, False, True, False]
    assert "never trades" in rep.answers[5].reason
    assert s["n_positive"] == sum(a.score > 0 for a in rep.valid)
    assert s["mean_score"] == pytest.approx(np.mean([a.score for a in rep.valid]))


def test_equal_weight_book():
    p = hand_panel()
    train, hold = split(p)
    ev = HoldoutEvaluator(train, hold)
    a, neg, b = ev.score("close"), ev.score("-close"), ev.score("volume")
    stats, net = ev.book([a])
    np.testing.assert_allclose(net, a.net)                  # one member: its own book
    stats, net = ev.book([a, neg])                          # opposite weights cancel: a flat book, no cost
    assert np.all(net == 0) and stats.turnover == 0 and stats.total_return == 0
    stats, net = ev.book([a, b])
    w = (a.weights + b.weights) / 2                         # the average of the members' weights, one book
    assert stats.n_members == 2
    assert stats.turnover == pytest.approx(np.abs(np.diff(w, axis=0))[ev.rows - 1].sum(1).mean())
    market = ev.market
    rows_p = ev.rows - ev.n_context + N_TRAIN                 # the same days, indexed in the full panel
    np.testing.assert_allclose(market, np.nanmean(_open_returns(p)[rows_p], axis=1))
    down = market < -0.015
    if down.any():
        assert stats.down_day_return == pytest.approx(net[down].mean())
    beta, corr = metrics.beta_and_correlation(net, market)
    assert (stats.beta, stats.market_correlation) == pytest.approx((beta, corr))
    assert stats.sharpe == pytest.approx(metrics.sharpe(net))
    assert stats.max_drawdown == pytest.approx(metrics.max_drawdown(net))


# ----------------------------------------------------------------------------- no leakage
FORMULAS = ["rank(-ts_delta(close, 5))", "rank(ts_std(volume, 20) / ts_mean(volume, 20))",
            "rank(ts_corr(close, volume, 10))"]


def test_no_holdout_value_reaches_the_training_path(small_synthetic, monkeypatch):
    train, hold = small_synthetic.head(300), small_synthetic.window(start=small_synthetic.dates[300])
    fingerprint = train.fingerprint()
    seen = []
    real_trade = Verifier.trade  # the one answer-to-book path (`evaluate` goes through it too)

    def spy(self, formula, *a, **k):
        seen.append((formula, self.panel.dates[-1], self.panel.n_days))
        return real_trade(self, formula, *a, **k)

    monkeypatch.setattr(Verifier, "trade", spy)
    verifier = Verifier(train)
    rep = evaluate_holdout(FORMULAS, train, hold, train_verifier=verifier)
    # 1. the training verifier only ever evaluated on its own panel, which ends before the holdout
    # (each answer once; the alpha tests' self-correlation may seed its archive, on the same panel)
    assert [f for f, _, _ in seen if f in {a.formula for a in rep.answers}] == [a.formula for a in rep.answers]
    assert all(last < hold.dates[0] and n == train.n_days for _, last, n in seen)
    assert not set(verifier.panel.dates.tolist()) & set(hold.dates.tolist())
    assert train.fingerprint() == fingerprint               # the training panel is untouched
    # 2. corrupt every holdout value: every train-window number stays bit-identical, holdout numbers move
    rng = np.random.default_rng(0)
    noisy = Panel({k: v * rng.uniform(0.5, 1.5, v.shape) for k, v in hold.data.items()}, hold.dates, hold.tickers)
    rep2 = evaluate_holdout(FORMULAS, train, noisy, train_verifier=verifier)
    assert [a.train_cpcv for a in rep2.answers] == [a.train_cpcv for a in rep.answers]
    assert [a.train_turnover for a in rep2.answers] == [a.train_turnover for a in rep.answers]
    assert [a.score for a in rep2.answers] != [a.score for a in rep.answers]


def test_holdout_reads_only_the_context_tail_and_never_looks_ahead(small_synthetic):
    train, hold = small_synthetic.head(300), small_synthetic.window(start=small_synthetic.dates[300])
    ctx = HoldoutConfig().context
    base = [holdout_score(f, train, hold) for f in FORMULAS]
    # sessions of the training panel before the context cannot matter
    early = {k: v.copy() for k, v in train.data.items()}
    for v in early.values():
        v[:train.n_days - ctx] *= 3.0
    shifted = Panel(early, train.dates, train.tickers)
    assert [holdout_score(f, shifted, hold).score for f in FORMULAS] == [r.score for r in base]
    # weights decided on holdout day k do not depend on holdout data after day k
    k = 40
    late = {name: v.copy() for name, v in hold.data.items()}
    for v in late.values():
        v[k + 1:] *= 1.7
    changed = Panel(late, hold.dates, hold.tickers)
    ev = HoldoutEvaluator(train, changed)
    for f, r in zip(FORMULAS, base):
        np.testing.assert_array_equal(ev.score(f).weights[:ctx + k + 1], r.weights[:ctx + k + 1])


# ----------------------------------------------------------------------------- selection
def test_select_checkpoint_rule():
    recs = [TrainRecord(0, (-1.0, -0.9, None)), TrainRecord(100, (0.5, None, 0.3)),
            TrainRecord(200, (0.4, 0.4)), TrainRecord(300, (None, None))]
    choice = select_checkpoint(recs)
    assert choice.step == 100 and choice.mean_train_cpcv == pytest.approx(0.4)
    assert choice.means[300] is None
    # ties go to the earliest step, whatever the input order
    assert select_checkpoint({300: [0.2], 100: [0.1, 0.3], 200: [0.2]}).step == 100
    assert select_checkpoint([TrainRecord(5, (None,)), TrainRecord(9, (-3.0,))]).step == 9
    with pytest.raises(TypeError):                          # records carrying anything else are refused
        select_checkpoint([{"step": 1, "probe_train_cpcv": [1.0], "holdout_score": 2.0}])


def test_checkpoint_choice_ignores_holdout_numbers():
    rng = np.random.default_rng(1)
    recs = [TrainRecord(s, tuple(rng.normal(0, 1, 50))) for s in range(0, 700, 100)]
    chosen = select_checkpoint(recs).step
    for trial in range(20):
        holdout = {s: {"holdout_score": float(rng.normal(0, 3)), "n_valid": int(rng.integers(0, 50)),
                       "book_return": float(rng.normal()), "book_sharpe": float(rng.normal(0, 2))}
                   for s in range(0, 700, 100)}
        if trial % 2:    # make some other checkpoint the holdout's best by far
            holdout[(chosen + 100) % 700]["holdout_score"] = 99.0
        table = checkpoint_table(recs, holdout)
        assert table["selected_step"] == chosen
        assert [r["step"] for r in table["rows"] if r["selected"]] == [chosen]
        assert all("holdout_score" in r for r in table["rows"])


def _cands():
    rng = np.random.default_rng(3)
    x, y, z = rng.normal(0, 0.01, (3, 500))
    return {
        "A": Candidate("A", 1.0, 0.10, x),
        "B": Candidate("B", 0.9, 0.10, x + rng.normal(0, 0.001, 500)),    # the same bet as A
        "C": Candidate("C", 0.8, 0.01, y),                                 # trades under 2% a day
        "D": Candidate("D", 0.7, 0.20, y + 0.2 * x),                       # |corr with A| about 0.2
        "E": Candidate("E", 0.6, 0.30, -x),                                # A reversed: |corr| = 1
        "F": Candidate("F", 0.5, 0.30, 0.6 * x + 0.8 * z),                 # |corr with A| about 0.6
        "G": Candidate("G", 0.4, 0.05, z - 0.3 * y),
    }


def test_correlation_capped_selector_picks_what_the_rule_says():
    c = _cands()
    sel = select_correlation_capped(list(c.values())[::-1])   # input order does not matter
    assert sel.members == ("A", "D", "G")
    assert sel.skipped == {"turnover": 1, "correlation": 3}
    pnls = np.array([c[m].pnl for m in sel.members])
    assert sel.median_cpcv == pytest.approx(0.7)
    assert sel.sharpe == pytest.approx(metrics.sharpe(pnls.mean(0)))
    assert sel.max_drawdown == pytest.approx(metrics.max_drawdown(pnls.mean(0)))
    top = select_top_k(c.values(), k=3)
    assert top.members == ("A", "B", "C")
    assert top.effective_bets < sel.effective_bets
    both = compare_selectors(list(c.values()), k=3)
    assert both["correlation_capped"].members == sel.members and both["top_k"].members == top.members


def _same_book(a, b) -> bool:
    return (a.members == b.members and a.skipped == b.skipped and a.effective_bets == b.effective_bets
            and a.median_cpcv == b.median_cpcv and a.sharpe == b.sharpe and a.mean_abs_corr == b.mean_abs_corr
            and np.array_equal(a.returns, b.returns))


def test_the_growing_book_is_the_correlation_capped_book_after_every_addition():
    """GrowingCappedBook (what an evolve run asks after every group) against the reference selector, on a set
    that grows by a few candidates at a time: families of correlated P&L, so candidates are blocked, and new
    ones with higher CPCV arrive late, so members leave and blocked candidates come back. Bit for bit."""
    from alpha_gym.evaluation.selection import GrowingCappedBook
    rng = np.random.default_rng(3)
    bases = rng.normal(0, 0.01, (12, 400))
    grown, book = [], GrowingCappedBook()
    left = came_back = 0
    previous, seen_blocked = (), set()
    for step in range(60):
        for _ in range(int(rng.integers(1, 5))):
            i = len(grown)
            family = rng.choice(12, size=2, replace=False)
            pnl = bases[family[0]] + rng.uniform(0, 1.2) * bases[family[1]] + rng.normal(0, 0.004, 400)
            cpcv = float(rng.normal(0.5 + 0.02 * step, 0.5))       # later ones tend to score higher
            grown.append(Candidate(f"c{i:03d}", cpcv, float(rng.choice([0.01, 0.1, 0.3])), pnl))
        got, want = book.select(grown), select_correlation_capped(grown)
        assert _same_book(got, want), step
        left += len(set(previous) - set(got.members))
        came_back += sum(1 for m in got.members if m in seen_blocked)
        seen_blocked = {c.name for c in grown} - set(got.members)
        previous = got.members
    assert left > 0 and came_back > 0 and want.skipped["correlation"] > 20 and want.skipped["turnover"] > 0
    # a copy of a member, ranked last, cannot join: the same members, so the statistics are reused (the same
    # returns array) and only the counts are new
    before = book.select(grown)
    member = next(c for c in grown if c.name == before.members[0])
    grown.append(Candidate("late", -9.0, 0.3, member.pnl.copy()))
    got, want = book.select(grown), select_correlation_capped(grown)
    assert _same_book(got, want) and got.returns is before.returns
    assert got.skipped["correlation"] == before.skipped["correlation"] + 1


def test_effective_bets():
    rng = np.random.default_rng(0)
    x = rng.normal(size=300)
    assert effective_bets([x, x, x]) == pytest.approx(1.0)
    y = rng.normal(size=300)
    rho = np.corrcoef(x, y)[0, 1]
    assert effective_bets([x, y]) == pytest.approx(2 / (1 + rho ** 2))     # eigenvalues 1 +- rho
    q, _ = np.linalg.qr(rng.normal(size=(300, 4)))
    q -= q.mean(0)
    assert effective_bets(q.T) == pytest.approx(4.0, rel=0.05)


# ----------------------------------------------------------------------------- report
def _run_dir(tmp_path, small_synthetic):
    train, hold = small_synthetic.head(300), small_synthetic.window(start=small_synthetic.dates[300])
    verifier = Verifier(train)
    rep = evaluate_holdout(FORMULAS + ["rank(close -)"], train, hold, train_verifier=verifier, label="t", step=3)
    run = tmp_path / "run"
    rep.save(run)
    with open(run / "log.jsonl", "w") as f:
        for s in range(30):
            f.write(json.dumps({"step": s, "reward": s / 30, "core": s / 60 - 0.3,
                                "valid_share": 0.8 + s / 200}) + "\n")
    save_checkpoints(run, checkpoint_table([TrainRecord(0, (0.1,)), TrainRecord(3, (0.2,))], {3: rep}))
    cands = [Candidate.from_evaluated(verifier.evaluate(f)) for f in FORMULAS]
    save_books(run, compare_selectors(cands, k=2))
    return run, rep


def test_report_writes_one_html_with_the_plots(tmp_path, small_synthetic):
    run, rep = _run_dir(tmp_path, small_synthetic)
    d = load_holdout(run)
    assert d["summary"]["n_valid"] == 3
    assert len(d["series"]["book"]) == len(d["series"]["dates"]) == rep.book_returns.size
    assert d["answers"][0]["slice_sharpes"] and len(d["answers"][0]["slice_sharpes"]) == 15
    path = write_report(run)
    html = path.read_text()
    images = html.split("data:image/png;base64,")[1:]
    assert len(images) == 4                                 # growth, beta scatter, CPCV slices, training
    for img in images:
        assert base64.b64decode(img.split('"', 1)[0])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "rank(ts_corr(close, volume, 10))" in html and "Checkpoints" in html and "effective bets" in html
    assert "&lt;" not in d["definition"] and "src=\"http" not in html   # self-contained


def test_report_with_only_a_training_log_and_with_nothing(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "log.jsonl").write_text('{"step": 0, "reward": -1}\n{"step": 1, "reward": 0}\n')
    assert write_report(tmp_path / "a").read_text().count("data:image/png") == 1
    (tmp_path / "b").mkdir()
    with pytest.raises(FileNotFoundError):
        write_report(tmp_path / "b")


# ----------------------------------------------------------------------------- baselines
def test_baselines_are_scored_as_answers_are(small_synthetic):
    """Each baseline's score is the holdout score of its formula(s); the Alpha101 row is the 82-formula book."""
    from alpha_gym.alpha101 import formulas as alpha101
    from alpha_gym.evaluation.baselines import all_baselines, beats, best_baseline, score_baselines
    train, hold = small_synthetic.head(300), small_synthetic.window(start=small_synthetic.dates[300])
    ev = HoldoutEvaluator(train, hold)
    rows = score_baselines(ev)
    assert [r["name"] for r in rows] == [b.name for b in all_baselines()]
    assert {r["kind"] for r in rows} == {"motif", "reference", "alpha101"}
    for r in rows:
        if r["n"] == 1:
            one = ev.score(r["formulas"][0])
            assert one.valid and r["n_valid"] == 1, (r["name"], one.reason)   # every single baseline is computable
            assert r["score"] == one.score and r["lo"] is None
        assert r["book"]["n_members"] == r["n_valid"]
    book = rows[-1]
    assert book["kind"] == "alpha101" and book["n"] == len(alpha101()) == 82
    members = [ev.score(f) for f in alpha101().values()]
    scores = [m.score for m in members if m.valid]
    assert book["n_valid"] == len(scores) >= 70
    assert book["score"] == pytest.approx(np.mean(scores), abs=1e-12)
    assert book["lo"] < book["score"] < book["hi"]
    best = best_baseline(rows)
    assert best["score"] == max(r["score"] for r in rows if r["score"] is not None)
    assert beats(best["score"] + 0.01, rows) is True and beats(best["score"] - 0.01, rows) is False
    assert beats(None, rows) is None and best_baseline([]) is None
    # deterministic: the same window gives the same rows
    assert json.dumps(score_baselines(HoldoutEvaluator(train, hold))) == json.dumps(rows)


def test_holdout_report_carries_baselines_and_an_interval(small_synthetic, tmp_path):
    train, hold = small_synthetic.head(300), small_synthetic.window(start=small_synthetic.dates[300])
    plain = evaluate_holdout(FORMULAS, train, hold)
    rep = evaluate_holdout(FORMULAS, train, hold, baselines=True)
    assert plain.baselines == () and len(rep.baselines) == 10
    assert [a.score for a in rep.answers] == [a.score for a in plain.answers]   # baselines change no answer
    s = rep.summary()
    assert s["mean_score_lo"] <= s["mean_score"] <= s["mean_score_hi"]
    d = json.loads(json.dumps(rep.to_dict()))
    assert d["baselines"][0]["formulas"] == ["rank(volume)"]
    rep.save(tmp_path / "run")
    html = write_report(tmp_path / "run").read_text()
    assert "Baselines (no model" in html and "rank(volume)" in html and "best baseline" in html


# ----------------------------------------------------------------------------- CLI
def _cli(argv):
    parser = argparse.ArgumentParser(prog="test")
    sub = parser.add_subparsers(dest="command", required=True)
    register_briefs(sub)
    register(sub)
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_briefs_holdout_and_report(tmp_path, small_synthetic, write_market_csv, capsys):
    out = tmp_path / "briefs.jsonl"
    assert _cli(["briefs", "generate", "--n", "40", "--seed", "1", "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 40
    assert _cli(["briefs", "split", "--briefs", str(out), "--n-probe", "4", "--train-out", str(tmp_path / "t.jsonl"),
                 "--probe-out", str(tmp_path / "p.jsonl")]) == 0
    assert len((tmp_path / "p.jsonl").read_text().splitlines()) == 4
    # a long-format CSV of the small synthetic market; the last 100 sessions are the holdout
    p = small_synthetic
    data = write_market_csv(p, tmp_path / "m.csv.gz")
    formulas = tmp_path / "f.txt"
    formulas.write_text("# two formulas and a broken one\n" + "\n".join(FORMULAS[:2]) + "\nrank(close -)\n")
    capsys.readouterr()
    run = tmp_path / "run"
    assert _cli(["holdout-formulas", "--data", str(data), "--holdout-start", str(p.dates[300]),
                 "--formulas", str(formulas), "--out", str(run)]) == 0
    text = capsys.readouterr().out
    assert "valid 2/3" in text and "equal-weight book" in text
    assert "baselines (no model" in text and "rank(volume)" in text and "the best baseline" in text
    lines = text.splitlines()  # the per-formula lines sit under a header naming their columns (issue 43.7)
    header = next(i for i, ln in enumerate(lines) if "train CPCV" in ln)
    assert lines[header].split() == ["holdout", "train", "CPCV", "turnover", "Sharpe", "formula", "(or", "why",
                                     "invalid)"]
    assert "rank(close -)  (" in lines[header + 3] and lines[header + 3].startswith("   invalid")  # and its reason
    d = load_holdout(run)
    assert d["train_end"] == str(p.dates[299]) and d["holdout_start"] == str(p.dates[300])
    assert d["answers"][0]["train_cpcv"] is not None
    assert _cli(["report", str(run)]) == 0 and (run / "report.html").exists()
    assert _cli(["holdout-formulas", "--data", str(data), "--holdout-start", str(p.dates[300]),
                 "--formulas", str(formulas), "--no-baselines", "--no-train"]) == 0
    assert "baselines" not in capsys.readouterr().out


# ----------------------------------------------------------------------------- real data
@pytest.mark.real_data
def test_real_pseudo_holdout_last_252_sessions(real_us46):
    train = real_us46.head(real_us46.n_days - 252)
    hold = real_us46.window(start=real_us46.dates[-252])
    assert train.dates[-1] < hold.dates[0] and hold.n_days == 252
    verifier = Verifier(train)
    formulas = ["rank(ts_max(volume / vwap, 11) / ts_mean(close, 21))", "rank(ts_std(volume / (high - low), 34))",
                "rank(ts_std(volume, 8) / ts_std(close, 8))", "rank(-ts_delta(close, 5))", "rank(close -)"]
    rep = evaluate_holdout(formulas, train, hold, train_verifier=verifier)
    s = rep.summary()
    assert s["n_valid"] == 4 and s["n_families"] == 4
    assert len(rep.dates) == 250 and rep.dates[0] == hold.dates[0]
    for a in rep.valid:
        assert -5 <= a.score <= 5 and len(a.slice_sharpes) == 15 and a.train_cpcv is not None
        assert 0 < a.mean_cost < 0.01
    b = rep.book
    assert b.n_members == 4
    for v in (b.total_return, b.sharpe, b.beta, b.market_correlation, b.max_drawdown):
        assert math.isfinite(v)
    assert abs(b.beta) < 0.5 and b.max_drawdown <= 0 and b.n_down_days > 0
    assert verifier.panel.dates[-1] < hold.dates[0]
    json.dumps(rep.to_dict(), allow_nan=False)
