"""A reward names the world model R3 used (issue 29.5): "off" or the checkpoint's content hash, in every score,
its JSON, the env's info and the training log; `gym.make` says once which world model it found.

The identity of a real, fitted checkpoint (and that it changes with the checkpoint's content) is tested
with the fitted tiny model in tests/test_stress.py (`test_auto_uses_the_model_registered_for_the_panel`)."""

from __future__ import annotations

import json
import logging

import gymnasium as gym
import pytest

import alpha_gym  # noqa: F401  (registers the environment)
from alpha_gym import env as env_module
from alpha_gym.jsonable import json_dumps
from alpha_gym.scoring.config import VerifierConfig
from alpha_gym.scoring.report import format_score
from alpha_gym.scoring.verifier import Verifier
from alpha_gym.stress import checkpoint as ck
from alpha_gym.stress.provider import StressProvider

F = "rank(-ts_delta(close, 5))"


@pytest.fixture
def empty_registry(tmp_path, monkeypatch):
    """A cache folder with no world model registered (the machine's own registry never decides a test)."""
    monkeypatch.setenv("ALPHA_GYM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(env_module, "_ANNOUNCED", set())


def _fake_checkpoint(folder, manifest: dict, weights: bytes):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ck.MODEL_FILE).write_bytes(weights)
    ck.write_json(folder / ck.MANIFEST_FILE, {**manifest, "model_sha256": ck.file_sha256(folder / ck.MODEL_FILE)})
    return folder


def test_every_score_says_off_without_a_world_model(small_synthetic, empty_registry):
    v = Verifier(small_synthetic, VerifierConfig(archive_seed=False))
    assert v.world_model == "off"
    for score in (v.score_formula(F), v.score("no tag"), v.score(f"<alpha>{F}</alpha>")):
        assert score.world_model == "off"
        assert json.loads(json_dumps(score.to_dict()))["world_model"] == "off"
    assert "R3 model: off" in format_score(v.score_formula(F), v.config.priorities)
    explicit_off = Verifier(small_synthetic, VerifierConfig(archive_seed=False, stress_checkpoint=None))
    assert explicit_off.score_formula(F).world_model == "off"


def test_the_env_info_names_the_world_model_and_make_logs_it_once(small_synthetic, empty_registry, caplog):
    with caplog.at_level(logging.INFO, logger="alpha_gym"):
        env = gym.make("AlphaFormula-v0", panel=small_synthetic, config=VerifierConfig(archive_seed=False))
        gym.make("AlphaFormula-v0", panel=small_synthetic, config=VerifierConfig(archive_seed=False))
    lines = [r for r in caplog.records if "R3 world model" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
    assert "off" in lines[0].getMessage() and "no world model fitted for this panel" in lines[0].getMessage()
    env.reset(seed=0)
    _, _, _, _, info = env.step(f"<alpha>{F}</alpha>")
    assert info["world_model"] == "off"


def test_the_cli_json_names_the_world_model(monkeypatch, capsys):
    from alpha_gym.commands.main import main
    monkeypatch.setenv("ALPHA_GYM_CACHE", "off")   # no registry: R3 off
    assert main(["score", F, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["world_model"] == "off"


def test_the_identity_is_a_content_hash(tmp_path):
    a = _fake_checkpoint(tmp_path / "a", {"format": 1, "gates": {"passed": True}}, b"weights")
    b = _fake_checkpoint(tmp_path / "b", {"format": 1, "gates": {"passed": True}}, b"weights")
    ident = ck.identity(a, ck.read_manifest(a)["model_sha256"])
    assert ident.startswith("sha256:") and len(ident) == len("sha256:") + 16
    assert ident == ck.identity(b, ck.read_manifest(b)["model_sha256"])       # the same files: the same model
    c = _fake_checkpoint(tmp_path / "c", {"format": 1, "gates": {"passed": True}}, b"other weights")
    assert ck.identity(c, ck.read_manifest(c)["model_sha256"]) != ident       # other weights
    d = _fake_checkpoint(tmp_path / "d", {"format": 1, "gates": {"passed": True}, "note": "edited"}, b"weights")
    assert ck.identity(d, ck.read_manifest(d)["model_sha256"]) != ident       # another manifest


def test_a_rewritten_weights_file_is_hashed_again(tmp_path):
    path = tmp_path / "w.bin"
    path.write_bytes(b"one")
    first = ck.cached_sha256(path)
    assert first == ck.file_sha256(path) and ck.cached_sha256(path) == first
    path.write_bytes(b"two, longer")
    assert ck.cached_sha256(path) == ck.file_sha256(path) != first


def test_a_provider_that_is_off_reports_off(small_synthetic, tmp_path):
    v = Verifier(small_synthetic, VerifierConfig(archive_seed=False, stress_checkpoint=None))
    failed = {"format": 1, "gates": {"passed": False}, "data": {"fingerprint": small_synthetic.fingerprint()}}
    folder = _fake_checkpoint(tmp_path / "failed", failed, b"weights")
    provider = StressProvider.from_checkpoint(folder, v)
    assert not provider.on and provider.identity == "off" and "failed its gates" in provider.reason
    assert StressProvider({"world": v}, "on").identity == "unidentified"      # worlds built by hand


def test_the_run_page_shows_the_world_model_of_the_log(tmp_path):
    from alpha_gym.evaluation.report_training import training_section
    log = [{"step": 1, "reward": 0.1, "seconds/total": 1.0, "world_model": "off"},
           {"step": 2, "reward": 0.2, "seconds/total": 1.0, "world_model": "off"}]
    html = "".join(training_section(tmp_path, log))
    assert 'R3 world model</th><td>off</td>' in html
    old = "".join(training_section(tmp_path, [{k: v for k, v in r.items() if k != "world_model"} for r in log]))
    assert 'R3 world model</th><td>not recorded</td>' in old
