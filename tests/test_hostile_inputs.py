"""Hostile inputs (issue 27): nothing a user or a client can send ends in a traceback or an HTTP 500.

Each `probe_*` function generates the inputs of one class (seeded, bounded), tries them and
returns `(tried, misbehaved)`: misbehaved lists each case that escaped as something other than
a clear refusal. The tests assert none did. Run this file as a script to print the counts
(`PYTHONPATH=<checkout> python tests/test_hostile_inputs.py`): against the code before issue 27
it counts the cases these fixes cover.

Found this way: OpenEnv `GET /health` always 500 and `/reset {"seed": "abc"}` 500; a body of
100,000 `[` a RecursionError 500; 404/405 as plain text; `serve --port 99999` an OverflowError;
a (date, ticker)-indexed Parquet file a KeyError; `load_panel(series)` a TypeError; a truncated
checkpoint on --resume a torch/safetensors traceback; a corrupt `.meta.json` or a binary
formulas file a JSONDecodeError/UnicodeDecodeError; an archive with text arrays a TypeError;
`alpha-gym score "-rank(close)"` read as a flag; `env.step` after `terminated=True` scoring again.
"""

from __future__ import annotations

import collections
import contextlib
import http.client
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
GOOD = "<alpha>rank(-ts_delta(close, 5))</alpha>"
METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD")


def _user_errors():
    from alpha_gym.commands.main import user_errors
    return user_errors()


def _small_panel():
    from alpha_gym.market import synthetic_panel
    return synthetic_panel(n_stocks=12, n_days=400, seed=3)


def _long_frame(panel):
    import pandas as pd
    dates = np.repeat(np.asarray(panel.dates).astype(str), len(panel.tickers))
    tickers = np.tile(np.asarray(panel.tickers), len(panel.dates))
    cols = {f: panel.data[f].reshape(-1) for f in ("open", "high", "low", "close", "volume")}
    return pd.DataFrame({"date": dates, "ticker": tickers, **cols})


# ------------------------------------------------------------------------------------------ HTTP fuzz
def _random_json(rng, depth: int = 3):
    kind = int(rng.integers(8 if depth > 0 else 5))
    if kind == 0:
        return None
    if kind == 1:
        return bool(rng.integers(2))
    if kind == 2:
        return int(rng.choice([0, -1, 7, 2**31, -2**63, 10**30]))
    if kind == 3:
        return float(rng.choice([0.5, -1e308, 1e308, float("nan"), float("inf")]))
    if kind == 4:
        return str(rng.choice(["", "abc", GOOD, "rank(close)", "-rank(close)", "\x00\ud7ff\u2028", "x" * 3000,
                               "<alpha>" * 50, "{" * 40, "\\", "null"]))
    if kind == 5:
        return [_random_json(rng, depth - 1) for _ in range(int(rng.integers(4)))]
    if kind == 6:
        keys = ["answer", "formula", "answers", "seed", "session_id", "action", "brief_id", "episode_id", "k"]
        return {str(rng.choice(keys)): _random_json(rng, depth - 1) for _ in range(int(rng.integers(4)))}
    return json.loads("[" * 20 + "1" + "]" * 20)


def _random_body(rng, keys, values) -> bytes:
    r = rng.random()
    if r < 0.5:  # the right shape, any values: reaches past the parser
        pick = lambda: values[int(rng.integers(len(values)))] if rng.random() < 0.5 else _random_json(rng)  # noqa
        body = {str(rng.choice(keys)): pick() for _ in range(1 + int(rng.integers(3)))}
        if "action" in body and rng.random() < 0.7:
            body["action"] = {str(rng.choice(["answer", "metadata", "x"])): pick()}
        return json.dumps(body).encode()
    if r < 0.62:
        return json.dumps(_random_json(rng)).encode()
    if r < 0.74:  # deep nesting, closed or not
        k = int(rng.choice([33, 100, 1000, 100_000]))
        opener, closer = (b"[", b"]") if rng.random() < 0.5 else (b'{"a":', b"}")
        return opener * k + (b"1" + closer * k if rng.random() < 0.5 else b"")
    if r < 0.84:
        return rng.bytes(int(rng.integers(1, 200)))
    if r < 0.94:
        text = json.dumps({"answer": GOOD, "session_id": "s"}).encode()
        return text[: int(rng.integers(1, len(text)))]
    return b""


def _random_path(rng, paths) -> str:
    r = rng.random()
    if r < 0.6:
        return str(rng.choice(paths))
    extra = ["/", "//", "/score/", "/health/x", "/%ff", "/sessions/", "/sessions/x/y", "/state?session_id=",
             "/state?session_id=%00", "/" + "a" * 4000, "/reset?x=1&x=2", "/..%2f..%2fetc"]
    return str(rng.choice(extra))


def _misbehaves(method: str, status: int, content_type: str, body: bytes) -> str | None:
    """Why a response breaks the contract (every response JSON; every error a JSON object with "error"; no 5xx)."""
    if status >= 500:
        return f"{status}"
    if 300 <= status < 400:  # Starlette's redirect of /score/ to /score: an answer, not an error
        return None
    if not content_type.startswith("application/json"):
        return f"{status} {content_type or 'no content type'}"
    if method == "HEAD":
        return None
    try:
        payload = json.loads(body)
    except ValueError:
        return f"{status} body not JSON"
    if status >= 400 and not (isinstance(payload, dict) and "error" in payload):
        return f"{status} JSON without error"
    return None


def _request(url: str, method: str, path: str, body: bytes | None):
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.getheader("content-type") or "", response.read()
    finally:
        conn.close()


def fuzz_http(url: str, paths, keys, values, n: int, seed: int) -> tuple[int, list[str]]:
    """`n` random requests (methods, paths, bodies) against the server at `url`; the ones that misbehave."""
    rng = np.random.default_rng(seed)
    bad = []
    for _ in range(n):
        method = str(rng.choice(METHODS)) if rng.random() < 0.4 else str(rng.choice(["GET", "POST"]))
        path = _random_path(rng, paths)
        body = _random_body(rng, keys, values) if method not in ("GET", "HEAD") or rng.random() < 0.1 else None
        why = _misbehaves(method, *_request(url, method, path, body))
        if why:
            bad.append(f"{why}: {method} {path[:60]} {(body or b'')[:60]!r}")
    return n, bad


def probe_scoring_service(n: int = 200, seed: int = 0) -> tuple[int, list[str]]:
    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.service.client import ScoringClient
    from alpha_gym.service.server import BackgroundServer
    panel = _small_panel()
    with BackgroundServer(lambda: Verifier(panel), max_bytes=1 << 20, max_answers=8) as url:
        ScoringClient(url).wait_ready(120)
        tried, bad = fuzz_http(url, ["/score", "/health"], ["answer", "formula", "answers"],
                               [GOOD, "rank(close)", [GOOD, "no tag"], ["x"] * 9], n, seed)
        fixed = [("GET", "/health", None), ("GET", "/nowhere", None), ("GET", "/score", None),
                 ("POST", "/score", b"[" * 100_000), ("POST", "/score", b'{"answers": ' + b"[" * 5000 + b"]" * 5000)]
        for method, path, body in fixed:
            why = _misbehaves(method, *_request(url, method, path, body))
            if why:
                bad.append(f"{why}: {method} {path} {(body or b'')[:40]!r}")
    return tried + len(fixed), bad


def _openenv_factory(data_path: str):
    from alpha_gym.integrations.openenv import AlphaEnvironment
    return lambda: AlphaEnvironment(briefs="probe", data=data_path)


def probe_openenv_server(data_path: str, n: int = 200, seed: int = 1) -> tuple[int, list[str]]:
    from alpha_gym.integrations.openenv_server import create_app
    from alpha_gym.service.client import request_json
    from alpha_gym.service.server import BackgroundServer
    with BackgroundServer(app=create_app(_openenv_factory(data_path), max_sessions=8)) as url:
        try:
            sid = request_json("POST", url + "/reset", {"seed": 0})["session_id"]
        except Exception as err:  # a broken /reset: every request that needs a session still gets tried
            sid = f"none ({type(err).__name__})"
        paths = ["/reset", "/step", "/health", f"/state?session_id={sid}", "/state", f"/sessions/{sid}",
                 "/sessions/nope"]
        tried, bad = fuzz_http(url, paths, ["seed", "session_id", "action", "brief_id", "episode_id"],
                               [sid, 0, "abc", -1, 2**70, {"answer": GOOD}, "g0-0008", GOOD], n, seed)
        fixed = [("GET", "/health", None), ("POST", "/reset", b'{"seed": "abc"}'), ("POST", "/reset", b'{"seed": 1.5}'),
                 ("POST", "/reset", b"[" * 100_000), ("GET", "/nowhere", None), ("GET", "/reset", None)]
        for method, path, body in fixed:
            why = _misbehaves(method, *_request(url, method, path, body))
            if why:
                bad.append(f"{why}: {method} {path} {(body or b'')[:40]!r}")
    return tried + len(fixed), bad


# ------------------------------------------------------------------------------------------- CLI args
def _parse(argv):
    """('ok', args) | ('refused', message) | ('crash', message): the CLI parser on `argv`, nothing run."""
    from alpha_gym.commands.main import build_parser
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return "ok", build_parser().parse_args(argv)
    except SystemExit as exit_:
        return ("refused" if exit_.code == 2 else "crash"), err.getvalue()
    except Exception as exc:  # noqa: BLE001 - the point: nothing else may escape
        return "crash", f"{type(exc).__name__}: {exc}"


def probe_cli_args(n: int = 150, seed: int = 2) -> tuple[int, list[str]]:
    """--port values (a parsed port must be one a socket can bind) and formulas that start with '-'."""
    from alpha_gym.language.sample import random_formula
    rng = np.random.default_rng(seed)
    bad, tried = [], 0
    ports = ["0", "1", "8000", "65535", "65536", "99999", "-1", "-8000", "abc", "", "80.5", "1e3", " 8000",
             str(2**64)] + [str(int(v)) for v in rng.integers(-10**6, 10**6, size=n // 3)]
    for value in ports:
        tried += 1
        outcome, args = _parse(["serve", "--port", value])
        if outcome == "crash" or (outcome == "ok" and not 0 <= args.port <= 65535):
            bad.append(f"serve --port {value!r}: {outcome} {getattr(args, 'port', args)!r}"[:160])
    formulas = ["-rank(close)", "-close", "-1 * close", "--rank(close)", "--close"] + \
        ["-" + random_formula(rng, depth=3) for _ in range(n - n // 3)]
    for formula in formulas:
        shaped_like_a_flag = re.fullmatch(r"--[A-Za-z][\w-]*", formula) is not None  # goes after --
        argvs = [["score", "--json", "--", formula]] if shaped_like_a_flag else \
            [["score", formula], ["score", "--json", formula], ["score", formula, "--json"]]
        for argv in argvs:
            tried += 1
            outcome, args = _parse(argv)
            if outcome != "ok" or args.formula != formula:
                bad.append(f"{argv}: {outcome} {str(args)[-120:]}")
    return tried, bad


# ------------------------------------------------------------------------------------------------ files
def _expect_user_error(label: str, fn, bad: list) -> None:
    try:
        fn()
    except _user_errors():
        return
    except Exception as exc:  # noqa: BLE001
        bad.append(f"{label}: {type(exc).__name__}: {str(exc)[:100]}")
        return
    bad.append(f"{label}: accepted")


def probe_market_inputs(tmp: Path) -> tuple[int, list[str]]:
    """Parquet files with an index, and things that are neither a path nor a DataFrame."""
    import pandas as pd
    from alpha_gym.market import load_panel
    panel = _small_panel().head(60)
    frame = _long_frame(panel)
    bad, tried = [], 0
    for label, indexed in (("(date, ticker) index", frame.set_index(["date", "ticker"])),
                           ("date index", frame.set_index("date")), ("ticker index", frame.set_index("ticker"))):
        tried += 1
        path = tmp / f"indexed_{tried}.parquet"
        indexed.to_parquet(path)
        try:
            loaded = load_panel(path)
            if not np.array_equal(loaded.data["close"], panel.data["close"]):
                bad.append(f"Parquet with a {label}: loaded other prices")
        except Exception as exc:  # noqa: BLE001
            bad.append(f"Parquet with a {label}: {type(exc).__name__}: {str(exc)[:80]}")
    not_sources = [frame["close"], frame.to_numpy(), frame.to_dict(), frame.to_dict("records"), 3, None, b"x.csv",
                   frame.set_index(["date", "ticker"])["close"]]
    for obj in not_sources:
        tried += 1
        _expect_user_error(f"load_panel({type(obj).__name__})", lambda: load_panel(obj), bad)
    return tried, bad


def probe_batch_files(tmp: Path) -> tuple[int, list[str]]:
    """Formula files that are not UTF-8 text, and damaged `.meta.json` sidecars."""
    from alpha_gym.batch.records import check_meta, meta_path, read_items
    rng = np.random.default_rng(4)
    bad, tried = [], 0
    contents = [b"\x89PNG\r\n\x1a\n" + rng.bytes(300), "rank(cl\u00f4se)\n".encode("latin-1"), b"\xff\xfe" + rng.bytes(40),
                b"rank(close)\n" * 3000 + b"\x80\n"]
    for k, content in enumerate(contents):
        for suffix in (".txt", ".jsonl"):
            tried += 1
            path = tmp / f"formulas_{k}{suffix}"
            path.write_bytes(content)
            _expect_user_error(f"formulas file {k}{suffix}", lambda: read_items(path), bad)
    out = tmp / "scores.jsonl"
    out.write_text("")
    for k, damaged in enumerate([b'{"input": "a", "items"', b"", b"\x00\x01\xff", b"[1, 2]", b"null", b'"text"']):
        tried += 1
        meta_path(out).write_bytes(damaged)
        _expect_user_error(f".meta.json {damaged[:20]!r}", lambda: check_meta(out, {"input": "a", "items": 1}), bad)
    return tried, bad


def _saved_archive(tmp: Path):
    from alpha_gym.scoring.verifier import Verifier
    verifier = Verifier(_small_panel())
    path = tmp / "archive.npz"
    verifier.save_archive(path)
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    return path, verifier.panel.fingerprint(), arrays


def probe_archive_files(tmp: Path) -> tuple[int, list[str]]:
    """Archives whose metadata fields or arrays have the wrong type or shape: ArchiveError, never a TypeError."""
    from alpha_gym.scoring.archive import Archive
    path, fingerprint, arrays = _saved_archive(tmp)
    meta = json.loads(str(arrays["meta"]))
    bad, tried = [], 0
    wrong = ["x", 3, -1, 1.5, None, [], ["a"], {"a": 1}, [None], True, [[1]]]

    def attempt(label, new_arrays):
        nonlocal tried
        tried += 1
        target = tmp / "mutated.npz"
        np.savez(target, **new_arrays)
        try:
            Archive.load(target, fingerprint)
        except _user_errors():
            return
        except Exception as exc:  # noqa: BLE001
            bad.append(f"{label}: {type(exc).__name__}: {str(exc)[:80]}")

    for key in meta:
        for value in wrong:
            attempt(f"meta[{key!r}] = {value!r}", {**arrays, "meta": np.array(json.dumps({**meta, key: value}))})
    for key in ("z", "in_sample", "out_of_sample"):
        for label, value in (("text", arrays[key].astype(str)), ("1-d", arrays[key].reshape(-1)),
                             ("empty", np.zeros((0,))), ("bytes", arrays[key].astype(bytes))):
            attempt(f"{key} as {label}", {**arrays, key: value})
    for label, value in (("a number", np.array(5.0)), ("a JSON list", np.array("[1, 2]")), ("bytes", np.array(b"{}"))):
        attempt(f"meta as {label}", {**arrays, "meta": value})
    return tried, bad


def _tiny_policy():
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, GPT2Config
    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=64, n_positions=16, bos_token_id=0, eos_token_id=0)
    with contextlib.redirect_stderr(io.StringIO()):
        policy = get_peft_model(AutoModelForCausalLM.from_config(config), LoraConfig(r=2, target_modules=["c_attn"],
                                                                                      fan_in_fan_out=True))
    return policy, torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-3)


def probe_checkpoints(tmp: Path) -> tuple[int, list[str]]:
    """A checkpoint whose trainer_state.pt or adapter_model.safetensors is truncated or overwritten, on resume."""
    from trainers.config import TrainConfig
    from trainers.checkpoints import load_checkpoint, save_checkpoint
    policy, optimizer = _tiny_policy()
    good = save_checkpoint(tmp, 1, policy, optimizer, None, None, TrainConfig())
    assert load_checkpoint(good, policy, optimizer, None, None) == 1  # the undamaged one restores
    bad, tried = [], 0
    for name in ("trainer_state.pt", "adapter_model.safetensors"):
        size = (good / name).stat().st_size
        for label, cut in (("empty", 0), ("10 bytes", 10), ("half", size // 2), ("all but 1 byte", size - 1),
                           ("garbage", -1)):
            tried += 1
            ckpt = tmp / f"checkpoint-{2 + tried}"
            shutil.copytree(good, ckpt)
            content = (good / name).read_bytes()
            (ckpt / name).write_bytes(b"\x00garbage" * (size // 8) if cut < 0 else content[:cut])
            _expect_user_error(f"{name} {label}", lambda: load_checkpoint(ckpt, policy, optimizer, None, None), bad)
    return tried, bad


# ------------------------------------------------------------------------------------------------- env
def probe_env_episodes() -> tuple[int, list[str]]:
    """A step after terminated=True raises until reset; vector envs (both autoreset modes) keep stepping."""
    import gymnasium as gym
    from gymnasium.error import ResetNeeded
    from gymnasium.vector import AutoresetMode
    from alpha_gym.env import AlphaFormulaEnv
    from alpha_gym.scoring.verifier import Verifier
    panel = _small_panel()
    verifier = Verifier(panel)
    bad, tried = [], 0
    for label, env in (("AlphaFormulaEnv", AlphaFormulaEnv(verifier=verifier, archive="frozen")),
                       ("gym.make", gym.make("AlphaFormula-v0", verifier=verifier, archive="frozen"))):
        env.reset(seed=0)
        _, first, terminated, _, _ = env.step(GOOD)
        for k in range(2):
            tried += 1
            try:
                env.step(GOOD)
                bad.append(f"{label}: step {k + 2} after terminated={terminated} scored again")
            except (ResetNeeded, RuntimeError):
                pass
        tried += 1
        env.reset()
        if env.step(GOOD)[1] != first:
            bad.append(f"{label}: the step after reset scored differently")
    for mode in (AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP):
        envs = gym.vector.SyncVectorEnv([lambda: AlphaFormulaEnv(verifier=verifier, archive="frozen")] * 2,
                                        autoreset_mode=mode)
        envs.reset(seed=0)
        for step in range(3):
            tried += 1
            try:
                _, rewards, terminated, _, _ = envs.step([GOOD, "no tag"])
                if mode == AutoresetMode.SAME_STEP and not terminated.all():
                    bad.append(f"{mode}: step {step} not terminated")
            except Exception as exc:  # noqa: BLE001
                bad.append(f"{mode} vector step {step}: {type(exc).__name__}: {exc}")
        envs.close()
    return tried, bad


# ----------------------------------------------------------------------------------------------- tests
@pytest.fixture(scope="module")
def small_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("hostile") / "small.csv"
    _long_frame(_small_panel()).to_csv(path, index=False)
    return str(path)


def _assert_none(result, at_least: int):
    tried, bad = result
    assert tried >= at_least and not bad, f"{len(bad)} of {tried} misbehaved:\n" + "\n".join(bad[:20])


def test_scoring_service_answers_every_request_with_json_and_never_500():
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    _assert_none(probe_scoring_service(), 200)


def test_openenv_server_answers_every_request_with_json_and_never_500(small_csv):
    pytest.importorskip("openenv.core.env_server.interfaces")
    pytest.importorskip("uvicorn")
    _assert_none(probe_openenv_server(small_csv), 200)


def test_json_depth_is_bounded_without_recursion():
    from alpha_gym.service.http_json import RequestError, json_depth, parse_json
    assert json_depth(b'{"a": [1, {"b": "[[[[{{"}]}') == 3  # brackets inside strings do not count
    assert json_depth(b'"\\"[["') == 0 and json_depth(b"") == 0 and json_depth(b"[" * 100_000) == 100_000
    assert parse_json(b'{"answers": [[1]]}') == {"answers": [[1]]}
    with pytest.raises(RequestError, match="nests 33 levels") as err:
        parse_json(b"[" * 33 + b"]" * 33)
    assert err.value.status == 400


def test_cli_args_parse_or_refuse_with_a_message():
    _assert_none(probe_cli_args(), 150)
    outcome, message = _parse(["serve", "--port", "99999"])
    assert outcome == "refused" and "argument --port: '99999' is not a TCP port" in message
    outcome, message = _parse(["score", "--jsn"])  # a mistyped long flag is still an error, not a formula
    assert outcome == "refused" and "unrecognized arguments: --jsn" in message and "goes after --" in message


def test_cli_scores_a_formula_that_starts_with_minus_and_serve_refuses_a_bad_port(small_csv):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = [sys.executable, "-m", "alpha_gym"]
    out = subprocess.run(run + ["score", "-rank(ts_delta(close, 5))", "--json", "--data", small_csv], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["formula"].startswith("-")
    for cmd in (run + ["serve", "--port", "99999"],
                [sys.executable, "-m", "alpha_gym.commands.openenv_server", "--port", "-1"]):
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and "Traceback" not in out.stderr and "not a TCP port" in out.stderr


def test_market_inputs_load_or_raise_data_error(tmp_path):
    pytest.importorskip("pyarrow")
    _assert_none(probe_market_inputs(tmp_path), 11)
    from alpha_gym.market import DataError, load_panel
    with pytest.raises(DataError, match="pandas.Series .*reset_index"):
        load_panel(_long_frame(_small_panel().head(30))["close"])


def test_batch_decode_errors_are_batch_errors(tmp_path):
    _assert_none(probe_batch_files(tmp_path), 14)
    from alpha_gym.batch.records import BatchError, read_items
    (tmp_path / "bin.txt").write_bytes(b"rank(close)\n\xff\x00")
    with pytest.raises(BatchError, match="bin.txt is not UTF-8 text"):
        read_items(tmp_path / "bin.txt")


def test_archive_type_errors_are_archive_errors(tmp_path):
    _assert_none(probe_archive_files(tmp_path), 120)


def test_damaged_checkpoints_are_checkpoint_errors_naming_the_file(tmp_path):
    pytest.importorskip("peft")
    pytest.importorskip("safetensors")
    _assert_none(probe_checkpoints(tmp_path), 10)
    from trainers.checkpoints import CheckpointError, load_state
    (tmp_path / "cut.pt").write_bytes(b"PK\x03\x04")
    with pytest.raises(CheckpointError, match=r"cut\.pt is truncated or damaged.*delete .* earlier checkpoint"):
        load_state(tmp_path / "cut.pt")


def test_a_damaged_partial_stress_fit_is_a_stress_error(tmp_path):
    pytest.importorskip("safetensors")
    import torch
    from safetensors.torch import save_file
    from alpha_gym.stress import checkpoint as ck
    from alpha_gym.stress.config import StressConfig, StressError
    from alpha_gym.stress.fit import _load_partial
    save_file({"rng.torch": torch.get_rng_state()}, str(tmp_path / ck.PARTIAL_FILE))
    good = (tmp_path / ck.PARTIAL_FILE).read_bytes()
    for json_text, tensors in (("{}", good[: len(good) // 2]), ('{"step": 1', good), ("[]", good)):
        (tmp_path / ck.PARTIAL_JSON).write_text(json_text)
        (tmp_path / ck.PARTIAL_FILE).write_bytes(tensors)
        with pytest.raises(StressError, match="(damaged|another config).*--restart"):
            _load_partial(tmp_path, None, None, StressConfig(), "fp")


def test_trl_resume_checks_the_checkpoint_folder(tmp_path):
    pytest.importorskip("safetensors")
    import torch
    from safetensors.torch import save_file
    from trainers.checkpoints import CheckpointError, check_folder
    save_file({"w": torch.ones(4, 4)}, str(tmp_path / "model.safetensors"))
    torch.save({"a": torch.zeros(3)}, tmp_path / "optimizer.pt")
    (tmp_path / "trainer_state.json").write_text("{}")
    check_folder(tmp_path)  # undamaged: nothing raised
    for name, cut in (("model.safetensors", 20), ("optimizer.pt", 30), ("trainer_state.json", 1)):
        damaged = tmp_path / "damaged"
        shutil.rmtree(damaged, ignore_errors=True)
        shutil.copytree(tmp_path, damaged, ignore=shutil.ignore_patterns("damaged"))
        (damaged / name).write_bytes((tmp_path / name).read_bytes()[:cut])
        with pytest.raises(CheckpointError, match=name.replace(".", r"\.")):
            check_folder(damaged)


def test_env_step_after_termination_raises_until_reset():
    _assert_none(probe_env_episodes(), 10)


# ----------------------------------------------------------------------------------------------- script
def run_probes(probes, shown: int = 4) -> tuple[int, int]:
    """Run each (name, probe) whose name holds one of the script's arguments (all without any); print what
    each tried and which cases misbehaved (the first `shown`; HTTP ones counted by kind). Returns the totals."""
    total_tried = total_bad = 0
    for name, probe in probes:
        if len(sys.argv) > 1 and not any(a in name for a in sys.argv[1:]):
            continue
        try:
            tried, bad = probe()
        except Exception as exc:  # noqa: BLE001 - a probe that cannot run at all is reported, not fatal
            print(f"{name}: probe failed: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            continue
        total_tried, total_bad = total_tried + tried, total_bad + len(bad)
        kinds = collections.Counter(line.split(":")[0] for line in bad) if "HTTP" in name else {}
        print(f"{name}: tried {tried}, misbehaved {len(bad)}" + "".join(f"; {n} x {k}" for k, n in
                                                                        sorted(kinds.items())), flush=True)
        for line in bad[:shown]:
            print(f"    {line[:160]}", flush=True)
    print(f"total: tried {total_tried}, misbehaved {total_bad}")
    return total_tried, total_bad


def main() -> int:
    """Print, per class, how many cases were tried and how many misbehaved (the first few of them)."""
    tmp = Path(tempfile.mkdtemp(prefix="hostile_"))
    csv = tmp / "small.csv"
    _long_frame(_small_panel()).to_csv(csv, index=False)
    run_probes([("scoring service HTTP", probe_scoring_service), ("OpenEnv server HTTP",
                lambda: probe_openenv_server(str(csv))), ("CLI args", probe_cli_args),
                ("market inputs", lambda: probe_market_inputs(tmp)), ("batch files", lambda: probe_batch_files(tmp)),
                ("archive files", lambda: probe_archive_files(tmp)), ("checkpoints", lambda: probe_checkpoints(tmp)),
                ("env episodes", probe_env_episodes)])
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
