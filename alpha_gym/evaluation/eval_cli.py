"""`alpha-gym eval`: a model behind an OpenAI-compatible endpoint answers the briefs; the verifier scores them.

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
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

from alpha_gym.cli_args import add_data_args, add_settings_args, iso_date, settings_from_args, universe_arg
from alpha_gym.errors import InputError

FORMAT = "alpha-gym/eval/v1"


def _api_key(name: str | None) -> str | None:
    """The key from the environment variable `name`; never taken from a flag, never printed."""
    if not name:
        return None
    key = os.environ.get(name)
    if not key:
        raise InputError(f"--api-key-env {name}: that environment variable is not set or empty")
    return key


def _briefs(args):
    from alpha_gym.env import brief_set
    from alpha_gym.tasks.generator import load_briefs
    briefs = list(load_briefs(args.briefs)) if args.briefs else list(brief_set("probe"))
    if args.limit:
        briefs = briefs[: args.limit]
    if not briefs:
        raise InputError("no briefs to answer")
    if len({b.id for b in briefs}) != len(briefs):
        raise InputError("the briefs' ids are not unique: each (brief, sample) needs its own key")
    return briefs


def _claim(out: Path, stamp: dict) -> None:
    path = out / "eval-settings.json"
    if path.is_file():
        before = json.loads(path.read_text(encoding="utf-8"))
        changed = sorted(k for k in stamp if before.get(k) != stamp[k])
        if changed:
            raise InputError(f"{out} holds answers made with other settings ({', '.join(changed)} differ); "
                             "pass another --out or delete the folder")
    else:
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(stamp, indent=1), encoding="utf-8")


def _day_before(date: str) -> str:
    import numpy as np
    return str(np.datetime64(date, "D") - np.timedelta64(1, "D"))


def _panels(args):
    """(train panel, holdout panel or None): with --holdout-start the train window ends the day before it."""
    from alpha_gym.env import resolve_panel
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
    rows = []
    for b in briefs:
        for s in range(samples):
            r = raw.get(f"{b.id}#{s}")
            if r is None or not r.get("ok") or not isinstance(r.get("completion"), str):
                continue  # missing or failed: counted, never scored
            from alpha_gym.language.answer import formula_or_none
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
    from alpha_gym.evaluation.endpoint import EndpointClient, EndpointConfig, read_raw, run_requests
    from alpha_gym.scoring.verifier import Verifier
    if args.samples < 1 or args.concurrency < 1 or args.retries < 0 or args.max_tokens < 1 or args.timeout <= 0:
        raise InputError("--samples, --concurrency and --max-tokens must be >= 1, --retries >= 0, --timeout > 0")
    out = Path(args.out)
    briefs = _briefs(args)
    settings = settings_from_args(args, {"holdout": {"context": args.context}} if args.context is not None else None)
    train, holdout = _panels(args)  # bad data flags fail before any request
    _claim(out, {"model": args.model, "temperature": args.temperature, "max_tokens": args.max_tokens,
                 "seed": args.seed})
    raw_path = out / "endpoint.jsonl"
    keys = [f"{b.id}#{s}" for b in briefs for s in range(args.samples)]
    run = {"asked": 0, "reused": len(keys), "total": len(keys)}
    if not args.report_only:
        if not args.base_url:
            raise InputError("--base-url is required (or --report-only to re-score the kept answers)")
        client = EndpointClient(EndpointConfig(
            base_url=args.base_url, model=args.model, api_key=_api_key(args.api_key_env), max_tokens=args.max_tokens,
            temperature=args.temperature, timeout_s=args.timeout, retries=args.retries, backoff_s=args.backoff,
            seed=args.seed))
        items = [(b.id, s, [{"role": "user", "content": b.prompt()}]) for b in briefs for s in range(args.samples)]
        try:
            run = run_requests(client, items, raw_path, concurrency=args.concurrency, progress=not args.no_progress)
        except KeyboardInterrupt:
            print(f"alpha-gym eval: interrupted; the answers so far are in {raw_path}: rerun to go on",
                  file=sys.stderr)
            return 130
    elif not raw_path.is_file():
        raise InputError(f"--report-only: {raw_path} does not exist (run without --report-only first)")
    raw = read_raw(raw_path)
    verifier = Verifier(train, settings.verifier)
    rows = score_rows(raw, briefs, args.samples, verifier)
    tmp = out / "answers.jsonl.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(out / "answers.jsonl")
    attempts, failed = error_counts(raw, keys)
    missing = sum(k not in raw for k in keys)
    valid = [r for r in rows if r["train_valid"]]
    summary = {
        "format": FORMAT, "model": args.model, "base_url": args.base_url, "api_key_env": args.api_key_env,
        "briefs": len(briefs), "samples": args.samples, "temperature": args.temperature, "max_tokens": args.max_tokens,
        "seed": args.seed, "items": len(keys), "answered": len(rows), "failed": sum(failed.values()),
        "missing": missing, "asked_this_run": run["asked"], "reused": run["reused"],
        "errors": dict(sorted(attempts.items())), "failed_by_error": dict(sorted(failed.items())),
        "train": {"start": str(train.dates[0]), "end": str(train.dates[-1]), "n_valid": len(valid),
                  "valid_share": len(valid) / len(rows) if rows else None,
                  "mean_cpcv": _mean([r["train_cpcv"] for r in valid]),
                  "mean_reward": _mean([r["reward"] for r in rows])},
    }
    if holdout is not None:
        from alpha_gym.evaluation.holdout import evaluate_holdout
        report = evaluate_holdout([r["formula"] for r in rows], train, holdout, costs=settings.holdout.costs,
                                  config=settings.holdout.rules, train_verifier=verifier, label=args.model,
                                  baselines=not args.no_baselines)
        report.save(out)
        summary["holdout"] = report.summary()
    (out / "eval.json").write_text(json.dumps(summary, indent=1, default=str), encoding="utf-8")
    _print_summary(summary, out)
    return 0 if summary["failed"] == 0 and missing == 0 else 3


def _fmt(x, spec):
    return "n/a" if x is None else format(x, spec)


def _print_summary(s: dict, out: Path) -> None:
    t = s["train"]
    print(f"{s['model']}: {s['answered']}/{s['items']} items answered ({s['briefs']} briefs x {s['samples']} "
          f"samples; asked {s['asked_this_run']} this run, {s['reused']} kept from before)")
    if s["failed"] or s["missing"] or s["errors"]:
        errs = ", ".join(f"{k} {v}" for k, v in s["errors"].items()) or "none"
        print(f"endpoint errors (attempts): {errs}; items failed after retries: {s['failed']}"
              + (f", never asked: {s['missing']}" if s["missing"] else ""))
    print(f"train window {t['start']}..{t['end']}: valid {t['n_valid']}/{s['answered']}  "
          f"mean CPCV of valid {_fmt(t['mean_cpcv'], '+.3f')}  mean reward {_fmt(t['mean_reward'], '+.3f')}")
    h = s.get("holdout")
    if h:
        print(f"holdout: mean score {_fmt(h.get('mean_score'), '+.3f')}  valid {h['n_valid']}/{h['n_answers']}  "
              f"families {h['n_families']}  ({out / 'holdout.json'}; page: alpha-gym report {out})")
    print(f"answers: {out / 'answers.jsonl'}  raw: {out / 'endpoint.jsonl'}")


def register(subparsers) -> None:
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
