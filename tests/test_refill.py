"""Signal in collapsed groups (issue 39.3): distinct canonical forms per group, the collapse refill, their log.

The counting and the swap are pure functions, checked on hand-made formulas and groups. The loop runs with
the real SmolLM2-135M and the real verifier (us46) at tiny settings; as in test_training.py, the sampled
texts are replaced by scripted answers (the model's own would all be unreadable), and their log-probs are
recomputed with the policy, so scoring, refill, advantages and the update all run for real.
"""

from __future__ import annotations

import json

import pytest
import torch

import test_training as tt
from trainers.config import TrainConfig, recipe
from trainers.refill import INVALID_FORM, answer_form, distinct_forms, swap_duplicates
from trainers.rollout import Group

A = tt.VALID_ANSWER                                   # valid on us46, core score > 0
B = "<alpha>rank(-ts_delta(close, 5))</alpha>"
B_SPELLED = "<alpha>rank( -ts_delta(close,5) )</alpha>"
C = "<alpha>rank(close + open)</alpha>"
C_SPELLED = "<alpha>rank(open+close)</alpha>"       # add is commutative: the same canonical form as C
D = "<alpha>rank(ts_mean(volume, 10))</alpha>"
JUNK = "I would rather not answer."


# ------------------------------------------------------------------------------------- counting forms
def test_distinct_forms_counts_canonical_forms():
    assert distinct_forms([A, A, A, B]) == 2
    assert answer_form(C) == answer_form(C_SPELLED) and distinct_forms([C, C_SPELLED]) == 1
    assert distinct_forms([B, B_SPELLED, C, C_SPELLED]) == 2
    # every unreadable answer is the one form "invalid": no tag, a syntax error, an empty block
    assert {answer_form(t) for t in (JUNK, "<alpha>rank(((</alpha>", "<alpha> </alpha>")} == {INVALID_FORM}
    assert distinct_forms([JUNK, "<alpha>rank(((</alpha>", A]) == 2
    assert distinct_forms([A, "<alpha>rank(ts_std(volume, 9) / ts_std(close, 8))</alpha>"]) == 2  # windows count


# ------------------------------------------------------------------------------------- the swap
PAD = 0


def _group(texts, T, seed):
    """A hand-made group: row k's tokens are k+1 over a length of its own, log-probs and entropies by row."""
    g = torch.Generator().manual_seed(seed)
    lengths = [1 + k % T for k in range(len(texts))]
    mask = torch.tensor([[1.0] * n + [0.0] * (T - n) for n in lengths])
    ids = (torch.arange(len(texts))[:, None] + 1 + 10 * seed).repeat(1, T) * mask.long()
    return Group("b", torch.ones(1, 3, dtype=torch.long), ids, mask, list(texts),
                 -torch.rand(len(texts), T, generator=g) * mask, torch.rand(len(texts), T, generator=g) * mask)


def test_swap_duplicates_adds_forms_from_fresh_answers():
    group = _group([A, A, A, JUNK], T=3, seed=1)
    fresh = _group([B, A, JUNK, C, C_SPELLED], T=5, seed=2)
    before = {name: getattr(group, name).clone() for name in ("completion_ids", "mask", "old_logp", "entropy")}
    new, n = swap_duplicates(group, fresh, 3, PAD)
    assert n == 1 and distinct_forms(new.texts) == 3
    assert group.texts == [A, A, A, JUNK] and all(torch.equal(getattr(group, k), v) for k, v in before.items())
    assert new.texts == [A, A, B, JUNK]  # the last copy of the most common form took the first new form
    assert new.completion_ids.shape == (4, 5)  # padded to the longer of the two groups
    for name in ("completion_ids", "mask", "old_logp", "entropy"):
        got, old, fr = getattr(new, name), getattr(group, name), getattr(fresh, name)
        assert torch.equal(got[2], fr[0]), name                         # the swapped row is the fresh one
        assert torch.equal(got[[0, 1, 3], :3], old[[0, 1, 3]]), name    # the kept rows are untouched
        assert not got[[0, 1, 3], 3:].any(), name                       # and padded (PAD = 0, mask 0)
    # four forms asked: two swaps (C_SPELLED is C's form: one of them is enough); the fresh draw then runs out
    new, n = swap_duplicates(group, fresh, 4, PAD)
    assert n == 2 and new.texts == [A, C, B, JUNK]
    new, n = swap_duplicates(group, fresh, 5, PAD)
    assert n == 2 and distinct_forms(new.texts) == 4


def test_swap_duplicates_leaves_a_diverse_group_and_brings_no_unreadable_answer():
    diverse = _group([A, B, C, D], T=4, seed=3)
    new, n = swap_duplicates(diverse, _group([A, A, JUNK, JUNK], T=2, seed=4), 4, PAD)
    assert n == 0 and new is diverse
    collapsed = _group([A, A, A, A], T=2, seed=5)
    new, n = swap_duplicates(collapsed, _group([JUNK, "<alpha>x(</alpha>", A, A], T=2, seed=6), 2, PAD)
    assert n == 0 and new is collapsed  # an unreadable answer is no new formula


# ------------------------------------------------------------------------------------- the setting
def test_min_distinct_forms_range_is_checked():
    assert TrainConfig().min_distinct_forms == 0 and recipe("cispo").min_distinct_forms == 0
    assert recipe("cispo_distinct_forms").min_distinct_forms == 4 and recipe("cispo_distinct_forms").refill_rounds
    with pytest.raises(ValueError, match=r"min_distinct_forms = -1: must be an integer in \[0, inf\)"):
        TrainConfig(refill_rounds=1, min_distinct_forms=-1)
    with pytest.raises(ValueError, match="a group cannot hold more forms than answers"):
        TrainConfig(refill_rounds=1, min_distinct_forms=13)
    with pytest.raises(ValueError, match="runs in the refill rounds"):
        TrainConfig(min_distinct_forms=2)
    with pytest.raises(ValueError, match="must be an integer"):
        TrainConfig(refill_rounds=1, min_distinct_forms=2.0)


def test_max_verifier_calls_range_is_checked():
    """0 is no cap; a cap below one step's first scoring could train nothing and is refused, naming both."""
    assert TrainConfig(max_verifier_calls=0).max_verifier_calls == 0
    assert TrainConfig(prompts_per_step=2, num_generations=4, max_verifier_calls=8).max_verifier_calls == 8
    with pytest.raises(ValueError, match=r"max_verifier_calls.*>= prompts_per_step x num_generations \(8\)"):
        TrainConfig(prompts_per_step=2, num_generations=4, max_verifier_calls=7)
    with pytest.raises(ValueError, match="max_verifier_calls"):
        TrainConfig(max_verifier_calls=-1)


# ------------------------------------------------------------------------------------- the loop
from test_training import _one_thread, smollm, verifier  # noqa: E402,F401  (test_training's fixtures: one thread,
#                                                          the us46 verifier, SmolLM2 loaded once per module)


def scripted(script):
    """A loop.sample_groups whose texts are the next entry of `script[brief id]` for each group sampled (the
    model samples underneath; its tokens are replaced by the script's, log-probs recomputed by the policy).
    `calls` records the briefs of every sampling call."""
    from oracles import recompute_logps
    from trainers import loop
    real, calls = loop.sample_groups, []

    def sample_groups(model, tokenizer, prompts, config, eos_ids, **kw):
        out, briefs = [], []
        for p, _ in zip(prompts, real(model, tokenizer, prompts, config, eos_ids, **kw)):
            brief = next(b for b in tt.BRIEFS if b.text in tokenizer.decode(p[0]))
            briefs.append(brief.id)
            texts = script[brief.id].pop(0)
            rows = [tokenizer(t, add_special_tokens=False).input_ids + [eos_ids[0]] for t in texts]
            T = max(map(len, rows))
            ids = torch.tensor([r + [tokenizer.pad_token_id] * (T - len(r)) for r in rows])
            mask = torch.tensor([[1.0] * len(r) + [0.0] * (T - len(r)) for r in rows])
            out.append((ids, mask, list(texts), *recompute_logps(model, p, ids, mask, config.temperature)))
        calls.append(briefs)
        return out
    return sample_groups, calls


def _train(smollm, verifier, tmp_path, config, script):
    from trainers import loop
    from trainers.run_log import read_log
    sample, calls = scripted(script)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop, "sample_groups", sample)
        loop.train(config, verifier.fork(), tt.BRIEFS, tmp_path, model=tt.fresh_policy(smollm, config), steps=1,
                   progress=False)
    rows = [json.loads(ln) for ln in (tmp_path / "completions.jsonl").read_text().splitlines()]
    return read_log(tmp_path)[0], rows, calls


@pytest.mark.slow
@pytest.mark.real_data
def test_collapse_refill_in_the_loop(smollm, verifier, tmp_path):
    """tiny-0 collapsed (A three times + one unreadable: 2 forms < 3) gets one swap from a fresh draw; tiny-1
    (4 forms) is left alone; the log counts forms, swaps and every answer scored. Then min_distinct_forms=0:
    no extra draw, and the same answers, rewards and advantages as a run whose groups never collapse."""
    from trainers.run_log import LOG_FIELDS
    base = {**tt.TINY, "max_completion_length": 8}
    config = recipe("cispo_distinct_forms", **base, min_distinct_forms=3)
    rec, rows, calls = _train(smollm, verifier, tmp_path / "on", config,
                              {"tiny-0": [[A, A, A, JUNK], [B, A, JUNK, C]], "tiny-1": [[A, B, C, D]]})
    assert set(LOG_FIELDS) <= set(rec)
    order = list(dict.fromkeys(r["brief_id"] for r in rows))  # the step's briefs (a seeded order): the log's too
    assert calls[0] == order and sorted(order) == ["tiny-0", "tiny-1"]
    assert calls[1:] == [["tiny-0"]]  # one refill draw, for the collapsed group only
    forms = dict(zip(order, rec["group_forms"]))
    assert forms == {"tiny-0": 3, "tiny-1": 4} and rec["distinct_forms_min"] == 3 and rec["distinct_forms_mean"] == 3.5
    assert (rec["form_refills"], rec["form_swaps"], rec["refills"]) == (1, 1, 0)
    assert rec["verifier_calls"] == 8 + 4  # the first scoring, then the changed group scored again, whole
    assert [r["answer"] for r in rows if r["brief_id"] == "tiny-0"] == [A, A, B, JUNK]
    assert [r["answer"] for r in rows if r["brief_id"] == "tiny-1"] == [A, B, C, D]
    per_group = [sum(r["advantage"] != 0 for r in rows if r["brief_id"] == b) / 4 for b in order]
    assert rec["group_nonzero_adv_share"] == pytest.approx(per_group)
    assert rec["nonzero_adv_share"] == pytest.approx(sum(per_group) / 2)
    # the report page draws both beside the other diagnostics
    from alpha_gym.evaluation.report_training import DIAGNOSTICS, plot_diagnostics
    assert {"nonzero_adv_share", "distinct_forms_mean", "distinct_forms_min"} <= {k for k, _ in DIAGNOSTICS}
    assert plot_diagnostics([rec]).startswith("iVBORw0KGgo")  # a base64 PNG

    # off (0): the same diverse start, no refill of any kind; on with m=2: nothing is below 2 forms, so nothing
    # is drawn and the run is the same, answer for answer
    script = {"tiny-0": [[A, JUNK, B, B]], "tiny-1": [[A, B, C, D]]}
    off, rows_off, calls_off = _train(smollm, verifier, tmp_path / "off", recipe("cispo", **base),
                                      {k: list(v) for k, v in script.items()})
    on, rows_on, calls_on = _train(smollm, verifier, tmp_path / "m2", recipe("cispo_distinct_forms", **base,
                                                                             min_distinct_forms=2), script)
    assert calls_off == calls_on == [order]
    assert rows_on == rows_off and dict(zip(order, on["group_forms"])) == {"tiny-0": 3, "tiny-1": 4}
    assert off["group_forms"] == on["group_forms"]
    assert (off["reward"], off["nonzero_adv_share"], off["verifier_calls"]) == \
        (on["reward"], on["nonzero_adv_share"], on["verifier_calls"]) and off["verifier_calls"] == 8


@pytest.mark.slow
@pytest.mark.real_data
def test_call_cap_pays_for_refills_with_steps(smollm, verifier, tmp_path):
    """max_verifier_calls = 20 with 2 x 4 answers a step: step 1 refills tiny-0 (8 + 4 = 12 calls), step 2 has
    room for its own 8 and no refill (tiny-0 collapses again, nothing is drawn), and the run stops there,
    checkpointed, without passing the cap; resumed for more steps it trains nothing more."""
    from trainers import loop
    from trainers.checkpoints import latest_checkpoint
    from trainers.run_log import read_log
    config = recipe("cispo_distinct_forms", **{**tt.TINY, "max_completion_length": 8}, min_distinct_forms=3,
                    max_verifier_calls=20)
    script = {"tiny-0": [[A, A, A, JUNK], [B, A, JUNK, C], [A, A, A, A]], "tiny-1": [[A, B, C, D], [A, B, C, D]]}
    sample, calls = scripted(script)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop, "sample_groups", sample)
        out = loop.train(config, verifier.fork(), tt.BRIEFS, tmp_path, model=tt.fresh_policy(smollm, config),
                         steps=5, progress=False)
        log = read_log(tmp_path)
        assert out["stopped_at_cap"] == 2 and [r["step"] for r in log] == [1, 2]
        assert [r["verifier_calls"] for r in log] == [12, 20]
        assert (log[0]["form_refills"], log[1]["form_refills"], log[1]["refills"]) == (1, 0, 0)
        assert [len(c) for c in calls] == [2, 1, 2]  # step 1, its refill draw, step 2: nothing drawn past the cap
        assert latest_checkpoint(tmp_path).name == "checkpoint-2"
        again = loop.train(config, verifier.fork(), tt.BRIEFS, tmp_path, model=tt.fresh_policy(smollm, config),
                           steps=5, resume=True, progress=False)
    assert again["stopped_at_cap"] == 2 and len(read_log(tmp_path)) == 2 and len(calls) == 3
