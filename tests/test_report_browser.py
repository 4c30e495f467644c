"""The run report in a real browser: headless Chromium renders it with no network, and the plots show."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.report_screenshot import find_chromium, screenshot  # the repo root is on pytest's pythonpath

pytestmark = pytest.mark.skipif(find_chromium() is None,
                                reason="no headless Chromium on PATH (Debian: apt-get install chromium)")


def _run_folder(tmp_path, panel) -> Path:
    """A run folder as training and evaluation leave it: holdout.json with baselines, log.jsonl, completions."""
    from alpha_gym.evaluation import evaluate_holdout
    from alpha_gym.scoring.config import CHANNELS
    from alpha_gym.scoring.verifier import Verifier
    train, hold = panel.head(300), panel.window(start=panel.dates[300])
    verifier = Verifier(train)
    answers = ["<alpha>rank(ts_std(volume, 20) / ts_mean(volume, 20))</alpha>", "<alpha>rank(-ts_delta(close, 5))"
               "</alpha>", "<alpha>rank(ts_corr(close, volume, 10))</alpha>", "no formula here"]
    run = tmp_path / "run"
    evaluate_holdout([a for a in answers[:3]], train, hold, train_verifier=verifier, baselines=True).save(run)
    group = verifier.score_group(answers)
    with open(run / "completions.jsonl", "w") as f:
        for step in (1, 2):
            for a, s in zip(answers, group.scores):
                f.write(json.dumps({"step": step, "brief_id": "b", "answer": a, "valid": s.valid, "reason": s.reason,
                                    "reward": s.reward, "advantage": 0.0, "channels": s.channels}) + "\n")
    with open(run / "log.jsonl", "w") as f:
        for step in (1, 2):
            f.write(json.dumps({"step": step, "reward": float(group.rewards.mean()), "valid_share": 0.75,
                                "kl": 0.01 * step, "entropy": 0.4, "families": 3,
                                **{f"rewards/{c}": float(group.matrix[:, k].mean()) for k, c in
                                   enumerate(CHANNELS)}}) + "\n")
    (run / "checkpoint-2").mkdir()
    return run


def test_report_renders_in_headless_chromium(tmp_path, small_synthetic):
    from PIL import Image

    from alpha_gym.evaluation.report import write_report
    page = write_report(_run_folder(tmp_path, small_synthetic))
    shot = screenshot(page, tmp_path / "report.png", height=3000)
    image = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    assert image.shape == (3000, 1200, 3)
    # the embedded plots rendered: text and tables are grey, the plots' lines and points are coloured
    coloured = (image.max(axis=2) - image.min(axis=2) > 80).sum()
    assert coloured > 5000, f"only {coloured} coloured pixels: the plots did not render"
    orange = (np.abs(image - np.array((255, 127, 14))).sum(axis=2) < 40).sum()   # the book's growth line
    assert orange > 200, orange
    assert len(np.unique(image.reshape(-1, 3), axis=0)) > 200   # text, tables and plots, not a blank page
