"""Hostile inputs, round three (issue 41, items 3, 5, 7's archive part and 8's settings part).

Each `probe_*` function builds the cases of one class, tries them and returns `(tried, misbehaved)`,
as in `test_hostile_inputs.py`; the tests assert nothing misbehaves. Run this file as a script to print
the counts (`PYTHONPATH=<checkout> python tests/test_hostile_round3_serve.py`).

    class                        a case misbehaves when                                   before    after
    OpenEnv parallel steps       more than one of 8 parallel steps on an episode scored   6 of 6    0 of 6
    lone surrogates over HTTP    a 5xx or non-JSON reply, or OpenEnv's reward != serve's  12 of 26  0 of 26
    score-batch counts           exit 0 with fewer records than it says, a traceback, a   9 of 12   0 of 12
                                 negative count or more workers than cores accepted
    archive metadata             a file whose metadata or books were edited loads         23 of 27  0 of 27
    settings                     accepted with a priority below 1e-6 or an R1 of -inf, or 13 of 14  0 of 14
                                 not a one-line ConfigError (RecursionError, ValueError)
    total                                                                                  63 of 85  0 of 85

"Before" is commit 5dcfc26 (main when this work began), "after" this branch, counted by running this
script against each (2026-12-04). One case was not run on the old code: `score-batch --workers 99999`
started a Ray cluster that ate 20 GB (the issue's report), so the script starts it only where
`--workers <cores + 1>` is refused, and otherwise counts it as misbehaving without running it.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_hostile_inputs import GOOD, _assert_none, _misbehaves, _request, run_probes  # noqa: E402,I001

SURROGATES = ["\ud800", "\udfff", GOOD + " \udc80", "<alpha>rank(close\ud800)</alpha>", "\ud83d" + GOOD]


# ------------------------------------------------------------------------------------------ HTTP
def _status(url: str, method: str, path: str, payload=None):
    body = None if payload is None else json.dumps(payload).encode()  # ensure_ascii: a lone surrogate as \\ud800
    return _request(url, method, path, body)


def probe_openenv_races(trials: int = 6, parallel: int = 8) -> tuple[int, list[str]]:
    """`parallel` POST /step at once on one fresh session, `trials` times: one must be scored, the rest 409."""
    from alpha_gym.integrations.openenv import AlphaEnvironment
    from alpha_gym.integrations.openenv_server import create_app
    from alpha_gym.service.client import request_json
    from alpha_gym.service.server import BackgroundServer
    bad = []
    with BackgroundServer(app=create_app(lambda: AlphaEnvironment(briefs="probe"))) as url:
        for trial in range(trials):
            sid = request_json("POST", url + "/reset", {"seed": trial})["session_id"]
            start, statuses = threading.Barrier(parallel), []

            def step():
                start.wait()
                statuses.append(_status(url, "POST", "/step", {"session_id": sid, "action": {"answer": GOOD}})[0])

            threads = [threading.Thread(target=step) for _ in range(parallel)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            state = request_json("GET", url + f"/state?session_id={sid}")
            if statuses.count(200) != 1 or sorted(set(statuses)) != [200, 409] or state["step_count"] != 1:
                bad.append(f"trial {trial}: {statuses.count(200)} of {parallel} steps scored, statuses "
                           f"{sorted(statuses)}, step_count {state['step_count']}")
    return trials, bad


def probe_lone_surrogates() -> tuple[int, list[str]]:
    """Lone surrogates in every text field of both servers: JSON answers, never a 5xx, and OpenEnv's reward for
    an answer equal to the scoring service's."""
    from alpha_gym.integrations.openenv import AlphaEnvironment
    from alpha_gym.integrations.openenv_server import create_app
    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.service.client import ScoringClient, request_json
    from alpha_gym.service.server import BackgroundServer
    from alpha_gym.market.resolve import default_panel
    bad, tried = [], 0

    def check(url, method, path, payload, label):
        nonlocal tried
        tried += 1
        status, content_type, body = _status(url, method, path, payload)
        why = _misbehaves(method, status, content_type, body)
        if why:
            bad.append(f"{label}: {why}")
        return status, body

    served = {}
    with BackgroundServer(lambda: Verifier(default_panel())) as url:
        ScoringClient(url).wait_ready(120)
        for s in SURROGATES:
            status, body = check(url, "POST", "/score", {"answer": s}, f"serve answer {s!r}")
            served[s] = json.loads(body)["reward"] if status == 200 else None
        check(url, "POST", "/score", {"formula": "rank(close\ud800)"}, "serve formula")
        check(url, "POST", "/score", {"answers": SURROGATES[:3]}, "serve group")
    with BackgroundServer(app=create_app(lambda: AlphaEnvironment(briefs="probe"))) as url:
        for s in SURROGATES:
            sid = request_json("POST", url + "/reset", {"seed": 0})["session_id"]
            status, body = check(url, "POST", "/step", {"session_id": sid, "action": {"answer": s}},
                                 f"openenv answer {s!r}")
            tried += 1
            reward = json.loads(body).get("reward") if status == 200 else None
            if reward is None or reward != served[s]:
                bad.append(f"openenv answer {s!r}: reward {reward} where serve gives {served[s]}")
        sid = request_json("POST", url + "/reset", {"seed": 0, "episode_id": "\ud800"})["session_id"]
        for method, path, payload in [
                ("GET", f"/state?session_id={sid}", None),
                ("POST", "/step", {"session_id": sid, "action": {"answer": "x", "metadata": {"\ud800": "\udc00"}}}),
                ("POST", "/step", {"session_id": sid, "action": {"answer": GOOD, "\ud800": 1}}),
                ("POST", "/step", {"session_id": sid, "action": {"answer": ["\ud800"]}}),
                ("POST", "/step", {"session_id": "\ud800", "action": {"answer": GOOD}}),
                ("POST", "/reset", {"brief_id": "\ud800"}), ("POST", "/reset", {"session_id": "\udfff"}),
                ("POST", "/reset", {"episode_id": ["\ud800"]}), ("DELETE", "/sessions/%ED%A0%80", None)]:
            check(url, method, path, payload, f"openenv {method} {path[:30]} {str(payload)[:50]}")
    return tried, bad


# ------------------------------------------------------------------------------------- score-batch
def _cli(argv) -> tuple[int, str, str]:
    from alpha_gym.commands.main import main
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    except Exception as exc:  # noqa: BLE001 - the point: nothing may escape as a traceback
        return -1, out.getvalue(), f"Traceback: {type(exc).__name__}: {exc}"
    return code, out.getvalue(), err.getvalue()


def _cores() -> int:
    import os
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def probe_batch_counts(tmp: Path) -> tuple[int, list[str]]:
    """score-batch with counts out of range: exit 2 with one line, and no summary that claims unwritten work."""
    pool = tmp / "pool.txt"
    pool.write_text("\n".join(["rank(close)", "rank(-ts_delta(close, 5))", "rank(volume)", "rank(open)",
                               "rank(ts_std(close, 10))", "rank(close / open)", "rank(high - low)",
                               "rank(ts_mean(volume, 5))"]) + "\n")
    cores = _cores()
    cases = [["--chunk", "-1"], ["--chunk", "0"], ["--chunk", "-64"], ["--chunk", "2e9"], ["--chunk", "abc"],
             ["--workers", "-3"], ["--workers", "-1"], ["--workers", "1.5"], ["--limit", "-1"], ["--limit", "0"],
             ["--workers", str(cores + 1)], ["--workers", "99999"]]
    bad = []
    checks_cores = None
    for k, flags in enumerate(cases):
        out = tmp / f"out{k}.jsonl"
        if flags == ["--workers", "99999"] and not checks_cores:
            bad.append("--workers 99999: not run (the code does not refuse more workers than cores, so it would "
                       "start them: the issue measured 20 GB in three minutes)")
            continue
        code, stdout, stderr = _cli(["score-batch", "--formulas", str(pool), "--out", str(out), "--quiet",
                                     *([] if "--workers" in flags else ["--workers", "0"]), *flags])
        if flags[0] == "--workers" and flags[1] == str(cores + 1):
            checks_cores = code == 2
        records = len(out.read_text().splitlines()) if out.exists() else 0
        label = " ".join(flags)
        if "Traceback" in stderr or code not in (0, 2):
            bad.append(f"{label}: {stderr.strip().splitlines()[-1][:120] if stderr.strip() else code}")
        elif code == 0:
            summary = json.loads(stdout.strip().splitlines()[-1])
            if summary.get("complete") and records != summary["items"] or summary["scored"] > records:
                bad.append(f"{label}: exit 0 with {summary['scored']} scored, complete {summary['complete']}, "
                           f"{records} records written")
            elif flags[0] == "--workers":
                bad.append(f"{label}: accepted on a machine of {cores} cores")
            elif flags[0] == "--limit":
                bad.append(f"{label}: accepted ({summary['scored']} scored)")
    return len(cases), bad


# ------------------------------------------------------------------------------------------ archive
def _archive_file(tmp: Path):
    """A saved archive of 4 learned books (and its fingerprint)."""
    from alpha_gym.scoring.archive import Archive
    rng = np.random.default_rng(7)
    a = Archive("f" * 64, 60, capacity=16, admit_corr=0.9)
    for k in range(4):
        a.add(f"form-{k}", f"rank(ts_mean(close, {k + 2}))", rng.standard_normal(60), 0.2 + 0.1 * k,
              rng.standard_normal(15), rng.standard_normal(15))
    path = tmp / "archive.npz"
    a.save(path)
    return path, "f" * 64


def probe_archive_metadata(tmp: Path) -> tuple[int, list[str]]:
    """Archives whose metadata has the wrong type or range, or whose content was edited so that every older check
    passes: each must raise ArchiveError (one line), never load."""
    from alpha_gym.errors import InputError
    from alpha_gym.scoring.archive import Archive
    path, fingerprint = _archive_file(tmp)
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    meta = json.loads(str(arrays["meta"]))
    rng = np.random.default_rng(3)
    z, ins = arrays["z"], arrays["in_sample"]
    shuffled = z[:, rng.permutation(z.shape[1])]  # every row still mean 0, mean square 1
    swapped = z[[1, 0, 2, 3]]
    cases = [("forms as ints", {"forms": [1, 2, 3, 4]}, {}), ("texts as ints", {"texts": [1, 2, 3, 4]}, {}),
             ("admit_corr 'x'", {"admit_corr": "x"}, {}), ("admit_corr NaN", {"admit_corr": float("nan")}, {}),
             ("admit_corr -5", {"admit_corr": -5}, {}), ("admit_corr true", {"admit_corr": True}, {}),
             ("admit_corr 0", {"admit_corr": 0}, {}), ("capacity true", {"capacity": True}, {}),
             ("capacity 1e7", {"capacity": 10**7}, {}), ("n_days true", {"n_days": True}, {}),
             ("cpcv 1e308", {"cpcv": [1e308] + meta["cpcv"][1:]}, {}),
             ("cpcv '0.5'", {"cpcv": ["0.5"] + meta["cpcv"][1:]}, {}),
             ("cpcv true", {"cpcv": [True] + meta["cpcv"][1:]}, {}),
             ("added -1", {"added": [-1] + meta["added"][1:]}, {}),
             ("added 1.5", {"added": [1.5] + meta["added"][1:]}, {}),
             ("added true", {"added": [True] + meta["added"][1:]}, {}),
             ("forms a string", {"forms": "abcd"}, {}),
             ("in_sample 1e300", {}, {"in_sample": np.where(np.arange(ins.size).reshape(ins.shape) == 0, 1e300, ins)}),
             ("out_of_sample -1e300", {}, {"out_of_sample": np.full_like(ins, -1e300)}),
             ("rows shuffled across days", {}, {"z": shuffled}),
             ("two books swapped", {}, {"z": swapped}),
             ("one day's P&L negated in every row", {}, {"z": z * np.where(np.arange(z.shape[1]) == 5, -1, 1)}),
             ("a formula swapped", {"texts": ["rank(close)"] + meta["texts"][1:]}, {}),
             ("a CPCV changed", {"cpcv": [9.9] + meta["cpcv"][1:]}, {}),
             ("a learned entry made a seed", {"seed": [True] + meta["seed"][1:]}, {}),
             ("admit_corr loosened", {"admit_corr": 1.0}, {}),
             ("slice Sharpes scaled", {}, {"in_sample": ins * 3})]
    bad = []
    for label, meta_changes, array_changes in cases:
        target = tmp / "edited.npz"
        np.savez(target, **{**arrays, "meta": np.array(json.dumps({**meta, **meta_changes})), **array_changes})
        try:
            Archive.load(target, fingerprint)
            bad.append(f"{label}: loaded")
        except InputError as err:
            if "\n" in str(err):
                bad.append(f"{label}: a message of several lines")
        except Exception as exc:  # noqa: BLE001
            bad.append(f"{label}: {type(exc).__name__}: {str(exc)[:80]}")
    return len(cases), bad


# ------------------------------------------------------------------------------------------ settings
SETTINGS_CASES = [
    ("set", "verifier.priorities.cpcv=1e-320"), ("set", "verifier.priorities.cpcv=5e-324"),
    ("set", "verifier.priorities.novelty_pnl=1e-300"), ("set", "verifier.priorities.cpcv=1e-7"),
    ("set", "verifier.turnover_cap=" + "1" * 5000), ("set", "verifier.limits.max_window=" + "9" * 5000),
    ("set", "verifier.turnover_cap=" + "1" * 4000), ("set", "verifier.turnover_cap=" + "[" * 3000),
    ("set", "verifier.turnover_cap=" + "{a=" * 3000), ("set", "verifier." + "a." * 3000 + "b=1"),
    ("toml", "a = " + "{b = " * 3000 + "1" + "}" * 3000),
    ("toml", "[verifier]\nturnover_cap = " + "[" * 3000 + "]" * 3000),
    ("toml", "[verifier]\nturnover_cap = " + "1" * 5000),
    ("toml", "[verifier.priorities]\ncpcv = 1e-320\n"),
]


def probe_settings(tmp: Path) -> tuple[int, list[str]]:
    """Hostile settings: a one-line ConfigError, or (never here) accepted with finite rewards."""
    from alpha_gym.errors import ConfigError
    from alpha_gym.settings import load
    bad = []
    for kind, text in SETTINGS_CASES:
        label = f"{kind} {text[:50]!r}{'...' if len(text) > 50 else ''}"
        try:
            if kind == "set":
                config = load(None, [text]).verifier
            else:
                (tmp / "run.toml").write_text(text)
                config = load(tmp / "run.toml").verifier
        except ConfigError as err:
            if "\n" in str(err) or len(str(err)) > 400:
                bad.append(f"{label}: an error of {len(str(err))} characters")
            continue
        except BaseException as exc:  # noqa: BLE001 - a RecursionError, ValueError, OverflowError
            bad.append(f"{label}: {type(exc).__name__}: {str(exc)[:80]}")
            continue
        rewards = [config.invalid_reward(k) for k in ("missing_tag", "unparseable", "invalid_book")]
        channel = [config.invalid_cpcv(k) for k in ("missing_tag", "unparseable", "invalid_book")]
        bad.append(f"{label}: accepted" + ("" if all(map(math.isfinite, rewards + channel)) else
                                           f", invalid rewards {rewards}, R1 {channel}"))
    return len(SETTINGS_CASES), bad


# ------------------------------------------------------------------------------------------ tests
def test_openenv_scores_one_answer_per_episode_under_parallel_steps():
    pytest.importorskip("openenv.core.env_server.interfaces")
    pytest.importorskip("uvicorn")
    _assert_none(probe_openenv_races(), 6)


def test_lone_surrogates_are_answered_as_serve_answers_them():
    pytest.importorskip("openenv.core.env_server.interfaces")
    pytest.importorskip("uvicorn")
    _assert_none(probe_lone_surrogates(), 24)


def test_score_batch_counts_are_checked_against_the_machine(tmp_path):
    _assert_none(probe_batch_counts(tmp_path), 12)


def test_edited_archives_are_refused(tmp_path):
    _assert_none(probe_archive_metadata(tmp_path), 27)
    from alpha_gym.scoring.archive import Archive, ArchiveError
    path, fingerprint = _archive_file(tmp_path)
    assert Archive.load(path, fingerprint).forms == [f"form-{k}" for k in range(4)]  # the saved one loads
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    z = arrays["z"][:, ::-1]  # every day reversed: each book still standardised, only the hash can tell
    np.savez(tmp_path / "reversed.npz", **{**arrays, "z": z})
    with pytest.raises(ArchiveError, match="does not match its content hash: it was edited or damaged"):
        Archive.load(tmp_path / "reversed.npz", fingerprint)


def test_an_archive_written_before_the_hash_is_refused_then_rehashed(tmp_path):
    from alpha_gym.scoring.archive import Archive, ArchiveError, main
    path, fingerprint = _archive_file(tmp_path)
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    meta = json.loads(str(arrays["meta"]))
    old = {k: v for k, v in meta.items() if k != "sha256"} | {"format_version": 2}
    np.savez(path, **{**arrays, "meta": np.array(json.dumps(old))})
    with pytest.raises(ArchiveError, match=r"before archives carried a content hash \(format 2\).*--rehash"):
        Archive.load(path, fingerprint)
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["--rehash", str(path)]) == 0
    assert Archive.load(path, fingerprint).forms == meta["forms"]
    (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04junk")
    with contextlib.redirect_stderr(io.StringIO()) as err:
        assert main(["--rehash", str(tmp_path / "junk.npz")]) == 2
    assert "not a readable alpha-gym archive" in err.getvalue()


def test_hostile_settings_are_one_line_errors(tmp_path):
    _assert_none(probe_settings(tmp_path), 14)


# ------------------------------------------------------------------------------------------ script
def main() -> int:
    """Print, per class, how many cases were tried and how many misbehaved (each of them)."""
    tmp = Path(tempfile.mkdtemp(prefix="hostile3_"))
    run_probes([("OpenEnv parallel steps", probe_openenv_races), ("lone surrogates over HTTP", probe_lone_surrogates),
                ("score-batch counts", lambda: probe_batch_counts(tmp)),
                ("archive metadata", lambda: probe_archive_metadata(tmp)), ("settings", lambda: probe_settings(tmp))],
               shown=100)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
