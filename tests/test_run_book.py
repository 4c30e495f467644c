"""A run's own book (trainers/run_book.py; issue 28 item 4): archive.jsonl of the archive's admitted formulas,
resumable without duplicates, and the correlation-capped book built from it on the train window."""

from __future__ import annotations

import json

import numpy as np
import pytest

from alpha_gym.evaluation.selection import Candidate, select_correlation_capped
from alpha_gym.scoring.config import VerifierConfig
from alpha_gym.scoring.verifier import Verifier
from conftest import REAL_TRAIN_FILE
from trainers.run_book import (ARCHIVE_LOG, RunBookError, append_admitted, build_run_book, read_admitted,
                               truncate_admitted)

#: Three steps of answers: reversal variants (one idea), volume and range ideas, and repeats.
STEPS = [
    ["rank(-ts_delta(close, 5))", "rank(-ts_delta(vwap, 5))", "rank(close -)", "rank(-ts_delta(high, 5))"],
    ["rank(-ts_delta(low, 5))", "rank(-ts_delta(close, 5))", "rank(volume / adv(20))", "rank(-ts_delta(open, 5))"],
    ["rank(-ts_mean(returns, 5))", "rank(-ts_corr(close, volume, 10))", "rank(-ts_delta(close, 3))",
     "rank(-close / ts_max(high, 20))"],
]


def _config(**changes) -> VerifierConfig:
    # archive_min_core below every CPCV here: the synthetic market's signals are weak, and the file should
    # see several admissions per step
    return VerifierConfig(stress_checkpoint=None, archive_min_core=-10.0, **changes)


def _step(verifier, answers):
    group = verifier.score_group([f"<alpha>{a}</alpha>" for a in answers])
    verifier.update_archive(group)
    return [group]


def test_the_file_holds_each_admitted_entry_once(tmp_path, small_synthetic):
    v = Verifier(small_synthetic, _config())
    path = tmp_path / ARCHIVE_LOG
    written = [append_admitted(path, v.archive, step, _step(v, answers)) for step, answers in enumerate(STEPS, 1)]
    rows = read_admitted(path)
    learned = [i for i in range(len(v.archive)) if not v.archive.seed[i]]
    assert sum(written) == len(rows) == len(learned) > 3
    assert [r["formula"] for r in rows] == [v.archive.texts[i] for i in learned]   # admission order
    assert [r["step"] for r in rows] == sorted(r["step"] for r in rows) and {r["step"] for r in rows} == {1, 2, 3}
    for r in rows:
        ev = v.evaluate(r["formula"])
        assert r["train_cpcv"] == ev.cpcv and r["turnover"] == ev.turnover and r["form"] == ev.form
    assert "rank(close -)" not in {r["formula"] for r in rows}                 # invalid: never admitted
    assert append_admitted(path, v.archive, 4, []) == 0                         # nothing new: nothing written
    assert all(json.loads(line) for line in path.read_text().splitlines())


def test_a_resume_writes_no_duplicates(tmp_path, small_synthetic):
    """A run checkpointed after step 1 and resumed replays steps 2-3: the file ends as the uninterrupted one."""
    straight = Verifier(small_synthetic, _config())
    for step, answers in enumerate(STEPS, 1):
        append_admitted(tmp_path / "a.jsonl", straight.archive, step, _step(straight, answers))

    run = Verifier(small_synthetic, _config())
    path = tmp_path / "b.jsonl"
    append_admitted(path, run.archive, 1, _step(run, STEPS[0]))
    run.save_archive(tmp_path / "checkpoint-1.npz")                         # the checkpoint after step 1
    for step, answers in enumerate(STEPS[1:], 2):                           # ... the run goes on, then dies
        append_admitted(path, run.archive, step, _step(run, answers))
    resumed = Verifier(small_synthetic, _config())
    resumed.load_archive(tmp_path / "checkpoint-1.npz")                     # what train(resume=True) does
    truncate_admitted(path, 1)
    for step, answers in enumerate(STEPS[1:], 2):
        append_admitted(path, resumed.archive, step, _step(resumed, answers))
    keys = ("step", "formula", "form", "train_cpcv", "turnover")
    a, b = ([{k: r[k] for k in keys} for r in read_admitted(tmp_path / n)] for n in ("a.jsonl", "b.jsonl"))
    assert a == b and len({r["form"] for r in b}) == len(b)
    truncate_admitted(path, 0)                                              # a fresh run starts empty
    assert read_admitted(path) == []


def test_entries_the_archive_arrived_with_are_unattributed(tmp_path, small_synthetic):
    v = Verifier(small_synthetic, _config())
    _step(v, STEPS[0])                                  # grown before the run's file began
    path = tmp_path / ARCHIVE_LOG
    append_admitted(path, v.archive, 1, _step(v, STEPS[1]))
    rows = read_admitted(path)
    before = {r["formula"] for r in rows if r["step"] is None}
    assert before and all(r["turnover"] is None for r in rows if r["step"] is None)
    assert {r["step"] for r in rows} == {None, 1}
    truncate_admitted(path, 1)
    assert len(read_admitted(path)) == len(rows)        # a resume keeps them
    own = build_run_book(path, v)
    every = build_run_book(path, v, include_unattributed=True)
    assert own.n_admitted == len(rows) - len(before) and every.n_admitted == len(rows)


def test_a_damaged_file_is_a_clear_error(tmp_path):
    path = tmp_path / ARCHIVE_LOG
    path.write_text('{"step": 1, "formula": "rank(close)"}\nnot json\n')
    with pytest.raises(RunBookError, match=r"archive.jsonl:2 is not JSON"):
        read_admitted(path)
    path.write_text('{"step": 1}\n')
    with pytest.raises(RunBookError, match="no formula"):
        read_admitted(path)


@pytest.fixture(scope="module")
def train_panel(request):
    """The real reference universe's train window when the data is here, else the synthetic market."""
    if REAL_TRAIN_FILE.exists():
        return request.getfixturevalue("real_us46")
    return request.getfixturevalue("synthetic46")


BOOK_FORMULAS = [
    "rank(-ts_delta(close, 5))", "rank(-ts_delta(vwap, 5))", "rank(-ts_delta(high, 5))", "rank(-ts_delta(low, 5))",
    "rank(-ts_delta(open, 5))", "rank(-ts_delta(close, 3))", "rank(-ts_mean(returns, 5))",
    "rank(volume / adv(20))", "rank(-ts_corr(close, volume, 10))", "rank(-close / ts_max(high, 20))",
    "rank(ts_std(returns, 20))", "rank(-ts_delta(close, 60))", "rank(ts_mean(close, 250))",
]


def test_the_book_is_the_correlation_capped_selection_on_the_train_window(tmp_path, train_panel):
    v = Verifier(train_panel, VerifierConfig(stress_checkpoint=None, archive_seed=False))
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": k // 4 + 1, "formula": f, "form": f, "train_cpcv": None, "turnover": None, "added": k}
            for k, f in enumerate(BOOK_FORMULAS + BOOK_FORMULAS[:2])]       # two formulas admitted twice
    (run / ARCHIVE_LOG).write_text("".join(json.dumps(r) + "\n" for r in rows))
    book = build_run_book(run, v)
    assert book.n_admitted == len(BOOK_FORMULAS)
    by_hand = select_correlation_capped([Candidate.from_evaluated(v.evaluate(f)) for f in BOOK_FORMULAS], 0.5, 0.02)
    assert book.members == by_hand.members and book.effective_bets == by_hand.effective_bets
    assert 1 <= book.n_members < len(BOOK_FORMULAS)         # the reversal variants are one idea: most are skipped
    assert book.selection.skipped["correlation"] >= 4
    evs = [v.evaluate(f) for f in book.members]
    assert all(ev.turnover >= 0.02 for ev in evs)
    cpcvs = [ev.cpcv for ev in evs]
    assert cpcvs == sorted(cpcvs, reverse=True)             # greedy by train CPCV
    z = np.array([(ev.net - ev.net.mean()) / np.linalg.norm(ev.net - ev.net.mean()) for ev in evs])
    off = np.abs(z @ z.T)[~np.eye(len(evs), dtype=bool)]
    assert (off < 0.5).all()
    assert 1.0 <= book.effective_bets <= book.n_members + 1e-9
    d = book.to_dict()
    assert d["n_members"] == book.n_members and d["members"] == list(book.members)
    json.dumps(d, allow_nan=False)


def test_an_absent_file_and_a_formula_that_no_longer_parses(tmp_path, small_synthetic):
    v = Verifier(small_synthetic, VerifierConfig(stress_checkpoint=None, archive_seed=False))
    empty = build_run_book(tmp_path, v)
    assert (empty.n_admitted, empty.n_members, empty.effective_bets) == (0, 0, 0.0)
    path = tmp_path / ARCHIVE_LOG
    path.write_text(json.dumps({"step": 1, "formula": "ts_mean(close, 900)"}) + "\n"     # over max_window
                    + json.dumps({"step": 1, "formula": "rank(-ts_delta(close, 5))"}) + "\n")
    book = build_run_book(path, v)
    assert book.unscored == ("ts_mean(close, 900)",) and book.members == ("rank(-ts_delta(close, 5))",)
