"""The scoring pool (alpha_gym.pool, issue 42.4): answers prepared on worker processes score bit for bit as in
one process, in the same order, for every path that uses it (groups, training-style groups with archive updates,
the search, score-batch, the service), and the workers stay within the machine: one thread each, no more than
its cores, a dead worker an error and never a hang."""

from __future__ import annotations

import glob
import json
import os
import signal

import numpy as np
import pytest

from alpha_gym import pool as P
from alpha_gym.errors import ConfigError
from alpha_gym.language.sample import random_formula
from alpha_gym.market import synthetic_panel
from alpha_gym.scoring.verifier import Verifier

GOOD = "<alpha>rank(-ts_delta(close, 5))</alpha>"


def _answers(n: int, seed: int = 0) -> list[str]:
    """Random formulas of depth 2-4, and every kind of answer the verifier treats apart."""
    rng = np.random.default_rng(seed)
    out = [f"<alpha>{random_formula(rng, depth=int(rng.integers(2, 5)))}</alpha>" for _ in range(n)]
    return out + [GOOD, GOOD, "<think>a reason</think>" + GOOD, "<alpha>rank(close -)</alpha>", "no tag",
                  "<alpha>rank(close)</alpha>", "<alpha>rank(close\ud800)</alpha>"]


def _same(a, b) -> bool:
    """Two GroupScores equal bit for bit: every score's dict (reward, channels, diagnostics), the matrices."""
    return (len(a.scores) == len(b.scores) and all(x.to_dict() == y.to_dict() for x, y in zip(a.scores, b.scores))
            and np.array_equal(a.matrix, b.matrix) and np.array_equal(a.rewards, b.rewards)
            and np.array_equal(a.guarded, b.guarded))


@pytest.fixture(scope="module")
def verifier():
    v = Verifier(synthetic_panel(n_stocks=30, n_days=600, seed=2))
    _ = v.archive
    yield v
    P.close_scoring_pool()


def test_two_workers_score_a_group_as_one_process(two_cores, verifier):
    answers = _answers(40)
    want = verifier.score_group(answers)
    got = P.score_group(verifier, answers, workers=2)
    assert _same(want, got) and want.valid.sum() >= 10  # enough valid books for the comparison to mean something
    pool = P.scoring_pool(verifier, 2)
    assert pool is not None and pool.workers == 2 and P.scoring_pool(verifier, 2) is pool  # started once, kept
    assert P.scoring_pool(verifier, 1) is None  # one worker: this process
    items = [("formula", "rank(volume / open)"), ("answer", GOOD), ("formula", "rank(close -)")]
    assert [getattr(it, "text", None) or it.formula for it in P.prepare(verifier, items, workers=2)] == \
        ["rank(volume / open)", "rank(-ts_delta(close, 5))", "rank(close -)"]  # input order, formulas and answers


def test_groups_with_archive_updates_match_the_serial_loop(two_cores, verifier):
    groups = [_answers(6, seed=s)[:8] for s in range(5)]
    serial, pooled = verifier.fork(), verifier.fork()
    want = []
    for g in groups:
        want.append(serial.score_group(g))
        serial.update_archive(want[-1])
    got = P.score_groups(pooled, groups, workers=2)
    assert all(_same(a, b) for a, b in zip(want, got))
    assert pooled.archive.forms == serial.archive.forms and len(serial.archive) > len(verifier.archive)


def test_the_search_does_not_depend_on_its_workers(two_cores, verifier):
    from alpha_gym.search.database import GP_SEARCH
    from alpha_gym.search.evolution import TreeMutator, evolve
    runs = [evolve(verifier.fork(), TreeMutator(), GP_SEARCH, 64, seed=5, seed_formulas=["rank(close / open)"],
                   progress=None, say=None, workers=w) for w in (1, 2)]
    one, two = (r.database.to_dict() for r in runs)
    assert one == two and runs[0].history == runs[1].history and runs[0].calls == 64


def test_workers_run_one_thread_each_and_die_loudly(two_cores, verifier):
    pool = P.scoring_pool(verifier, 2)
    for proc in pool._procs:  # no BLAS/OpenMP threads beside the interpreter's (an allocator's helper may run)
        names = [open(f"{task}/comm").read().strip() for task in glob.glob(f"/proc/{proc.pid}/task/*")]
        assert [n for n in names if not n.startswith("jemalloc")] == ["python"], names
    os.kill(pool._procs[0].pid, signal.SIGKILL)
    with pytest.raises(P.ScoringError, match="died .*killed, or out of memory"):
        P.prepare(verifier, [("answer", a) for a in _answers(16)], workers=2)
    assert all(proc.poll() is not None for proc in pool._procs)  # the broken pool's workers are gone
    assert P.scoring_pool(verifier, 2) is not pool  # the next call starts a new one
    assert _same(P.score_group(verifier, [GOOD], workers=2), verifier.score_group([GOOD]))


def test_worker_counts_are_checked_against_the_machine(verifier, monkeypatch):
    from alpha_gym.ranges import usable_cores
    for bad in (0, -1, usable_cores() + 1, True, 1.5):
        with pytest.raises(ConfigError, match="workers"):
            P.scoring_pool(verifier, bad)
    monkeypatch.setenv("ALPHA_GYM_SCORING_WORKERS", "two")
    with pytest.raises(ConfigError, match="ALPHA_GYM_SCORING_WORKERS 'two': must be an integer from 1"):
        P.default_workers(verifier.panel)
    monkeypatch.setenv("ALPHA_GYM_SCORING_WORKERS", "1")
    assert P.default_workers(verifier.panel) == 1
    monkeypatch.delenv("ALPHA_GYM_SCORING_WORKERS")
    assert 1 <= P.default_workers(verifier.panel) <= usable_cores()


def test_score_batch_on_worker_processes_gives_the_serial_bytes(two_cores, tmp_path):
    from alpha_gym.batch.runner import score_batch
    panel = synthetic_panel(n_stocks=12, n_days=400, seed=3)
    rng = np.random.default_rng(1)
    pool = tmp_path / "pool.txt"
    pool.write_text("\n".join([random_formula(rng, depth=int(rng.integers(2, 5))) for _ in range(60)]
                              + ["rank(close -)"]) + "\n")
    serial, pooled = tmp_path / "serial.jsonl", tmp_path / "pooled.jsonl"
    score_batch(panel, pool, serial, workers=0, progress=False)
    first = score_batch(panel, pool, pooled, workers=2, progress=False, chunk=8, limit=25)
    assert first["scored"] == 25 and not first["complete"]
    second = score_batch(panel, pool, pooled, workers=2, progress=False, chunk=8)
    assert second["already_done"] == 25 and second["complete"]
    assert pooled.read_bytes() == serial.read_bytes()


def test_the_service_on_two_workers_answers_as_a_direct_call(two_cores, verifier):
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    from alpha_gym.jsonable import json_dumps
    from alpha_gym.service.client import ScoringClient
    from alpha_gym.service.server import BackgroundServer
    answers = _answers(10)
    as_sent = lambda x: json.loads(json_dumps(x))  # noqa: E731  (what the client reads back)
    with BackgroundServer(lambda: verifier, workers=2) as url:
        client = ScoringClient(url)
        assert client.wait_ready(120)["workers"] == 2
        assert client.score_group(answers) == as_sent([s.to_dict() for s in verifier.score_group(answers).scores])
        assert client.score(answers[0]) == as_sent(verifier.score(answers[0]).to_dict())
        assert client.score_formula("rank(volume)") == as_sent(verifier.score_formula("rank(volume)").to_dict())


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_kill_9_of_score_batch_leaves_no_worker(two_cores, tmp_path):
    """The workers read their stdin until it closes: a driver killed with -9 takes them down with it."""
    import subprocess
    import sys
    import time
    from pathlib import Path
    rng = np.random.default_rng(0)
    pool = tmp_path / "big.txt"
    pool.write_text("\n".join(random_formula(rng, depth=3) for _ in range(4000)) + "\n")
    out = tmp_path / "out.jsonl"
    root = str(Path(__file__).resolve().parents[1])
    driver = subprocess.Popen([sys.executable, "-m", "alpha_gym", "score-batch", "--formulas", str(pool), "--out",
                               str(out), "--workers", "2", "--chunk", "4", "--quiet"], cwd=tmp_path,
                              env=dict(os.environ, PYTHONPATH=root), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while not (out.exists() and out.stat().st_size) and time.monotonic() < deadline:
            assert driver.poll() is None, "score-batch ended before it could be killed"
            time.sleep(0.2)
        workers = [int(p) for p in Path(f"/proc/{driver.pid}/task/{driver.pid}/children").read_text().split()]
        assert len(workers) == 2
        driver.kill()
        driver.wait()
        deadline = time.monotonic() + 15
        while any(os.path.exists(f"/proc/{p}") for p in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(os.path.exists(f"/proc/{p}") for p in workers), "a worker outlived its killed driver"
    finally:
        if driver.poll() is None:
            driver.kill()
