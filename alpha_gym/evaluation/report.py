"""One-file HTML report of a run directory, with the plots embedded as base64 PNGs.

`write_report(run_dir)` reads whichever of these files the run directory holds
(at least one must exist) and writes `run_dir/report.html` (or `out_dir/report.html`; `page_folder` says
where `alpha-gym report` puts it):

holdout.json     (format "alpha-gym/holdout/v1", written by `evaluate_holdout(...).save(run_dir)`)
    {"format", "label", "step", "train_end", "holdout_start", "holdout_end", "n_days", "definition",
     "costs": {...}, "config": {...},
     "summary": {"n_answers", "n_valid", "validity", "n_refused_on_train", "mean_score", "n_positive",
                 "n_families", "mean_train_cpcv"},
     "book": {"n_members", "total_return", "annual_return", "sharpe", "beta", "market_correlation",
              "max_drawdown", "down_day_return", "n_down_days", "turnover", "mean_cost", "market_total_return"},
     "series": {"dates": ["YYYY-MM-DD", ...], "book": [daily net return], "market": [daily return]},
     "answers": [{"formula", "valid", "reason", "score", "cpcv", "slice_sharpes": [15 floats], "sharpe",
                  "total_return", "turnover", "mean_cost", "max_drawdown", "beta", "market_correlation",
                  "form", "n_days", "train_cpcv", "train_turnover", "train_valid" (with a training verdict),
                  "alpha_tests" (valid answers: `alpha_tests.alpha_tests`, the industry's tests)}, ...]}
    -> growth of $1 (book vs market), book vs market daily returns with the beta line,
       the 15 CPCV slice Sharpes of every valid answer, and the answers table.
holdout-*.json   the same format, e.g. one per checkpoint: their books are added to the growth plot.
log.jsonl, completions.jsonl, settings.toml  (a training run) -> the training section of
                 `report_training`: diagnostics per step (reward, valid share, families, non-zero
                 advantages, KL, entropy, zeta, clip/cap share), every channel's mean per step, and the
                 best and worst answers of each checkpoint with their 14 channels.
checkpoints.json (format "alpha-gym/checkpoints/v1", `selection.checkpoint_table` + `save_checkpoints`)
    -> the checkpoint table (train CPCV selects; holdout columns reported). A comparison rung on a walk-forward
       fold writes one with the train reward logged at each step and the validation score beside it (train
       CPCV admits, validation chooses).
books.json       (format "alpha-gym/books/v1", `selection.save_books`) -> the book-selector comparison.
overfitting.json (format "alpha-gym/overfitting/v1", `alpha-gym overfitting RUN_DIR`) -> the run archive's
                 probability of backtest overfitting, effective trials and deflated Sharpe (`report_overfitting`).
eval.json, answers.jsonl, endpoint.jsonl  (an `alpha-gym eval` folder, with or without holdout.json)
                 -> `report_eval`: the run and every item with its brief id, raw answer excerpt and the
                 verifier's reason for an invalid one (and its holdout score with a holdout).

A comparison folder (`alpha-gym compare --out OUT`: report.json and/or seed-S/RUNG runs)
gets the page of `report_comparison` instead (rung table with intervals, baselines, per-checkpoint
plots, every run overlaid), and each run under it gets its own page, linked from it.

Numbers in JSON may be null (not finite / not available); the report prints "n/a". Pages are
self-contained (embedded PNGs, no script, nothing fetched).
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np

from alpha_gym.errors import InputError
from alpha_gym.evaluation.alpha_tests import summary_line
from alpha_gym.evaluation.report_eval import eval_section, load_eval
from alpha_gym.evaluation.report_html import arr as _arr, fmt as _fmt, img as _img, kv_table as _kv_table
from alpha_gym.evaluation.report_html import mpl as _mpl, page, png as _png, table as _table, write_page
from alpha_gym.evaluation.report_overfitting import html_section, read_overfitting
from alpha_gym.evaluation.report_training import read_jsonl, training_section

REPORT_NAME = "report.html"


# ----------------------------------------------------------------------------- plots
def plot_growth(holdout: dict, others: list[dict] = ()) -> str:
    """Growth of $1: the equal-weight book and the market over the holdout (plus other runs' books, thin)."""
    plt = _mpl()
    s = holdout["series"]
    dates = np.array(s["dates"], dtype="datetime64[D]")
    fig, ax = plt.subplots(figsize=(8, 4))
    for o in others:
        so = o["series"]
        ax.plot(np.array(so["dates"], dtype="datetime64[D]"), np.cumprod(1 + np.nan_to_num(_arr(so["book"]))),
                lw=0.8, alpha=0.6, label=" ".join(["book", str(o.get("label") or ""),
                                                   f"step {o['step']}" if o.get("step") is not None else ""]))
    ax.plot(dates, np.cumprod(1 + np.nan_to_num(_arr(s["book"]))), lw=2.0, color="tab:orange",
            label=f"equal-weight book ({holdout['book']['n_members']} formulas)")
    ax.plot(dates, np.cumprod(1 + np.nan_to_num(_arr(s["market"]))), lw=1.5, color="0.4",
            label="equal-weight market")
    ax.axhline(1.0, color="0.8", lw=0.8)
    ax.set_title(f"Growth of $1 on the holdout, after realistic costs ({holdout['holdout_start']} .. "
                 f"{holdout['holdout_end']})")
    ax.set_ylabel("value of $1")
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    fig.autofmt_xdate()
    return _png(fig)


def plot_beta(holdout: dict) -> str:
    """Scatter of the book's daily returns against the market's, with the OLS line (slope = beta)."""
    plt = _mpl()
    b, m = _arr(holdout["series"]["book"]), _arr(holdout["series"]["market"])
    ok = np.isfinite(b) & np.isfinite(m)
    b, m = b[ok] * 100, m[ok] * 100
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    ax.scatter(m, b, s=10, alpha=0.6, color="tab:blue")
    if len(m) > 1 and np.var(m) > 0:
        beta = np.cov(m, b, ddof=0)[0, 1] / np.var(m)
        alpha = b.mean() - beta * m.mean()
        xs = np.linspace(m.min(), m.max(), 2)
        ax.plot(xs, alpha + beta * xs, color="tab:red", lw=2, label=f"OLS fit, beta = {beta:+.2f}")
        ax.legend(loc="best")
    ax.axhline(0, color="0.7", lw=0.8)
    ax.axvline(0, color="0.7", lw=0.8)
    ax.set_xlabel("market daily return (%)")
    ax.set_ylabel("book daily return (%)")
    ax.set_title("Book vs market, daily (holdout)")
    ax.grid(alpha=0.3)
    return _png(fig)


def _short(text: str, n: int = 48) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def plot_slices(holdout: dict, max_answers: int = 60) -> str | None:
    """Box and strip plot of the 15 holdout CPCV slice Sharpes of each valid answer, best score on top."""
    answers = [a for a in holdout["answers"] if a.get("valid") and a.get("slice_sharpes")]
    if not answers:
        return None
    answers = sorted(answers, key=lambda a: (a.get("score") is None, -(a.get("score") or 0.0)))[:max_answers]
    answers = answers[::-1]   # matplotlib draws the first box at the bottom
    data = [np.nan_to_num(_arr(a["slice_sharpes"])) for a in answers]
    plt = _mpl()
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.32 * len(answers)))
    box = dict(widths=0.6, showfliers=False, medianprops={"color": "0.15"})
    try:  # matplotlib >= 3.10 spells it orientation=; older versions only know vert=
        ax.boxplot(data, orientation="horizontal", **box)
    except TypeError:
        ax.boxplot(data, vert=False, **box)
    rng = np.random.default_rng(0)
    for k, d in enumerate(data, start=1):
        ax.scatter(d, k + rng.uniform(-0.15, 0.15, size=len(d)), s=6, alpha=0.5, color="tab:blue")
        ax.scatter([answers[k - 1]["score"]], [k], marker="D", s=22, color="tab:orange", zorder=3)
    ax.set_yticks(range(1, len(answers) + 1))
    ax.set_yticklabels([_short(a["formula"]) for a in answers], fontsize=7, family="monospace")
    ax.axvline(0, color="0.6", lw=0.8)
    ax.set_xlabel("annualised net Sharpe of each CPCV slice (orange: holdout score)")
    ax.set_title("Holdout CPCV slices per answer")
    ax.grid(alpha=0.3, axis="x")
    return _png(fig)


# ----------------------------------------------------------------------------- reading
def _load_json(path: Path, fmt: str | None = None) -> dict | None:
    if not path.is_file():
        return None
    d = json.loads(path.read_text(encoding="utf-8"))
    if fmt is not None and d.get("format") != fmt:
        raise InputError(f"{path}: expected format {fmt!r}, found {d.get('format')!r}")
    return d


def _validity_words(s: dict) -> str:
    """Whose verdict made an answer valid (a holdout summary's `validity`; a file written before it: not said)."""
    from alpha_gym.evaluation.holdout import VALIDITY_BOTH, VALIDITY_HOLDOUT
    if s.get("validity") == VALIDITY_BOTH:
        return (f"valid on the training window under its rules and trading on the holdout; "
                f"{s.get('n_refused_on_train', 0)} refused on the training window though trading here")
    if s.get("validity") == VALIDITY_HOLDOUT:
        return "the holdout's book alone (no training verdict given: the training rules were not applied)"
    return "not recorded (a holdout.json written before the training verdict was applied here)"


def _holdout_section(h: dict, others: list[dict], answers_table: bool = True) -> list[str]:
    """The holdout's summary, plots and baselines; its answers table unless the eval part shows them."""
    s, b = h["summary"], h["book"]
    out = [f"<h2 id=\"holdout\">Holdout {html.escape(h['holdout_start'])} .. {html.escape(h['holdout_end'])}"
           f"{' - ' + html.escape(str(h['label'])) if h.get('label') else ''}</h2>",
           f'<p class="note">Training window ends {html.escape(h["train_end"])}; {h["n_days"]} holdout decision '
           f"days. Score: {html.escape(h['definition'])}</p>",
           _kv_table([
               ("answers (valid / all)", f"{s['n_valid']} / {s['n_answers']}"),
               ("valid means", html.escape(_validity_words(s))),
               ("mean holdout score (valid answers) [95% CI]", _fmt(s.get("mean_score"))
                + (f" [{_fmt(s.get('mean_score_lo'))}, {_fmt(s.get('mean_score_hi'))}]"
                   if s.get("mean_score_lo") is not None else "")),
               ("answers scoring above 0", str(s.get("n_positive"))),
               ("distinct formula families", str(s.get("n_families"))),
               ("mean train CPCV (valid answers)", _fmt(s.get("mean_train_cpcv"))),
               ("book return after costs", _fmt(b.get("total_return"), "+.1%")),
               ("book Sharpe", _fmt(b.get("sharpe"), "+.2f")),
               ("book beta / correlation to market",
                f"{_fmt(b.get('beta'), '+.2f')} / {_fmt(b.get('market_correlation'), '+.2f')}"),
               ("book max drawdown", _fmt(b.get("max_drawdown"), ".1%")),
               (f"book mean return on market down days (n = {b.get('n_down_days')})",
                _fmt(b.get("down_day_return"), "+.2%")),
               ("book turnover / day, mean cost / day",
                f"{_fmt(b.get('turnover'), '.1%')}, {_fmt(b.get('mean_cost'), '.4%')}"),
               ("market return", _fmt(b.get("market_total_return"), "+.1%")),
           ]),
           _img(plot_growth(h, others), "growth of $1"),
           _img(plot_beta(h), "book vs market"),
           _img(plot_slices(h), "CPCV slices per answer")]
    rows, classes = [], []
    for a in sorted(h["answers"], key=lambda a: (not a["valid"], -(a.get("score") or 0.0))):
        rows.append([f"<code>{html.escape(a['formula'])}</code>" if a.get("formula") else "(none)",
                     "yes" if a["valid"] else "no",
                     _fmt(a.get("score")), _fmt(a.get("train_cpcv")), _fmt(a.get("turnover"), ".1%"),
                     _fmt(a.get("sharpe"), "+.2f"), _fmt(a.get("total_return"), "+.1%"),
                     html.escape(summary_line(a.get("alpha_tests"))) if a["valid"] else "",
                     html.escape(a["reason"]) if not a["valid"] else ""])
        classes.append("")
    out += _baselines_part(h)
    if not answers_table:
        out.append('<p class="note">Each answer\'s holdout score or reason is in the eval table above.</p>')
        return out + _alpha_tests_part(h)
    out.append("<h3>Answers</h3>")
    out.append('<p class="note">Alpha tests: WorldQuant BRAIN\'s submission tests on the holdout book (fitness '
               ">= 1, sub-universe Sharpe, self-correlation &lt; 0.7 on the training window, largest weight &lt; 10%, "
               "turnover 1-70%), diagnostics beside the score, never a reward (docs/alpha_tests.md).</p>")
    out.append(_table(["formula", "valid", "holdout score", "train CPCV", "turnover/day", "holdout Sharpe",
                       "holdout return", "alpha tests passed", "reason"], rows, left={0, 7, 8}))
    out += _alpha_tests_part(h)
    return out


def _alpha_tests_part(h: dict) -> list[str]:
    """Each valid answer's five tests: value and pass/fail (n/a where a test did not run)."""
    from alpha_gym.evaluation.alpha_tests import TESTS
    answers = [a for a in h["answers"] if a.get("valid") and a.get("alpha_tests")]
    if not answers:
        return []
    mark = {True: "pass", False: "FAIL", None: "n/a"}
    fmts = {"fitness": "+.2f", "sub_universe": "+.2f", "self_correlation": ".2f", "max_weight": ".1%",
            "turnover": ".1%"}
    rows = [[f"<code>{html.escape(a['formula'])}</code>"]
            + [f"{_fmt(a['alpha_tests'][t]['value'], fmts[t])} {mark[a['alpha_tests'][t]['pass']]}" for t in TESTS]
            for a in sorted(answers, key=lambda a: -(a.get("score") or 0.0))]
    first = answers[0]["alpha_tests"]
    head = ["formula"] + [f"{t.replace('_', ' ')} ({html.escape(first[t]['threshold'])})"
                          if t != "sub_universe" else "sub-universe Sharpe" for t in TESTS]
    return ["<h3>Alpha tests per answer</h3>", _table(head, rows, left={0})]


def _baselines_part(h: dict) -> list[str]:
    """The model-free baselines scored on the same window, and whether the answers' interval clears them."""
    from alpha_gym.evaluation.baselines import beats, best_baseline
    from alpha_gym.evaluation.report_comparison import baseline_table
    rows = h.get("baselines") or []
    if not rows:
        return []
    s, best = h["summary"], best_baseline(rows)
    verdict = beats(s.get("mean_score_lo"), rows)
    text = ("no interval to compare (fewer than 2 valid answers)" if verdict is None else
            f"the answers' interval lies {'above' if verdict else '<b>not</b> above'} the best baseline, "
            f"{html.escape(best['name'])} ({best['score']:+.2f})")
    return ["<h3>Baselines (no model; same window and costs)</h3>", f'<p class="note">{text}.</p>',
            baseline_table({"baselines": rows})]


def _checkpoints_part(checkpoints: dict) -> list[str]:
    rows = checkpoints.get("rows", [])
    # a run on a walk-forward fold adds the train reward logged at each step and the validation score beside it
    cols = ["step", "train_reward", "train_cpcv", "validation_score", "n_valid_validation", "holdout_score",
            "n_valid", "n_families", "book_return", "book_sharpe"]
    cols = [c for c in cols if any(c in r for r in rows)]
    fmts = {"train_reward": "+.3f", "train_cpcv": "+.2f", "validation_score": "+.2f", "holdout_score": "+.2f",
            "book_return": "+.1%", "book_sharpe": "+.2f"}
    train_pick = checkpoints.get("train_selected_step")
    return ['<h2 id="checkpoints">Checkpoints</h2>',
            f'<p class="note">Selection rule: {html.escape(checkpoints.get("rule", ""))}. '
            f"Selected step: {html.escape(str(checkpoints.get('selected_step')))}"
            + ("" if train_pick is None else f" (train CPCV alone: step {html.escape(str(train_pick))})") + ".</p>",
            _table(cols, [[_fmt(r.get(c), fmts.get(c, "")) for c in cols] for r in rows],
                   classes=["sel" if r.get("selected") else "" for r in rows])]


def _books_part(books: dict) -> list[str]:
    rows = [[html.escape(s["method"]), str(s["n"]), _fmt(s.get("effective_bets"), ".1f"),
             _fmt(s.get("median_cpcv"), "+.2f"), _fmt(s.get("mean_abs_corr"), ".2f"),
             _fmt(s.get("sharpe"), "+.2f"), _fmt(s.get("max_drawdown"), ".1%")]
            for s in books.get("selections", [])]
    return ['<h2 id="books">Book selectors (training window)</h2>',
            '<p class="note">Effective bets = 1 / sum of squared eigenvalue shares of the members\' '
            "P&amp;L correlation matrix; book = equal-weight average of members' daily net P&amp;L.</p>",
            _table(["selector", "members", "effective bets", "median CPCV", "mean |corr|", "Sharpe",
                    "max drawdown"], rows, left={0})]


def write_report(run_dir, out_name: str = REPORT_NAME, out_dir=None) -> Path:
    """Write `out_dir/report.html` (default `run_dir/report.html`) from the files described in this module's
    docstring. Returns its path.

    A comparison folder gets the comparison page, and each of its runs a page of its own (under `out_dir`, at
    the run's place relative to `run_dir`, when `out_dir` is given).
    """
    from alpha_gym.evaluation.report_comparison import comparison_section, is_comparison, run_folders
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory not found: {run_dir}")
    out_dir = run_dir if out_dir is None else Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if is_comparison(run_dir):
        links = {}
        for _, _, path in run_folders(run_dir):
            try:
                links[path] = write_report(path, out_name, out_dir / path.relative_to(run_dir))
            except FileNotFoundError:   # a run stopped before it wrote anything a page can show
                pass
        parts = comparison_section(run_dir, links, page_dir=out_dir)
        return write_page(out_dir / out_name, page(f"alpha-gym comparison: {run_dir.name}", parts))
    return write_page(out_dir / out_name, page(f"alpha-gym report: {run_dir.name}", _run_parts(run_dir)))


def page_folder(run_dir, out=None) -> tuple[Path | None, str]:
    """Where `alpha-gym report RUN_DIR [--out DIR]` writes its page, and why when it is not RUN_DIR.

    `--out` wins. Otherwise the page goes beside the run, unless the run lies in a git work tree and git does not
    ignore it (kept results, `benchmarks/results/...`): a page there would be an untracked file in the
    repository, so it goes to `<user cache>/reports/<name>-<hash of the run's path>/` (a temporary folder when the
    cache is off). `runs/` is ignored by the project's .gitignore, so training runs keep their page beside them.
    """
    import hashlib
    import subprocess
    import tempfile
    from alpha_gym.user_cache import cache_dir
    if out is not None:
        return Path(out), ""
    run_dir = Path(run_dir).resolve()
    top = next((p for p in (run_dir, *run_dir.parents) if (p / ".git").exists()), None)
    if top is None:
        return None, ""
    try:
        ignored = subprocess.run(["git", "-C", str(top), "check-ignore", "-q", str(run_dir)],
                                 capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ignored = False
    if ignored:
        return None, ""
    base = cache_dir()
    base = base / "reports" if base is not None else Path(tempfile.gettempdir()) / "alpha_gym-reports"
    folder = base / f"{run_dir.name}-{hashlib.sha256(str(run_dir).encode()).hexdigest()[:8]}"
    return folder, (f"{run_dir} is in the git work tree {top} and not ignored, so the page goes to {folder} "
                    "(--out DIR to choose)")


def _run_parts(run_dir: Path) -> list[str]:
    from alpha_gym.evaluation.holdout import HOLDOUT_FORMAT
    from alpha_gym.evaluation.selection import BOOKS_FORMAT, CHECKPOINTS_FORMAT
    holdout = _load_json(run_dir / "holdout.json", HOLDOUT_FORMAT)
    others = [d for p in sorted(run_dir.glob("holdout-*.json"), key=_step_order)
              if (d := _load_json(p)) is not None and d.get("format") == HOLDOUT_FORMAT]
    log = read_jsonl(run_dir / "log.jsonl")
    checkpoints = _load_json(run_dir / "checkpoints.json", CHECKPOINTS_FORMAT)
    books = _load_json(run_dir / "books.json", BOOKS_FORMAT)
    evaluated = load_eval(run_dir)
    overfitting = read_overfitting(run_dir)
    if (holdout is None and not others and not log and checkpoints is None and books is None and evaluated is None
            and overfitting is None):
        raise FileNotFoundError(f"{run_dir} holds none of holdout.json, holdout-*.json, log.jsonl, "
                                "checkpoints.json, books.json, eval.json, overfitting.json")
    if holdout is None and others:
        holdout, others = others[-1], others[:-1]
    sections = [("eval", "Eval", evaluated is not None), ("holdout", "Holdout", holdout is not None), ("checkpoints", "Checkpoints", checkpoints is not None),
                ("training", "Training", bool(log)),
                ("answers", "Answers", (run_dir / "completions.jsonl").is_file() and bool(log)),
                ("books", "Book selectors", books is not None), ("overfitting", "Overfitting", overfitting is not None)]
    nav = " ".join(f'<a href="#{a}">{t}</a>' for a, t, present in sections if present)
    parts = [f"<h1>alpha-gym run report: {html.escape(run_dir.name)}</h1>", f"<nav>{nav}</nav>"]
    if evaluated is not None:
        parts += eval_section(run_dir, holdout)
    if holdout is not None:
        parts += _holdout_section(holdout, others, answers_table=evaluated is None)
    if checkpoints is not None:
        parts += _checkpoints_part(checkpoints)
    parts += training_section(run_dir, log)
    if books is not None:
        parts += _books_part(books)
    return parts + html_section(overfitting)


def _step_order(path: Path):
    """holdout-step-10.json after holdout-step-9.json (numbers in a name compared as numbers)."""
    tail = path.stem.rsplit("-", 1)[-1]
    return (0, int(tail), "") if tail.isdigit() else (1, 0, path.name)
