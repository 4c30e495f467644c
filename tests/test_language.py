"""Grammar, nodes, limits, error positions and printers of the formula language."""

from __future__ import annotations

import pytest

from alpha_gym.language import (AnswerError, Field, FormulaArgumentError, FormulaError, FormulaLimitError,
                                FormulaSyntaxError, Limits, Num, Op, UnknownNameError, bucket_window,
                                canonical, count_tokens, depth, extract, lookback, parse, size, to_text)
from alpha_gym.language.operators import OPERATORS

C, O, H, L, V = Field("close"), Field("open"), Field("high"), Field("low"), Field("volume")


# --------------------------------------------------------------- every operator
TS_ONE = ["delay", "ts_delta", "ts_mean", "ts_std", "ts_sum", "ts_max", "ts_min", "ts_rank", "ts_decay_linear",
          "ts_ema", "ts_skew", "ts_kurt", "ts_slope", "ts_argmax", "ts_argmin", "ts_product"]


@pytest.mark.parametrize("name", TS_ONE)
def test_every_one_series_ts_operator(name):
    assert parse(f"{name}(close, 10)") == Op(name, (C,), window=10)


@pytest.mark.parametrize("name", ["ts_corr", "ts_cov"])
def test_two_series_ts_operators(name):
    assert parse(f"{name}(close, volume, 20)") == Op(name, (C, V), window=20)


@pytest.mark.parametrize("name", ["abs", "log", "sign", "rank"])
def test_unary_functions(name):
    node = parse(f"{name}(close)")
    assert node.name == name and node.args == (C,)


@pytest.mark.parametrize("name", ["power", "signed_power", "min", "max"])
def test_binary_functions(name):
    assert parse(f"{name}(close, open)") == Op(name, (C, O))


def test_scale_with_and_without_constant():
    assert parse("scale(close)") == Op("scale", (C,), const=1.0)
    assert parse("scale(close, 2)") == Op("scale", (C,), const=2.0)


@pytest.mark.parametrize("field", ["open", "high", "low", "close", "volume", "returns", "vwap"])
def test_fields(field):
    assert parse(field) == Field(field)


def test_numbers():
    assert parse(".001") == Num(0.001)
    assert parse("1e-3") == Num(0.001)
    assert parse("-2.5") == Num(-2.5)


# ------------------------------------------------------ precedence, associativity
def test_precedence_mul_over_add():
    assert parse("close + open * high") == Op("add", (C, Op("mul", (O, H))))


def test_left_associative_sub_and_div():
    assert parse("close - open - high") == Op("sub", (Op("sub", (C, O)), H))
    assert parse("close / open / high") == Op("div", (Op("div", (C, O)), H))


def test_brackets_override():
    assert parse("close - (open - high)") == Op("sub", (C, Op("sub", (O, H))))


def test_unary_minus_binds_tighter_than_mul():
    assert parse("-close * open") == Op("mul", (Op("neg", (C,)), O))


def test_comparison_and_ternary():
    node = parse("close > open ? close : -open")
    assert node == Op("where", (Op("gt", (C, O)), C, Op("neg", (O,))))
    assert parse("close < open || high >= low && volume == 1").name == "or"


def test_paper_aliases_build_the_same_tree():
    assert parse("correlation(close, volume, 10)") == parse("ts_corr(close, volume, 10)")
    assert parse("stddev(close, 5)") == parse("ts_std(close, 5)")
    assert parse("SignedPower(close, 2)") == parse("signed_power(close, 2)")
    assert parse("adv20") == Op("adv", (), window=20)


def test_non_integer_window_is_floored():
    assert parse("ts_mean(close, 9.7)").window == 9


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize("text, cls, column", [
    ("rank(close -)", FormulaSyntaxError, 13),
    ("close + $", FormulaSyntaxError, 9),
    ("foo(close)", UnknownNameError, 1),
    ("rank(clse)", UnknownNameError, 6),
    ("close + ts_mean(close)", FormulaArgumentError, 9),
    ("ts_mean(close, open)", FormulaArgumentError, 1),
    ("ts_mean(close, 0)", FormulaArgumentError, 1),
    ("ts_mean(close, 253)", FormulaArgumentError, 1),
    ("ts_mean(close, 1e9)", FormulaArgumentError, 1),
    ("rank", FormulaArgumentError, 1),
    ("rank(close, open, high)", FormulaArgumentError, 1),
])
def test_errors_are_typed_and_located(text, cls, column):
    with pytest.raises(cls) as info:
        parse(text)
    assert info.value.column == column
    assert f"column {column}" in str(info.value)


def test_unclosed_bracket():
    with pytest.raises(FormulaSyntaxError, match="ends too early"):
        parse("rank(close")


def test_empty_and_non_string():
    with pytest.raises(FormulaSyntaxError):
        parse("   ")
    with pytest.raises(FormulaSyntaxError):
        parse(None)  # type: ignore[arg-type]


def test_huge_constant():
    with pytest.raises(FormulaArgumentError, match="too large"):
        parse("close * 1e999")


# ------------------------------------------------------------------ limits
def test_lookback_sums_along_a_path():
    assert lookback(parse("ts_rank(ts_delta(volume, 23), 47)")) == 23 + 46
    assert lookback(parse("delay(close, 252)")) == 252
    assert lookback(parse("ts_mean(returns, 5)")) == 5  # returns itself needs one past session
    with pytest.raises(FormulaLimitError, match="lookback"):
        parse("ts_mean(delay(close, 200), 100)")


def test_lookback_takes_the_deepest_path_not_the_sum_of_branches():
    assert lookback(parse("ts_mean(close, 200) - ts_mean(close, 200)")) == 199


def test_depth_limit():
    ok = "abs(" * 15 + "close" + ")" * 15
    assert depth(parse(ok)) == 16
    with pytest.raises(FormulaLimitError, match="levels deep"):
        parse("abs(" * 16 + "close" + ")" * 16)


def test_token_limit():
    text = " + ".join(["close"] * 128)  # 255 tokens
    assert count_tokens(text) == 255
    with pytest.raises(FormulaLimitError):  # the depth limit might also trip: any limit error is right
        parse(text + " + close")
    with pytest.raises(FormulaLimitError, match="tokens"):
        parse("(" * 30 + "close" + ")" * 30 + " + close" * 100)


def test_char_and_bracket_limits():
    with pytest.raises(FormulaLimitError, match="characters"):
        parse("close" + " " * 5000)
    with pytest.raises(FormulaLimitError, match="brackets"):
        parse("(" * 100 + "close" + ")" * 100)


def test_limits_are_configurable():
    wide = Limits(max_lookback=600, max_depth=30)
    assert lookback(parse("ts_mean(delay(close, 200), 100)", wide)) == 299


def test_every_operator_has_a_kernel():
    from alpha_gym.language.operators import KERNELS
    assert set(OPERATORS) - {"adv"} <= set(KERNELS)


# ----------------------------------------------------------------- printers
ROUND_TRIP = [
    "((close - open) / ((high - low) + .001))",
    "close - (open - high)",
    "-(close - open)",
    "--close",
    "close - -3",
    "rank(-ts_delta(close, 5)) * ts_corr(rank(volume), rank(vwap), 10)",
    "close > open ? ts_max(high, 5) : -ts_min(low, 5)",
    "(close > open) == (high < low)",
    "scale(close, 3)",
    "adv20 / volume",
    "close ^ 2",
    "a" if False else "(close + open) * (high + low)",
    "close * 1.2345678901234567",
]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_printer_round_trips(text):
    node = parse(text)
    assert parse(to_text(node)) == node
    assert parse(canonical(node)) is not None


def test_canonical_ignores_spacing_and_commutative_order():
    a = canonical(parse("rank(close+open)*ts_corr(volume,close,10)"))
    b = canonical(parse("ts_corr( close , volume , 10 ) * rank(open + close)"))
    assert a == b
    assert canonical(parse("(close + open) + high")) == canonical(parse("high + (open + close)"))


def test_canonical_keeps_non_commutative_order():
    assert canonical(parse("close - open")) != canonical(parse("open - close"))
    assert canonical(parse("close / open")) != canonical(parse("open / close"))


def test_bucketed_canonical_merges_jittered_windows():
    assert canonical(parse("ts_mean(close, 20)"), bucket=True) == canonical(parse("ts_mean(close, 21)"), bucket=True)
    assert canonical(parse("ts_mean(close, 20)")) != canonical(parse("ts_mean(close, 21)"))
    assert canonical(parse("ts_mean(close, 5)"), bucket=True) != canonical(parse("ts_mean(close, 63)"), bucket=True)


def test_bucket_boundaries():
    assert [bucket_window(d) for d in (1, 5, 10, 11, 21, 36, 37, 63, 89, 90, 126, 178, 179, 252)] == \
        [5, 5, 5, 21, 21, 21, 63, 63, 63, 126, 126, 126, 252, 252]


def test_size_counts_nodes():
    assert size(parse("rank(close - open)")) == 4


# ------------------------------------------------------------------ answers
def test_extract_answer():
    a = extract("<think>use reversal</think> <alpha> rank(-returns) </alpha>")
    assert a.formula == "rank(-returns)" and a.has_reasoning
    assert not extract("<alpha>close</alpha>").has_reasoning
    for bad in ["rank(close)", "<alpha></alpha>", "<alpha>close</alpha><alpha>open</alpha>", "<alpha>close"]:
        with pytest.raises(AnswerError):
            extract(bad)


def test_formula_errors_share_one_base():
    for cls in (FormulaSyntaxError, UnknownNameError, FormulaArgumentError, FormulaLimitError):
        assert issubclass(cls, FormulaError)


# ------------------------------------------------------ the paper's syntax (issue 4)
@pytest.mark.parametrize("paper, dsl", [
    ("correlation(close, volume, 10)", "ts_corr(close, volume, 10)"),
    ("covariance(close, volume, 10)", "ts_cov(close, volume, 10)"),
    ("stddev(close, 10)", "ts_std(close, 10)"),
    ("sum(close, 10)", "ts_sum(close, 10)"),
    ("product(close, 10)", "ts_product(close, 10)"),
    ("delta(close, 10)", "ts_delta(close, 10)"),
    ("delay(close, 10)", "delay(close, 10)"),
    ("decay_linear(close, 10)", "ts_decay_linear(close, 10)"),
    ("Ts_Rank(close, 10)", "ts_rank(close, 10)"),
    ("Ts_ArgMax(close, 10)", "ts_argmax(close, 10)"),
    ("Ts_ArgMin(close, 10)", "ts_argmin(close, 10)"),
    ("SignedPower(close, 2)", "signed_power(close, 2)"),
    ("signedpower(close, 2)", "signed_power(close, 2)"),
    ("Log(close)", "log(close)"),
    ("Sign(close)", "sign(close)"),
    ("IndNeutralize(close, IndClass.sector)", "ind_neutralize(close)"),
    ("indneutralize(close, IndClass.subindustry)", "ind_neutralize(close)"),
    ("close ^ 2", "power(close, 2)"),
])
def test_paper_names_are_aliases(paper, dsl):
    node = parse(paper)
    assert node == parse(dsl)
    assert parse(to_text(node)) == node


def test_paper_operators_and_precedence():
    assert parse("adv20") == parse("adv(20)") == Op("adv", (), window=20)
    assert parse("(close < open) || (close == open)") == Op("or", (Op("lt", (C, O)), Op("eq", (C, O))))
    assert parse("close <= open && high >= low").name == "and"
    # `?:` binds loosest and nests to the right, as in Alpha#9
    node = parse("0 < close ? close : open < 0 ? open : -1 * close")
    assert node.name == "where" and node.args[2].name == "where"
    # `^` binds tighter than `*` and `-` (Alpha#54: open^5, Alpha#41: (high * low)^0.5)
    assert parse("-1 * open^5") == Op("mul", (Num(-1.0), Op("power", (O, Num(5.0)))))
    assert parse("((high * low)^0.5) - vwap").args[0] == Op("power", (Op("mul", (H, L)), Num(0.5)))
    assert parse("(-1 * 1)") == Op("mul", (Num(-1.0), Num(1.0)))
    assert parse("scale(close, 3)").const == 3.0


@pytest.mark.parametrize("text, window", [
    ("correlation(close, volume, 3.92795)", 3), ("decay_linear(close, 7.89291)", 7),
    ("Ts_Rank(close, 5.50322)", 5), ("delta(close, 1.06157)", 1), ("sum(close, 19.8975)", 19),
    ("ts_max(close, 15.3217)", 15), ("Ts_ArgMax(close, 12.6556)", 12), ("delay(close, 2.9)", 2),
])
def test_paper_windows_are_floored(text, window):
    assert parse(text).window == window


def test_min_max_with_an_integer_literal_is_the_papers_ts_min_max():
    # the paper: "min(x, d) = ts_min(x, d)" (Alpha#29 writes min(product(...), 5))
    assert parse("min(close, 5)") == Op("ts_min", (C,), window=5)
    assert parse("max(rank(close), 3)") == Op("ts_max", (Op("rank", (C,)),), window=3)
    # everything else stays element-wise: a constant first, a non-integer literal, 0 or below
    assert parse("min(5, close)") == Op("min", (Num(5.0), C))
    assert parse("min(close, 5.0)") == Op("min", (C, Num(5.0)))
    assert parse("max(close, 2.5)") == Op("max", (C, Num(2.5)))
    assert parse("max(returns, 0)") == Op("max", (Field("returns"), Num(0.0)))
    assert parse("max(returns, -1)").name == "max"
    assert parse("min(close, open)") == Op("min", (C, O))
    assert parse("min(2, 3)") == Op("min", (Num(2.0), Num(3.0)))
    with pytest.raises(FormulaArgumentError, match="max\\(300, x\\)"):
        parse("max(close, 300)")


def test_elementwise_min_with_an_integer_constant_prints_back_elementwise():
    for node in (Op("min", (C, Num(5.0))), Op("max", (Op("rank", (C,)), Num(1.0)))):
        text = to_text(node)
        assert parse(text) == node, text
        assert parse(canonical(node)).name == node.name
    assert to_text(Op("ts_min", (C,), window=5)) == "ts_min(close, 5)"


def test_indneutralize_and_indclass():
    assert parse("IndNeutralize(rank(close), IndClass.industry)") == Op("ind_neutralize", (Op("rank", (C,)),))
    assert parse("ind_neutralize(close)") == Op("ind_neutralize", (C,))
    for bad, match in [("IndNeutralize(close, IndClass.market)", "industry level"),
                       ("IndNeutralize(close, volume)", "IndClass level"),
                       ("IndNeutralize(IndClass.sector)", "IndClass level"),
                       ("close + IndClass.sector", "second argument of IndNeutralize"),
                       ("rank(IndClass.sector)", "second argument of IndNeutralize"),
                       ("IndClass.sector", "second argument of IndNeutralize"),
                       ("IndNeutralize(close, IndClass.sector, 2)", "IndClass level"),
                       ("Foo.bar", "unknown field")]:
        with pytest.raises(FormulaError, match=match):
            parse(bad)


def test_cap_is_an_optional_field():
    assert parse("rank(returns * cap)").args[0] == Op("mul", (Field("returns"), Field("cap")))


# ============================================================================ issue 13: bounded cost, linear extraction
def test_cost_counts_window_work_and_shared_subexpressions_once():
    from alpha_gym.language import cost
    assert cost(parse("close")) == 0.0
    assert cost(parse("ts_rank(close, 250)")) == 10.0 + 0.8 * 250
    assert cost(parse("ts_rank(close, 10)")) < cost(parse("ts_rank(close, 100)"))
    assert cost(parse("close ^ volume")) == 90.0  # libm pow per cell
    assert cost(parse("close ^ 2")) == cost(parse("signed_power(close, 0.5)")) - 2.0 == 8.0  # special-cased
    one = cost(parse("ts_corr(close, volume, 20)"))
    assert cost(parse("ts_corr(close, volume, 20) + ts_corr(close, volume, 20)")) == one + 4.0  # shared: once
    assert cost(parse("ts_corr(close, volume, 20) + ts_corr(close, volume, 21)")) > 2 * one


def test_formula_over_the_cost_limit_is_refused_with_the_limit_named():
    from alpha_gym.language import FormulaLimitError, Limits
    terms = [f"ts_rank({x}, {d})" for x in ("close", "open", "high", "low") for d in (248, 250, 252)]
    text = "((" + " + ".join(terms[:6]) + ") ^ (" + " + ".join(terms[6:]) + "))"
    with pytest.raises(FormulaLimitError, match=r"estimated evaluation cost \d+ units a cell exceeds the limit "
                                                 r"max_cost=500 \(VerifierConfig.limits"):
        parse(text)
    assert parse(text, Limits(max_cost=3000)) is not None
    parse("ts_rank(close, 250) + ts_rank(open, 250)")  # 2 x 210 + 4 = 424: within


def test_all_paper_alphas_fit_the_cost_limit():
    from alpha_gym.alpha101 import ALPHAS, parse_alpha
    from alpha_gym.language import DEFAULT_LIMITS, cost
    worst = max(cost(parse_alpha(a.n)) for a in ALPHAS)
    assert 200 < worst <= DEFAULT_LIMITS.max_cost


def _blank_reasoning(text):
    """`text` with its reasoning blanked, by regexes (the reference for `reasoning_spans`): a first `</think>` with
    no `<think>` before it ends reasoning that began at the start; then each `<think>` runs to the next
    `</think>` or the end."""
    import re
    lead = re.match(r"(?:(?!<think>).)*?</think>", text, re.DOTALL | re.IGNORECASE)
    cut = lead.end() if lead else 0
    rest = re.sub(r"<think>.*?(?:</think>|\Z)", lambda m: " " * len(m.group()), text[cut:], flags=re.DOTALL | re.I)
    return " " * cut + rest


def _old_extract(text):
    """The regex extraction that `extract` replaced (quadratic on unclosed tags), on the text with its reasoning
    blanked, as the reference."""
    import re
    blocks = list(re.finditer(r"<alpha>(.*?)</alpha>", _blank_reasoning(text), re.DOTALL | re.IGNORECASE))
    blocks = [(b.start(), text[b.start(1):b.end(1)]) for b in blocks]
    if len(blocks) != 1 or not blocks[0][1].strip():
        return len(blocks), None, None
    reasoning = re.compile(r"<think>\s*\S.*?</think>", re.DOTALL | re.IGNORECASE).search(text, 0, blocks[0][0])
    return 1, blocks[0][1].strip(), reasoning is not None


def test_linear_extraction_matches_the_regex_on_random_answers():
    import random
    from alpha_gym.language import AnswerError
    from alpha_gym.language.answer import alpha_blocks, reasoning_spans
    pieces = ["<alpha>", "</alpha>", "<ALPHA>", "</Alpha>", "<think>", "</think>", "<THINK>", " ", "\n", "x",
              "<", ">", "/", "rank(close)", "\t"]
    rng = random.Random(13)
    for _ in range(4000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        n, formula, reasoning = _old_extract(text)
        import re
        assert len(alpha_blocks(text)) == len(re.findall(r"<alpha>(.*?)</alpha>", text, re.S | re.I)), text
        assert len(alpha_blocks(text, reasoning_spans(text))) == n, text
        if formula is None:
            with pytest.raises(AnswerError):
                extract(text)
        else:
            got = extract(text)
            assert (got.formula, got.has_reasoning) == (formula, reasoning), text


def test_unclosed_tags_at_the_length_limit_are_refused():
    from alpha_gym.language import AnswerError
    with pytest.raises(AnswerError, match="no <alpha>"):
        extract("<alpha>" * 4681)
    with pytest.raises(AnswerError, match="outside <think>"):  # reasoning never closed: the block is a draft
        extract("<think>" * 4000 + "<alpha>rank(close)</alpha>")
    assert extract("<think>" * 4000 + "a</think><alpha>rank(close)</alpha>").has_reasoning is True
