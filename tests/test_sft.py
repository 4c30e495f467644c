"""Supervised warm start: verified pairs export, and a real (tiny) SFTTrainer run on SmolLM2-135M."""

from __future__ import annotations

import json

import pytest

from alpha_gym import Verifier
from alpha_gym.tasks.sets import brief_set
from alpha_gym.tasks.compliance import brief_compliance
from alpha_gym.tasks.sft_data import build_sft_dataset, formula_pool, pair_rows
from alpha_gym.tasks.template_search import SearchBounds, search_briefs


@pytest.fixture(scope="module")
def sft_file(tmp_path_factory, small_synthetic):
    verifier = Verifier(small_synthetic)
    path = tmp_path_factory.mktemp("sft") / "pairs.jsonl"
    summary = build_sft_dataset(verifier, brief_set("train")[:12], path, pool_size=300, per_brief=2, seed=1)
    return path, summary, verifier


def test_export_loads_with_datasets_and_every_row_reverifies(sft_file):
    datasets = pytest.importorskip("datasets")
    path, summary, verifier = sft_file
    assert summary["rows"] >= summary["briefs_covered"] >= 10 and summary["briefs"] == 12
    ds = datasets.load_dataset("json", data_files=str(path), split="train")
    assert len(ds) == summary["rows"]
    for row in ds:
        assert row["prompt"][0]["role"] == "user" and row["completion"][0]["role"] == "assistant"
        score = verifier.score(row["completion"][0]["content"])
        assert score.valid, (row["formula"], score.reason)
        assert score.channels["cpcv"] == pytest.approx(row["cpcv"])


def test_pool_formulas_that_meet_a_brief_come_first(small_synthetic):
    verifier = Verifier(small_synthetic)
    pool = formula_pool(verifier, 300, seed=2)
    assert pool == sorted(pool, key=lambda r: (-r["cpcv"], r["formula"]))
    met = [b for b in brief_set("train")           # the few briefs a pool formula meets (g0-0311, g0-0495), and others
           if any(r["cpcv"] > 0 and brief_compliance(b, r["live"], extended=True)["share"] == 1.0 for r in pool)]
    briefs = met[:3] + list(brief_set("train")[:5])
    results, _ = search_briefs(verifier, briefs, SearchBounds(per_brief=3, max_briefs=10**6), pool=pool)
    led = 0
    for brief, result in zip(briefs, results):
        meeting = [r["formula"] for r in pool
                   if r["cpcv"] > 0 and brief_compliance(brief, r["live"], extended=True)["share"] == 1.0]
        got = [f["formula"] for f in result.found]
        assert got[:len(meeting)] == meeting[:3]          # best CPCV first, before any composed formula
        led += bool(meeting)
    assert led >= 1                                        # the pool met some brief: the order was tested
    rows = pair_rows(briefs, {r.brief_id: r.found for r in results})
    assert [(r["brief_id"], r["formula"]) for r in rows] == [(b.id, f["formula"]) for b, res in zip(briefs, results)
                                                             for f in res.found]


@pytest.mark.slow
def test_sft_trains_and_saves_a_loadable_model(sft_file, tmp_path):
    pytest.importorskip("trl")
    import torch
    from trainers.models import load_base, model_identity
    from trainers.sft import SFTSettings, run_sft
    path, _, _ = sft_file
    threads = torch.get_num_threads()
    # two steps of one row each (a row is ~550 tokens): enough to move the weights and to rebuild them
    summary = run_sft(None, path, tmp_path / "sft", SFTSettings(max_steps=2, batch_size=1, max_length=768, threads=1))
    assert summary["steps"] == 2 and summary["train_loss"] > 0
    assert summary["threads"] == 1 and torch.get_num_threads() == threads  # the caller's count is given back
    merged, tokenizer = load_base(summary["model_dir"])
    base, _ = load_base(None)
    name = "model.layers.0.self_attn.q_proj.weight"
    changed = dict(merged.named_parameters())[name]
    original = dict(base.named_parameters())[name]
    assert changed.shape == original.shape and not torch.equal(changed, original)
    assert json.loads((tmp_path / "sft" / "sft_summary.json").read_text())["rows"] == summary["rows"]
    # the same data, settings and thread count rebuild the same weights: the identity a comparison stamps
    again = run_sft(None, path, tmp_path / "again", SFTSettings(max_steps=2, batch_size=1, max_length=768, threads=1))
    assert again["model_identity"] == summary["model_identity"] == model_identity(tmp_path / "sft" / "model")
    assert model_identity(tmp_path / "sft" / "model") != model_identity(None)
