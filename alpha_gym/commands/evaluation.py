"""Command-line pieces for holdout scoring of formula files, and reports (the `briefs` commands: commands/briefs.py).

`register(subparsers)` adds, to an `argparse` sub-parser collection:

    holdout-formulas --data PATH [--universe U] --holdout-start DATE [--holdout-end DATE]
                     --formulas FILE [--train-start DATE] [--context 252] [--out RUN_DIR] [--json]
    report RUN_DIR [--out DIR]

and `register_eval(subparsers)` adds `eval`:

    alpha-gym eval --base-url http://127.0.0.1:8000/v1 --model NAME --out runs/eval-NAME \
        [--api-key-env OPENAI_API_KEY] [--briefs FILE] [--limit N] [--samples K] [--temperature T] \
        [--max-tokens N] [--concurrency C] [--timeout S] [--retries R] [--backoff S] [--seed S] \
        [--data PATH --universe U --start D] [--holdout-start D [--holdout-end D] [--no-baselines]] \
        [--report-only] [--no-progress] [--no-model-check]

Writes into --out:
    endpoint.jsonl   every raw completion or error, one line per (brief, sample) (`endpoint.read_raw`);
                     a rerun asks only for the items it does not hold answered, so a killed run resumes
                     and a finished one re-scores without calling the endpoint (also: --report-only)
    answers.jsonl    the answered items in the comparison's kept format (brief_id, step, answer, formula,
                     train_cpcv, train_valid; plus sample, reward, reason, and brief: the answer's compliance with
                     its brief, each check met or not): `holdout-formulas --formulas` reads it
    holdout.json     with --holdout-start: the holdout evaluator's report beside the no-model baselines
                     (`alpha-gym report OUT` makes the page)
    eval.json        the run: endpoint, model, sampling, items answered/failed, every error counted by kind,
                     the train-window and holdout summaries
    eval-settings.json  the folder's stamp (`alpha_gym.evaluation.eval_folder`): endpoint (redacted), model, temperature, max
                     tokens, seed, extra body, data file, universe, train and holdout windows with their panels'
                     fingerprints, each brief's prompt hash. Once the folder holds an answer a rerun with
                     any of them changed is refused rather than mixed (`claim_eval_dir`; the endpoint
                     only when there is something to ask it)
    report.html      not written here: `alpha-gym report OUT` makes the page (`report_eval`)

Exit status 0 when every item is answered, 3 when some ended in an endpoint error (they are counted in
eval.json, never scored, and asked again by the next run) or the endpoint cannot answer at all (nothing
listening, 401/403/404, a redirect: one line, the run stops; `endpoint` module docstring), 2 for bad
input (flags out of range, a key that cannot be sent, a --model the endpoint does not list, a folder
made with other settings), 130 after Ctrl-C (the answers finished so far are kept).

Each sub-command sets `func(args) -> int` (exit status), like the main CLI's.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

from alpha_gym.commands.flags import (add_data_args, add_settings_args, add_task_arg, iso_date, settings_from_args,
                                      task_overrides, task_prompts_of, universe_arg)
from alpha_gym.errors import InputError
from alpha_gym.evaluation.answers_file import (answers_universe, read_briefs, read_formulas, universe_record,
                                               universe_warning)
from alpha_gym.evaluation.eval_folder import (answered_briefs, claim_eval_dir, error_counts, eval_stamp, mean,
                                             score_rows)
from alpha_gym.tasks.compliance import compliance_summary
from alpha_gym.jsonable import json_dumps


def _day_before(date: str) -> str:
    import numpy as np
    return str(np.datetime64(date, "D") - np.timedelta64(1, "D"))


def split_at_holdout(full, holdout_start: str, holdout_end: str | None = None):
    """(training panel, holdout panel) cut from one panel: training ends the day before `holdout_start`.
    A start that leaves either side without a session is an InputError naming the data's span and a start
    that works there (its last 252 sessions), not the panel's bare "no sessions" error."""
    import numpy as np
    first, last = str(full.dates[0]), str(full.dates[-1])
    last_year = str(full.dates[-min(252, full.n_days - 1)]) if full.n_days > 1 else last
    hint = f"pass a date inside the data (its last 252 sessions start on {last_year})"
    if np.datetime64(holdout_start, "D") > full.dates[-1]:
        raise InputError(f"--holdout-start {holdout_start}: the data end on {last}, so the holdout would hold no "
                         f"session; {hint}, or a file that also holds the later sessions")
    if np.datetime64(holdout_start, "D") <= full.dates[0]:
        raise InputError(f"--holdout-start {holdout_start}: the data begin on {first}, so training would hold no "
                         f"session; {hint}")
    return full.window(end=_day_before(holdout_start)), full.window(start=holdout_start, end=holdout_end)


def _holdout_settings(args):
    """The settings with --context applied to holdout.context (and --task to train.task, where the command has it)."""
    context = {"holdout": {"context": args.context}} if args.context is not None else {}
    return settings_from_args(args, {**context, **task_overrides(args)} or None)


def cmd_holdout_formulas(args) -> int:
    from alpha_gym.evaluation.holdout import evaluate_holdout
    from alpha_gym.market import load_panel
    settings = _holdout_settings(args)
    universe = universe_arg(args.universe)
    # One read of the file, cut in two: the training panel holds copies of the sessions before the
    # holdout only, so nothing in it reaches the holdout window.
    full = load_panel(args.data, universe=universe, start=args.train_start, end=args.holdout_end)
    train, holdout = split_at_holdout(full, args.holdout_start, args.holdout_end)
    del full
    formulas = read_formulas(args.formulas)
    briefs = read_briefs(args.formulas)
    verifier = None
    if not args.no_train:
        from alpha_gym.scoring.verifier import Verifier
        verifier = Verifier(train, settings.verifier)
    named = universe_record(universe, holdout, args.data)
    warning = universe_warning(named, universe, args.formulas)
    if warning:
        print(f"alpha-gym holdout-formulas: {warning}", file=sys.stderr)
        named["answers_trained_on"] = answers_universe(args.formulas)[1] or "all tickers"
    report = evaluate_holdout(formulas, train, holdout, costs=settings.holdout.costs, config=settings.holdout.rules,
                              train_verifier=verifier, label=args.label or Path(args.formulas).stem,
                              baselines=not args.no_baselines, briefs=briefs)
    report = replace(report, universe=named)
    if args.out:
        path = report.save(args.out)
        print(f"wrote {path}", file=sys.stderr)
    if args.json:
        print(json_dumps(report.to_dict()))
        return 0
    _print_report(report)
    return 0


def validity_line(summary: dict) -> str:
    """Whose verdict made the holdout's answers valid, in words (a holdout summary's `validity`)."""
    from alpha_gym.evaluation.holdout import VALIDITY_BOTH
    if summary.get("validity") == VALIDITY_BOTH:
        return (f"valid on the training window under its rules, then a book that trades on the holdout "
                f"(refused on the training window though trading here, so not scored: "
                f"{summary.get('n_refused_on_train', 0)})")
    return "the holdout's book alone (no training verdict: the training rules, e.g. the 2% turnover floor, not applied)"


def _print_report(report) -> None:
    s, b = report.summary(), report.book
    print(f"holdout {report.holdout_start}..{report.holdout_end} ({len(report.dates)} decision days), "
          f"training ends {report.train_end}")
    if report.universe is not None:
        u = report.universe
        print(f"universe {u['name']}: {u['size']} tickers (sha256 {u['tickers_sha256']})"
              + (f"; the answers' run used {u['answers_trained_on']}" if "answers_trained_on" in u else ""))
    if report.answers:  # holdout score, the train window's CPCV, the holdout book's turnover and Sharpe
        print(f"  {'holdout':>8}  {'train CPCV':>10}  {'turnover':>8}  {'Sharpe':>6}  formula (or why invalid)")
    for a in report.answers:
        score = f"{a.score:+.3f}" if a.valid else "invalid"
        train = f"{a.train_cpcv:+.2f}" if a.train_cpcv is not None else "n/a"
        if a.valid:
            print(f"  {score:>8}  {train:>10}  {a.turnover:8.1%}  {a.sharpe:+6.2f}  {a.formula}")
        else:
            print(f"  {score:>8}  {train:>10}  {'':>8}  {'':>6}  {a.formula}  ({a.reason})")
    mean = f"{s['mean_score']:+.3f}" if s["mean_score"] is not None else "n/a"
    interval = f" [{s['mean_score_lo']:+.3f}, {s['mean_score_hi']:+.3f}]" if s["mean_score_lo"] is not None else ""
    print(f"mean score {mean}{interval}  valid {s['n_valid']}/{s['n_answers']}  above 0: {s['n_positive']}  "
          f"families {s['n_families']}")
    print(f"validity: {validity_line(s)}")
    if "brief_share" in s:  # the answers' briefs (extended checks, what R13 pays; an invalid answer meets none)
        print(f"brief compliance: mean share {s['brief_share']:.2f}  every check met {s['brief_met_all']}/"
              f"{s['n_briefs']}")
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
    train, holdout = split_at_holdout(full, args.holdout_start, args.holdout_end)
    del full
    briefs = list(brief_set("probe"))[: args.probe]
    verifier = Verifier(train, settings.verifier)
    prompts = task_prompts_of(settings, verifier, briefs)
    model, tokenizer = load_for_inference(args.checkpoint)
    answers = [a[0] for a in generate_answers(model, tokenizer, prompts, max_new_tokens=args.max_new_tokens)]
    formulas = [formula_or_none(a) for a in answers]
    label = args.label or (Path(args.checkpoint).name if args.checkpoint else "base")
    report = evaluate_holdout(formulas, train, holdout, costs=settings.holdout.costs, config=settings.holdout.rules,
                              train_verifier=verifier, label=label,
                              baselines=not args.no_baselines, briefs=briefs)
    report = replace(report, universe=universe_record(universe, holdout, args.data))
    if args.out:
        print(f"wrote {report.save(args.out, name=f'holdout-{label}.json' if args.name_by_label else 'holdout.json')}",
              file=sys.stderr)
    _print_report(report)
    return 0


def cmd_report(args) -> int:
    from alpha_gym.evaluation.report import page_folder, write_report
    out, why = page_folder(args.run_dir, args.out)
    if why:
        print(f"alpha-gym report: {why}", file=sys.stderr)
    print(write_report(args.run_dir, out_dir=out))
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
    h.add_argument("--no-train", action="store_true", help="skip the training window: each formula's CPCV there and "
                   "its verdict (then the holdout judges validity alone, without the training rules such as the 2%% "
                   "turnover floor)")
    h.add_argument("--no-baselines", action="store_true", help="skip the model-free baselines (rank(volume), "
                   "momentum, the reference's answers, the Alpha101 book) scored beside the answers")
    h.add_argument("--label", help="a label stored in holdout.json")
    h.add_argument("--out", help="run directory to write holdout.json into")
    h.add_argument("--json", action="store_true", help="print the holdout.json object")
    add_settings_args(h)
    h.set_defaults(func=cmd_holdout_formulas)

    c = subparsers.add_parser("holdout", help="greedy answers of a checkpoint to the probe briefs, scored on the "
                                                "holdout window with realistic costs (needs the train extra)")
    c.add_argument("--checkpoint", help="a training checkpoint (adapters), a model folder or a packaged model "
                                        "(smollm2-135m-instruct, gemma3-270m) (default: the base model)")
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
    add_task_arg(c)
    add_settings_args(c)
    c.set_defaults(func=cmd_holdout)

    r = subparsers.add_parser("report", help="write the page of a run (report.html) from holdout.json, log.jsonl, ...")
    r.add_argument("run_dir")
    r.add_argument("--out", help="folder for report.html (default: RUN_DIR, unless RUN_DIR lies in a git work tree "
                                 "and git does not ignore it: then a folder under the user cache, printed)")
    r.set_defaults(func=cmd_report)


# ------------------------------------------------------------------------------ eval: a model behind an endpoint


def _api_key(name: str | None) -> str | None:
    """The key from the environment variable `name`; never taken from a flag, never printed."""
    from alpha_gym.evaluation.endpoint import key_problem
    if not name:
        return None
    key = os.environ.get(name)
    if not key:
        raise InputError(f"--api-key-env {name}: that environment variable is not set or empty")
    problem = key_problem(key)
    if problem:
        raise InputError(f"--api-key-env {name}: the key in that variable cannot be sent: {problem}")
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


#: The ranges of eval's numeric flags: (flag, attribute, lowest, highest); a float must also be finite.
EVAL_RANGES = (("--samples", "samples", 1, 10_000), ("--concurrency", "concurrency", 1, 256),
               ("--retries", "retries", 0, 20), ("--max-tokens", "max_tokens", 1, 1_000_000),
               ("--limit", "limit", 0, None), ("--timeout", "timeout", 1e-3, 86_400.0),
               ("--backoff", "backoff", 0.0, 3_600.0), ("--temperature", "temperature", 0.0, 100.0))


def _check_eval_numbers(args) -> None:
    """One line for the first flag out of its range (nan, inf, 0 or negative where they make no sense)."""
    import math
    for flag, attr, low, high in EVAL_RANGES:
        value = getattr(args, attr)
        if isinstance(value, float) and not math.isfinite(value) or value < low or (high is not None and value > high):
            span = f"a number >= {low:g}" if high is None else f"a number within [{low:g}, {high:g}]"
            if flag == "--timeout":
                span = f"seconds > 0 and <= {high:g}"
            raise InputError(f"{flag} {value}: expected {span}")


def _eval_panels(args):
    """(train panel, holdout panel or None): with --holdout-start the train window ends the day before it."""
    from alpha_gym.market.resolve import resolve_panel
    universe = universe_arg(args.universe)
    if args.holdout_start is None:
        return resolve_panel(data=args.data, universe=universe, train_start=args.start, train_end=args.end), None
    if args.end is not None:
        raise InputError("give --end or --holdout-start, not both: with --holdout-start training ends the day before")
    full = resolve_panel(data=args.data, universe=universe, train_start=args.start, train_end=args.holdout_end)
    return split_at_holdout(full, args.holdout_start, args.holdout_end)


def _check_model(client, model: str) -> list[str] | None:
    """What `GET /models` lists (None where the server has no list). A list without `model` is refused when
    it holds several models; one model under another name is a warning only: llama.cpp's servers (and
    others serving a single model) answer for it whatever `model` a request names."""
    served = client.served_models()
    if served is None or model in served:
        return served
    where = client.config.url("/models")
    if len(served) > 1:
        names = ", ".join(served[:10]) + (f", ... ({len(served)} in all)" if len(served) > 10 else "")
        raise InputError(f"--model {model}: {where} lists {names}; pass one of them "
                         "(or --no-model-check where the server takes names it does not list)")
    print(f"alpha-gym eval: warning: {where} lists {served[0] if served else 'no model'}, not {model!r}; "
          f"going on, as servers with one model (llama.cpp) answer under any name: the answers are "
          f"{served[0] if served else 'its model'}'s, recorded as {model!r}", file=sys.stderr)
    return served


def cmd_eval(args) -> int:
    out = Path(args.out)
    try:
        return _eval(args, out)
    except KeyboardInterrupt:
        print(f"alpha-gym eval: interrupted; the answers so far are in {out / 'endpoint.jsonl'}: rerun the same "
              "command to go on", file=sys.stderr)
        return 130


def _eval(args, out: Path) -> int:
    from alpha_gym.evaluation.endpoint import (EVAL_FORMAT, EndpointClient, EndpointConfig, EndpointFailure,
                                               Interrupted, extra_body, item_key, model_problem, read_raw,
                                               run_requests)
    from alpha_gym.scoring.verifier import Verifier
    problem = model_problem(args.model)
    if problem:  # before anything is sent, written or printed: the name goes into requests, files and pages
        raise InputError(f"--model {args.model!r}: {problem}; give the name the server lists")
    _check_eval_numbers(args)
    extra = extra_body(args.extra_body)
    briefs = _briefs(args)
    settings = _holdout_settings(args)
    raw_path = out / "endpoint.jsonl"
    if args.report_only and not raw_path.is_file():
        raise InputError(f"--report-only: {raw_path} does not exist (run without --report-only first)")
    if not args.report_only and not args.base_url:
        raise InputError("--base-url is required (or --report-only to re-score the kept answers)")
    if args.report_only:
        args.base_url = None  # nothing is asked: the folder's endpoint stays what it was
    client = None if args.report_only else EndpointClient(EndpointConfig(
        base_url=args.base_url, model=args.model, api_key=_api_key(args.api_key_env), max_tokens=args.max_tokens,
        temperature=args.temperature, timeout_s=args.timeout, retries=args.retries, backoff_s=args.backoff,
        seed=args.seed, extra_body=extra))
    if client is not None and args.samples > 1 and args.temperature == 0:
        print(f"alpha-gym eval: warning: --samples {args.samples} at temperature 0: greedy decoding gives the "
              "same answer to every sample on most servers; pass --temperature 0.7 (or so) for different ones",
              file=sys.stderr)
    keys = [item_key(b.id, s) for b in briefs for s in range(args.samples)]
    have = read_raw(raw_path)
    asking = client is not None and any(not have.get(k, {}).get("ok") for k in keys)
    answered = any(r.get("ok") for r in have.values())
    served = None
    try:
        if asking and not args.no_model_check:  # first: a dead endpoint is reported before the data load
            served = _check_model(client, args.model)
        train, holdout = _eval_panels(args)  # bad data flags fail before any chat request
        verifier = Verifier(train, settings.verifier)
        messages = [[{"role": "user", "content": p}] for p in task_prompts_of(settings, verifier, briefs)]
        stamp = eval_stamp(base_url=args.base_url, model=args.model, temperature=args.temperature,
                           max_tokens=args.max_tokens, seed=args.seed, extra_body=extra, data=args.data,
                           universe=universe_arg(args.universe), briefs=briefs, messages=messages, train=train,
                           holdout=holdout)
        stamp = claim_eval_dir(out, stamp, asking, answered)  # a folder made otherwise is refused
        run = {"asked": 0, "reused": len(keys), "total": len(keys)}
        if asking:
            items = [(b.id, s, m) for b, m in zip(briefs, messages) for s in range(args.samples)]
            run = run_requests(client, items, raw_path, concurrency=args.concurrency, progress=not args.no_progress)
    except EndpointFailure as err:
        print(f"alpha-gym eval: error: {err}", file=sys.stderr)
        return 3
    except Interrupted as stop:
        print(f"alpha-gym eval: interrupted: {stop.kept} of {stop.total} items answered and kept in {raw_path}"
              + (f" ({stop.late} finished after Ctrl-C)" if stop.late else "")
              + f"; rerun the same command to ask for the other {stop.total - stop.kept}", file=sys.stderr)
        return 130
    raw = read_raw(raw_path)
    rows = score_rows(raw, briefs, args.samples, verifier)
    tmp = out / "answers.jsonl.tmp"
    tmp.write_text("".join(json_dumps(r) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(out / "answers.jsonl")
    attempts, failed = error_counts(raw, keys)
    missing = sum(k not in raw for k in keys)
    valid = [r for r in rows if r["train_valid"]]
    row_briefs = answered_briefs(rows, briefs)
    summary = {
        "format": EVAL_FORMAT, "model": args.model, "base_url": stamp.get("endpoint"),
        "api_key_env": args.api_key_env, "served_models": served,
        "briefs": len(briefs), "samples": args.samples, "temperature": args.temperature, "max_tokens": args.max_tokens,
        "seed": args.seed, "extra_body": extra, "items": len(keys), "answered": len(rows),
        "failed": sum(failed.values()), "missing": missing, "asked_this_run": run["asked"], "reused": run["reused"],
        "errors": dict(sorted(attempts.items())), "failed_by_error": dict(sorted(failed.items())),
        "last_error": next((raw[k].get("detail") for k in reversed(keys) if k in raw and not raw[k].get("ok")), None),
        "data": stamp["data"], "universe": stamp["universe"],
        "train": {"start": str(train.dates[0]), "end": str(train.dates[-1]), "n_valid": len(valid),
                  "valid_share": len(valid) / len(rows) if rows else None,
                  "mean_cpcv": mean([r["train_cpcv"] for r in valid]),
                  "mean_reward": mean([r["reward"] for r in rows]),
                  "world_model": verifier.world_model,  # what R3 used: a content hash, or "off"
                  **(compliance_summary(r["brief"] for r in rows) or {})},
    }
    if holdout is not None:
        from alpha_gym.evaluation.holdout import evaluate_holdout
        report = evaluate_holdout([r["formula"] for r in rows], train, holdout, costs=settings.holdout.costs,
                                  config=settings.holdout.rules, train_verifier=verifier, label=args.model,
                                  baselines=not args.no_baselines, briefs=row_briefs)
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
        if s.get("last_error"):
            print(f"the last failed item's error: {s['last_error']}")
    print(f"train window {t['start']}..{t['end']}: valid {t['n_valid']}/{s['answered']}  mean CPCV of valid "
          f"{_eval_fmt(t['mean_cpcv'], '+.3f')}  mean reward {_eval_fmt(t['mean_reward'], '+.3f')}")
    if "brief_share" in t:  # the answers' briefs (the extended checks R13 pays; an invalid answer meets none)
        print(f"brief compliance: mean share {t['brief_share']:.2f}  every check met {t['brief_met_all']}/"
              f"{t['n_briefs']}")
    h = s.get("holdout")
    if h:
        print(f"holdout: mean score {_eval_fmt(h.get('mean_score'), '+.3f')}  valid {h['n_valid']}/{h['n_answers']}  "
              f"families {h['n_families']}  ({out / 'holdout.json'}; page: alpha-gym report {out})")
        print(f"holdout validity: {validity_line(h)}")
    print(f"answers: {out / 'answers.jsonl'}  raw: {out / 'endpoint.jsonl'}  page: alpha-gym report {out}")


def register_eval(subparsers) -> None:
    """Add `eval` (a model behind an OpenAI-compatible endpoint) to an argparse sub-parser collection."""
    p = subparsers.add_parser("eval", help="answer the briefs with a model behind an OpenAI-compatible endpoint "
                                          "and score the answers (train window; holdout with --holdout-start)")
    p.add_argument("--base-url", help="the endpoint's base URL, e.g. http://127.0.0.1:8000/v1 (a user:password@ in "
                   "it is sent as HTTP Basic credentials and written nowhere; redirects are not followed)")
    p.add_argument("--model", required=True, help="the model name the endpoint serves")
    p.add_argument("--api-key-env", metavar="VAR", help="name of the environment variable holding the API key "
                                                       "(sent as a Bearer token; never given on the command line)")
    p.add_argument("--out", required=True, help="output folder (resumable: rerun with the same folder)")
    p.add_argument("--briefs", help="briefs JSONL (default: the probe briefs)")
    p.add_argument("--limit", type=int, default=0, help="only the first N briefs (default: %(default)s, all)")
    p.add_argument("--samples", type=int, default=1, help="answers per brief (default: %(default)s; more than 1 "
                   "needs a temperature above 0 to differ)")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default: %(default)s, "
                   "greedy)")
    p.add_argument("--max-tokens", type=int, default=256, help="longest answer, in tokens (default: %(default)s)")
    p.add_argument("--seed", type=int, help="sent as the request's seed (plus the sample's index; default: none)")
    p.add_argument("--extra-body", metavar="JSON", help="more request fields, a JSON object, e.g. llama.cpp's "
                   "'{\"repeat_penalty\": 1.0}' for greedy answers at temperature 0 (default: none)")
    p.add_argument("--concurrency", type=int, default=4, help="requests in flight at once (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=60.0, help="deadline of one attempt, in seconds, however "
                   "slowly the reply comes (default: %(default)s)")
    p.add_argument("--retries", type=int, default=3, help="attempts after the first, for a time-out, 429 or 5xx "
                   "only; nothing listening, 401/403/404 and redirects stop the run at once (default: %(default)s)")
    p.add_argument("--backoff", type=float, default=1.0, help="first wait before a retry in seconds, doubled each "
                   "time; a server's Retry-After wins, capped at 60 (default: %(default)s)")
    p.add_argument("--no-model-check", action="store_true", help="do not compare --model with the endpoint's "
                   "/models list (for servers that take names they do not list)")
    p.add_argument("--report-only", action="store_true", help="no requests: re-score the answers in OUT")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_data_args(p)
    p.add_argument("--holdout-start", type=iso_date, help="also score on a holdout from this session (the train "
                                                          "window ends the day before)")
    p.add_argument("--holdout-end", type=iso_date, help="last holdout session (default: the data's last)")
    p.add_argument("--context", type=int, help="training sessions used as holdout lookback (default: holdout.context)")
    p.add_argument("--no-baselines", action="store_true", help="skip the model-free baselines beside the holdout")
    add_task_arg(p)
    add_settings_args(p)
    p.set_defaults(func=cmd_eval)
