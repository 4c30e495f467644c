"""Hostile inputs, part 4: nothing is silently mixed or changed.

Each test is one case that the code before issue 27 got wrong without a word: a batch output resumed
with another panel or config once its sidecar is gone, an edited record, --out naming the input file,
Ray agents outliving a killed driver, a training run resumed with other settings once settings.toml is
gone, an archive of books that are not standardised P&L, and a holdout report that does not say which
universe it scored. New names are imported inside the tests, so on the old code each case fails alone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from alpha_gym.batch.records import BatchError
from alpha_gym.batch.runner import score_batch
from alpha_gym.errors import InputError
from alpha_gym.market import synthetic_panel
from alpha_gym.scoring.archive import Archive, ArchiveError
from alpha_gym.scoring.config import VerifierConfig

ROOT = Path(__file__).resolve().parents[1]
FORMULAS = ["rank(-ts_delta(close, 5))", "rank(volume)", "rank(ts_std(close, 10))", "rank(close / open)",
            "rank(-ts_corr(close, volume, 10))", "rank(ts_mean(close, 5) - close)"]


@pytest.fixture(scope="module")
def panel():
    return synthetic_panel(n_stocks=12, n_days=400, seed=3)


@pytest.fixture
def pool(tmp_path):
    path = tmp_path / "pool.txt"
    path.write_text("\n".join(FORMULAS) + "\n")
    return path


def _partial(panel, pool, out, **kw):
    """An output holding the first 3 records, its sidecar then lost (the case the sidecar alone missed)."""
    score_batch(panel, pool, out, workers=0, progress=False, limit=3, **kw)
    Path(str(out) + ".meta.json").unlink()


# ------------------------------------------------------------------ (a) batch records carry their origin
def test_resume_without_sidecar_on_another_panel_is_refused(panel, pool, tmp_path):
    out = tmp_path / "o.jsonl"
    _partial(panel, pool, out)
    before = out.read_bytes()
    with pytest.raises(BatchError, match="another panel.*--restart"):
        score_batch(synthetic_panel(n_stocks=12, n_days=400, seed=4), pool, out, workers=0, progress=False)
    assert out.read_bytes() == before


def test_resume_without_sidecar_with_another_config_is_refused(panel, pool, tmp_path):
    out = tmp_path / "o.jsonl"
    _partial(panel, pool, out)
    with pytest.raises(BatchError, match="verifier config"):
        score_batch(panel, pool, out, workers=0, progress=False, config=VerifierConfig(turnover_cap=0.3))


def test_an_edited_record_is_detected(panel, pool, tmp_path):
    out = tmp_path / "o.jsonl"
    score_batch(panel, pool, out, workers=0, progress=False, limit=3)
    lines = out.read_text().splitlines()
    rec = json.loads(lines[1])
    rec["score"]["reward"] += 1.0  # a better score written in by hand
    lines[1] = json.dumps(rec)
    out.write_text("\n".join(lines) + "\n")
    with pytest.raises(BatchError, match="line 2 .*edited"):
        score_batch(panel, pool, out, workers=0, progress=False)


def test_a_corrupt_middle_line_is_an_error_not_a_truncation(panel, pool, tmp_path):
    out = tmp_path / "o.jsonl"
    score_batch(panel, pool, out, workers=0, progress=False, limit=4)
    lines = out.read_text().splitlines()
    lines[1] = lines[1][:20]  # a complete line (it has its newline) that is no record: not a torn last line
    out.write_text("\n".join(lines) + "\n")
    size = out.stat().st_size
    with pytest.raises(BatchError, match="line 2 is not a score-batch record"):
        score_batch(panel, pool, out, workers=0, progress=False)
    assert out.stat().st_size == size  # records 3 and 4 are still there


def test_restart_rescores_a_refused_output(panel, pool, tmp_path):
    out, fresh = tmp_path / "o.jsonl", tmp_path / "fresh.jsonl"
    _partial(synthetic_panel(n_stocks=12, n_days=400, seed=4), pool, out)
    summary = score_batch(panel, pool, out, workers=0, progress=False, restart=True)
    assert summary["already_done"] == 0 and summary["complete"]
    score_batch(panel, pool, fresh, workers=0, progress=False)
    assert out.read_bytes() == fresh.read_bytes()
    stamps = {json.loads(line)["scored_with"] for line in out.read_text().splitlines()}
    assert len(stamps) == 1


# ------------------------------------------------------------------ (b) --out is not the input
def test_out_equal_to_formulas_is_refused(panel, pool, tmp_path):
    before = pool.read_bytes()
    with pytest.raises(BatchError, match="overwrite the --formulas"):
        score_batch(panel, pool, tmp_path / "." / "pool.txt", workers=0, progress=False)
    link = tmp_path / "hard.txt"
    os.link(pool, link)  # another name for the same file
    with pytest.raises(BatchError, match="overwrite the --formulas"):
        score_batch(panel, pool, link, workers=0, progress=False)
    (tmp_path / "sym.txt").symlink_to(pool)
    with pytest.raises(BatchError, match="overwrite the --formulas"):
        score_batch(panel, pool, tmp_path / "sym.txt", workers=0, progress=False)
    assert pool.read_bytes() == before


def test_cli_out_equal_to_formulas_exits_2(pool, capsys):
    from alpha_gym.commands.main import main
    before = pool.read_bytes()
    assert main(["score-batch", "--formulas", str(pool), "--out", str(pool), "--workers", "0", "--quiet"]) == 2
    assert "overwrite" in capsys.readouterr().err and pool.read_bytes() == before


# ------------------------------------------------------------------ (c) the local Ray cluster dies with its driver
def _children(pid: int) -> set[int]:
    out = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                raw = Path(f"/proc/{name}/stat").read_bytes()
            except OSError:
                continue
            if int(raw[raw.rindex(b")") + 2:].split()[1]) == pid:
                out.add(int(name))
    return out


def _tree(pid: int) -> set[int]:
    found, frontier = set(), [pid]
    while frontier:
        kids = _children(frontier.pop()) - found
        found |= kids
        frontier.extend(kids)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return state[state.rindex(b")") + 2:state.rindex(b")") + 3] != b"Z"


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_kill_9_of_the_driver_leaves_no_ray_process(two_cores, tmp_path):
    pytest.importorskip("ray", reason="ray (alpha-gym[batch]) is not installed")
    from alpha_gym.language.sample import random_formula
    rng = np.random.default_rng(0)
    pool = tmp_path / "big.txt"
    pool.write_text("\n".join(random_formula(rng, depth=3) for _ in range(4000)) + "\n")
    out = tmp_path / "out.jsonl"
    env = dict(os.environ, PYTHONPATH=str(ROOT), RAY_AUTH_MODE="token")
    driver = subprocess.Popen([sys.executable, "-m", "alpha_gym", "score-batch", "--formulas", str(pool),
                               "--out", str(out), "--workers", "2", "--chunk", "4", "--quiet",
                               "--ray-address", "local"],  # Ray asked for: without it, worker processes
                              cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while not (out.exists() and out.stat().st_size) and time.monotonic() < deadline:
            assert driver.poll() is None, "score-batch ended before it could be killed"
            time.sleep(0.5)
        assert out.stat().st_size, "no record written within 240 s"
        ray_procs = {p for p in _tree(driver.pid) if "reaper" not in Path(f"/proc/{p}/cmdline").read_text()}
        assert len(ray_procs) >= 4  # gcs, raylet, agents, workers
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        deadline = time.monotonic() + 15
        while any(_alive(p) for p in ray_procs) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = [Path(f"/proc/{p}/cmdline").read_text().replace("\0", " ")[:80] for p in ray_procs if _alive(p)]
        assert not left, f"Ray processes alive 15 s after kill -9 of the driver: {left}"
    finally:
        if driver.poll() is None:
            driver.kill()
        for p in (q for q in locals().get("ray_procs", ()) if _alive(q)):  # the old code's orphans
            os.kill(p, signal.SIGKILL)


# ------------------------------------------------------------------ (d) a resume is checked against the checkpoint
def _run_with_checkpoint(tmp_path, config):
    """A run folder as `train` leaves it after step 1 (settings.toml and checkpoint-1 with its record)."""
    from alpha_gym.settings import claim_run_dir, to_dict
    out = tmp_path / "run"
    tables = {"verifier": to_dict(VerifierConfig()), "train": to_dict(config)}
    claim_run_dir(out, tables, resume=False)
    ckpt = out / "checkpoint-1"
    ckpt.mkdir()
    (ckpt / "trainer_state.pt").write_bytes(b"")
    (ckpt / "settings.toml").write_text((out / "settings.toml").read_text())
    (ckpt / "trainer_state.json").write_text(json.dumps({"step": 1, "config": config.to_dict()}))
    return out


class Brief:
    id = "b0"

    def prompt(self) -> str:
        return "Write one trading formula."


def test_resume_after_settings_toml_was_deleted_refuses_other_settings(tmp_path):
    pytest.importorskip("torch")
    from alpha_gym.scoring.verifier import Verifier
    from trainers.config import recipe
    from trainers.loop import train
    out = _run_with_checkpoint(tmp_path, recipe("cispo", seed=7))
    (out / "settings.toml").unlink()
    with pytest.raises(InputError, match="checkpoint-1 was trained with other settings: train.learning_rate"):
        # refused before any model is loaded: the checkpoint folder needs no weights for this
        train(recipe("cispo", seed=7, learning_rate=1e-3), Verifier(synthetic_panel(n_stocks=8, n_days=300)),
              [Brief()], out, steps=2, resume=True, progress=False)
    assert not (out / "settings.toml").exists()  # nothing rewritten


def test_checkpoint_without_its_record_is_checked_against_trainer_state(tmp_path):
    pytest.importorskip("torch")
    from alpha_gym.settings import to_dict
    from trainers.config import recipe
    from trainers.checkpoints import check_checkpoint_settings
    out = _run_with_checkpoint(tmp_path, recipe("dapo"))
    (out / "checkpoint-1" / "settings.toml").unlink()  # a checkpoint written before the record existed
    (out / "settings.toml").unlink()
    tables = {"verifier": to_dict(VerifierConfig()), "train": to_dict(recipe("dapo", seed=1))}
    with pytest.raises(InputError, match="train.seed"):
        check_checkpoint_settings(out, tables)
    check_checkpoint_settings(out, {**tables, "train": to_dict(recipe("dapo"))})  # the same: accepted


def test_cli_resume_without_settings_takes_the_checkpoints(tmp_path):
    pytest.importorskip("torch")
    import argparse
    from alpha_gym.commands.train import lost_settings_record, register, settings_from_train_args
    from trainers.config import recipe
    out = _run_with_checkpoint(tmp_path, recipe("cispo_repo_r", seed=5))
    (out / "settings.toml").unlink()
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["train", "--resume", "--out", str(out)])
    record = lost_settings_record(args, out)
    assert record == out / "checkpoint-1" / "settings.toml"
    args.config = str(record)
    assert settings_from_train_args(args)["train"].config == recipe("cispo_repo_r", seed=5)
    # settings given on the command line are the user's: compared by `train`, not replaced
    assert lost_settings_record(parser.parse_args(["train", "--resume", "--out", str(out), "--seed", "5"]), out) is None


# ------------------------------------------------------------------ (e) archive books are standardised P&L
def _archive(tmp_path, **changes):
    rng = np.random.default_rng(1)
    a = Archive("f" * 64, 30, capacity=8)
    for k in range(3):
        a.add(f"form-{k}", f"text-{k}", rng.standard_normal(30), 0.1, np.zeros(15), np.zeros(15))
    path = tmp_path / "a.npz"
    a.save(path)
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    meta = json.loads(str(arrays["meta"]))
    meta.update(changes.pop("meta", {}))
    arrays.update(meta=np.array(json.dumps(meta)), **changes)
    bad = tmp_path / "bad.npz"
    np.savez(bad, **arrays)
    return bad, a._z


@pytest.mark.parametrize("fill", [1e308, 0.0, 3.0])
def test_archive_of_books_that_are_not_standardised_is_refused(tmp_path, fill):
    _, z = _archive(tmp_path)
    bad, _ = _archive(tmp_path, z=np.full_like(z, fill))
    with pytest.raises(ArchiveError, match="not standardised"):
        Archive.load(bad, "f" * 64)


def test_archive_seed_flags_must_be_json_booleans(tmp_path):
    bad, _ = _archive(tmp_path, meta={"seed": ["false", False, False]})  # bool("false") is True
    with pytest.raises(ArchiveError, match="seed flag 'false'"):
        Archive.load(bad, "f" * 64)
    good, z = _archive(tmp_path)
    np.testing.assert_array_equal(Archive.load(good, "f" * 64)._z, z)


# ------------------------------------------------------------------ (f) holdout reports name their universe
@pytest.fixture
def market_csv(tmp_path, panel, write_market_csv):
    return write_market_csv(panel, tmp_path / "m.csv.gz")


def test_holdout_formulas_names_the_universe_and_warns_on_another(tmp_path, panel, market_csv, capsys):
    from alpha_gym.commands.main import main
    from alpha_gym.evaluation.holdout import load_holdout
    kept = tmp_path / "kept"
    (kept / "seed-42").mkdir(parents=True)
    universe = tmp_path / "universe_small.txt"
    universe.write_text("\n".join(panel.tickers[:8]) + "\n")
    (kept / "settings.json").write_text(json.dumps({"universe": "universe_small.txt", "data": "m.csv.gz"}))
    answers = kept / "seed-42" / "rung.jsonl"
    answers.write_text("".join(json.dumps({"formula": f}) + "\n" for f in FORMULAS[:3]))
    base = ["holdout-formulas", "--data", str(market_csv), "--holdout-start", str(panel.dates[300]),
            "--formulas", str(answers), "--no-baselines", "--no-train"]
    capsys.readouterr()
    assert main(base + ["--out", str(tmp_path / "all")]) == 0
    run = capsys.readouterr()
    assert "universe_small.txt" in run.err and "12 tickers" in run.err  # trained on 8, scored on all 12
    assert "universe all tickers of m.csv.gz: 12 tickers" in run.out
    u = load_holdout(tmp_path / "all")["universe"]
    assert u["name"] == "all tickers of m.csv.gz" and u["size"] == 12 and len(u["tickers_sha256"]) == 16
    assert u["answers_trained_on"] == "universe_small.txt"
    assert main(base + ["--universe", str(universe), "--out", str(tmp_path / "same")]) == 0
    run = capsys.readouterr()
    assert "warning" not in run.err and "universe universe_small.txt: 8 tickers" in run.out
    same = load_holdout(tmp_path / "same")["universe"]
    assert same["size"] == 8 and same["tickers_sha256"] != u["tickers_sha256"] and "answers_trained_on" not in same
