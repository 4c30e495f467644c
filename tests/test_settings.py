"""The settings file (alpha_gym/settings.py): one TOML surface for every setting that decides a reward or a run."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from alpha_gym import settings as S
from alpha_gym.commands.main import main
from alpha_gym.scoring.config import ConfigError, VerifierConfig, weighted_sum
from alpha_gym.scoring.verifier import Verifier
from trainers.config import register_train_table

#: A model folder that does not exist: loading it fails at once, where a Hub id ("owner/name") would be looked up
#: on the Hub first (a minute of retries on a machine without the network).
MISSING_MODEL = "/nonexistent/no-such-model"


@pytest.fixture(autouse=True, scope="module")
def _train_table():
    """These tests read [train]: registered explicitly, as the trainers' entry points do."""
    register_train_table()

#: Every channel constant of VerifierConfig, and a changed value that must move some answer's reward.
CHANNEL_CONSTANTS = {
    "cpcv_clip": 0.5, "pbo_floor": -2.0, "neutrality_weight": 2.0, "neutrality_max_gap": 0.05,
    "turnover_cap": 0.05, "turnover_penalty": 9.0, "min_turnover_free": 0.5, "ic_weight": 0.9, "ic_scale": 2.0,
    "ic_cap_when_unprofitable": 0.0, "novelty_pnl_weight": 2.0, "duplicate_corr": 0.2,
    "duplicate_pnl_penalty": -3.0, "novelty_syntax_weight": 2.0, "syntax_duplicate_penalty": -2.0,
    "syntax_duplicates_counted": 1, "motif_min_ic": 0.5, "complexity_free_nodes": 2, "complexity_per_node": -0.5,
    "format_bonus": 0.7, "min_turnover_invalid": 0.2, "syntax_window_buckets": [5, 6, 252], "reward_missing_tag": -5.0, "reward_unparseable": -0.9,
    "reward_invalid_book": -0.7, "self_corr_gate": 0.3,
}
#: Settings a constant needs to act at all (R12 is off by default).
CONTEXT = {"format_bonus": {"format_enabled": True}, "min_turnover_invalid": {"min_turnover_free": 0.5}}

ANSWERS = [
    "<alpha>rank(-ts_delta(close, 5))</alpha>",
    "<alpha>rank(-ts_delta(close, 5))</alpha>",                       # a duplicate (R8, R9)
    "<alpha>rank(-ts_delta(close, 6))</alpha>",                       # same bucketed form (R9)
    "<think>volume</think><alpha>rank(ts_std(volume, 20) / ts_mean(volume, 20))</alpha>",  # R12
    "<alpha>-correlation(rank(open), rank(volume), 10)</alpha>",
    "<alpha>rank(returns)</alpha>",                                    # bare motif (R10), high turnover (R5)
    "<alpha>rank(ts_mean(returns, 10)) - rank(ts_std(volume, 15)) * rank(delta(vwap, 3)) + "
    "rank(ts_corr(close, volume, 12)) - rank(ts_min(low, 7))</alpha>",  # long (R11)
    "<alpha>rank(ts_mean(close, 120))</alpha>",                        # slow: low turnover (R6)
    "no answer tag",
    "<alpha>rank(close -)</alpha>",
    "<alpha>scale(ts_rank(ts_delta(volume, 23), 47) - ts_rank(ts_delta(volume, 23), 47))</alpha>",
]


@pytest.fixture(scope="module")
def base(small_synthetic):
    return Verifier(small_synthetic)


def _rewards(verifier) -> np.ndarray:
    group = verifier.score_group(ANSWERS)
    for s in group.scores:
        assert s.reward == weighted_sum(s.channels, verifier.config.priorities)
    return np.array([s.reward for s in group.scores])


def test_defaults_file_loads_back_to_the_defaults(tmp_path):
    text = S.dumps(S.defaults_tables(), header=S.HEADER)
    path = tmp_path / "defaults.toml"
    path.write_text(text)
    loaded = S.load(path)
    assert loaded.verifier == VerifierConfig()
    assert set(tomllib.loads(text)) == {"verifier", "holdout", "stress", "train"}
    assert S.differing_keys(loaded.tables, tomllib.loads(text)) == []
    assert loaded["train"].recipe == "cispo_repo_r"
    from trainers.config import RECIPES
    assert loaded["train"].config == RECIPES["cispo_repo_r"]


def test_a_train_table_loads_once_registered(tmp_path):
    path = tmp_path / "train.toml"
    path.write_text('[train]\nrecipe = "dapo"\nlearning_rate = 3e-5\n')
    s = S.load(path)
    assert s["train"].recipe == "dapo" and s["train"].config.learning_rate == 3e-5
    with pytest.raises(ConfigError, match="unknown setting 'train.learning_rat'"):  # checked, not kept as given
        S.load(None, ["train.learning_rat=1"])


#: Run in a fresh interpreter: the registration is process-wide, and this module's fixture has made it.
_UNREGISTERED = """
import alpha_gym.settings as S
import trainers.config  # importing the trainers registers nothing: only register_train_table() does
s = S.load({path!r})
assert s.tables["train"] == {{"recipe": "dapo", "learning_rate": 3e-5}}, s.tables["train"]  # kept as given
assert s.verifier == S.load(None).verifier
try:
    s["train"]
except S.UnregisteredTableError as err:
    assert isinstance(err, S.ConfigError), type(err).__mro__
    print(err)
else:
    raise SystemExit("settings['train'] did not raise without the registration")
"""


def test_a_train_table_without_the_registration_is_kept_unchecked_and_asked_for_by_name(tmp_path):
    path = tmp_path / "train.toml"
    path.write_text('[train]\nrecipe = "dapo"\nlearning_rate = 3e-5\n')
    run = subprocess.run([sys.executable, "-c", _UNREGISTERED.format(path=str(path))], capture_output=True,
                         text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])  # this checkout's package
    assert run.returncode == 0, run.stderr
    assert "[train] settings table is not registered" in run.stdout
    assert "trainers.config.register_train_table()" in run.stdout


def test_every_channel_constant_is_read_from_the_file(tmp_path, base):
    """Changing any channel constant in the file moves at least one answer's reward (and keeps the contract)."""
    assert set(CHANNEL_CONSTANTS) <= {f for f in S.to_dict(VerifierConfig())}
    for name, value in CHANNEL_CONSTANTS.items():
        context = CONTEXT.get(name, {})
        before = _rewards(Verifier(base.panel, VerifierConfig(**context), archive=base.archive.copy()))
        path = tmp_path / f"{name}.toml"
        path.write_text(S.dumps({"verifier": {**context, name: value}}))
        config = S.load(path).verifier
        assert getattr(config, name) == (tuple(value) if isinstance(value, list) else value)
        after = _rewards(Verifier(base.panel, config, archive=base.archive.copy()))
        assert not np.array_equal(before, after), f"verifier.{name} = {value} left every reward unchanged"


def test_priorities_and_costs_through_set(base):
    before = _rewards(base)
    for item in ("verifier.priorities.cpcv=1.0", "verifier.priorities.novelty_pnl=2", "verifier.costs.fee_bps=40"):
        config = S.load(None, [item]).verifier
        archive = base.archive.copy() if "costs" not in item else None  # costs change the seed books too
        assert not np.array_equal(before, _rewards(Verifier(base.panel, config, archive=archive))), item


def test_holdout_rules_follow_the_verifier():
    s = S.load(None, ["verifier.turnover_cap=0.4", "verifier.turnover_penalty=3", "verifier.min_valid_stocks=7",
                      "holdout.context=100"])
    rules = s.holdout.rules
    assert (rules.turnover_cap, rules.turnover_penalty, rules.min_valid_stocks, rules.context) == (0.4, 3.0, 7, 100)
    with pytest.raises(ConfigError, match="verifier.turnover_cap"):
        S.load(None, ["holdout.turnover_cap=0.4"])


@pytest.mark.parametrize("sets, match", [
    (["verifier.turnover_ca=1"], "did you mean verifier.turnover_cap"),
    (["verifier.turnover_cap=abc"], "expected a number"),
    (["verifier.min_valid_stocks=2.5"], "expected an integer"),
    (["verifier.format_enabled=1"], "expected true or false"),
    (["verifer.turnover_cap=1"], r"did you mean \[verifier\]"),
    (["turnover_cap"], "SECTION.KEY=VALUE"),
    (["verifier.priorities.sharpe=1"], "unknown channels"),
    (["verifier.turnover_penalty=-1"], r"verifier.turnover_penalty = -1.0: must be \[0, 1000\]"),
    (["train.learning_rate=-1"], r"train.learning_rate = -1.0: must be \(0, inf\)"),  # ranges.py's style (issue 38.4)
    (["train.recipe=ppo"], "unknown recipe"),
    (["stress.window=13"], "multiple of"),
    (["verifier.limits.max_tokens=nan"], "expected an integer"),
    (["verifier.syntax_window_buckets=[21, 5]"], "increasing positive integers"),
    (["verifier.stress_weight=-1"], r"verifier.stress_weight = -1.0: must be \[0, 1000\]"),
    (["verifier.self_corr_gate=1.5"], r"verifier.self_corr_gate = 1.5: must be \(0, 1\]"),
    (["verifier.self_corr_margin=-0.1"], r"verifier.self_corr_margin = -0.1: must be \[0, 1000\]"),
])
def test_bad_settings_name_the_key(sets, match):
    with pytest.raises(ConfigError, match=match):
        S.load(None, sets)


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        S.load(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[verifier\nturnover_cap = 1")
    with pytest.raises(ConfigError, match="not a valid TOML"):
        S.load(bad)
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match="not a valid TOML"):
        S.load(binary)


def test_optional_values_and_set_strings():
    s = S.load(None, ["verifier.stress_checkpoint=models/world", "verifier.cpcv_clip=none",
                      "verifier.invalid_rewards=reference", "train.advantage_floor=none"])
    assert s.verifier.stress_checkpoint == "models/world" and s.verifier.cpcv_clip is None
    assert s["train"].config.advantage_floor is None
    assert 'stress_checkpoint = "auto"' in S.dumps(S.defaults_tables())


def test_a_recipe_file_is_not_run_under_another_recipe(tmp_path):
    path = tmp_path / "cispo.toml"
    path.write_text(S.dumps(S.defaults_tables()))
    with pytest.raises(ConfigError, match="names recipe 'dapo'"):
        S.load(path, ["train.recipe=dapo"])
    with pytest.raises(ConfigError, match="names recipe 'dapo'"):
        S.load(path, overrides={"train": {"recipe": "dapo"}})
    small = tmp_path / "lr.toml"
    small.write_text("[train]\nlearning_rate = 3e-5\n")
    s = S.load(small, overrides={"train": {"recipe": "dapo"}})
    assert s["train"].recipe == "dapo" and s["train"].config.learning_rate == 3e-5
    assert s["train"].config.loss_type == "dapo"


def test_run_folder_keeps_the_settings_and_a_resume_refuses_others(tmp_path):
    a = S.load(None).tables
    S.claim_run_dir(tmp_path, a, resume=False)
    assert tomllib.loads((tmp_path / S.SETTINGS_FILE).read_text()) == tomllib.loads(S.dumps(a))
    S.claim_run_dir(tmp_path, a, resume=True)  # same settings: fine
    b = S.load(None, ["verifier.turnover_cap=0.4", "train.learning_rate=2e-5"]).tables
    with pytest.raises(ConfigError, match=r"train.learning_rate \(1e-05 -> 2e-05\).*verifier.turnover_cap"):
        S.claim_run_dir(tmp_path, b, resume=True)
    S.claim_run_dir(tmp_path, b, resume=False)  # a fresh run in the folder replaces them


def test_the_folder_stamp_refuses_on_the_callers_rule_and_writes_whole(tmp_path):
    """alpha_gym.folder_stamp.claim_stamp, under claim_run_dir, the comparison's --out, score-batch's sidecar, an eval
    folder and a resumed checkpoint: the caller's rule refuses; a refused run leaves the stamp as it was;
    replace=False keeps the first stamp; text=None only checks (a checkpoint's stamp is written with it)."""
    from alpha_gym.folder_stamp import claim_stamp
    path = tmp_path / "run" / "stamp.json"
    claim_stamp(path, '{"a": 1}', lambda p: ValueError("never asked: nothing stamped yet"))
    assert path.read_text() == '{"a": 1}'
    with pytest.raises(ValueError, match="a differs"):
        claim_stamp(path, '{"a": 2}', lambda p: None if p.read_text() == '{"a": 2}' else ValueError("a differs"))
    assert path.read_text() == '{"a": 1}'
    claim_stamp(path, '{"a": 2}', lambda p: ValueError("not checked"), check=False)  # a fresh run replaces it
    claim_stamp(path, '{"a": 3}', lambda p: None, replace=False)
    assert path.read_text() == '{"a": 2}' and [p.name for p in path.parent.iterdir()] == ["stamp.json"]
    with pytest.raises(ValueError, match="a differs"):
        claim_stamp(path, None, lambda p: None if p.read_text() == '{"a": 3}' else ValueError("a differs"))
    claim_stamp(path, None, lambda p: None)
    claim_stamp(tmp_path / "none.json", None, lambda p: ValueError("never asked: nothing stamped"))
    assert path.read_text() == '{"a": 2}' and not (tmp_path / "none.json").exists()


def test_a_resume_accepts_a_setting_added_since_at_its_default(tmp_path):
    """A run recorded before verifier.self_corr_gate existed resumes with the gate unset, not with it on."""
    a = S.load(None).tables
    S.claim_run_dir(tmp_path, a, resume=False)
    path = tmp_path / S.SETTINGS_FILE
    recorded = tomllib.loads(path.read_text())
    del recorded["verifier"]["self_corr_gate"], recorded["verifier"]["self_corr_margin"]
    path.write_text(S.dumps(recorded))
    S.claim_run_dir(tmp_path, a, resume=True)          # added since, at its default: the same run
    path.write_text(S.dumps(recorded))
    with pytest.raises(ConfigError, match=r"verifier.self_corr_gate \(unset -> 0.7\)"):
        S.claim_run_dir(tmp_path, S.load(None, ["verifier.self_corr_gate=0.7"]).tables, resume=True)


def test_train_refuses_to_resume_with_other_settings_before_loading_a_model(tmp_path, small_synthetic):
    from trainers.config import RECIPES
    from trainers.loop import train
    verifier = Verifier(small_synthetic)
    S.claim_run_dir(tmp_path, {"verifier": S.to_dict(verifier.config), "train": S.to_dict(RECIPES["dapo"])},
                    resume=False)
    with pytest.raises(ConfigError, match="train.loss_type"):
        train(RECIPES["cispo"], verifier, None, tmp_path, model=MISSING_MODEL, steps=2, resume=True)


def test_a_resume_may_change_what_is_written_but_not_what_is_learned(tmp_path, small_synthetic):
    """log_completions and logging_steps change only the files a run writes: a resume may change them
    (a run started before completions were logged by default goes on); any other key is still refused."""
    from trainers.config import OUTPUT_ONLY, RECIPES
    from trainers.loop import train
    verifier = Verifier(small_synthetic)
    old = RECIPES["dapo"].with_(log_completions=False, logging_steps=5)
    S.claim_run_dir(tmp_path, {"verifier": S.to_dict(verifier.config), "train": S.to_dict(old)}, resume=False)
    assert set(OUTPUT_ONLY) == {"log_completions", "logging_steps"}
    with pytest.raises(Exception) as info:   # got past the settings check, to the model
        train(RECIPES["dapo"], verifier, None, tmp_path, model=MISSING_MODEL, steps=2, resume=True)
    assert not isinstance(info.value, ConfigError) and MISSING_MODEL in str(info.value)
    with pytest.raises(ConfigError, match="train.learning_rate"):
        train(RECIPES["dapo"].with_(learning_rate=1e-3), verifier, None, tmp_path, model=MISSING_MODEL, steps=2,
              resume=True)


def test_gym_make_reads_a_settings_file(tmp_path):
    import gymnasium as gym
    import alpha_gym  # noqa: F401
    path = tmp_path / "env.toml"
    path.write_text("[verifier]\nturnover_cap = 0.3\n[verifier.priorities]\ncpcv = 2.0\n")
    env = gym.make("AlphaFormula-v0", config=str(path))
    config = env.unwrapped.verifier.config
    assert config.turnover_cap == 0.3 and config.priorities["cpcv"] == 2.0
    env.close()
    bad = tmp_path / "bad.toml"
    bad.write_text("[verifier]\nturnover_capp = 1\n")
    with pytest.raises(ConfigError, match="did you mean verifier.turnover_cap"):
        gym.make("AlphaFormula-v0", config=str(bad))


def test_cli_config_show_and_score_with_settings(tmp_path, capsys):
    assert main(["config", "show"]) == 0
    shown = capsys.readouterr().out
    path = tmp_path / "run.toml"
    path.write_text(shown)
    assert S.load(path).verifier == VerifierConfig()
    formula = "rank(-ts_delta(close, 5))"
    import json
    assert main(["score", formula, "--json"]) == 0
    default = json.loads(capsys.readouterr().out)["reward"]
    assert main(["score", formula, "--json", "--config", str(path), "--set", "verifier.priorities.cpcv=1"]) == 0
    changed = json.loads(capsys.readouterr().out)["reward"]
    assert changed != default
    assert main(["score", formula, "--set", "verifier.nope=1"]) == 2
    assert "unknown setting 'verifier.nope'" in capsys.readouterr().err


def test_cli_bug_shows_a_traceback_user_error_one_line(capsys, monkeypatch):
    import alpha_gym.commands.config
    import alpha_gym.commands.main as cli

    def boom(args):
        raise KeyError("a bug")
    monkeypatch.setattr(alpha_gym.commands.config, "cmd_config_show", boom)
    with pytest.raises(KeyError):  # not swallowed into a one-line message
        cli.main(["config", "show"])
    monkeypatch.undo()
    assert cli.main(["config", "show", "--set", "x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "SECTION.KEY=VALUE" in err
    assert cli.main(["--debug", "config", "show", "--set", "x"]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_every_command_that_scores_or_trains_takes_the_settings():
    """--config and --set on each command whose results a setting can change."""
    import argparse
    from alpha_gym.commands.main import build_parser

    def leaves(parser, path=()):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield " ".join(path), parser
            return
        for name, child in subs[0].choices.items():
            yield from leaves(child, (*path, name))
    without = {"briefs generate", "briefs split", "report", "stress check", "export-gguf"}  # read or write no score
    for name, parser in leaves(build_parser()):
        flags = {s for a in parser._actions for s in a.option_strings}
        if name in without:
            continue
        assert {"--config", "--set"} <= flags, f"alpha-gym {name} does not take --config/--set"


def test_r3_weight_is_a_setting():
    import math
    from alpha_gym.stress.geometry import r3_value
    config = S.load(None, ["verifier.stress_weight=0.8"]).verifier
    assert r3_value(1.0, [0.0])[0] == -0.4 * math.log(2.0)
    assert r3_value(1.0, [0.0], config.stress_weight)[0] == -0.8 * math.log(2.0)
