"""Batch scoring (`alpha-gym score-batch`): records equal the verifier's, resumable output, Ray equals serial."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from alpha_gym.batch.records import BatchError, read_items
from alpha_gym.batch.runner import score_batch
from alpha_gym.language.sample import random_formula
from alpha_gym.market import synthetic_panel
from alpha_gym.scoring.verifier import Verifier

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def panel():
    return synthetic_panel(n_stocks=12, n_days=400, seed=3)


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """90 random formulas (some invalid books) and a few broken lines, one per line."""
    rng = np.random.default_rng(1)
    lines = [random_formula(rng, depth=int(rng.integers(2, 5))) for _ in range(90)]
    lines[5], lines[40] = "rank(close -)", "unknown_op(close)"
    path = tmp_path_factory.mktemp("pool") / "pool.txt"
    path.write_text("\n".join(lines[:50]) + "\n\n" + "\n".join(lines[50:]) + "\n")
    return path


@pytest.fixture(scope="module")
def serial(panel, pool, tmp_path_factory):
    out = tmp_path_factory.mktemp("serial") / "serial.jsonl"
    summary = score_batch(panel, pool, out, workers=0, progress=False, chunk=16)
    assert summary["scored"] == 90 and summary["complete"]
    return out


def test_records_are_the_verifiers_scores(panel, pool, serial):
    items = read_items(pool)
    records = [json.loads(line) for line in serial.read_text().splitlines()]
    assert [r["index"] for r in records] == list(range(90))
    direct = Verifier(panel)
    for r in records[::7] + [records[5], records[40]]:
        kind, text = items[r["index"]]
        assert (r["kind"], r["input"]) == (kind, text)
        assert r["score"] == json.loads(json.dumps(direct.score_formula(text).to_dict()))
    assert records[5]["score"]["valid"] is False and records[40]["score"]["valid"] is False
    assert sum(r["score"]["valid"] for r in records) > 30


def test_interrupted_runs_resume_to_the_same_bytes(panel, pool, serial, tmp_path):
    out = tmp_path / "resumed.jsonl"
    first = score_batch(panel, pool, out, workers=0, progress=False, chunk=16, limit=37)
    assert first == {**first, "scored": 37, "complete": False}
    with open(out, "a") as fh:  # a run killed mid-write leaves half a line
        fh.write('{"index": 37, "kind": "formu')
    second = score_batch(panel, pool, out, workers=0, progress=False, chunk=16)
    assert second["already_done"] == 37 and second["scored"] == 53 and second["complete"]
    assert out.read_bytes() == serial.read_bytes()
    again = score_batch(panel, pool, out, workers=0, progress=False)
    assert again["scored"] == 0 and out.read_bytes() == serial.read_bytes()


def test_an_output_made_with_other_data_is_refused(pool, serial, tmp_path):
    out = tmp_path / "o.jsonl"
    score_batch(synthetic_panel(n_stocks=12, n_days=400, seed=3), pool, out, workers=0, progress=False, limit=5)
    with pytest.raises(BatchError, match="panel"):
        score_batch(synthetic_panel(n_stocks=12, n_days=400, seed=4), pool, out, workers=0, progress=False)


def test_jsonl_input_with_answers_and_formulas(panel, tmp_path):
    src = tmp_path / "rows.jsonl"
    rows = [{"formula": "rank(-ts_delta(close, 5))", "brief_id": "b1"}, {"answer": "<alpha>rank(volume)</alpha>"},
            {"answer": "no tag"}]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "rows_out.jsonl"
    score_batch(panel, src, out, workers=0, progress=False)
    got = [json.loads(line) for line in out.read_text().splitlines()]
    v = Verifier(panel)
    assert got[0]["score"] == json.loads(json.dumps(v.score_formula(rows[0]["formula"]).to_dict()))
    assert got[1]["score"] == json.loads(json.dumps(v.score(rows[1]["answer"]).to_dict()))
    assert got[2]["kind"] == "answer" and got[2]["score"] == json.loads(json.dumps(v.score("no tag").to_dict()))
    assert got[2]["score"]["valid"] is False


@pytest.mark.parametrize("text, message", [("{not json\n", "not JSON"), ('{"prompt": "x"}\n', 'no "formula"'),
                                           ("\n\n", "holds no formulas")])
def test_bad_input_files_are_clear_errors(tmp_path, text, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(BatchError, match=message):
        read_items(path)


def test_a_rows_brief_id_reaches_the_scoring_and_its_record(panel, tmp_path):
    """Issue 38.1: a JSONL row's brief_id is passed to the scoring and kept in the record; the reward is unchanged."""
    from alpha_gym.tasks.sets import brief_set
    brief, answer = brief_set("train")[0], "<alpha>rank(-ts_delta(close, 5))</alpha>"
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"answer": answer, "brief_id": brief.id}) + "\n" + json.dumps({"answer": answer}) + "\n")
    out = tmp_path / "out.jsonl"
    score_batch(panel, path, out, workers=0, progress=False)
    got = [json.loads(line) for line in out.read_text().splitlines()]
    v = Verifier(panel)
    assert got[0]["brief_id"] == brief.id and "brief_id" not in got[1]
    assert got[0]["score"] == json.loads(json.dumps(v.score(answer, brief=brief).to_dict()))
    assert got[1]["score"] == json.loads(json.dumps(v.score(answer).to_dict()))
    assert got[0]["score"]["reward"] == got[1]["score"]["reward"]
    assert "brief_compliance" in got[0]["score"]["diagnostics"]
    assert read_items(path) == [("answer", answer)] * 2  # without briefs=True: the pairs as before
    # an id that names no brief is ignored, as any other key of a row (`sft-data` rows of other briefs score as ever)
    path.write_text(json.dumps({"answer": answer, "brief_id": "g9-9999"}) + "\n")
    score_batch(panel, path, tmp_path / "other.jsonl", workers=0, progress=False)
    other = json.loads((tmp_path / "other.jsonl").read_text())
    assert "brief_id" not in other and other["score"] == got[1]["score"]


def test_cli_score_batch_serial(pool, serial, tmp_path, capsys):
    from alpha_gym.commands.main import main
    out = tmp_path / "cli.jsonl"
    # the CLI's default panel is the 46-stock synthetic market: a different panel, so only the shape is compared
    assert main(["score-batch", "--formulas", str(pool), "--out", str(out), "--workers", "0", "--quiet",
                 "--limit", "10"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["scored"] == 10 and not summary["complete"]
    assert main(["score-batch", "--formulas", str(tmp_path / "missing.txt"), "--out", str(out)]) == 2


@pytest.mark.parametrize("chunk", [1, 7, 90, 10_000])
def test_the_summary_counts_the_records_written(panel, pool, serial, tmp_path, chunk):
    out = tmp_path / f"chunk{chunk}.jsonl"
    summary = score_batch(panel, pool, out, workers=0, progress=False, chunk=chunk)
    assert summary["scored"] == 90 and summary["complete"] and out.read_bytes() == serial.read_bytes()


@pytest.mark.parametrize("flags, message", [
    (["--chunk", "-1"], "--chunk: -1 is out of range"), (["--chunk", "0"], "--chunk: 0 is out of range"),
    (["--workers", "-3"], "--workers: -3 is out of range"), (["--limit", "-1"], "--limit: -1 is out of range"),
    (["--workers", "99999"], "--workers 99999: this machine has [0-9]+ usable core"),
    (["--chunk", "2e9"], "'2e9' is not an integer")])
def test_counts_out_of_range_are_one_line_and_write_nothing(pool, tmp_path, capsys, flags, message):
    """Issue 41.5: --chunk -1 exited 0 with "scored": 8, "complete": true and no record written; --chunk 0 was a
    traceback; --workers 99999 started a Ray cluster that ate 20 GB; --workers -3 was accepted."""
    from alpha_gym.commands.main import main
    out = tmp_path / "out.jsonl"
    try:
        code = main(["score-batch", "--formulas", str(pool), "--out", str(out), "--quiet", *flags])
    except SystemExit as exit_:  # argparse's refusal of a flag
        code = exit_.code
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # argparse's usage, then one line saying what is wrong
    assert code == 2 and "Traceback" not in err and re.search(message, last), err
    assert not out.exists()


@pytest.mark.parametrize("kwargs, message", [({"chunk": -1}, "--chunk -1"), ({"chunk": 0}, "--chunk 0"),
                                             ({"chunk": 2.5}, "--chunk 2.5"), ({"workers": -3}, "--workers -3"),
                                             ({"workers": True}, "--workers True"), ({"limit": 0}, "--limit 0"),
                                             ({"workers": 10**6}, "usable core")])
def test_the_python_api_checks_the_same_counts(panel, pool, tmp_path, kwargs, message):
    with pytest.raises(BatchError, match=message):
        score_batch(panel, pool, tmp_path / "out.jsonl", progress=False, **{"workers": 0, **kwargs})
    assert not (tmp_path / "out.jsonl").exists()


HEAD = """
import os, sys
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"   # listen on 127.0.0.1 only
import ray
ctx = ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 << 20)
print(ctx.address_info["address"], flush=True)
sys.stdin.read()                                          # hold the cluster until the test closes stdin
ray.shutdown()
"""


def test_cli_on_an_existing_cluster_by_address(pool, tmp_path):
    """--ray-address: a cluster started elsewhere (here: another process, on 127.0.0.1) gets the package and
    the panel from the driver and writes the serial bytes. Both sides are subprocesses, as a user runs them."""
    pytest.importorskip("ray", reason="ray (alpha-gym[batch]) is not installed")
    import subprocess
    import sys
    from alpha_gym.commands.main import main
    env = dict(os.environ, RAY_AUTH_MODE="token", PYTHONPATH=str(ROOT))  # Ray 2.5x heads use token auth
    head = subprocess.Popen([sys.executable, "-c", HEAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, cwd=tmp_path, env=env)
    try:
        address = head.stdout.readline().strip()
        assert address.startswith("127.0.0.1:"), address
        remote, serial = tmp_path / "remote.jsonl", tmp_path / "serial.jsonl"
        run = subprocess.run([sys.executable, "-m", "alpha_gym", "score-batch", "--formulas", str(pool), "--out",
                              str(remote), "--workers", "2", "--ray-address", address, "--quiet"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        assert json.loads(run.stdout.strip().splitlines()[-1])["complete"]
        assert main(["score-batch", "--formulas", str(pool), "--out", str(serial), "--workers", "0", "--quiet"]) == 0
        assert remote.read_bytes() == serial.read_bytes()
    finally:
        head.stdin.close()
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray of 2 CPUs on this machine; its workers import this checkout's alpha_gym. Always shut down."""
    ray = pytest.importorskip("ray", reason="ray (alpha-gym[batch]) is not installed")
    from alpha_gym.batch.runner import loopback_only
    loopback_only()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 << 20,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}})
    try:
        yield ray
    finally:
        ray.shutdown()


def test_the_local_cluster_listens_on_loopback_only(local_ray):
    assert local_ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    assert {n["NodeManagerAddress"] for n in local_ray.nodes()} == {"127.0.0.1"}


def test_ray_workers_give_the_serial_bytes_and_resume(two_cores, local_ray, panel, pool, serial, tmp_path):
    out = tmp_path / "ray.jsonl"
    first = score_batch(panel, pool, out, workers=2, progress=False, chunk=8, limit=30)
    assert first["scored"] == 30 and not first["complete"]
    assert local_ray.is_initialized()  # a cluster the caller started is left running
    second = score_batch(panel, pool, out, workers=2, progress=False, chunk=8)
    assert second["already_done"] == 30 and second["complete"]
    assert out.read_bytes() == serial.read_bytes()


def test_cli_score_batch_takes_the_settings_file(tmp_path, changed_settings):
    from alpha_gym.commands.main import main
    from alpha_gym.market.resolve import default_panel
    toml, sets, config = changed_settings
    from alpha_gym.tasks.sets import brief_set
    brief = brief_set("probe")[0]  # R13, on in the changed settings, reads the row's brief
    pool = tmp_path / "pool.jsonl"
    pool.write_text(json.dumps({"formula": "rank(-ts_delta(close, 5))"}) + "\n"
                    + json.dumps({"formula": "rank(-ts_delta(close, 5))", "brief_id": brief.id}) + "\n")
    verifier = Verifier(default_panel(), config)
    direct = [verifier.score_formula("rank(-ts_delta(close, 5))", brief=b) for b in (None, brief)]
    # R13 is not the last term of the sum (R14 `book` follows it): the same up to rounding
    assert direct[1].reward == pytest.approx(direct[0].reward + direct[1].channels["brief"], abs=1e-12)
    assert direct[1].reward != direct[0].reward
    for flags in (["--config", str(toml)], [x for s in sets for x in ("--set", s)]):
        out = tmp_path / f"out{len(flags)}.jsonl"
        assert main(["score-batch", "--formulas", str(pool), "--out", str(out), "--workers", "0", "--quiet",
                     *flags]) == 0
        got = [json.loads(line)["score"] for line in out.read_text().splitlines()]
        assert got == [json.loads(json.dumps(d.to_dict())) for d in direct]
