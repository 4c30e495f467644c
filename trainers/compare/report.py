"""The comparison's table, from the kept answers alone (any seeds, any session).

`build_report` re-scores every rung's shipped answers (and any `alpha-gym eval` folder's, `evaluated`)
on the pseudo-holdout and puts a bootstrap interval over briefs and seeds on each row, a paired
difference against the rung before, and the verdict against the model-free baselines, and takes the
overfitting report of the kept archives where `alpha-gym overfitting` wrote one (results/overfitting.json);
`write_table` renders it as comparison.md and `report_json` as report.json (the page,
`alpha_gym.evaluation.report_comparison`, reads the latter).
"""

from __future__ import annotations

from pathlib import Path

from trainers.compare.arms.table import CONTROLS, PAIRED_WITH
from alpha_gym.evaluation.kept import read_object, read_rows
from alpha_gym.evaluation.report_overfitting import markdown_lines, read_overfitting
from trainers.compare.runner import CompareError


def rescore(rows, train, holdout, valid=None):
    """Per-brief pseudo-holdout scores (NaN: invalid), the valid answers' daily net P&L, the book, and the
    share of valid answers passing each industry test that ran (docs/alpha_tests.md) and all of them.
    One validity on both windows: an answer invalid on the training window (`valid`, one verdict a row, what
    the table's valid column counts; None: each row's kept `train_valid`) is invalid on the pseudo-holdout too."""
    import numpy as np
    from alpha_gym.evaluation.holdout import evaluate_holdout
    valid = [bool(r.get("train_valid")) for r in rows] if valid is None else list(valid)
    report = evaluate_holdout([r["formula"] for r in rows], train, holdout, train_valid=valid)
    scores = np.array([a.score if a.valid and a.score is not None else np.nan for a in report.answers])
    nets = [a.net for a in report.answers if a.valid and a.net is not None]
    families = len({a.form for a in report.answers if a.valid})
    from alpha_gym.evaluation.alpha_tests import TESTS
    tests = [a.alpha_tests for a in report.answers if a.valid and a.alpha_tests]
    shares = {t: float(np.mean([x[t]["pass"] for x in tests])) if tests and all(x[t]["pass"] is not None
                                                                            for x in tests) else None
              for t in TESTS}
    shares["all"] = float(np.mean([x["passed"] for x in tests])) if tests else None
    return scores, nets, families, report.book, shares


def train_validity(rows, verifier, cache: dict | None = None) -> list[bool]:
    """Whether the train verifier finds each kept row's formula valid, scored again: the row's own
    `train_valid` is never read, so a row edited by hand and resealed counts for what its formula is.
    `cache`: formula -> verdict, shared across calls (step 0's rows are read once per seed)."""
    cache = {} if cache is None else cache
    out = []
    for r in rows:
        formula = r.get("formula") if isinstance(r.get("formula"), str) else None
        if formula not in cache:
            cache[formula] = formula is not None and verifier.valid_book(formula) is not None
        out.append(cache[formula])
    return out


def brief_compliance_of(rows, valid) -> dict | None:
    """The answers' compliance with their briefs (`compliance_summary`: mean share of the extended checks met,
    how many met every check); `valid`: the train verifier's verdict on each row (`train_validity`), an
    answer it refused meeting none, as R13 pays it."""
    from alpha_gym.tasks.compliance import compliance_record, compliance_summary
    from alpha_gym.tasks.sets import brief_by_id
    return compliance_summary(compliance_record(brief_by_id(r.get("brief_id")), r.get("formula"), ok)
                              for r, ok in zip(rows, valid))


def run_book_summary(results: Path, name: str, seeds, train, holdout) -> dict | None:
    """Each seed's own book (results/seed-S/NAME.book.json, `arms.kept.keep_run_book`) re-scored on the
    pseudo-holdout: members, effective bets (train window) and the members' mean pseudo-holdout score,
    averaged over the seeds that kept one (None when none did)."""
    import numpy as np
    from alpha_gym.evaluation.holdout import evaluate_holdout
    books = [read_object(p) for s in seeds if (p := results / f"seed-{s}" / f"{name}.book.json").exists()]
    if not books:
        return None
    scores = []
    for b in books:
        rep = evaluate_holdout(b["members"], train, holdout) if b["members"] else None
        vals = [a.score for a in rep.answers if a.valid and a.score is not None] if rep is not None else []
        scores.append(float(np.mean(vals)) if vals else float("nan"))
    finite = [x for x in scores if np.isfinite(x)]
    bets = [b["effective_bets"] for b in books if b["effective_bets"] is not None]
    return {"seeds": len(books), "admitted": float(np.mean([b["n_admitted"] for b in books])),
            "members": float(np.mean([b["n_members"] for b in books])),
            "effective_bets": float(np.mean(bets)) if bets else None,
            "score": float(np.mean(finite)) if finite else None, "per_seed_score": scores}


def training_signal(sums) -> dict:
    """Mean over a rung's seeds (kept NAME.json) of the steps trained, the verifier calls spent (refills
    included; a run kept before the count was, with no refill, spent steps x prompts x answers), the distinct
    canonical forms per group and the share of answers with a non-zero advantage (None where not kept)."""
    def calls(x):
        if x.get("verifier_calls") is not None:
            return x["verifier_calls"]
        c = x.get("config") or {}
        if c.get("refill_rounds") or x.get("steps") is None or "prompts_per_step" not in c:
            return None
        return x["steps"] * c["prompts_per_step"] * c["num_generations"]

    def avg(xs):
        xs = [x for x in xs if x is not None]
        return sum(xs) / len(xs) if xs else None
    return {"steps": avg([x.get("steps") for x in sums]), "verifier_calls": avg([calls(x) for x in sums]),
            "distinct_forms": avg([x.get("distinct_forms_mean") for x in sums]),
            "nonzero_adv_share": avg([x.get("nonzero_adv_share") for x in sums])}


def build_report(results: Path, ladder, train, holdout, n_boot: int = 2000, evals=(), brief_ids=(),
                 controls=(), verifier=None) -> dict:
    """Every rung over every seed found under `results` (seeds may come from several sessions), then the
    `controls` (no training, the same verifier calls: each rung is paired against each of them), then one row
    per `evaluated.read_eval` result in `evals`, its samples in place of seeds.

    The probe briefs are those of results/step-0.jsonl, or `brief_ids` when there is none (a table of
    eval folders alone). `verifier`: the comparison's train verifier, which the valid column and the brief
    compliance score every kept formula with again (None: one on `train` with the default settings).
    """
    import numpy as np
    from alpha_gym.evaluation.baselines import beats, score_baselines
    from alpha_gym.evaluation.holdout import HoldoutEvaluator
    from alpha_gym.evaluation.selection import effective_bets
    from trainers.compare.stats import mean_pairwise_corr, paired_difference, table_interval, valid_mean
    if verifier is None:
        from alpha_gym.scoring.config import VerifierConfig
        from alpha_gym.scoring.verifier import Verifier
        verifier = Verifier(train, VerifierConfig())
    verdicts: dict = {}  # formula -> valid on the train window, across every row and seed
    # what `alpha-gym overfitting` kept of the runs' archives (PBO, deflated Sharpe), where it was run: read first,
    # so a damaged file is refused before minutes of re-scoring
    overfitting = read_overfitting(results)
    step0 = read_rows(results / "step-0.jsonl") if (results / "step-0.jsonl").exists() else None
    briefs = [r["brief_id"] for r in step0] if step0 is not None else list(brief_ids)
    seeds = sorted(int(p.name.split("-")[1]) for p in results.glob("seed-*") if p.is_dir())
    rows = {}

    def summarise(label, per_seed):
        """per_seed: {seed: answer rows in brief order}."""
        tables, valid, families, corrs, bets, books, tests, extra = [], [], [], [], [], [], [], {}
        complies = []
        for seed, rs in per_seed.items():
            if [r["brief_id"] for r in rs] != briefs:
                raise CompareError(f"{label} seed {seed}: the answers are not for the same probe briefs as step 0")
            ok = train_validity(rs, verifier, verdicts)
            complies.append(brief_compliance_of(rs, ok))
            scores, nets, fams, book, shares = rescore(rs, train, holdout, ok)
            tests.append(shares)
            tables.append(scores)
            valid.append(sum(ok))
            families.append(fams)
            if len(nets) >= 2:
                corrs.append(mean_pairwise_corr(np.array(nets)))
            bets.append(effective_bets(np.array(nets)) if nets else 0.0)
            books.append(book)
        table = np.array(tables)
        lo, hi = table_interval(table, n_boot)

        def avg(xs):
            xs = [x for x in xs if x is not None and np.isfinite(x)]
            return float(np.mean(xs)) if xs else None
        return {"label": label, "seeds": list(per_seed), "table": table, "score": valid_mean(table), "lo": lo,
                "hi": hi, "valid": avg(valid), "families": avg(families), "mean_abs_corr": avg(corrs),
                "effective_bets": avg(bets), "book_beta": avg([b.beta for b in books]),
                "book_market_corr": avg([b.market_correlation for b in books]),
                "book_max_drawdown": avg([b.max_drawdown for b in books]),
                "book_down_day": avg([b.down_day_return for b in books]),
                "book_sharpe": avg([b.sharpe for b in books]),
                "alpha_tests_pass": {k: avg([s[k] for s in tests]) for k in tests[0]} if tests else {},
                "brief_share": avg([c["brief_share"] for c in complies if c]),
                "brief_met_all": avg([c["brief_met_all"] for c in complies if c]), **extra}

    if step0 is not None:
        rows["step-0"] = summarise("step 0", {s: step0 for s in (seeds or [0])})
    def paired(r, other):
        """The paired difference of row r over row `other` on their common seeds (None without any)."""
        o = rows.get(other, {"seeds": []})
        common = [i for i, s in enumerate(r["seeds"]) if s in o["seeds"]]
        if not common:
            return None
        idx = [o["seeds"].index(r["seeds"][i]) for i in common]
        return {"rung": other, "seeds": len(common), **paired_difference(r["table"][common], o["table"][idx],
                                                                           n_boot)}

    previous, deferred = "step-0", []
    rungs = [(name, "rung") for name, _recipe, _prompts in ladder] + [(name, "control") for name in controls]
    for name, kind in rungs:
        have = [s for s in seeds if (results / f"seed-{s}" / f"{name}.jsonl").exists()]
        if not have:
            continue
        r = summarise(name, {s: read_rows(results / f"seed-{s}" / f"{name}.jsonl") for s in have})
        sums = [read_object(results / f"seed-{s}" / f"{name}.json") for s in have]
        r["clipped_share"] = float(np.mean([x["clipped_share"] for x in sums if x["clipped_share"] is not None]
                                           or [np.nan]))
        r["selected_steps"] = [x["selected_step"] for x in sums]
        if kind == "rung":
            r["training"] = training_signal(sums)
        if kind == "control":
            r["kind"] = "control"
        else:
            # a rung that changes one thing pairs with the rung it changes; where that rung was not run in
            # this comparison (the long runs keep cispo, not cispo_repo_r), with the row before, and says so
            partner = PAIRED_WITH.get(name)
            if partner in controls:  # a control's row is read after the rungs': paired once it is
                deferred.append((name, previous))
            else:
                vs = paired(r, partner if partner in rows else previous)
                if vs is not None:
                    r["vs_previous"] = vs
            previous = name
        book = run_book_summary(results, name, have, train, holdout)
        if book is not None:
            r["run_book"] = book
        rows[name] = r
    for name, before in deferred:  # rungs paired with a control (evolve_rl with evolve_model)
        vs = paired(rows[name], PAIRED_WITH[name] if PAIRED_WITH[name] in rows else before)
        if vs is not None:
            rows[name]["vs_previous"] = vs
    for name, kind in rungs:  # every rung against every control, on their common seeds
        if kind == "rung" and name in rows:
            vs = {c: paired(rows[name], c) for c in controls if c in rows}
            if any(v is not None for v in vs.values()):
                rows[name]["vs_controls"] = {c: v for c, v in vs.items() if v is not None}
    for e in evals:  # a model behind an endpoint: no rung before it to pair with
        if e["key"] in rows:
            raise CompareError(f"two rows named {e['key']!r}: give eval folders of different names")
        rows[e["key"]] = {**summarise(e["label"], e["per_sample"]), "kind": "eval", "model": e["model"],
                          "samples": len(e["per_sample"]), "folder": e["folder"]}
    # a rung counts as learning only where its interval lies above every model-free baseline
    baselines = score_baselines(HoldoutEvaluator(train, holdout), n_boot=n_boot)
    motifs = [b for b in baselines if b["kind"] == "motif"]
    for r in rows.values():
        r["above_baselines"] = beats(r["lo"], baselines)
        r["above_motifs"] = beats(r["lo"], motifs)
    return {"seeds": seeds, "briefs": len(briefs), "rows": rows, "baselines": baselines,
            **({"overfitting": overfitting} if overfitting is not None else {})}


def report_json(report) -> dict:
    """The report without its score tables, JSON-safe (NaN as null)."""
    from alpha_gym.jsonable import jsonable
    return jsonable({"seeds": report["seeds"], "briefs": report["briefs"],
                     "rows": {k: {kk: vv for kk, vv in v.items() if kk != "table"}
                              for k, v in report["rows"].items()},
                     "baselines": report.get("baselines", []),
                     **({"overfitting": report["overfitting"]} if report.get("overfitting") is not None else {})})


def _fmt(x, spec):
    return "n/a" if x is None or x != x else format(x, spec)


def write_table(report, scale_name, out: Path) -> str:
    """comparison.md: each rung's shipped answers over all seeds, against step 0 and the rung before.

    valid = answers the train verifier accepts (parse, evaluate, turnover >= 2%), mean over seeds;
    pseudo-holdout = mean score of the valid answers on the held-out last year of the train window,
    with a 95% bootstrap interval resampling briefs and seeds; vs previous = the paired difference;
    above all baselines / motifs = the interval's lower end lies above the best model-free baseline's
    score (all of `alpha_gym.evaluation.baselines`, or its one-motif formulas only). Last, where the results
    keep an overfitting.json, its Overfitting section (`report_overfitting.markdown_lines`).
    """
    from alpha_gym.evaluation.baselines import best_baseline
    seeds = report["seeds"]
    baselines = report.get("baselines", [])
    best = best_baseline(baselines)
    lines = [f"Trainer comparison, scale `{scale_name}`, seeds {', '.join(map(str, seeds)) or 'none'}, "
             f"{report['briefs']} probe briefs (pseudo-holdout: the last year of the train window).", "",
             "| rung | seeds | valid | pseudo-holdout [95% CI] | vs previous rung [95% CI] | above all baselines | "
             "above motifs | "
             "families | eff. bets | mean abs corr | clipped/capped | book Sharpe | beta | mkt corr | max DD | "
             "down days |",
             "|---|---:|---:|---|---|:-:|:-:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    verdict = {True: "yes", False: "no", None: "n/a"}
    for name, r in report["rows"].items():
        vs = r.get("vs_previous")
        vs_text = "" if not vs else (f"{vs['diff']:+.2f} [{vs['lo']:+.2f}, {vs['hi']:+.2f}]"
                                     + (" *" if vs["outside_noise"] else ""))
        lines.append(f"| {r['label']} | {len(r['seeds']) if name != 'step-0' else '-'} | {_fmt(r['valid'], '.1f')} | "
                     f"{_fmt(r['score'], '+.2f')} [{_fmt(r['lo'], '+.2f')}, {_fmt(r['hi'], '+.2f')}] | {vs_text} | "
                     f"{verdict[r.get('above_baselines')]} | {verdict[r.get('above_motifs')]} | "
                     f"{_fmt(r['families'], '.1f')} | {_fmt(r['effective_bets'], '.1f')} | "
                     f"{_fmt(r['mean_abs_corr'], '.2f')} | {_fmt(r.get('clipped_share'), '.3f')} | "
                     f"{_fmt(r['book_sharpe'], '+.2f')} | {_fmt(r['book_beta'], '+.2f')} | "
                     f"{_fmt(r['book_market_corr'], '+.2f')} | {_fmt(r['book_max_drawdown'], '.1%')} | "
                     f"{_fmt(r['book_down_day'], '+.2%')} |")
    lines += ["", "`*`: the paired interval excludes 0 (outside the noise of briefs and seeds)."]
    if any(r.get("brief_share") is not None for r in report["rows"].values()):
        lines += ["", "Brief compliance: each answer against its probe brief's checks (`alpha_gym/tasks/compliance.py`, "
                      "extended: what R13 `brief` pays), an answer the train verifier refused meeting none; mean "
                      f"over seeds of the share of checks met and of the answers meeting every check (of "
                      f"{report['briefs']}).", "", "| rung | brief share | every check met |", "|---|---:|---:|"]
        lines += [f"| {r['label']} | {_fmt(r.get('brief_share'), '.2f')} | {_fmt(r.get('brief_met_all'), '.1f')} |"
                  for r in report["rows"].values() if r.get("brief_share") is not None]
    trained = [r for r in report["rows"].values() if r.get("training")]
    if trained:
        lines += ["", "Training signal: steps trained, verifier calls spent (refills included: a rung that refills "
                      "pays for them with steps, `max_verifier_calls`), distinct canonical forms per group and the "
                      "share of answers with a non-zero advantage (means over steps and seeds).", "",
                  "| rung | steps | verifier calls | forms a group | non-zero advantage |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {r['label']} | {_fmt(t['steps'], '.0f')} | {_fmt(t['verifier_calls'], ',.0f')} | "
                  f"{_fmt(t['distinct_forms'], '.1f')} | {_fmt(t['nonzero_adv_share'], '.1%')} |"
                  for r in trained for t in [r["training"]]]
    changed = [(n, r["vs_previous"]["rung"]) for n, r in report["rows"].items() if n in PAIRED_WITH and
               r.get("vs_previous")]
    if changed:
        lines += ["", "Paired with the rung it changes rather than the row before: "
                  + ", ".join(f"{n} with {p}" if p == PAIRED_WITH[n] else
                              f"{n} with {p} ({PAIRED_WITH[n]}, the rung it changes, is not in this comparison: "
                              f"the difference is the change and {PAIRED_WITH[n]}'s own against {p} together)"
                              for n, p in changed) + "."]
    controls = [n for n, r in report["rows"].items() if r.get("kind") == "control"]
    if controls and any(r.get("vs_controls") for r in report["rows"].values()):
        about = dict(CONTROLS)  # each control the table shows, in the words of its row in the controls table
        named = "; ".join(f"`{c}`: {about[c]}" if c in about else f"`{c}`" for c in controls)
        lines += ["", f"Controls: no weight updated, the same verifier calls as a rung's training ({named}). "
                      "Each rung minus each control, paired over briefs and seeds [95% CI]; `*`: the interval "
                      "excludes 0.", "",
                  "| rung | " + " | ".join(f"minus {c}" for c in controls) + " |",
                  "|---|" + "---|" * len(controls)]
        for name, r in report["rows"].items():
            vs = r.get("vs_controls")
            if not vs:
                continue
            cells = []
            for c in controls:
                v = vs.get(c)
                cells.append("" if v is None else f"{v['diff']:+.2f} [{v['lo']:+.2f}, {v['hi']:+.2f}]"
                             + (" *" if v["outside_noise"] else ""))
            lines.append(f"| {r['label']} | " + " | ".join(cells) + " |")
    booked = [(n, r) for n, r in report["rows"].items() if r.get("run_book")]
    if booked:
        lines += ["", "Each run's own book: the formulas its archive admitted during the run, and the "
                      "correlation-capped book chosen from them on the train window (|corr| < 0.5, turnover >= 2%, "
                      "best train CPCV first), its members scored on the pseudo-holdout; beside the probe answers' "
                      "effective bets. Means over the seeds that kept one.", "",
                  "| rung | seeds | admitted | book members | book eff. bets | book pseudo-holdout | "
                  "probe answers' eff. bets | probe pseudo-holdout |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for name, r in booked:
            b = r["run_book"]
            lines.append(f"| {r['label']} | {b['seeds']} | {_fmt(b['admitted'], '.1f')} | {_fmt(b['members'], '.1f')} | "
                         f"{_fmt(b['effective_bets'], '.1f')} | {_fmt(b['score'], '+.2f')} | "
                         f"{_fmt(r['effective_bets'], '.1f')} | {_fmt(r['score'], '+.2f')} |")
    if any(r.get("kind") == "eval" for r in report["rows"].values()):
        lines += ["", "`eval` rows: a model behind an endpoint (an `alpha-gym eval` folder), its samples in place of "
                      "seeds, its answers' validity re-scored on this train window; no rung before it to pair with."]
    if best is not None:
        lines += ["", f"Baselines on the same pseudo-holdout and costs (no model). Best: {best['name']} "
                      f"({best['score']:+.2f}); a rung is above them when its interval's lower end is higher. The reference's "
                      "formulas were chosen on data through 2025-08, which may include this window: a high bar, "
                      "not an ex-ante one; the motifs are ex-ante.",
                  "", "| baseline | formulas (valid) | score [95% CI] | families | turnover/day (median) | book Sharpe | beta | "
                  "max DD |", "|---|---|---|---:|---:|---:|---:|---:|"]
        for b in baselines:
            what = f"`{b['formulas'][0]}`" if b["n"] == 1 else f"{b['n_valid']} of {b['n']}"
            ci = f" [{_fmt(b['lo'], '+.2f')}, {_fmt(b['hi'], '+.2f')}]" if b["lo"] is not None else ""
            bk = b["book"]
            lines.append(f"| {b['name']} | {what} | {_fmt(b['score'], '+.2f')}{ci} | {b['n_families']} | "
                         f"{_fmt(b.get('median_turnover'), '.0%')} | "
                         f"{_fmt(bk['sharpe'], '+.2f')} | {_fmt(bk['beta'], '+.2f')} | {_fmt(bk['max_drawdown'], '.1%')} |")
    lines += markdown_lines(report.get("overfitting") or [])
    text = "\n".join(lines) + "\n"
    (out / "comparison.md").write_text(text)
    return text


