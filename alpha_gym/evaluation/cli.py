"""Command-line pieces for holdout scoring of formula files, and reports (the `briefs` commands: tasks/cli.py).

`register(subparsers)` adds, to an `argparse` sub-parser collection:

    holdout-formulas --data PATH [--universe U] --holdout-start DATE [--holdout-end DATE]
                     --formulas FILE [--train-start DATE] [--context 252] [--out RUN_DIR] [--json]
    report RUN_DIR

and `register_eval(subparsers)` adds `eval`:

    alpha-gym eval --base-url http://127.0.0.1:8000/v1 --model NAME --out runs/eval-NAME \
        [--api-key-env OPENAI_API_KEY] [--briefs FILE] [--limit N] [--samples K] [--temperature T] \
        [--max-tokens N] [--concurrency C] [--timeout S] [--retries R] [--backoff S] [--seed S] \
        [--data PATH --universe U --start D] [--holdout-start D [--holdout-end D] [--no-baselines]] \
        [--report-only] [--no-progress]

Writes into --out:
    endpoint.jsonl   every raw completion or error, one line per (brief, sample) (`endpoint.read_raw`);
                     a rerun asks only for the items it does not hold answered, so a killed run resumes
                     and a finished one re-scores without calling the endpoint (also: --report-only)
    answers.jsonl    the answered items in the comparison's kept format (brief_id, step, answer, formula,
                     train_cpcv, train_valid; plus sample, reward, reason): `holdout-formulas --formulas` reads it
    holdout.json     with --holdout-start: the holdout evaluator's report beside the no-model baselines
                     (`alpha-gym report OUT` makes the page)
    eval.json        the run: endpoint, model, sampling, items answered/failed, every error counted by kind,
                     the train-window and holdout summaries
    eval-settings.json  what the answers depend on (model, temperature, max tokens, seed): a rerun with
                     other values into the same folder is refused rather than mixed

Exit status 0 when every item is answered, 3 when some ended in an endpoint error (they are counted in
eval.json, never scored, and asked again by the next run), 2 for bad input.

Each sub-command sets `func(args) -> int` (exit status), like the main CLI's.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

from alpha_gym.cli_args import (add_data_args, add_settings_args, iso_date, panel_from_args, settings_from_args,
                                universe_arg)
from alpha_gym.errors import InputError
from alpha_gym.jsonable import json_dumps


def read_formulas(path) -> list[str | None]:
    """Formulas from a file: JSONL objects with a "formula" (or "answer") key, or one formula per line.

    In a text file blank lines and lines starting with '#' are skipped.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    out: list[str | None] = []
    if path.suffix in (".jsonl", ".json"):
        for k, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if isinstance(row, str):
                out.append(row)
            elif isinstance(row, dict) and ("formula" in row or "answer" in row):
                out.append(row.get("formula", row.get("answer")))
            else:
                raise InputError(f"{path}:{k}: expected a string or an object with a 'formula' key")
        return out
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def _day_before(date: str) -> str:
    import numpy as np
    return str(np.datetime64(date, "D") - np.timedelta64(1, "D"))


def _holdout_settings(args):
    """The settings with --context applied to holdout.context."""
    return settings_from_args(args, {"holdout": {"context": args.context}} if args.context is not None else None)


def universe_record(value, panel, data) -> dict:
    """How a report names the universe it scored: where it came from, how many tickers, a hash of them."""
    import hashlib
    if value is None:
        name = f"all tickers of {Path(data).name}"
    elif isinstance(value, list):
        name = ",".join(value[:8]) + (f",... ({len(value)} listed)" if len(value) > 8 else "")
    else:
        name = Path(value).name
    tickers = sorted(panel.tickers)
    return {"name": name, "size": len(tickers),
            "tickers_sha256": hashlib.sha256("\n".join(tickers).encode()).hexdigest()[:16]}


def answers_universe(formulas) -> tuple[Path, str | None] | None:
    """(settings.json, its "universe") of the run that wrote the answers file: beside it or one folder up
    (a comparison's `seed-S/RUNG.jsonl`); None when there is none to read."""
    for folder in (Path(formulas).resolve().parent, Path(formulas).resolve().parent.parent):
        path = folder / "settings.json"
        if not path.is_file():
            continue
        try:
            settings = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, OSError):
            return None
        if isinstance(settings, dict) and "universe" in settings:
            theirs = settings["universe"]
            return path, (str(theirs) if theirs is not None else None)
    return None


def _universe_warning(universe: dict, value, formulas) -> str | None:
    """A warning when the answers' run was trained on another universe than this report scores."""
    found = answers_universe(formulas)
    if found is None:
        return None
    path, theirs = found
    ours = None if value is None else universe["name"]
    if (Path(theirs).name if theirs is not None else None) == ours:
        return None
    return (f"warning: the answers in {formulas} come from a run on universe {theirs or 'all tickers'} ({path}); "
            f"this report scores them on {universe['name']} ({universe['size']} tickers): pass --universe to match")


def cmd_holdout_formulas(args) -> int:
    from alpha_gym.evaluation.holdout import evaluate_holdout
    from alpha_gym.market import load_panel
    settings = _holdout_settings(args)
    universe = universe_arg(args.universe)
    # One read of the file, cut in two: the training panel holds copies of the sessions before the
    # holdout only, so nothing in it reaches the holdout window.
    full = load_panel(args.data, universe=universe, start=args.train_start, end=args.holdout_end)
    train = full.window(end=_day_before(args.holdout_start))
    holdout = full.window(start=args.holdout_start, end=args.holdout_end)
    del full
    formulas = read_formulas(args.formulas)
    verifier = None
    if not args.no_train:
        from alpha_gym.scoring.verifier import Verifier
        verifier = Verifier(train, settings.verifier)
    named = universe_record(universe, holdout, args.data)
    warning = _universe_warning(named, universe, args.formulas)
    if warning:
        print(f"alpha-gym holdout-formulas: {warning}", file=sys.stderr)
        named["answers_trained_on"] = answers_universe(args.formulas)[1] or "all tickers"
    report = evaluate_holdout(formulas, train, holdout, costs=settings.holdout.costs, config=settings.holdout.rules,
                              train_verifier=verifier, label=args.label or Path(args.formulas).stem,
                              baselines=not args.no_baselines)
    report = replace(report, universe=named)
    if args.out:
        path = report.save(args.out)
        print(f"wrote {path}", file=sys.stderr)
    if args.json:
        print(json_dumps(report.to_dict()))
        return 0
    _print_report(report)
    return 0


def _print_report(report) -> None:
    s, b = report.summary(), report.book
    print(f"holdout {report.holdout_start}..{report.holdout_end} ({len(report.dates)} decision days), "
          f"training ends {report.train_end}")
    if report.universe is not None:
        u = report.universe
        print(f"universe {u['name']}: {u['size']} tickers (sha256 {u['tickers_sha256']})"
              + (f"; the answers' run used {u['answers_trained_on']}" if "answers_trained_on" in u else ""))
    for a in report.answers:
        score = f"{a.score:+.3f}" if a.valid else "invalid"
        train = f"{a.train_cpcv:+.2f}" if a.train_cpcv is not None else "  n/a"
        extra = f"turnover {a.turnover:6.1%}  Sharpe {a.sharpe:+.2f}" if a.valid else a.reason
        print(f"  {score:>8}  train {train}  {extra}  {a.formula}")
    mean = f"{s['mean_score']:+.3f}" if s["mean_score"] is not None else "n/a"
    interval = f" [{s['mean_score_lo']:+.3f}, {s['mean_score_hi']:+.3f}]" if s["mean_score_lo"] is not None else ""
    print(f"mean score {mean}{interval}  valid {s['n_valid']}/{s['n_answers']}  above 0: {s['n_positive']}  "
          f"families {s['n_families']}")
    down = f"{b.down_day_return:+.2%}" if b.down_day_return is not None else "n/a"
    print(f"equal-weight book: return {b.total_return:+.1%}  Sharpe {b.sharpe:+.2f}  beta {b.beta:+.2f}  "
          f"corr {b.market_correlation:+.2f}  max DD {b.max_drawdown:.1%}  "
          f"mean on market drops > 1.5% ({b.n_down_days} days) {down}")
    if report.baselines:
        from alpha_gym.evaluation.baselines import beats, best_baseline
        print("baselines (no model; same window and costs):")
        for r in report.baselines:
            score = f"{r['score']:+.3f}" if r["score"] is not None else "invalid"
            print(f"  {score:>8}  book Sharpe {r['book']['sharpe'] or 0:+.2f}  {r['name']}"
                  + (f" ({r['n_valid']}/{r['n']} valid)" if r["n"] > 1 else f": {r['formulas'][0]}"))
        best, verdict = best_baseline(report.baselines), beats(s["mean_score_lo"], report.baselines)
        if best is not None and verdict is not None:
            print(f"the answers' interval lies {'above' if verdict else 'NOT above'} the best baseline "
                  f"({best['name']}, {best['score']:+.3f})")


def cmd_holdout(args) -> int:
    """Greedy answers of a checkpoint to the probe briefs, scored on the holdout window."""
    from alpha_gym.evaluation.holdout import evaluate_holdout
    from alpha_gym.language.answer import formula_or_none
    from alpha_gym.market import load_panel
    from alpha_gym.scoring.verifier import Verifier
    from alpha_gym.tasks.sets import brief_set
    from trainers.answers import load_for_inference
    from trainers.rollout import generate_answers
    settings = _holdout_settings(args)
    universe = universe_arg(args.universe)
    full = load_panel(args.data, universe=universe, end=args.holdout_end)
    train = full.window(end=_day_before(args.holdout_start))
    holdout = full.window(start=args.holdout_start, end=args.holdout_end)
    del full
    briefs = list(brief_set("probe"))[: args.probe]
    model, tokenizer = load_for_inference(args.checkpoint)
    answers = [a[0] for a in generate_answers(model, tokenizer, [b.prompt() for b in briefs],
                                              max_new_tokens=args.max_new_tokens)]
    formulas = [formula_or_none(a) for a in answers]
    label = args.label or (Path(args.checkpoint).name if args.checkpoint else "base")
    report = evaluate_holdout(formulas, train, holdout, costs=settings.holdout.costs, config=settings.holdout.rules,
                              train_verifier=Verifier(train, settings.verifier), label=label,
                              baselines=not args.no_baselines)
    report = replace(report, universe=universe_record(universe, holdout, args.data))
    if args.out:
        print(f"wrote {report.save(args.out, name=f'holdout-{label}.json' if args.name_by_label else 'holdout.json')}",
              file=sys.stderr)
    _print_report(report)
    return 0


def cmd_report(args) -> int:
    from alpha_gym.evaluation.report import write_report
    print(write_report(args.run_dir))
    return 0


def register(subparsers) -> None:
    """Add `holdout-formulas`, `holdout` and `report` to an argparse sub-parser collection."""
    h = subparsers.add_parser("holdout-formulas", help="score a file of formulas on a holdout window "
                                                      "(realistic costs) and build their equal-weight book")
    h.add_argument("--data", required=True, help="long-format CSV/Parquet holding the training and holdout sessions")
    h.add_argument("--universe", help="a ticker file, or tickers separated by commas")
    h.add_argument("--train-start", type=iso_date, help="first training session to read (default: the file's first)")
    h.add_argument("--holdout-start", type=iso_date, required=True, help="first holdout session (YYYY-MM-DD); "
                                                          "training ends the day before")
    h.add_argument("--holdout-end", type=iso_date, help="last holdout session (default: the file's last)")
    h.add_argument("--formulas", required=True, help="one formula per line, or JSONL with a 'formula' key")
    h.add_argument("--context", type=int, help="training sessions used as lookback history (default: holdout.context, "
                                             "252)")
    h.add_argument("--no-train", action="store_true", help="skip the train-window CPCV of each formula")
    h.add_argument("--no-baselines", action="store_true", help="skip the model-free baselines (rank(volume), "
                   "momentum, the reference's answers, the Alpha101 book) scored beside the answers")
    h.add_argument("--label", help="a label stored in holdout.json")
    h.add_argument("--out", help="run directory to write holdout.json into")
    h.add_argument("--json", action="store_true", help="print the holdout.json object")
    add_settings_args(h)
    h.set_defaults(func=cmd_holdout_formulas)

    c = subparsers.add_parser("holdout", help="greedy answers of a checkpoint to the probe briefs, scored on the "
                                                "holdout window with realistic costs (needs the train extra)")
    c.add_argument("--checkpoint", help="a training checkpoint (adapters) or a model folder (default: the base model)")
    c.add_argument("--data", required=True, help="long-format CSV/Parquet holding the training and holdout sessions")
    c.add_argument("--holdout-start", type=iso_date, required=True, help="first holdout session; training ends the day before")
    c.add_argument("--holdout-end", type=iso_date, help="last holdout session (default: the file's last)")
    c.add_argument("--universe", help="a ticker file, or tickers separated by commas")
    c.add_argument("--probe", type=int, default=50, help="how many probe briefs")
    c.add_argument("--max-new-tokens", type=int, default=128)
    c.add_argument("--context", type=int, help="training sessions used as lookback history (default: holdout.context, "
                                             "252)")
    c.add_argument("--label", help="a label stored in the JSON (default: the checkpoint folder's name)")
    c.add_argument("--out", help="run directory to write holdout.json into")
    c.add_argument("--name-by-label", action="store_true", help="write holdout-LABEL.json instead of holdout.json")
    c.add_argument("--no-baselines", action="store_true", help="skip the model-free baselines (rank(volume), "
                   "momentum, the reference's answers, the Alpha101 book) scored beside the answers")
    add_settings_args(c)
    c.set_defaults(func=cmd_holdout)

    r = subparsers.add_parser("report", help="write RUN_DIR/report.html from holdout.json, log.jsonl, ...")
    r.add_argument("run_dir")
    r.set_defaults(func=cmd_report)


# ------------------------------------------------------------------------------ eval: a model behind an endpoint


def _api_key(name: str | None) -> str | None:
    """The key from the environment variable `name`; never taken from a flag, never printed."""
    if not name:
        return None
    key = os.environ.get(name)
    if not key:
        raise InputError(f"--api-key-env {name}: that environment variable is not set or empty")
    return key


def _briefs(args):
    from alpha_gym.tasks.generator import load_briefs
    from alpha_gym.tasks.sets import brief_set
    briefs = list(load_briefs(args.briefs)) if args.briefs else list(brief_set("probe"))
    if args.limit:
        briefs = briefs[: args.limit]
    if not briefs:
        raise InputError("no briefs to answer")
    if len({b.id for b in briefs}) != len(briefs):
        raise InputError("the briefs' ids are not unique: each (brief, sample) needs its own key")
    return briefs


def _claim_eval_dir(out: Path, stamp: dict) -> None:
    path = out / "eval-settings.json"
    if path.is_file():
        before = json.loads(path.read_text(encoding="utf-8"))
        changed = sorted(k for k in stamp if before.get(k) != stamp[k])
        if changed:
            raise InputError(f"{out} holds answers made with other settings ({', '.join(changed)} differ); "
                             "pass another --out or delete the folder")
    else:
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json_dumps(stamp, indent=1), encoding="utf-8")


def _eval_panels(args):
    """(train panel, holdout panel or None): with --holdout-start the train window ends the day before it."""
    from alpha_gym.market.resolve import resolve_panel
    universe = universe_arg(args.universe)
    if args.holdout_start is None:
        return resolve_panel(data=args.data, universe=universe, train_start=args.start, train_end=args.end), None
    if args.end is not None:
        raise InputError("give --end or --holdout-start, not both: with --holdout-start training ends the day before")
    full = resolve_panel(data=args.data, universe=universe, train_start=args.start, train_end=args.holdout_end)
    train = full.window(end=_day_before(args.holdout_start))
    holdout = full.window(start=args.holdout_start, end=args.holdout_end)
    if train.n_days == 0 or holdout.n_days == 0:
        raise InputError(f"--holdout-start {args.holdout_start}: the data hold no sessions on one side of it")
    return train, holdout


def score_rows(raw: dict, briefs, samples: int, verifier) -> list[dict]:
    """The answered items in brief, then sample, order: kept rows scored on the train window."""
    from alpha_gym.language.answer import formula_or_none
    rows = []
    for b in briefs:
        for s in range(samples):
            r = raw.get(f"{b.id}#{s}")
            if r is None or not r.get("ok") or not isinstance(r.get("completion"), str):
                continue  # missing or failed: counted, never scored
            score = verifier.score(r["completion"], brief=b)
            cpcv = score.channels.get("cpcv") if score.valid else None
            rows.append({"brief_id": b.id, "sample": s, "step": None, "answer": r["completion"],
                         "formula": formula_or_none(r["completion"]), "train_cpcv": cpcv,
                         "train_valid": bool(score.valid), "reward": score.reward, "reason": score.reason})
    return rows


def error_counts(raw: dict, keys) -> tuple[Counter, Counter]:
    """(failed attempts by kind over every item, failed items by their last error)."""
    attempts, items = Counter(), Counter()
    for k in keys:
        r = raw.get(k)
        if r is None:
            continue
        attempts.update(r.get("attempt_errors") or [])
        if not r.get("ok"):
            items[r.get("error") or "unknown"] += 1
    return attempts, items


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return float(sum(xs) / len(xs)) if xs else None


def cmd_eval(args) -> int:
    from alpha_gym.evaluation.endpoint import EVAL_FORMAT, EndpointClient, EndpointConfig, read_raw, run_requests
    from alpha_gym.scoring.verifier import Verifier
    if args.samples < 1 or args.concurrency < 1 or args.retries < 0 or args.max_tokens < 1 or args.timeout <= 0:
        raise InputError("--samples, --concurrency and --max-tokens must be >= 1, --retries >= 0, --timeout > 0")
    out = Path(args.out)
    briefs = _briefs(args)
    settings = settings_from_args(args, {"holdout": {"context": args.context}} if args.context is not None else None)
    raw_path = out / "endpoint.jsonl"
    if args.report_only and not raw_path.is_file():
        raise InputError(f"--report-only: {raw_path} does not exist (run without --report-only first)")
    if not args.report_only and not args.base_url:
        raise InputError("--base-url is required (or --report-only to re-score the kept answers)")
    client = None if args.report_only else EndpointClient(EndpointConfig(
        base_url=args.base_url, model=args.model, api_key=_api_key(args.api_key_env), max_tokens=args.max_tokens,
        temperature=args.temperature, timeout_s=args.timeout, retries=args.retries, backoff_s=args.backoff,
        seed=args.seed))
    train, holdout = _eval_panels(args)  # bad data flags fail before any request
    _claim_eval_dir(out, {"model": args.model, "temperature": args.temperature, "max_tokens": args.max_tokens,
                          "seed": args.seed})
    keys = [f"{b.id}#{s}" for b in briefs for s in range(args.samples)]
    run = {"asked": 0, "reused": len(keys), "total": len(keys)}
    if client is not None:
        items = [(b.id, s, [{"role": "user", "content": b.prompt()}]) for b in briefs for s in range(args.samples)]
        try:
            run = run_requests(client, items, raw_path, concurrency=args.concurrency, progress=not args.no_progress)
        except KeyboardInterrupt:
            print(f"alpha-gym eval: interrupted; the answers so far are in {raw_path}: rerun to go on",
                  file=sys.stderr)
            return 130
    raw = read_raw(raw_path)
    verifier = Verifier(train, settings.verifier)
    rows = score_rows(raw, briefs, args.samples, verifier)
    tmp = out / "answers.jsonl.tmp"
    tmp.write_text("".join(json_dumps(r) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(out / "answers.jsonl")
    attempts, failed = error_counts(raw, keys)
    missing = sum(k not in raw for k in keys)
    valid = [r for r in rows if r["train_valid"]]
    summary = {
        "format": EVAL_FORMAT, "model": args.model, "base_url": args.base_url, "api_key_env": args.api_key_env,
        "briefs": len(briefs), "samples": args.samples, "temperature": args.temperature, "max_tokens": args.max_tokens,
        "seed": args.seed, "items": len(keys), "answered": len(rows), "failed": sum(failed.values()),
        "missing": missing, "asked_this_run": run["asked"], "reused": run["reused"],
        "errors": dict(sorted(attempts.items())), "failed_by_error": dict(sorted(failed.items())),
        "train": {"start": str(train.dates[0]), "end": str(train.dates[-1]), "n_valid": len(valid),
                  "valid_share": len(valid) / len(rows) if rows else None,
                  "mean_cpcv": _mean([r["train_cpcv"] for r in valid]),
                  "mean_reward": _mean([r["reward"] for r in rows]),
                  "world_model": verifier.world_model},  # what R3 used: a content hash, or "off"
    }
    if holdout is not None:
        from alpha_gym.evaluation.holdout import evaluate_holdout
        report = evaluate_holdout([r["formula"] for r in rows], train, holdout, costs=settings.holdout.costs,
                                  config=settings.holdout.rules, train_verifier=verifier, label=args.model,
                                  baselines=not args.no_baselines)
        report.save(out)
        summary["holdout"] = report.summary()
    (out / "eval.json").write_text(json_dumps(summary, indent=1, default=str), encoding="utf-8")
    _print_eval(summary, out)
    return 0 if summary["failed"] == 0 and missing == 0 else 3


def _eval_fmt(x, spec):
    return "n/a" if x is None else format(x, spec)


def _print_eval(s: dict, out: Path) -> None:
    t = s["train"]
    print(f"{s['model']}: {s['answered']}/{s['items']} items answered ({s['briefs']} briefs x {s['samples']} "
          f"samples; asked {s['asked_this_run']} this run, {s['reused']} kept from before)")
    if s["failed"] or s["missing"] or s["errors"]:
        errs = ", ".join(f"{k} {v}" for k, v in s["errors"].items()) or "none"
        print(f"endpoint errors (attempts): {errs}; items failed after retries: {s['failed']}"
              + (f", never asked: {s['missing']}" if s["missing"] else ""))
    print(f"train window {t['start']}..{t['end']}: valid {t['n_valid']}/{s['answered']}  mean CPCV of valid "
          f"{_eval_fmt(t['mean_cpcv'], '+.3f')}  mean reward {_eval_fmt(t['mean_reward'], '+.3f')}")
    h = s.get("holdout")
    if h:
        print(f"holdout: mean score {_eval_fmt(h.get('mean_score'), '+.3f')}  valid {h['n_valid']}/{h['n_answers']}  "
              f"families {h['n_families']}  ({out / 'holdout.json'}; page: alpha-gym report {out})")
    print(f"answers: {out / 'answers.jsonl'}  raw: {out / 'endpoint.jsonl'}")


def register_eval(subparsers) -> None:
    """Add `eval` (a model behind an OpenAI-compatible endpoint) to an argparse sub-parser collection."""
    p = subparsers.add_parser("eval", help="answer the briefs with a model behind an OpenAI-compatible endpoint "
                                          "and score the answers (train window; holdout with --holdout-start)")
    p.add_argument("--base-url", help="the endpoint's base URL, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", required=True, help="the model name the endpoint serves")
    p.add_argument("--api-key-env", metavar="VAR", help="name of the environment variable holding the API key "
                                                       "(sent as a Bearer token; never given on the command line)")
    p.add_argument("--out", required=True, help="output folder (resumable: rerun with the same folder)")
    p.add_argument("--briefs", help="briefs JSONL (default: the probe briefs)")
    p.add_argument("--limit", type=int, default=0, help="only the first N briefs")
    p.add_argument("--samples", type=int, default=1, help="answers per brief")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--seed", type=int, help="sent as the request's seed (plus the sample's index)")
    p.add_argument("--concurrency", type=int, default=4, help="requests in flight at once")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for one response")
    p.add_argument("--retries", type=int, default=3, help="retries of a failed request (429, 5xx, time-out, ...)")
    p.add_argument("--backoff", type=float, default=1.0, help="first wait before a retry, doubled each time")
    p.add_argument("--report-only", action="store_true", help="no requests: re-score the answers in OUT")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_data_args(p)
    p.add_argument("--holdout-start", type=iso_date, help="also score on a holdout from this session (the train "
                                                          "window ends the day before)")
    p.add_argument("--holdout-end", type=iso_date, help="last holdout session (default: the data's last)")
    p.add_argument("--context", type=int, help="training sessions used as holdout lookback (default: holdout.context)")
    p.add_argument("--no-baselines", action="store_true", help="skip the model-free baselines beside the holdout")
    add_settings_args(p)
    p.set_defaults(func=cmd_eval)
