"""Briefs a person can read: `alpha-gym score --brief ID` shows the brief's text and each of its checks in words, met
or missed, and says so where a brief has no checks; `alpha-gym eval` keeps each answer's compliance in answers.jsonl
and shows it on the page."""

from __future__ import annotations

import json

import pytest

from alpha_gym.commands.main import main
from alpha_gym.scoring.report import brief_lines, brief_object
from alpha_gym.tasks.briefs import FIXED_BRIEFS
from alpha_gym.tasks.compliance import check_compliance, compliance_report, described_checks, extended_constraints
from alpha_gym.tasks.sets import brief_set

from chat_endpoint import ChatEndpoint  # a real chat server on 127.0.0.1

#: A generated family: every probe brief and every tenth training brief, against formulas of several shapes
#: (one meets many checks of a volume brief, one few, one is refused on the train window, one does not parse).
BRIEFS = list(brief_set("probe")) + list(brief_set("train"))[::10]
FORMULAS = ["sign(ts_std(volume, 5) / ts_mean(volume, 5))", "rank(-ts_delta(close, 5))",
            "ts_corr(close, volume, 10)", "ts_mean(close, 250)", "rank(close -"]


@pytest.mark.parametrize("brief", BRIEFS, ids=[b.id for b in BRIEFS])
def test_every_check_is_said_in_words_met_or_missed(brief):
    for formula in FORMULAS[:3]:
        got = brief_object(brief, formula, True)
        checks = check_compliance(brief, formula, extended=True)
        assert [d["name"] for d in got["described"]] == list(checks) == list(got["checks"])
        assert [d["met"] for d in got["described"]] == list(checks.values())
        assert [d["description"] for d in got["described"]] == [c.description for c in extended_constraints(brief)]
        assert all(d["description"] for d in got["described"])
        assert got["text"] == brief.request and got["family"] == brief.family
        lines = brief_lines(got)
        met = sum(checks.values())
        assert f"{met} of {len(checks)} checks met" in lines[0]
        for d in got["described"]:           # one line a check: met or missed, its name and its words
            assert f"  {'met' if d['met'] else 'missed':<7} {d['name']}" in "\n".join(lines)
            assert any(line.endswith(d["description"]) for line in lines)
        assert " ".join(" ".join(lines).split()).count(brief.request.split(". ")[0]) == 1   # the text is shown
    refused = brief_object(brief, FORMULAS[3], False)       # invalid on the train window: meets none
    assert refused["checks"] == {} and not any(d["met"] for d in refused["described"])
    assert len(refused["described"]) == refused["n"] and "an invalid answer meets none" in brief_lines(refused)[0]


@pytest.mark.parametrize("brief", FIXED_BRIEFS, ids=[b.id for b in FIXED_BRIEFS])
def test_a_brief_without_checks_says_so_and_shows_its_text(brief):
    for formula, valid in zip(FORMULAS, (True, True, True, False, False)):
        got = brief_object(brief, formula, valid)
        assert got["n"] == 0 and got["described"] == []
        lines = brief_lines(got)
        assert "this brief has no checks" in lines[0] and "checks met" not in lines[0]
        assert " ".join(" ".join(lines[1:]).split()) == brief.request


def test_score_shows_the_brief_text_and_checks_and_the_json_carries_them(capsys):
    assert main(["score", "rank(volume)", "--brief", "fixed-003"]) == 0
    text = capsys.readouterr().out
    assert "brief   : fixed-003 (range): this brief has no checks" in text and "0 of 0" not in text
    assert "where the close sits inside the day's high-low range" in text
    brief = next(b for b in BRIEFS if b.id == "g0-0008")
    formula = "rank(ts_std(volume, 5) / ts_mean(volume, 20))"
    assert main(["score", formula, "--brief", brief.id, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] and out["brief"] == json.loads(json.dumps(brief_object(brief, out["formula"], True)))
    assert out["brief"]["text"] == brief.request and len(out["brief"]["described"]) == out["brief"]["n"]
    assert 0 < sum(d["met"] for d in out["brief"]["described"]) < out["brief"]["n"]   # some met, some missed
    assert main(["score", formula, "--brief", brief.id]) == 0
    text = capsys.readouterr().out
    for d in out["brief"]["described"]:
        assert f"{'met' if d['met'] else 'missed':<7} {d['name']}" in text and d["description"] in text


def test_eval_keeps_each_answers_compliance_and_the_page_shows_it(tmp_path, capsys):
    from alpha_gym.evaluation.report import write_report
    probe = list(brief_set("probe"))[:3]
    replies = {probe[0].prompt(): f"<alpha>{FORMULAS[0]}</alpha>", probe[1].prompt(): f"<alpha>{FORMULAS[2]}</alpha>",
               probe[2].prompt(): "<alpha>rank(close -</alpha>"}
    out = tmp_path / "eval"
    with ChatEndpoint(lambda body: replies[body["messages"][-1]["content"]]) as server:
        assert main(["eval", "--base-url", server.url, "--model", "tiny-model", "--out", str(out), "--no-progress",
                     "--concurrency", "1", "--end", "2016-12-30", "--limit", "3"]) == 0
    capsys.readouterr()
    rows = [json.loads(x) for x in (out / "answers.jsonl").read_text().splitlines()]
    assert [r["brief_id"] for r in rows] == [b.id for b in probe]
    for r, b in zip(rows, probe):
        assert r["brief"] == json.loads(json.dumps(compliance_report(b, r["formula"], r["train_valid"])))
    assert not rows[2]["train_valid"] and rows[2]["brief"]["checks"] == {} and rows[2]["brief"]["share"] == 0.0
    summary = json.loads((out / "eval.json").read_text())["train"]
    assert summary["brief_share"] == pytest.approx(sum(r["brief"]["share"] for r in rows) / 3, abs=1e-12)
    page = write_report(out).read_text()
    assert "<th class=\"\">brief checks</th>" in page or "brief checks</th>" in page
    for r, b in zip(rows, probe):
        n, missed = r["brief"]["n"], [k for k, ok in r["brief"]["checks"].items() if not ok]
        if r["train_valid"]:
            assert f"{n - len(missed)}/{n} met" in page
            words = {d["name"]: d["description"] for d in described_checks(b, r["formula"])}
            assert all(f"{k} ({words[k]})" in page for k in missed)
        else:
            assert f"0/{n} met (an invalid answer meets none)" in page
