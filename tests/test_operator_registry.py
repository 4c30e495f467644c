"""The operator registry: every operator declared once, and everything that lists operators read from it."""

from __future__ import annotations

import inspect
import re
from importlib import resources
from pathlib import Path

import pytest

from alpha_gym.language import Limits, Op, parse, to_text
from alpha_gym.language.cost import node_work
from alpha_gym.language.errors import FormulaError
from alpha_gym.language.operators import (ALIASES, FORMS, KERNELS, KINDS, OPERATORS, SPECS, Cost, OpSpec,
                                          OperatorSpecError, operator_table_markdown, resolve, with_operator_table)
from alpha_gym.tasks import DSL_REFERENCE, FIXED_BRIEFS, dsl_reference

ROOT = Path(__file__).resolve().parents[1]

#: The prompt's DSL reference as it was written by hand before the registry: prompts must not move.
REFERENCE_TEXT = """\
Fields: open high low close volume returns vwap.
Cross-sectional: rank(x) in [0, 1] per day; scale(x) rescales so sum |x| = 1.
Time series (d = integer window, 1..252): delay(x, d), ts_delta(x, d), ts_mean, ts_std, ts_sum,
ts_max, ts_min, ts_rank, ts_decay_linear, ts_ema, ts_skew, ts_kurt, ts_slope, ts_argmax,
ts_argmin, ts_product (x, d); ts_corr(x, y, d), ts_cov(x, y, d).
Element-wise: + - * /, abs, log, sign, power(x, y), signed_power(x, y), min(x, y), max(x, y).
Paper names (correlation, stddev, sum, Ts_Rank, SignedPower, adv20, ...) are aliases; min(x, d)/max(x, d)
with an integer d is ts_min/ts_max (write max(x, 1.0) for element-wise).
Limits: total nested lookback <= 252 sessions, <= 256 tokens, depth <= 16."""


def _example(spec: OpSpec, name: str | None = None) -> str:
    """A formula calling `spec` in its own form."""
    series = ["close", "volume", "open"][:spec.n_series]
    if spec.form == "infix":
        return f"close {spec.symbol} volume"
    if spec.form == "prefix":
        return f"{spec.symbol}close"
    if spec.form == "ternary":
        return "close > open ? volume : open"
    if spec.form == "window_name":
        return f"{spec.name}20"
    return f"{name or spec.name}({', '.join(series + (['5'] if spec.kind == 'ts' else []))})"


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_every_operator_has_every_field(spec):
    assert spec.kind in KINDS and spec.form in FORMS
    assert spec.doc and "\n" not in spec.doc and len(spec.doc) <= 100
    assert isinstance(spec.cost, Cost) and spec.cost.base > 0 and spec.cost.per_window >= 0
    assert (spec.kernel is None) == (spec.form == "window_name")
    if spec.form in ("infix", "prefix"):
        assert spec.symbol and spec.precedence is not None


@pytest.mark.parametrize("spec", [s for s in SPECS if s.kernel is not None], ids=lambda s: s.name)
def test_each_kernel_takes_the_arguments_its_entry_declares(spec):
    params = list(inspect.signature(spec.kernel).parameters.values())
    want = spec.n_series + (spec.kind == "ts") + (spec.optional_const is not None) + (spec.name == "ind_neutralize")
    assert len(params) == want, [p.name for p in params]
    if spec.optional_const is not None:
        assert params[-1].default == spec.optional_const
    assert KERNELS[spec.name] is spec.kernel


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_each_operator_parses_and_prints_in_its_declared_form(spec):
    node = parse(_example(spec))
    assert isinstance(node, Op) and node.name == spec.name
    assert parse(to_text(node)) == node
    units = spec.cost
    if units.general_exponent is None:  # the cost model charges what the entry declares
        assert node_work(node) == units.base + units.per_window * (node.window or 0)
    else:
        assert node_work(node) == units.general_exponent  # `volume` is not a constant exponent
        assert node_work(parse("power(close, 2)" if spec.name == "power" else "signed_power(close, 2)")) == units.base
    if not spec.callable:  # symbols are not names
        assert resolve(spec.name) is None
        with pytest.raises(FormulaError):
            parse(f"{spec.name}(close, volume)" if spec.name != "adv" else "adv")


def test_every_alias_calls_its_operator():
    assert ALIASES and set(ALIASES.values()) <= set(OPERATORS)
    for alias, name in ALIASES.items():
        spec = OPERATORS[name]
        assert parse(_example(spec, alias)) == parse(_example(spec)), alias


def test_the_grammar_knows_every_symbol():
    grammar = resources.files("alpha_gym.language").joinpath("grammar.lark").read_text()
    quoted = set(re.findall(r'"([^"]+)"', grammar))
    for spec in SPECS:
        if spec.symbol is not None:
            assert spec.symbol in quoted, spec.name


def test_a_contradictory_entry_is_refused():
    with pytest.raises(OperatorSpecError, match="symbol"):
        OpSpec("bad", "elem", 2, KERNELS["add"], Cost(1.0), "doc", symbol="+")  # a call with a symbol
    with pytest.raises(OperatorSpecError, match="kernel"):
        OpSpec("bad", "elem", 1, None, Cost(1.0), "doc")
    with pytest.raises(OperatorSpecError, match="kind"):
        OpSpec("bad", "rolling", 1, KERNELS["abs"], Cost(1.0), "doc")
    with pytest.raises(OperatorSpecError, match="doc"):
        OpSpec("bad", "elem", 1, KERNELS["abs"], Cost(1.0), "two\nlines")
    with pytest.raises(OperatorSpecError, match="rounding bound"):
        OpSpec("bad", "elem", 1, KERNELS["abs"], Cost(1.0), "doc")  # no bound rule (docs/operators.md, rule 5)


def test_the_default_prompt_reference_is_the_hand_written_text():
    assert DSL_REFERENCE == dsl_reference() == REFERENCE_TEXT
    assert all(REFERENCE_TEXT in b.prompt() for b in FIXED_BRIEFS)


def test_the_prompt_states_the_configured_limits():
    limits = Limits(max_window=100, max_lookback=400, max_tokens=64, max_depth=9)
    text = dsl_reference(limits)
    assert "1..100)" in text and "<= 400 sessions" in text and "<= 64 tokens" in text and "depth <= 9." in text
    assert "252" not in text and "256" not in text
    assert FIXED_BRIEFS[0].prompt(limits).endswith(text)


def test_every_prompted_operator_is_in_the_prompt():
    for spec in SPECS:
        if spec.prompt is not None:
            assert spec.prompt in DSL_REFERENCE, spec.name


def test_the_docs_table_is_current():
    page = (ROOT / "docs" / "operators.md").read_text()
    assert with_operator_table(page) == page, "run python tests/make_operator_docs.py"
    table = operator_table_markdown()
    assert all(f"`{s.signature()}`".replace("|", "\\|") in table for s in SPECS)


def test_the_environment_prompts_with_its_verifiers_limits(small_synthetic):
    from alpha_gym.env import AlphaFormulaEnv
    from alpha_gym.scoring.config import VerifierConfig
    env = AlphaFormulaEnv(panel=small_synthetic, config=VerifierConfig(limits=Limits(max_depth=9)),
                          briefs=list(FIXED_BRIEFS))
    prompt, _ = env.reset(seed=0)
    assert prompt.endswith(dsl_reference(Limits(max_depth=9))) and "depth <= 9." in prompt


def test_the_readme_language_table_names_every_operator():
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## The formula language"):text.index("## From formula to book")].replace("\\|", "|")
    for spec in SPECS:
        spellings = (spec.name, *spec.aliases) if spec.form == "call" else (spec.symbol or "",)
        if spec.form in ("call", "infix"):
            assert any(re.search(rf"(?<![\w_]){re.escape(s)}(?![\w_])", section) for s in spellings), spec.name
