"""best-of-N's pick on a walk-forward fold, measured on real data without a model: the samples are Alpha101 formulas
(the 82 that need no sector labels, a seeded draw of 80), 40 for each of 2 probe briefs, scored as best-of-N scores
its samples (one group a brief, the archive grown after it) and kept as samples.json, so `run_best_of_n_rung` picks
from them as it does from a model's. Prints the seconds of a plain run and of a fold run (the validation readings'
cost), and per brief the sample the train reward picks and the one chosen on validation (train admits), each then
scored on the test window, after every choice, for the note only.

    python benchmarks/best_of_n_validation_pick.py OUT FOLD        # us46, e.g. FOLD 3
"""
import sys, time
from dataclasses import replace
from pathlib import Path
import numpy as np
from alpha_gym.alpha101 import formulas as paper
from alpha_gym.market.resolve import resolve_panel
from alpha_gym.market.folds import cut_fold
from alpha_gym.scoring.config import VerifierConfig
from alpha_gym.scoring.verifier import Verifier
from alpha_gym.evaluation.validation import ValidationScorer
from alpha_gym.evaluation.holdout import evaluate_holdout, train_verdict
from alpha_gym.evaluation.kept import read_rows
from alpha_gym.jsonable import json_dumps
from alpha_gym.tasks.sets import brief_set
from trainers.compare.ladder import SCALES
from trainers.compare.folds import fold_plan, folds_of
from trainers.compare.arms.best_of_n import run_best_of_n_rung, sampling_settings, best_sample

out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
D = "/work/shared/data/us_equities"
full = resolve_panel(data=f"{D}/us_daily_train.csv.gz", universe=f"{D}/universe_us46.txt")
scale = replace(SCALES["cpu"], steps=5, probe=2)          # 80 calls: k = 40 for each of 2 briefs
fold, = folds_of(sys.argv[2], full, scale)
panels = cut_fold(full, fold, fold_plan(scale).history)
purge = full.window(fold.purge.start, fold.purge.end)
verifier = Verifier(panels.search, VerifierConfig(stress_checkpoint=None))
probe = tuple(list(brief_set("probe"))[:2])
pool = list(paper(industry_free=True).values())
order = np.random.default_rng(0).permutation(len(pool))[:80]
grown = verifier.fork()
records = []
t0 = time.perf_counter()
for i, brief in enumerate(probe):
    texts = [f"<alpha>{pool[j]}</alpha>" for j in order[40 * i: 40 * (i + 1)]]
    g = grown.score_group(texts, brief=brief)
    grown.update_archive(g)
    records.append({"brief_id": brief.id, "answers": texts, "rewards": g.rewards.tolist(), "valid": g.valid.tolist(),
                    "cpcv": [float(s.channels["cpcv"]) if s.valid else None for s in g.scores],
                    "best": best_sample(g.rewards)})
print(f"scored 80 samples in {time.perf_counter() - t0:.1f} s")
res = {}
for which, scorer in (("plain", None), ("fold", ValidationScorer(panels, verifier))):
    run = out / which
    rd = run / "out" / "seed-42" / "best_of_n"; rd.mkdir(parents=True, exist_ok=True)
    (rd / "samples.json").write_text(json_dumps({"settings": sampling_settings(scale, 42, None, probe)[3],
                                                 "seconds": 0.0, "briefs": records}))
    t = time.perf_counter()
    run_best_of_n_rung(scale, 42, None, verifier, panels.search, purge, probe, run / "results", out=run / "out",
                       validation=scorer)
    res[which] = (time.perf_counter() - t, read_rows(run / "results" / "seed-42" / "best_of_n.jsonl"))
    print(f"{which}: run_best_of_n_rung {res[which][0]:.2f} s")
# after every choice: the test window, for the note only
def window_scores(formulas, history, window):
    ok = [train_verdict(verifier, f).valid for f in formulas]
    rep = evaluate_holdout(formulas, history, window, train_valid=ok, alpha_tests=False)
    return [a.score if a.valid else None for a in rep.answers]
from alpha_gym.language.answer import formula_or_none
for p, row in zip(records, res["fold"][1]):
    t, v = p["best"], row["sample"]
    fs = [formula_or_none(p["answers"][t]), formula_or_none(p["answers"][v])]
    val = window_scores(fs, panels.validation_history, panels.validation)
    test = window_scores(fs, panels.test_history, panels.test)
    admitted = sum(1 for c in p["cpcv"] if c is not None and c > 0)
    print(json_dumps({"brief": p["brief_id"], "admitted": admitted, "valid": sum(p["valid"]), "rule": row["chosen_by"],
                      "train_pick": {"formula": fs[0], "reward": round(p["rewards"][t], 3), "cpcv": p["cpcv"][t],
                                     "validation": val[0], "test": test[0]},
                      "validation_pick": {"formula": fs[1], "reward": round(p["rewards"][v], 3), "cpcv": p["cpcv"][v],
                                          "validation": val[1], "test": test[1]}}))
