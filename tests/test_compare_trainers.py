"""End-to-end smoke run of the trainer comparison: every rung, 2 steps, real SmolLM2-135M, tiny settings."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_compare_trainers_smoke_produces_table_plots_and_json(tmp_path):
    pytest.importorskip("trl")
    spec = importlib.util.spec_from_file_location("compare_trainers", ROOT / "benchmarks" / "compare_trainers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    out = tmp_path / "compare"
    assert module.main(["--scale", "smoke", "--out", str(out)]) == 0
    table = (out / "comparison.md").read_text()
    rungs = [name for name, _, _ in module.LADDER]
    for name in rungs:
        assert f"| {name} |" in table
    data = json.loads((out / "comparison.json").read_text())
    assert [r["rung"] for r in data["rungs"]] == rungs
    for r in data["rungs"]:
        assert [c["step"] for c in r["checkpoints"]] == [0, 1, 2]
        assert r["selected_step"] in (0, 1, 2)
        assert len(r["log"]) == 2 and all("reward" in x and "core" in x for x in r["log"])
        assert (out / r["rung"] / "holdout-step-2.json").exists()
    assert data["pseudo_holdout"][0] > data["train_end"]
    for png in ("curves.png", "holdout_per_checkpoint.png"):
        assert (out / png).stat().st_size > 10_000
