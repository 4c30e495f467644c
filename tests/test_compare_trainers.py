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
    # the start model answers the probe once, for every rung
    assert (out / "step-0" / "probe-step-0.json").exists()
    assert not any((out / name / "probe-step-0.json").exists() for name in rungs)
    assert len({json.dumps(r["checkpoints"][0], sort_keys=True) for r in data["rungs"]}) == 1
    for r in data["rungs"]:
        assert all(0 <= c["train_valid"] <= c["n"] for c in r["checkpoints"])

    # a rerun resumes from what is on disk: no retraining, no new probe answers, the same rows
    probe_file = out / rungs[0] / "probe-step-2.json"
    before = probe_file.stat().st_mtime_ns
    assert module.main(["--scale", "smoke", "--out", str(out), "--rungs", rungs[0]]) == 0
    assert probe_file.stat().st_mtime_ns == before
    again = json.loads((out / "comparison.json").read_text())["rungs"][0]
    assert again["checkpoints"] == data["rungs"][0]["checkpoints"]
    assert len(again["log"]) == 2
    # ... but not into a folder made with other settings
    with pytest.raises(SystemExit, match="scale_settings"):
        module.main(["--scale", "smoke", "--out", str(out), "--steps", "3"])
