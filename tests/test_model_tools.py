"""Model-driven tools: the difficulty filter and the checkpoint holdout, with the real SmolLM2-135M through the CLI."""

from __future__ import annotations

import json

import pytest

from trainers.difficulty import BriefPassRate, filter_briefs, keep


def test_keep_rule():
    assert not keep(0.0) and not keep(1.0)
    assert keep(0.125) and keep(0.875)
    assert not keep(0.875, upper=0.75) and keep(0.75, upper=0.75)


def test_filter_keeps_order_and_rule():
    from alpha_gym.tasks.briefs import FIXED_BRIEFS
    briefs = list(FIXED_BRIEFS[:4])
    rates = [BriefPassRate(b.id, b.family, 8, solved, solved) for b, solved in zip(briefs, (0, 3, 8, 7))]
    assert [b.id for b in filter_briefs(briefs, rates)] == [briefs[1].id, briefs[3].id]
    assert [b.id for b in filter_briefs(briefs, rates, upper=0.75)] == [briefs[1].id]


@pytest.mark.slow
def test_filter_cli_with_the_real_model(tmp_path, small_synthetic):
    pytest.importorskip("trl")
    from alpha_gym.commands.main import main
    from alpha_gym.market.loader import load_panel  # noqa: F401  (the CLI loads data itself)
    data = tmp_path / "market.csv"
    _write_long_csv(small_synthetic, data)
    out = tmp_path / "kept.jsonl"
    rc = main(["briefs", "filter", "--tries", "2", "--limit", "2", "--max-new-tokens", "12", "--out", str(out),
               "--data", str(data)])
    assert rc == 0 and out.exists()
    rates = [json.loads(line) for line in out.with_suffix(".pass_rates.jsonl").read_text().splitlines()]
    assert len(rates) == 2 and all(r["tries"] == 2 and 0 <= r["pass_rate"] <= 1 for r in rates)


@pytest.mark.slow
def test_holdout_cli_with_the_real_model(tmp_path, small_synthetic):
    pytest.importorskip("trl")
    from alpha_gym.commands.main import main
    data = tmp_path / "market.csv"
    _write_long_csv(small_synthetic, data)
    start = str(small_synthetic.dates[300])
    run = tmp_path / "run"
    rc = main(["holdout", "--data", str(data), "--holdout-start", start, "--probe", "2", "--max-new-tokens", "16",
               "--out", str(run)])
    assert rc == 0
    saved = json.loads((run / "holdout.json").read_text())
    assert saved["summary"]["n_answers"] == 2 and saved["holdout_start"] == start
    assert saved["train_end"] < start


def _write_long_csv(panel, path):
    import numpy as np
    with open(path, "w") as fh:
        fh.write("date,ticker,open,high,low,close,volume\n")
        for t, day in enumerate(panel.dates):
            for i, ticker in enumerate(panel.tickers):
                row = [panel.field(f)[t, i] for f in ("open", "high", "low", "close", "volume")]
                fh.write(f"{np.datetime_as_string(day)},{ticker}," + ",".join(repr(float(x)) for x in row) + "\n")
