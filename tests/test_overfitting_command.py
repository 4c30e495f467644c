"""`alpha-gym overfitting` and the reports that show it: a run folder's archive and a comparison's kept archives
traded on their train window, overfitting.json checked against the statistics computed directly, the run page,
the comparison page and comparison.md; and every bad source, stamp, kept file and report file refused in one
line (exit 2), never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from alpha_gym.commands.main import main
from alpha_gym.evaluation.kept import write_object
from alpha_gym.evaluation.overfitting import overfitting_summary
from alpha_gym.evaluation.report_overfitting import (HEADERS, OVERFITTING_FORMAT, html_section, markdown_lines,
                                                     read_overfitting)
from alpha_gym.language.sample import random_formula
from alpha_gym.market import synthetic_panel
from alpha_gym.scoring.config import VerifierConfig
from alpha_gym.scoring.verifier import Verifier
from alpha_gym.settings import to_dict

#: The window the kept-comparison tests name in their settings.json: the synthetic market's first 900 sessions.
WINDOW_DAYS = 900


@pytest.fixture(scope="module")
def formulas() -> list[str]:
    rng = np.random.default_rng(0)
    return list(dict.fromkeys(random_formula(rng, 3) for _ in range(30)))


@pytest.fixture(scope="module")
def window() -> list[str]:
    panel = synthetic_panel()
    return [str(panel.dates[0]), str(panel.dates[WINDOW_DAYS - 1])]


def _archive(path: Path, formulas, cpcv: float = 0.25) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"step": 1, "formula": f, "form": f, "train_cpcv": cpcv, "turnover": 0.1,
                                        "added": i}) + "\n" for i, f in enumerate(formulas)), encoding="utf-8")
    return path


def _results(tmp_path: Path, formulas, window, arms=(("seed-7", "evolve", 1234),)) -> Path:
    results = tmp_path / "results"
    results.mkdir(parents=True)
    write_object(results / "settings.json", {"scale": "cpu", "probe_briefs": [], "data": None, "universe": None,
                                             "train_window": window, "verifier": to_dict(VerifierConfig())})
    for seed, name, calls in arms:
        _archive(results / seed / f"{name}.archive.jsonl", formulas)
        write_object(results / seed / f"{name}.json", {"rung": name, "seed": int(seed[5:]), "selected_step": 1,
                                                       "checkpoints": [], "verifier_calls": calls})
    return results


def _direct(panel, formulas, calls):
    """The statistics computed here, without the command: the check on what it wrote."""
    v = Verifier(panel, VerifierConfig(stress_checkpoint=None))
    evs = [v.evaluate(f) for f in formulas]
    pnl = np.stack([e.net for e in evs], axis=1)
    return overfitting_summary(pnl, [e.cpcv for e in evs], [e.text for e in evs], verifier_calls=calls)


def _same(written: dict, direct: dict) -> None:
    for keys in (("pbo", "pbo"), ("pbo", "n_splits"), ("effective_trials", "n_trials"), ("best", "formula"),
                 ("deflated_sharpe", "effective", "dsr"), ("deflated_sharpe", "calls", "dsr"), ("top", "train"),
                 ("n_candidates",), ("n_days",)):
        a, b = written, direct
        for k in keys:
            a, b = a[k], b[k]
        assert a == pytest.approx(b, rel=1e-12), keys


def test_a_run_folder_gets_overfitting_json_and_its_page_shows_it(tmp_path, formulas, capsys):
    run = tmp_path / "run"
    _archive(run / "archive.jsonl", formulas)
    assert main(["overfitting", str(run), "--calls", "500", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "PBO" in out and "effective trials" in out
    d = json.loads((run / "overfitting.json").read_text())
    assert d["format"] == OVERFITTING_FORMAT and [e["label"] for e in d["entries"]] == ["run"]
    entry = d["entries"][0]
    assert entry["n_formulas"] == len(formulas) and entry["verifier_calls"] == 500
    assert entry["n_rescored_differently"] == entry["n_candidates"]      # the archive says 0.25 for each
    _same(entry, _direct(synthetic_panel(), formulas, 500))
    assert main(["report", str(run)]) == 0
    page = (run / "report.html").read_text()
    assert '<h2 id="overfitting">Overfitting</h2>' in page and f"{entry['pbo']['pbo']:.2f}" in page


def test_kept_archives_read_their_comparisons_window_and_calls(tmp_path, formulas, window, capsys):
    results = _results(tmp_path, formulas, window, arms=(("seed-7", "evolve", 1234), ("seed-8", "search", 99)))
    assert main(["overfitting", str(results / "seed-7" / "evolve.archive.jsonl"), "--quiet"]) == 0
    first = read_overfitting(results)
    assert [e["label"] for e in first] == ["seed-7/evolve"]
    entry = first[0]
    assert entry["train_window"] == window and entry["verifier_calls"] == 1234
    assert entry["n_rescored_differently"] == entry["n_candidates"]
    _same(entry, _direct(synthetic_panel().window(*window), formulas, 1234))
    # a second archive joins the file; the first one's entry stays as it was
    assert main(["overfitting", str(results / "seed-8" / "search.archive.jsonl"), "--quiet"]) == 0
    both = read_overfitting(results)
    assert [e["label"] for e in both] == ["seed-7/evolve", "seed-8/search"] and both[0] == entry
    assert both[1]["verifier_calls"] == 99
    capsys.readouterr()


def test_comparison_md_and_the_comparison_page_show_the_section(tmp_path, formulas, window):
    from alpha_gym.evaluation.report_comparison import comparison_section
    from trainers.compare.report import report_json, write_table
    results = _results(tmp_path, formulas, window)
    assert main(["overfitting", str(results), "--quiet"]) == 0       # the results folder: every kept archive
    entries = read_overfitting(results)
    report = {"seeds": [7], "briefs": 0, "rows": {}, "baselines": [], "overfitting": entries}
    text = write_table(report, "cpu", tmp_path)
    assert "Overfitting: " in text and "| seed-7/evolve | " in text
    row = next(line for line in text.splitlines() if line.startswith("| seed-7/evolve"))
    assert len(row.split(" | ")) == len(HEADERS)
    assert f"| {entries[0]['pbo']['pbo']:.2f} |" in row and "walk-forward folds" in text
    assert report_json(report)["overfitting"] == json.loads(json.dumps(entries))
    page = "\n".join(comparison_section(results, {}))                 # no report.json: the file itself
    assert '<h2 id="overfitting">Overfitting</h2>' in page
    without = {"seeds": [], "briefs": 0, "rows": {}, "baselines": []}
    assert "Overfitting" not in write_table(without, "cpu", tmp_path) and "overfitting" not in report_json(without)


def test_the_sections_render_an_entry_edited_or_older_as_not_available():
    """Every key of an entry replaced by junk of every JSON type: the table says n/a there, never raises."""
    good = {"label": "a", "n_candidates": 10, "n_formulas": 12, "verifier_calls": 100,
            "pbo": {"pbo": 0.4, "oos_loss_share": 0.3, "n_blocks": 16},
            "effective_trials": {"n_trials": 5, "min_corr": 0.5},
            "deflated_sharpe": {"effective": {"sharpe": 1.0, "benchmark_sharpe": 0.5, "dsr": 0.9},
                                "calls": {"sharpe": 1.0, "benchmark_sharpe": 0.9, "dsr": 0.6}},
            "top": {"train": 1.0, "validation": None, "test": None}, "rank_correlation": {"validation": None},
            "best": {"formula": "rank(volume)", "train_score": 1.0}, "seconds": {"scoring": 3.0, "statistics": 1.0},
            "n_unscored": 0, "n_rescored_differently": 0, "verifier_failures": {"AttributeError": 1}}
    junk = [None, "x", [], {}, [1, 2], True, -1, 1e308, float("nan"), 2.5]
    cases = 0
    for key, value in good.items():
        if key == "label":
            continue
        subkeys = list(value) if isinstance(value, dict) else [None]
        for sub in subkeys:
            for j in junk:
                e = json.loads(json.dumps(good))
                if sub is None:
                    e[key] = j
                else:
                    e[key][sub] = j
                assert markdown_lines([e])[-1].startswith("| a | ")
                assert "Overfitting" in html_section([e])[0]
                cases += 1
    assert cases >= 200


# ------------------------------------------------------------------------------ bad input: one line, exit 2
def _bad_archives(tmp_path: Path, formulas) -> list[tuple[str, list[str]]]:
    """(name, argv) for every bad source of the family."""
    cases = []
    bodies = {"not JSON": b"{", "binary": bytes(range(256)), "utf-16": '{"formula": "rank(close)"}'.encode("utf-16"),
              "a list": b"[1, 2]\n", "no formula": b'{"x": 1}\n', "formula a number": b'{"formula": 5}\n',
              "formula null": b'{"formula": null}\n', "empty": b"", "blank lines": b"\n\n  \n",
              "one formula": json.dumps({"formula": formulas[0]}).encode() + b"\n",
              "unparseable": b"".join(json.dumps({"formula": f}).encode() + b"\n"
                                      for f in ("rank(", "foo(close)", ")))", "1 +", "rank(close, 5, 6)")),
              "deep": json.dumps({"formula": "(" * 5000 + "close" + ")" * 5000}).encode() + b"\n" * 2}
    for name, body in bodies.items():
        folder = tmp_path / name.replace(" ", "-")
        folder.mkdir()
        (folder / "archive.jsonl").write_bytes(body)
        cases.append((f"archive {name}", [str(folder)]))
    cases.append(("no such path", [str(tmp_path / "missing")]))
    empty = tmp_path / "empty-folder"
    empty.mkdir()
    cases.append(("folder without archive", [str(empty)]))
    dup = tmp_path / "dup"
    _archive(dup / "archive.jsonl", formulas)
    cases.append(("the same archive twice", [str(dup), str(dup / "archive.jsonl")]))
    for blocks in ("3", "0", "22", "x", "-4", "1e3"):
        cases.append((f"--blocks {blocks}", [str(dup), "--blocks", blocks]))
    for top in ("0", "x", "-1"):
        cases.append((f"--top {top}", [str(dup), "--top", top]))
    for calls in ("0", "-5", "many", "1.5"):
        cases.append((f"--calls {calls}", [str(dup), "--calls", calls]))
    cases.append(("--out a folder", [str(dup), "--out", str(tmp_path)]))
    for name, body in {"report not JSON": "{", "report of another format": '{"format": "x", "entries": []}',
                       "report entries not a list": json.dumps({"format": OVERFITTING_FORMAT, "entries": 5}),
                       "report entry without label": json.dumps({"format": OVERFITTING_FORMAT, "entries": [{}]})}.items():
        f = tmp_path / f"{name.replace(' ', '-')}.json"
        f.write_text(body)
        cases.append((name, [str(dup), "--out", str(f)]))
    return cases


def _bad_stamps(tmp_path: Path, formulas, window) -> list[tuple[str, list[str]]]:
    cases = []
    stamps = {"not JSON": "{", "a list": "[]", "no window": json.dumps({"verifier": {}}),
              "window of one date": json.dumps({"train_window": [window[0]], "verifier": {}}),
              "window of numbers": json.dumps({"train_window": [1, 2], "verifier": {}}),
              "no verifier": json.dumps({"train_window": window}),
              "verifier a list": json.dumps({"train_window": window, "verifier": []}),
              "unknown verifier key": json.dumps({"train_window": window, "verifier": {"cpcv_clipp": 5.0}}),
              "verifier value out of range": json.dumps({"train_window": window, "verifier": {"cpcv_clip": -1}}),
              "window the data lacks": json.dumps({"train_window": ["1990-01-02", "1991-01-02"], "verifier": {}}),
              "window not its dates": json.dumps({"train_window": ["2012-06-30", window[1]], "verifier": {}}),
              "data file not here": json.dumps({"train_window": window, "verifier": {}, "data": "/nowhere/x.csv"})}
    for name, body in stamps.items():
        results = tmp_path / f"stamp-{name.replace(' ', '-')}"
        _archive(results / "seed-1" / "evolve.archive.jsonl", formulas)
        (results / "settings.json").write_text(body)
        cases.append((f"settings.json {name}", [str(results)]))
    good = _results(tmp_path / "flags", formulas, window)
    for flags in (["--start", window[0]], ["--end", window[1]], ["--set", "verifier.cpcv_clip=4"]):
        cases.append((f"a stamp and {flags[0]}", [str(good), *flags]))
    for name, value in {"calls a string": "many", "calls negative": -1, "calls true": True, "calls 0": 0}.items():
        results = _results(tmp_path / name.replace(" ", "-"), formulas, window)
        write_object(results / "seed-7" / "evolve.json", {"rung": "evolve", "seed": 7, "selected_step": 1,
                                                          "checkpoints": [], "verifier_calls": value})
        cases.append((f"kept {name}", [str(results)]))
    tampered = _results(tmp_path / "tampered", formulas, window)
    numbers = tampered / "seed-7" / "evolve.json"
    numbers.write_text(numbers.read_text().replace("1234", "4321"))
    cases.append(("kept numbers edited after sealing", [str(tampered)]))
    run = tmp_path / "curve-run"
    _archive(run / "archive.jsonl", formulas)
    (run / "curve.jsonl").write_text('{"calls": 8}\n{not json\n')
    cases.append(("curve.jsonl torn", [str(run)]))
    return cases


def _misbehaves(argv, capsys) -> str | None:
    """Why the command misbehaved on argv (None when it refused in one line with exit 2)."""
    try:
        code = main(["overfitting", "--quiet", *argv])
    except SystemExit as exit_:          # argparse's refusal of a flag: usage and one error line, exit 2
        code = exit_.code
    except BaseException as err:         # noqa: BLE001 - a traceback is what the family looks for
        return f"raised {type(err).__name__}: {err}"
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith(("usage:", " ", "alpha-gym: note:"))]
    if code != 2:
        return f"exit {code}"
    if len(lines) != 1 or "error" not in lines[0] or "Traceback" in err:
        return f"not one error line: {err!r}"
    return None


def test_every_bad_input_is_refused_in_one_line(tmp_path, formulas, window, capsys):
    cases = _bad_archives(tmp_path, formulas) + _bad_stamps(tmp_path, formulas, window)
    bad = {name: why for name, argv in cases if (why := _misbehaves(argv, capsys)) is not None}
    assert bad == {}
    assert len(cases) >= 45


def test_a_damaged_overfitting_json_stops_the_page_in_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    for body in ("{", "[]", json.dumps({"format": "other"}), json.dumps({"format": OVERFITTING_FORMAT}),
                 json.dumps({"format": OVERFITTING_FORMAT, "entries": [{"label": 5}]}), "\udcff"):
        (run / "overfitting.json").write_text(body, errors="surrogateescape")
        assert main(["report", str(run)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "overfitting.json" in err
