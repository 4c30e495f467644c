"""Every setting is validated where it is read (alpha_gym/ranges.py), and no JSON the project writes holds a
bare NaN or Infinity (alpha_gym/jsonable.json_dumps)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alpha_gym import settings as S
from alpha_gym.book.costs import REALISTIC_COST_RANGES, TRAINING_COST_RANGES, RealisticCosts, TrainingCosts
from alpha_gym.commands.main import main
from alpha_gym.jsonable import json_dumps
from alpha_gym.language.parser import LIMIT_RANGES, Limits
from alpha_gym.market import synthetic_panel
from alpha_gym.ranges import INF, Range, SettingError, unranged_numeric_fields
from alpha_gym.scoring.holdout_config import HOLDOUT_RANGES, HoldoutConfig
from alpha_gym.scoring.config import (CHANNELS, DEFAULT_PRIORITIES, PRIORITY, VERIFIER_RANGES, ConfigError,
                                      VerifierConfig, weighted_sum)
from alpha_gym.scoring.cpcv import CPCV_RANGES, MAX_SLICES, CPCVConfig
from alpha_gym.scoring.verifier import Verifier
from alpha_gym.search.database import DATABASE_RANGES, DatabaseConfig
from alpha_gym.commands.serve import SERVE_RANGES
from alpha_gym.stress.config import (GATE_RANGES, SCENARIO_RANGES, STRESS_RANGES, PRESETS, GateConfig, ScenarioConfig,
                                     StressConfig, StressError)
from count_bad_settings import CASES, _try

REPO = Path(__file__).resolve().parents[1]
RANGED = [(VerifierConfig, VERIFIER_RANGES), (CPCVConfig, CPCV_RANGES), (Limits, LIMIT_RANGES),
          (TrainingCosts, TRAINING_COST_RANGES), (RealisticCosts, REALISTIC_COST_RANGES),
          (HoldoutConfig, HOLDOUT_RANGES), (StressConfig, STRESS_RANGES), (GateConfig, GATE_RANGES),
          (ScenarioConfig, SCENARIO_RANGES), (DatabaseConfig, DATABASE_RANGES)]


# ------------------------------------------------------------------------------ the issue's cases
@pytest.mark.parametrize("case, key", CASES, ids=[c for c, _ in CASES])
def test_each_bad_setting_of_the_issue_is_refused_naming_its_key(case, key):
    error, accepted = _try(case)
    assert accepted is None and error is not None and not error.startswith("BUG"), (case, error)
    assert key in error and ("must be" in error or "expected" in error or "directory" in error), error


def test_the_error_names_the_range():
    with pytest.raises(ConfigError, match=r"^verifier\.cpcv\.n_blocks = 1: must be an integer in \[2, 64\]$"):
        S.load(None, ["verifier.cpcv.n_blocks=1"])
    with pytest.raises(ConfigError, match=r"verifier\.cpcv\.n_test_blocks = 6: .*\[1, 5\]"):
        S.load(None, ["verifier.cpcv.n_test_blocks=6"])
    with pytest.raises(ConfigError, match=rf"n_test_blocks = 10: .*<= {MAX_SLICES} slices"):
        S.load(None, ["verifier.cpcv.n_blocks=20", "verifier.cpcv.n_test_blocks=10"])
    with pytest.raises(ConfigError, match=r"holdout\.crash_threshold = 0\.5: must be \[-1, 0\]"):
        S.load(None, ["holdout.crash_threshold=0.5"])


def test_the_python_api_checks_the_same_ranges_and_types():
    with pytest.raises(SettingError, match=r"CPCVConfig\.n_blocks = 0"):
        CPCVConfig(n_blocks=0)
    with pytest.raises(SettingError, match=r"VerifierConfig\.priorities\.cpcv = '3\.0': must be a number"):
        VerifierConfig(priorities={"cpcv": "3.0"})
    with pytest.raises(SettingError, match=r"priorities\.cpcv = 1e\+308"):
        VerifierConfig(priorities={"cpcv": 1e308})
    with pytest.raises(SettingError, match=r"Limits\.max_depth = True: must be an integer"):
        Limits(max_depth=True)          # a bool is not an integer
    with pytest.raises(SettingError, match=r"VerifierConfig\.format_enabled = 'yes': must be true or false"):
        VerifierConfig(format_enabled="yes")
    with pytest.raises(SettingError, match=r"TrainingCosts\.fee_bps = nan: must be a finite number"):
        TrainingCosts(fee_bps=float("nan"))
    with pytest.raises(SettingError, match=r"RealisticCosts\.book_size = -1"):
        RealisticCosts(book_size=-1)
    with pytest.raises(SettingError, match=r"HoldoutConfig\.context = 0"):
        HoldoutConfig(context=0)
    assert isinstance(SettingError("A", "b", 1, "x"), ValueError)  # code that caught ValueError still does


def test_a_toml_string_is_not_a_number_in_a_file_or_in_set(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[verifier]\nturnover_cap = "0.4"\n')
    with pytest.raises(ConfigError, match="verifier.turnover_cap: expected a number, got '0.4'"):
        S.load(path)
    with pytest.raises(ConfigError, match="verifier.turnover_cap: expected a number"):
        S.load(None, ['verifier.turnover_cap="0.4"'])


def test_every_numeric_field_has_a_declared_range_and_the_defaults_are_inside():
    for cls, ranges in RANGED:
        assert unranged_numeric_fields(cls, ranges) == [], cls.__name__
        assert set(ranges) <= {f.name for f in fields(cls)}, cls.__name__
        cls()  # the defaults pass their own check
    assert 0.0 in PRIORITY and all(p in PRIORITY for p in DEFAULT_PRIORITIES.values())


def test_training_stress_and_search_settings_are_checked_the_same_way():
    """TrainConfig, StressConfig and DatabaseConfig declare their ranges: every numeric field has one, the defaults
    and every recipe and preset pass, and a bad value is a SettingError naming the key and the range; for the
    stress settings it is still the StressError callers catch."""
    from trainers.config import RECIPES, TRAIN_RANGES, TrainConfig, register_train_table
    register_train_table()
    assert unranged_numeric_fields(TrainConfig, TRAIN_RANGES) == [] and set(TRAIN_RANGES) <= {f.name for f in
                                                                                             fields(TrainConfig)}
    assert all(isinstance(r, TrainConfig) for r in RECIPES.values()) and all(StressConfig(**p) for p in PRESETS.values())
    with pytest.raises(SettingError, match=r"^TrainConfig\.num_generations = 1: must be an integer in \[2, 1024\]$"):
        TrainConfig(num_generations=1)
    with pytest.raises(SettingError, match=r"^TrainConfig\.loss_type = 'ppo': must be one of grpo, dapo, cispo$"):
        TrainConfig(loss_type="ppo")
    with pytest.raises(SettingError, match=r"TrainConfig\.steps_per_generation = 13: must be <= num_generations"):
        TrainConfig(steps_per_generation=13)
    with pytest.raises(SettingError, match=r"TrainConfig\.use_dora = 1: must be true or false"):
        TrainConfig(use_dora=1)
    with pytest.raises(ConfigError, match=r"^train\.epsilon = 1\.5: must be \(0, 1\]$"):
        S.load(None, ["train.epsilon=1.5"])["train"]
    with pytest.raises(StressError, match=r"StressConfig\.mask_ratio = 1\.0: must be \(0, 1\)"):
        StressConfig(mask_ratio=1.0)
    with pytest.raises(StressError, match=r"ScenarioConfig\.innovations = 'x': must be one of replay, simulate"):
        ScenarioConfig(innovations="x")
    with pytest.raises(ConfigError, match=r"^stress\.gates\.max_error_ratio = 0\.0: must be \(0, inf\)$"):
        S.load(None, ["stress.gates.max_error_ratio=0"])
    with pytest.raises(SettingError, match=r"^DatabaseConfig\.tournament = 0: must be an integer in \[1, 10000\]$"):
        DatabaseConfig(selection="tournament", tournament=0)
    with pytest.raises(SettingError, match=r"^DatabaseConfig\.selection = 'best': must be one of softmax, tournament$"):
        DatabaseConfig(selection="best")


def test_serve_flags_name_the_flag_and_range(capsys):
    assert set(SERVE_RANGES) == {"port", "max_bytes", "max_answers", "concurrency"}
    for flag, value in [("--max-bytes", "-1"), ("--max-answers", "0"), ("--concurrency", "0"), ("--port", "70000"),
                        ("--max-bytes", "1.5")]:
        with pytest.raises(SystemExit) as info:
            main(["serve", flag, value])
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert f"argument {flag}: " in err and value in err, err


def test_range_text():
    assert str(Range(0.0, 1.0, hi_open=True)) == "[0, 1)"
    assert str(Range(0.0, 1e15, lo_open=True)) == "(0, 1e+15]"
    assert str(Range(2, INF, integer=True)) == "an integer in [2, inf)"
    assert 1.0 not in Range(0.0, 1.0, hi_open=True) and 0.0 in Range(0.0, 1.0, hi_open=True)
    assert str(Range(1e-6, 1e3, or_zero=True)) == "0 or [1e-06, 1000]"
    assert 0.0 in Range(1e-6, 1e3, or_zero=True) and 1e-320 not in Range(1e-6, 1e3, or_zero=True)


@pytest.mark.parametrize("item, message", [
    ("verifier.priorities.cpcv=1e-320", r"verifier.priorities.cpcv = 1e-320: must be 0 or \[1e-06, 1000\]"),
    ("verifier.priorities.novelty_pnl=5e-7", "must be 0 or"),
    ("verifier.turnover_cap=" + "1" * 5000, "an integer of more than 4,300 digits"),
    ("verifier.turnover_cap=" + "1" * 4000, r"expected a finite number, got 1+\.\.\.1+$"),
    ("verifier.turnover_cap=" + "[" * 3000, "nests 3000 levels deep; settings nest at most 32"),
    ("verifier.turnover_cap=" + "{a=" * 3000, "nests 3000 levels deep"),
    ("verifier.costs.fee_bps=" + "[" * 30 + "1" + "]" * 30, r"expected a number, got \[+\.\.\.\]+$")],
    ids=["priority-1e-320", "priority-5e-7", "5000-digits", "4000-digits", "3000-brackets", "3000-tables", "30-deep"])
def test_hostile_set_items_are_one_line_errors(item, message):
    """Issue 41.8: a priority of 1e-320 passed and made every invalid reward -inf; a 5,000-digit number was a
    ValueError traceback, 3,000 nested `[` a RecursionError; a 4,000-digit one an OverflowError."""
    with pytest.raises(ConfigError, match=message) as err:
        S.load(None, [item])
    assert "\n" not in str(err.value) and len(str(err.value)) < 300


@pytest.mark.parametrize("text", ["a = " + "{b = " * 3000 + "1" + "}" * 3000,
                                  "[verifier]\nturnover_cap = " + "[" * 3000 + "]" * 3000,
                                  "[verifier]\nturnover_cap = " + "1" * 5000], ids=["tables", "arrays", "digits"])
def test_hostile_settings_files_are_one_line_errors(tmp_path, text):
    path = tmp_path / "run.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="--config .*run.toml: (nests 3000 levels|holds no usable TOML)") as err:
        S.load(path)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------------------ no valid setting breaks a reward
def _value(rng: Range, cap: float | None = None):
    """Values inside `rng` (below `cap`, to keep a test fast), boundaries included."""
    hi = rng.hi if cap is None else min(rng.hi, cap)
    if rng.integer:
        return st.integers(int(rng.lo), int(hi))
    inside = st.floats(rng.lo, hi, exclude_min=rng.lo_open, exclude_max=rng.hi_open and hi == rng.hi,
                       allow_nan=False, allow_infinity=False)
    return st.one_of(st.just(0.0), inside) if rng.or_zero else inside  # "0 or [lo, hi]": 0 too


#: The verifier refuses (DataError) a panel with fewer stocks than min_valid_stocks or under 10 sessions a
#: CPCV block: the drawn settings stay within what the 12 x 300 test panel can score.
_PANEL_CAPS = {"min_valid_stocks": 12}
_MAX_BLOCKS = 30


def _or_default(cls, name: str, rng: Range, cap: float | None = None):
    """The field's default half the time, so that many drawn configs keep some answers valid."""
    return st.one_of(st.just(getattr(cls(), name)), _value(rng, cap))


@st.composite
def verifier_configs(draw):
    values = {k: draw(_or_default(VerifierConfig, k, r, _PANEL_CAPS.get(k))) for k, r in VERIFIER_RANGES.items()}
    values["reward_missing_tag"], values["reward_unparseable"], values["reward_invalid_book"] = sorted(
        draw(st.lists(_value(VERIFIER_RANGES["reward_invalid_book"]), min_size=3, max_size=3, unique=True)))
    lo, hi = sorted(draw(st.lists(st.floats(0.0, 0.99), min_size=2, max_size=2, unique=True)) if draw(st.booleans())
                    else [0.02, 0.03])
    values["min_turnover_invalid"], values["min_turnover_free"] = lo, hi
    values["archive_capacity"] = draw(st.integers(1, 64))
    values["invalid_rewards"] = draw(st.sampled_from(["below_valid", "reference"]))
    if values["invalid_rewards"] == "reference" and draw(st.booleans()):
        values["cpcv_clip"] = None
    priorities = {c: draw(_value(PRIORITY)) for c in CHANNELS}
    if values["invalid_rewards"] == "below_valid":
        priorities["cpcv"] = draw(st.floats(1e-3, PRIORITY.hi))
    n_blocks = draw(st.integers(2, _MAX_BLOCKS))
    n_test = draw(st.integers(1, n_blocks - 1).filter(lambda k: math.comb(n_blocks, k) <= 64))  # fast
    cpcv = CPCVConfig(n_blocks, n_test, draw(st.integers(0, 300)), draw(st.integers(0, 300)),
                      draw(_value(CPCV_RANGES["std_penalty"])))
    costs = TrainingCosts(**{k: draw(_or_default(TrainingCosts, k, r)) for k, r in TRAINING_COST_RANGES.items()})
    limits = Limits(**{k: draw(_or_default(Limits, k, r, 600 if r.integer else None)) for k, r in LIMIT_RANGES.items()})
    return VerifierConfig(priorities=priorities, cpcv=cpcv, costs=costs, limits=limits, archive_seed=False,
                          stress_checkpoint=None, syntax_window_buckets=(5, 20, 60), **values)


ANSWERS = [
    "<alpha>rank(-ts_delta(close, 5))</alpha>",                       # good
    "<alpha>rank(-ts_delta(close, 5))</alpha>",                       # its duplicate (R8, R9)
    "<think>volume</think><alpha>rank(ts_std(volume, 20) / ts_mean(volume, 20))</alpha>",
    "<alpha>rank(returns)</alpha>",                                    # bad: bare motif, high turnover
    "<alpha>rank(ts_mean(returns, 10)) - rank(ts_std(volume, 15)) * rank(delta(vwap, 3))</alpha>",
    "<alpha>scale(ts_rank(ts_delta(volume, 23), 47) - ts_rank(ts_delta(volume, 23), 47))</alpha>",  # flat
    "<alpha>rank(close -)</alpha>",                                    # unparseable
    "no answer tag",
]


@pytest.fixture(scope="module")
def panel():
    return synthetic_panel(n_stocks=12, n_days=300, seed=5)


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(config=verifier_configs())
def test_no_accepted_setting_gives_a_non_finite_reward(panel, config):
    HoldoutConfig.from_verifier(config)  # the holdout accepts whatever the verifier does
    assert math.isfinite(config.invalid_reward("unparseable"))
    group = Verifier(panel, config).score_group(ANSWERS)
    for s in group.scores:
        assert math.isfinite(s.reward), (s.reason, s.channels)
        assert all(math.isfinite(v) for v in s.channels.values()), s.channels
        assert s.reward == weighted_sum(s.channels, config.priorities)
        json.loads(json_dumps(s.to_dict()), parse_constant=_refuse)


# ------------------------------------------------------------------------------ JSON writers
def _refuse(name):
    raise AssertionError(f"bare {name} in JSON")


_RAW = re.compile(r"\bjson\.dumps?\(|from json import|\bJSONEncoder\b")


def test_every_json_writer_goes_through_json_dumps():
    offenders = set()
    for py in sorted([*REPO.glob("alpha_gym/**/*.py"), *REPO.glob("trainers/**/*.py")]):
        rel = py.relative_to(REPO).as_posix()
        if rel != "alpha_gym/jsonable.py" and _RAW.search(py.read_text(encoding="utf-8")):
            offenders.add(rel)
    assert offenders == set(), "write JSON with alpha_gym.jsonable.json_dumps"


def test_json_dumps_never_writes_a_bare_nan():
    text = json_dumps({"a": float("nan"), "b": [np.float32("inf"), -math.inf], "c": np.array([1.0, np.nan]),
                       "d": (np.int64(3), np.bool_(True)), "e": np.float64(0.5)})
    assert json.loads(text, parse_constant=_refuse) == {"a": None, "b": [None, None], "c": [1.0, None],
                                                        "d": [3, True], "e": 0.5}
    with pytest.raises(ValueError):  # what `default=` makes is not cleaned: a bug, not a bare NaN
        json_dumps({"x": object()}, default=lambda o: float("nan"))


def test_a_file_writer_writes_null_for_nan(tmp_path):
    from alpha_gym.tasks.sft_data import save_jsonl
    path = save_jsonl([{"prompt": "p", "reward": float("nan")}], tmp_path / "rows.jsonl")
    line = Path(path).read_text().strip()
    assert json.loads(line, parse_constant=_refuse) == {"prompt": "p", "reward": None}


def test_score_json_on_the_command_line_is_strict(capsys):
    assert main(["score", "rank(-ts_delta(close, 5))", "--json"]) == 0
    out = capsys.readouterr().out
    json.loads(out, parse_constant=_refuse)
