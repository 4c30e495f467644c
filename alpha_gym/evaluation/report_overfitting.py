"""The overfitting section of the reports: `overfitting.json` read back, as a Markdown table (comparison.md) and as
an HTML section (the run page and the comparison page).

`alpha-gym overfitting` writes the file (`alpha_gym.commands.overfitting`): beside a comparison's kept results
(one entry per kept archive, "seed-42/evolve") or in a run folder (one entry, the folder's name):

    {"format": "alpha-gym/overfitting/v1",
     "entries": [{"label", "archive", "train_window", "n_formulas", "n_unscored",
                  "verifier_failures": {error type: count} (formulas the verifier itself failed on),
                  "n_rescored_differently", "seconds": {"scoring", "statistics"},
                  ...`overfitting.overfitting_summary`'s keys: n_candidates, n_days, verifier_calls, pbo,
                  effective_trials, best, deflated_sharpe, rank_correlation, top}, ...]}

The statistics and how to read them: docs/overfitting.md.
"""

from __future__ import annotations

import json
from pathlib import Path

from alpha_gym.errors import InputError
from alpha_gym.evaluation.report_html import esc, fmt, table

OVERFITTING_FORMAT = "alpha-gym/overfitting/v1"
OVERFITTING_FILE = "overfitting.json"

#: What the reports say of the columns that wait for a validation and a test window.
LATER_WINDOWS = ("Validation and test: n/a until the run is scored on a validation and a test window after its "
                 "search window (walk-forward folds); until then PBO and the deflated Sharpe read the train "
                 "window alone")


def read_overfitting(folder) -> list[dict] | None:
    """The entries of `folder/overfitting.json` (None when there is none); a file of another format or not JSON is
    an InputError naming it."""
    path = Path(folder) / OVERFITTING_FILE
    return read_overfitting_file(path) if path.is_file() else None


def read_overfitting_file(path) -> list[dict]:
    """The entries of an overfitting report file (InputError naming it when it is not one)."""
    path = Path(path)
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"{path} is not JSON ({err}): remove it and run `alpha-gym overfitting` again") from None
    if not isinstance(d, dict) or d.get("format") != OVERFITTING_FORMAT or not isinstance(d.get("entries"), list):
        raise InputError(f"{path} is not an overfitting report (format {OVERFITTING_FORMAT!r} with entries)")
    if not all(isinstance(e, dict) and isinstance(e.get("label"), str) for e in d["entries"]):
        raise InputError(f"{path}: an entry is not an object with a label")
    return d["entries"]


def _get(entry: dict, *keys):
    """entry[k1][k2]...; None where any level is missing or not an object (a file written by an older version)."""
    for k in keys:
        if not isinstance(entry, dict):
            return None
        entry = entry.get(k)
    return entry


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x


def _number(x, spec: str) -> str:
    """`x` formatted, "n/a" for anything but a number (an entry edited by hand, or written by an older version)."""
    if not _is_number(x):
        return "n/a"
    try:
        return format(x, spec)
    except ValueError:        # a float where the column counts (",d")
        return format(x, spec.replace("d", ".0f"))


def row_cells(e: dict) -> list[str]:
    """One archive's numbers, as text (Markdown and HTML share them)."""
    return [_number(e.get("n_candidates"), ",d") + f" of {_number(e.get('n_formulas'), ',d')}",
            _number(e.get("verifier_calls"), ",d"),
            _number(_get(e, "pbo", "pbo"), ".2f"),
            _number(_get(e, "pbo", "oos_loss_share"), ".2f"),
            _number(_get(e, "effective_trials", "n_trials"), ",d"),
            _number(_get(e, "deflated_sharpe", "effective", "sharpe"), "+.2f"),
            _number(_get(e, "deflated_sharpe", "effective", "benchmark_sharpe"), "+.2f"),
            _number(_get(e, "deflated_sharpe", "effective", "dsr"), ".3f"),
            _number(_get(e, "deflated_sharpe", "calls", "benchmark_sharpe"), "+.2f"),
            _number(_get(e, "deflated_sharpe", "calls", "dsr"), ".3f"),
            _number(_get(e, "top", "k"), ",d") + ": "
            + " / ".join(_number(_get(e, "top", k), "+.2f") for k in ("train", "validation", "test")),
            _number(_get(e, "rank_correlation", "validation"), "+.2f"),
            _number(_get(e, "seconds", "scoring"), ".0f") + " + " + _number(_get(e, "seconds", "statistics"), ".1f")]


HEADERS = ["archive", "formulas scored", "verifier calls", "PBO", "IS best loses OOS", "effective trials",
           "best's Sharpe", "expected best (eff.)", "DSR (eff.)", "expected best (calls)", "DSR (calls)",
           "top k by train: train / validation / test", "rank corr. train~validation", "seconds (scoring + statistics)"]


def _about(entries: list[dict]) -> str:
    blocks = {b for e in entries if _is_number(b := _get(e, "pbo", "n_blocks"))}
    cuts = {c for e in entries if _is_number(c := _get(e, "effective_trials", "min_corr"))}
    return (f"Over each archive's distinct formulas, their daily net P&L on the train window: PBO = the share of "
            f"the C(S, S/2) splits of {'/'.join(map(str, sorted(blocks))) or 'S'} blocks whose in-sample best "
            "(by Sharpe) ranks at or below the out-of-sample median (0.5: the choice carries no information; near "
            "0: it holds); IS best loses OOS = the share of splits where it lost money out of sample. Effective "
            "trials = clusters of the P&L (average linkage on 1 - |corr|, merged at |corr| >= "
            f"{'/'.join(f'{c:g}' for c in sorted(cuts)) or '0.5'}). Best = the highest train CPCV; its whole-window "
            "Sharpe (annualised) against the expected best of that many zero-edge trials; DSR = the probability its "
            "true Sharpe exceeds it (significant at 0.95), at the effective trials and at the run's verifier calls "
            f"(no two calls alike: the upper bound). Top k: the k best by train CPCV (20 by default), their mean train, "
            f"validation and test scores. {LATER_WINDOWS}. "
            "docs/overfitting.md says how to read each number.")


def _failures(x) -> str:
    """{"AttributeError": 1} as "AttributeError 1"; "none" for none, "n/a" where the entry does not say."""
    if not isinstance(x, dict):
        return "n/a"
    return ", ".join(f"{k} {_number(v, ',d')}" for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))) or "none"


def markdown_lines(entries: list[dict]) -> list[str]:
    """comparison.md's Overfitting section (no lines without entries)."""
    if not entries:
        return []
    lines = ["", "Overfitting: " + _about(entries), "",
             "| " + " | ".join(HEADERS) + " |", "|---|" + "---:|" * (len(HEADERS) - 1)]
    lines += [f"| {e['label']} | " + " | ".join(row_cells(e)) + " |" for e in entries]
    return lines


def html_section(entries: list[dict] | None) -> list[str]:
    """The run page's and the comparison page's Overfitting section (nothing without entries)."""
    if not entries:
        return []
    rows = [[esc(e["label"])] + [esc(c) for c in row_cells(e)] for e in entries]
    best = [[esc(e["label"]), f"<code>{esc(_get(e, 'best', 'formula') or 'n/a')}</code>",
             fmt(_get(e, "best", "train_score"), "+.2f"), esc(_number(e.get("n_rescored_differently"), ",d")),
             esc(_number(e.get("n_unscored"), ",d")), esc(_failures(e.get("verifier_failures")))] for e in entries]
    return ['<h2 id="overfitting">Overfitting</h2>', f'<p class="note">{esc(_about(entries))}</p>',
            table(HEADERS, rows, left={0}),
            '<p class="note">The best formula of each archive; re-scored differently: formulas whose train CPCV '
            "today differs from the one the archive kept (the verifier changed since the run); unscored: formulas "
            "that no longer evaluate, among them those the verifier itself failed on (by error).</p>",
            table(["archive", "best formula", "train CPCV", "re-scored differently", "unscored", "verifier failed"],
                  best, left={0, 1, 5})]
