"""The training part of a run report: what the reference watched, and the answers themselves.

The reference found every reward hack by reading the top-scoring formulas, and judged a run by its
entropy, REPO-R's zeta, the share of answers with a non-zero advantage and the KL to the start model.
This page puts those beside each other, per step, from the files a training run writes:

log.jsonl          one object per step (trainers/run_log.py `LOG_FIELDS`): the diagnostics grid, the
                   mean of each reward channel ("rewards/<channel>") over steps, and the world model R3
                   used ("world_model": a content hash, or "off");
completions.jsonl  every answer with its reward, advantage and 14 channels (`log_completions`, on by
                   default): the best and worst answers of each checkpoint's steps;
settings.toml      the run's settings: the recipe shown on top, and the channel priorities.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np

from alpha_gym.evaluation.report_html import arr, esc, fmt, img, kv_table, mpl, png, table
from alpha_gym.scoring.config import CHANNELS, DEFAULT_PRIORITIES

#: (log key, panel title): drawn when the log has the key.
DIAGNOSTICS = (
    ("reward", "reward (group mean)"),
    ("core", "R1 core score (train CPCV)"),
    ("valid_share", "valid share"),
    ("families", "formula families (valid answers)"),
    ("nonzero_adv_share", "answers with a non-zero advantage"),
    ("distinct_forms_mean", "distinct canonical forms a group (mean)"),
    ("distinct_forms_min", "distinct canonical forms a group (fewest)"),
    ("kl", "KL to the start model"),
    ("entropy", "token entropy"),
    ("zeta", "REPO-R zeta"),
    ("clipped_share", "tokens clipped / capped"),
    ("guarded_share", "R10 motif-guarded share"),
    ("archive_size", "novelty archive size"),
    ("seconds/total", "seconds per step"),
)


def read_jsonl(path: Path) -> list[dict]:
    """The objects of a JSONL file; blank or broken lines (a run killed mid-write) are skipped."""
    out = []
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            out.append(row)
    return out


def _series(log: list[dict], key: str):
    pts = [(r["step"], r[key]) for r in log if r.get(key) is not None and r.get("step") is not None]
    return np.array([p[0] for p in pts], dtype=float), arr([p[1] for p in pts])


def _smooth(ax, xs, ys, color):
    ax.plot(xs, ys, lw=0.8, alpha=0.5, color=color, marker="." if len(ys) < 40 else None)
    if len(ys) >= 10:
        w = max(2, len(ys) // 20)
        ax.plot(xs[w - 1:], np.convolve(np.nan_to_num(ys), np.ones(w) / w, mode="valid"), lw=2, color=color,
                label=f"{w}-step mean")
        ax.legend(fontsize=7)


def plot_diagnostics(log: list[dict]) -> str | None:
    """Small multiples of every diagnostic the log holds, per step."""
    keys = [(k, t) for k, t in DIAGNOSTICS if any(r.get(k) is not None for r in log)]
    if not keys:
        return None
    plt = mpl()
    cols = min(3, len(keys))
    rows = -(-len(keys) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.3 * cols, 2.9 * rows), squeeze=False)
    for ax, (k, title) in zip(axes.flat, keys):
        xs, ys = _series(log, k)
        _smooth(ax, xs, ys, "tab:blue")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    fig.tight_layout()
    return png(fig)


def plot_channels(log: list[dict], priorities: dict) -> str | None:
    """The mean of each reward channel per step, one panel a channel, titled with its priority."""
    present = [c for c in CHANNELS if any(r.get(f"rewards/{c}") is not None for r in log)]
    if not present:
        return None
    plt = mpl()
    cols = 4
    rows = -(-len(present) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.4 * rows), squeeze=False)
    for ax, c in zip(axes.flat, present):
        xs, ys = _series(log, f"rewards/{c}")
        _smooth(ax, xs, ys, "tab:green" if np.nanmean(ys) >= 0 else "tab:red")
        ax.axhline(0, color="0.7", lw=0.8)
        ax.set_title(f"R{CHANNELS.index(c) + 1} {c} (x{priorities.get(c, float('nan')):g})", fontsize=9)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(present):]:
        ax.axis("off")
    fig.tight_layout()
    return png(fig)


def run_settings(run_dir: Path) -> dict:
    """settings.toml of a run; runs older than that file have config.json (the TrainConfig); {} if neither."""
    try:
        if (run_dir / "settings.toml").is_file():
            return tomllib.loads((run_dir / "settings.toml").read_text(encoding="utf-8"))
        if (run_dir / "config.json").is_file():
            return {"train": json.loads((run_dir / "config.json").read_text(encoding="utf-8"))}
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError):
        pass
    return {}


def checkpoint_steps(run_dir: Path, last_step: int | None) -> list[int]:
    """Steps with a checkpoint-N folder, else the last logged step."""
    steps = sorted(int(p.name.split("-", 1)[1]) for p in run_dir.glob("checkpoint-*")
                   if p.is_dir() and p.name.split("-", 1)[1].isdigit())
    return steps or ([last_step] if last_step is not None else [])


def _formula(answer: str) -> str:
    from alpha_gym.language.answer import formula_or_none
    f = formula_or_none(answer) if isinstance(answer, str) else None
    return f if f is not None else (answer or "")


def answers_table(rows: list[dict]) -> str:
    """Answers with reward, advantage and the 14 channels (R1..R14); invalid rows greyed with their reason."""
    headers = ["step", "answer (formula)", "reward", "adv.", *[f"R{k}" for k in range(1, len(CHANNELS) + 1)]]
    body, classes = [], []
    for r in rows:
        ch = r.get("channels") or {}
        text = _formula(r.get("answer", ""))
        text = text if len(text) <= 90 else text[:87] + "..."
        cell = f"<code>{esc(text)}</code>" + ("" if r.get("valid") else f'<br><span class="note">{esc(r.get("reason", ""))}</span>')
        body.append([str(r.get("step")), cell, fmt(r.get("reward"), "+.2f"), fmt(r.get("advantage"), "+.2f"),
                     *[fmt(ch.get(c), "+.2f") for c in CHANNELS]])
        classes.append("" if r.get("valid") else "bad")
    return table(headers, body, left={1}, classes=classes)


def checkpoint_answers(completions: list[dict], steps: list[int], k: int = 3) -> list[str]:
    """For each checkpoint: the k best and k worst answers (by reward) of the steps since the previous one."""
    out = []
    previous = 0
    for c in steps:
        window = [r for r in completions if previous < (r.get("step") or 0) <= c and r.get("reward") is not None]
        previous = c
        if not window:
            continue
        ranked = sorted(window, key=lambda r: -r["reward"])
        valid = sum(bool(r.get("valid")) for r in window)
        out.append(f"<h3>Checkpoint {c}: steps {window[0]['step']}..{c}, {len(window)} answers, {valid} valid</h3>")
        out.append(answers_table(ranked[:k] + ranked[-k:] if len(ranked) > 2 * k else ranked))
    return out


def training_section(run_dir: Path, log: list[dict]) -> list[str]:
    """The training half of a run page (empty when the run wrote no log)."""
    if not log:
        return []
    settings = run_settings(run_dir)
    priorities = {**DEFAULT_PRIORITIES, **settings.get("verifier", {}).get("priorities", {})}
    train = settings.get("train", {})
    last = log[-1]
    secs = [r["seconds/total"] for r in log if r.get("seconds/total") is not None]
    parts = ["<h2 id=\"training\">Training</h2>", kv_table([
        ("recipe (loss, advantages)", esc(f"{train.get('loss_type', 'n/a')}, {train.get('advantage_mode', 'n/a')}"
                                          + (", REPO-R" if train.get("repo_r") else ""))),
        ("steps logged", f"{len(log)} (last step {last.get('step')})"),
        ("last step: reward / valid share / families", f"{fmt(last.get('reward'), '+.3f')} / "
                                                       f"{fmt(last.get('valid_share'), '.0%')} / {fmt(last.get('families'), 'd')}"),
        ("last step: KL / entropy / non-zero advantages", f"{fmt(last.get('kl'), '.3g')} / {fmt(last.get('entropy'), '.3f')} / "
                                                           f"{fmt(last.get('nonzero_adv_share'), '.0%')}"),
        ("seconds per step (mean)", fmt(float(np.mean(secs)) if secs else None, ".1f")),
        ("R3 world model", esc(", ".join(sorted({str(r["world_model"]) for r in log if "world_model" in r}))
                               or "not recorded")),
    ]), img(plot_diagnostics(log), "training diagnostics per step"),
        "<h3>Reward channels</h3>",
        '<p class="note">Mean raw value of each channel over the step\'s answers; the reward is the '
        "priority-weighted sum (priority in brackets).</p>",
        img(plot_channels(log, priorities), "reward channels per step")]
    completions = read_jsonl(run_dir / "completions.jsonl")
    if completions:
        legend = ", ".join(f"R{k} {c}" for k, c in enumerate(CHANNELS, 1))
        parts.append("<h2 id=\"answers\">Best and worst answers at each checkpoint</h2>")
        parts.append(f'<p class="note">From completions.jsonl: the three highest and three lowest rewards of the '
                     f"steps since the previous checkpoint. Channels: {esc(legend)}.</p>")
        parts += checkpoint_answers(completions, checkpoint_steps(run_dir, last.get("step")))
    return parts
