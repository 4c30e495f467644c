"""What an arm keeps: the small text files of one run for one seed that the table is rebuilt from
(`report.build_report`) and `alpha-gym holdout-formulas` reads, in the format of `alpha_gym.evaluation.kept`:

    results/seed-S/NAME.jsonl, NAME.json           an RL rung's shipped checkpoint (`keep_answers`), an evolution
                                                   run's answers and numbers along its curve (`keep_evolve`); the
                                                   best-of-N control writes its own (`best_of_n.run_best_of_n_rung`)
    results/seed-S/NAME.archive.jsonl, NAME.book.json  the formulas the run's archive admitted and the book chosen
                                                   from them (`keep_run_book`, `keep_evolve`)

An evolution run's kept answers: for each probe brief, the best-rewarded formula the run scored that meets the brief's
constraints (`alpha_gym.tasks.compliance`), else the best overall (`complies` says which). NAME.json holds the curve;
`keep_evolve(..., calls=B)` rewrites the kept files as the run stood after its last group ending at or before B calls
(its programs, its book, its curve to there: `alpha_gym.search.evolve_arm` says why that is a run of budget B's).
Nothing here reads the pseudo-holdout but `checkpoint_row`, which scores the kept answers on it for the table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from alpha_gym.evaluation.kept import answer_row, checkpoint_row, control_numbers, write_kept, write_object
from alpha_gym.evaluation.selection import Candidate, select_correlation_capped
from alpha_gym.jsonable import json_dumps
from alpha_gym.search.evolution import BOOK_FILE, STATE_FILE
from alpha_gym.search.evolve_arm import (SHIPPED_KEYS, EvolveRunError, archive_lines, book_damage, choice_of,
                                        curve_at, curve_rows, group_seconds, pool_of, shipped_book,
                                        validation_readings)
from alpha_gym.search.run_state import PROPOSALS_LOG, check_folder, read_json, read_log, read_state


# ------------------------------------------------------------------------------ an RL rung's answers
def answer_rows(probe_file: Path, probe_briefs, step: int) -> list[dict]:
    """The probe answers of one checkpoint as kept rows (`kept.answer_row`): brief id, raw answer, formula,
    train-window score."""
    d = json.loads(Path(probe_file).read_text())
    return [answer_row(b.id, step, a, f, c) for b, a, f, c in zip(probe_briefs, d["answers"], d["formulas"],
                                                                  d["train_cpcv"])]


def keep_answers(results: Path, result: dict, probe_briefs) -> None:
    """results/seed-S/RUNG.jsonl (the shipped checkpoint's probe answers) and RUNG.json (its numbers)."""
    seed, name, step = result["seed"], result["rung"], result["selected_step"]
    log = result["log"]

    def mean(key):
        vals = [x[key] for x in log if x.get(key) is not None]
        return round(float(sum(vals) / len(vals)), 6) if vals else None
    summary = {k: result[k] for k in ("rung", "recipe", "prompts", "seed", "n_prompts", "train_seconds",
                                      "selected_step", "checkpoints")}
    summary.update(config=result["config"], clipped_share=mean("clipped_share"), ratio_mean=mean("ratio_mean"),
                   valid_share=mean("valid_share"), nonzero_adv_share=mean("nonzero_adv_share"),
                   kl_last=log[-1].get("kl") if log else None, steps=len(log),
                   distinct_forms_mean=mean("distinct_forms_mean"), verifier_calls=result.get("verifier_calls"))
    write_kept(results, seed, name, answer_rows(Path(result["probe_files"][step]), probe_briefs, step), summary)


# ------------------------------------------------------------------------------ the run's own book
def keep_run_book(results: Path, seed: int, name: str, run_dir: Path, verifier) -> dict | None:
    """results/seed-S/NAME.archive.jsonl (the formulas the run's archive admitted: formula, step, train CPCV,
    turnover) and NAME.book.json (the correlation-capped book chosen from them on the train window, seed
    section 8: |corr| < 0.5, turnover >= 2%). A training run writes its archive.jsonl as it goes
    (`trainers.run_book`); a control's grown archive (archive.npz) is written out here, its entries unattributed
    to a step. None for a folder that is neither. An evolve run on a fold keeps the book it shipped, chosen on
    the validation window (its book.json), this train book beside it (`evolve_arm.shipped_book`)."""
    from trainers.run_book import ARCHIVE_LOG, append_admitted, build_run_book
    run_dir = Path(run_dir)
    log = run_dir / ARCHIVE_LOG
    if not log.exists():
        if (run_dir / "archive.npz").exists():  # a control: its grown archive, written out once
            grown = verifier.fork()
            grown.load_archive(run_dir / "archive.npz")
            append_admitted(log, grown.archive, 0)
        elif not (run_dir / "log.jsonl").exists():
            return None
        if not log.exists():  # nothing admitted: an empty book, kept as such
            log.write_text("", encoding="utf-8")
    folder = Path(results) / f"seed-{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.archive.jsonl").write_text(log.read_text(encoding="utf-8"), encoding="utf-8")
    # the comparison's verifier arrives with the seeds only, so an entry without a step was admitted during
    # this run (a control's, or a run resumed from before it kept the file): it counts
    book = build_run_book(log, verifier, include_unattributed=True).to_dict()
    shipped = _shipped_on_fold(run_dir / BOOK_FILE)
    if shipped is not None:     # an evolve run on a fold ships its book chosen on the validation window
        book = shipped_book(book, choice_of(shipped))
    d = {"rung": name, "seed": int(seed), **book}
    write_object(folder / f"{name}.book.json", d)
    return d


def _shipped_on_fold(path: Path) -> dict | None:
    """The book an evolve run on a fold shipped (its book.json, `evolve_arm.ship_on_validation`); None where the
    folder holds none (a trained rung, a control) or its book was chosen on train alone (a run on no fold)."""
    if not path.exists():
        return None
    d = read_json(path, "book")
    damage = book_damage(d)
    if damage is not None:
        raise EvolveRunError(f"{path} is not the book an evolve run writes ({damage}): damaged or edited (remove it, "
                             "and rerun the same command to write it again)")
    return d if "chosen_on" in d else None


# ------------------------------------------------------------------------------ an evolution run's
def keep_evolve(run_dir, verifier, train, holdout, probe: Sequence, results, seed: int, *, name: str = "evolve",
                calls: int | None = None, step: int | None = None, config: dict | None = None,
                holdout_history=None, fold=None) -> dict:
    """Write results/seed-S/NAME.jsonl, NAME.json, NAME.book.json and NAME.archive.jsonl from the run in `run_dir`
    (its state.json), as it stood after its last group ending at or before `calls` (None: the whole run).

    verifier: a train-window verifier (the probe answers' CPCV and the book's P&L do not depend on its archive).
    holdout_history: the lookback sessions of `holdout` where they are not the end of `train` (`run_evolve`).
    fold: the run's walk-forward fold (`FoldPanels`; None: a run on no fold): NAME.book.json is then the book the
    run ships, chosen on the fold's validation window (`evolve_arm.shipped_book`: the run's book.json at its end,
    chosen here from the pool as it stood at `calls` before), and NAME.json's "shipped" says what it chose.
    Returns the numbers written to NAME.json (a control's keys, `alpha_gym.evaluation.kept.control_numbers`,
    plus budget, verifier_calls, groups, mutator shares, the curve and the book)."""
    from alpha_gym.tasks.compliance import check_compliance
    run_dir = Path(run_dir)
    state_path = run_dir / STATE_FILE
    if not state_path.exists():
        raise EvolveRunError(f"{run_dir} holds no evolve run ({STATE_FILE} is missing)")
    checked = read_state(run_dir)
    state = checked.state
    history = list(state["history"])
    if not history:
        raise EvolveRunError(f"{run_dir}: the run scored no group yet")
    seconds = group_seconds(run_dir)
    curve = curve_rows(history, seconds, validation_readings(run_dir))   # a fold run's validation column
    at = curve[-1] if calls is None else curve_at(curve, calls)
    curve = [r for r in curve if r["group"] <= at["group"]]
    limits = verifier.config.limits
    programs = sorted((p for p in checked.database.programs if p.call <= at["calls"]), key=lambda p: (-p.reward, p.id))
    step = at["group"] if step is None else int(step)
    rows, formulas, cpcvs, complied = [], [], [], 0
    trees: dict[int, object] = {}

    def tree(p):                              # parsed once, for every brief that looks at it
        if p.id not in trees:
            trees[p.id] = p.tree(limits)
        return trees[p.id]
    for brief in probe:
        hit = next((p for p in programs if all(check_compliance(brief, tree(p)).values())), None)
        pick = hit if hit is not None else (programs[0] if programs else None)
        complied += hit is not None
        formulas.append(None if pick is None else pick.text)
        cpcvs.append(None if pick is None else pick.core)
        rows.append(answer_row(brief.id, step, "" if pick is None else f"<alpha>{pick.text}</alpha>",
                               None if pick is None else pick.text, None if pick is None else pick.core,
                               complies=hit is not None, reward=None if pick is None else pick.reward,
                               origin=None if pick is None else pick.origin, call=None if pick is None else pick.call))
    checkpoint = checkpoint_row(step, cpcvs, train if holdout_history is None else holdout_history, holdout, verifier,
                                formulas, run_dir, label=name)
    admitted = [line for line in archive_lines(state) if line["step"] <= at["group"]]
    finished = run_dir / BOOK_FILE
    book = None
    if at["group"] == state["groups"] and state["calls"] >= state["budget"] and finished.exists():
        book = _finished_book(finished, at["group"])   # the book the run chose at its end: no formula traded again
    if book is None:
        book = _book(admitted, verifier, state["settings"]["book"])
    if fold is not None and "chosen_on" not in book:    # a budget prefix of a fold run: chosen as its end is
        from alpha_gym.evaluation.shipped import choose_to_ship
        rule = state["settings"]["book"]
        book = shipped_book(book, choose_to_ship(pool_of(admitted, programs), verifier, fold,
                                                 max_corr=rule["max_corr"], min_turnover=rule["min_turnover"]))
    logged = read_log(run_dir / PROPOSALS_LOG, state["groups"], state["calls"])
    scored = [r for _line, r in logged if r.get("status") == "scored" and r["call"] <= at["calls"]]
    numbers = control_numbers(
        name, "evolve", seed, at["seconds"] or 0.0, step, checkpoint,
        {**(config or {}), "settings": state["settings"]["database"], "group_size": state["settings"]["group_size"]},
        steps=at["group"], budget=state["budget"] if calls is None else int(calls), verifier_calls=at["calls"],
        seed_formulas=len(state["settings"]["seed_formulas"]), complies=complied,
        valid_share=sum(bool(r["valid"]) for r in scored) / len(scored) if scored else None,
        best_reward=at["best_reward"], programs=len(programs), curve=curve,
        mutator_calls=_origins(scored))
    if "chosen_on" in book:        # a fold run: what it ships, chosen on the validation window, beside the train best
        numbers["shipped"] = {k: book[k] for k in ("chosen_on", "rule", "fallback", "best", "train_best")}
    write_kept(check_folder(results, "--results"), seed, name, rows, numbers)
    folder = Path(results) / f"seed-{seed}"
    (folder / f"{name}.archive.jsonl").write_text("".join(json_dumps(x) + "\n" for x in admitted), encoding="utf-8")
    write_object(folder / f"{name}.book.json", {"rung": name, "seed": int(seed), **book})
    return numbers


def _origins(scored: Sequence[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in scored:
        out[r["origin"]] = out.get(r["origin"], 0) + 1
    return dict(sorted(out.items()))


def _finished_book(path: Path, groups: int) -> dict | None:
    """The run's book.json when it is the book after `groups` groups (None when it is another checkpoint's: a
    kill between the state and the book leaves the book before; a file without "groups" predates the check)."""
    d = read_json(path, "book")
    damage = book_damage(d)
    if damage is not None:
        raise EvolveRunError(f"{path} is not the book an evolve run writes ({damage}): damaged or edited (remove it, "
                             "and rerun the same command to write it again)")
    if d.get("groups", groups) != groups:
        return None
    return {"n_admitted": d["n_admitted"], "n_members": d["n_members"], "effective_bets": d["effective_bets"],
            "members": d["members"], "unscored": [], "selection": d["selection"],
            **{k: d[k] for k in SHIPPED_KEYS if k in d}}


def _book(admitted: Sequence[dict], verifier, settings: dict) -> dict:
    """The correlation-capped book of the admitted formulas (`trainers.run_book.build_run_book`'s keys)."""
    formulas = list(dict.fromkeys(line["formula"] for line in admitted))
    candidates = [Candidate.from_evaluated(verifier.evaluate(f)) for f in formulas]
    selection = select_correlation_capped(candidates, settings["max_corr"], settings["min_turnover"])
    from alpha_gym.jsonable import finite_or_none
    return {"n_admitted": len(formulas), "n_members": selection.n,
            "effective_bets": finite_or_none(selection.effective_bets), "members": list(selection.members),
            "unscored": [], "selection": selection.to_dict()}
