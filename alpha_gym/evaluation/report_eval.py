"""The eval part of a run page: an `alpha-gym eval --out` folder, with or without a holdout.

`eval_section(run_dir, holdout)` reads eval.json (format `endpoint.EVAL_FORMAT`), answers.jsonl and
endpoint.jsonl and returns HTML parts: the run (model, endpoint as written, data, items answered and
failed, endpoint errors by kind, the train-window summary) and one row per item, in brief then sample
order: brief id, sample, whether the answer is valid on the training window, its formula, train CPCV,
reward, its brief's checks met and missed (in words), an excerpt of the raw answer and, for an invalid one,
the verifier's reason. An item the
endpoint never answered shows its error instead. With a holdout.json of the same answers (what
`alpha-gym eval --holdout-start` writes: one holdout answer per answered item, in order) each row also
shows the holdout score or the holdout's reason, so the page needs no second table of bare formulas.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from alpha_gym.evaluation.endpoint import EVAL_FORMAT, read_raw
from alpha_gym.evaluation.report_html import fmt, kv_table, table

#: Characters of a raw answer shown on the page (the whole answer is in answers.jsonl).
EXCERPT_CHARS = 200


def load_eval(run_dir: Path) -> dict | None:
    """eval.json of an eval folder, or None where the folder holds none (or another file by that name)."""
    path = Path(run_dir) / "eval.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) and data.get("format") == EVAL_FORMAT else None


def excerpt(text: str | None, n: int = EXCERPT_CHARS) -> str:
    """The first `n` characters of an answer on one line (whitespace runs become one space)."""
    if not isinstance(text, str):
        return ""
    flat = " ".join(text.split())
    return flat if len(flat) <= n else flat[: n - 3] + "..."


def _rows(run_dir: Path) -> list[dict]:
    rows = []
    path = run_dir / "answers.jsonl"
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def brief_cell(record, words: dict[str, str] | None = None) -> str:
    """An answer's compliance with its brief, for a person: how many checks it met and each missed one, in words
    where the brief is known (`words`: check name -> description). `record`: answers.jsonl's "brief"."""
    if not isinstance(record, dict) or not isinstance(record.get("n"), int):
        return "n/a"
    n, checks = record["n"], record.get("checks")
    if n == 0:
        return "the brief has no checks"
    if not isinstance(checks, dict) or not checks:
        return f"0/{n} met (an invalid answer meets none)"
    missed = [k for k, ok in checks.items() if not ok]
    words = words or {}
    return f"{n - len(missed)}/{n} met" + ("; missed: " + "; ".join(f"{k} ({words[k]})" if k in words else k
                                                                      for k in missed) if missed else "")


def _check_words(brief_id) -> dict[str, str]:
    """Check name -> description for a seeded or fixed brief (empty for a brief from a file: names alone)."""
    from alpha_gym.tasks.compliance import described_checks
    from alpha_gym.tasks.sets import brief_by_id
    brief = brief_by_id(brief_id) if isinstance(brief_id, str) else None
    return {} if brief is None else {d["name"]: d["description"] for d in described_checks(brief, None, False)}


def eval_section(run_dir, holdout: dict | None = None) -> list[str]:
    """HTML parts of the eval folder's run and every item (see the module docstring)."""
    run_dir = Path(run_dir)
    s = load_eval(run_dir)
    if s is None:
        return []
    rows = _rows(run_dir)
    t = s.get("train") or {}
    errors = ", ".join(f"{k} {v}" for k, v in (s.get("errors") or {}).items()) or "none"
    universe = s.get("universe") or {}
    parts = ['<h2 id="eval">Eval: a model behind an endpoint</h2>',
             kv_table([
                 ("model", html.escape(str(s.get("model")))),
                 ("endpoint", html.escape(str(s.get("base_url")))),
                 ("data / universe", html.escape(f"{s.get('data', 'n/a')} / {universe.get('name', 'n/a')} "
                                                 f"({universe.get('size', '?')} tickers)")),
                 ("briefs x samples", f"{s.get('briefs')} x {s.get('samples')} (temperature {s.get('temperature')}, "
                                      f"max tokens {s.get('max_tokens')}, seed {s.get('seed')})"),
                 ("items answered / failed / never asked", f"{s.get('answered')} / {s.get('failed')} / "
                                                           f"{s.get('missing')}"),
                 ("endpoint errors (attempts)", html.escape(errors)),
                 (f"train window {t.get('start')} .. {t.get('end')}: valid",
                  f"{t.get('n_valid')} / {s.get('answered')}"),
                 ("mean train CPCV (valid) / mean reward", f"{fmt(t.get('mean_cpcv'))} / {fmt(t.get('mean_reward'))}"),
             ] + ([("brief compliance: mean share / every check met",  # an invalid answer meets none (as R13 pays)
                    f"{fmt(t.get('brief_share'))} / {t.get('brief_met_all')} of {t.get('n_briefs')}")]
                  if "brief_share" in t else []))]
    held = holdout.get("answers") if holdout else None
    if not isinstance(held, list) or len(held) != len(rows):
        held = None
    by_key = {(r.get("brief_id"), r.get("sample")): (k, r) for k, r in enumerate(rows)}
    raw = read_raw(run_dir / "endpoint.jsonl")
    failed = [r for r in raw.values() if not r.get("ok") and (r.get("brief_id"), r.get("sample")) not in by_key]
    out, words = [], {}
    for k, r in enumerate(rows):
        valid = bool(r.get("train_valid"))
        if r.get("brief_id") not in words:
            words[r.get("brief_id")] = _check_words(r.get("brief_id"))
        cells = [html.escape(str(r.get("brief_id"))), str(r.get("sample")), "yes" if valid else "no",
                 f"<code>{html.escape(r['formula'])}</code>" if r.get("formula") else "(none)",
                 fmt(r.get("train_cpcv")), fmt(r.get("reward")),
                 html.escape(brief_cell(r.get("brief"), words[r.get("brief_id")])),
                 f"<code>{html.escape(excerpt(r.get('answer')))}</code>",
                 "" if valid else html.escape(str(r.get("reason") or ""))]
        if held is not None:
            h = held[k]
            cells.append(fmt(h.get("score")) if h.get("valid") else html.escape(str(h.get("reason") or "invalid")))
        out.append(cells)
    for r in sorted(failed, key=lambda r: str(r.get("key"))):
        cells = [html.escape(str(r.get("brief_id"))), str(r.get("sample")), "no answer", "(none)", "n/a", "n/a",
                 "n/a", "", html.escape(f"endpoint: {r.get('error')}: {r.get('detail') or ''}")]
        out.append(cells + ([""] if held is not None else []))
    head = ["brief", "sample", "valid (train)", "formula", "train CPCV", "reward", "brief checks",
            "raw answer (excerpt)", "why invalid"] + (["holdout score or reason"] if held is not None else [])
    n_invalid = sum(not r.get("train_valid") for r in rows)
    parts += ["<h3>Every item</h3>",
              f'<p class="note">{len(rows)} answered, {n_invalid} invalid on the training window (the verifier\'s '
              f"reason beside each), {len(failed)} not answered by the endpoint. Brief checks: the checks of "
              "the answer's brief it met (R13's extended checks), each missed one named and said in words; an "
              f"answer invalid on the training window meets none. The first {EXCERPT_CHARS} "
              "characters of each raw answer; the whole answers are in answers.jsonl.</p>",
              table(head, out, left={0, 3, 6, 7, 8, 9})]
    return parts
