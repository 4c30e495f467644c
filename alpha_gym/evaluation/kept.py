"""The kept files of a comparison run: one writer and one reader, for every rung, control and step 0.

A rung of the trainer comparison keeps, under its results folder (`alpha-gym compare`, trainers/compare/):

    step-0.jsonl        the start model's probe answers, in the rows below
    seed-S/NAME.jsonl   one line per probe brief: brief_id, step, answer (raw), formula, train_cpcv, train_valid
    seed-S/NAME.json    that run's numbers: rung, recipe, prompts, seed, n_prompts, train_seconds,
                        selected_step, checkpoints (one row per scored checkpoint), config, the training
                        means (clipped_share, ratio_mean, valid_share, nonzero_adv_share, kl_last), steps
    seed-S/NAME.book.json   the run's own book (trainers/compare/arms/kept.keep_run_book)
    settings.json       what the kept results were made with (scale, model, data, windows, probe briefs, verifier)

A control writes the same files with the same keys, so `--report-only`, the intervals and
`alpha-gym holdout-formulas` read it like any rung; its own extra keys (e.g. `complies`, `verifier_calls`)
sit beside them. The training means a control has no value for are None. Nothing here needs torch.

Every row of a kept .jsonl and every kept .json object carries a content hash of itself under "sha256"
(`alpha_gym.jsonable.content_hash`, the score-batch records' hash): the table is rebuilt from these files
alone, so a row edited by hand (a formula swapped, a train_cpcv changed), a torn file or a damaged stamp is
refused with the file and row named (`KeptError`), never read. After an intentional edit, seal the folder
again with `python -m alpha_gym.evaluation.kept --rehash FOLDER` (it re-hashes every kept file under FOLDER, and
leaves any other JSON there, one without the keys its kind of kept file has, as it was).
The `.archive.jsonl` files (the formulas a run's archive admitted) and `filter.json` (the difficulty filter's
pass rates) are logs the table does not read, and carry no hash.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from alpha_gym.errors import InputError
from alpha_gym.jsonable import content_hash, json_dumps

#: The key under which a kept row or object carries its content hash.
HASH_KEY = "sha256"
#: The command that seals kept files again after an intentional edit.
REHASH = "python -m alpha_gym.evaluation.kept --rehash {folder}"


class KeptError(InputError):
    """A kept file that cannot be used as it is: torn, not JSON, or edited since it was written."""


#: The training means of a rung's numbers; a control that trains nothing writes them as None.
TRAINING_MEANS = ("clipped_share", "ratio_mean", "valid_share", "nonzero_adv_share", "kl_last")


def answer_row(brief_id: str, step: int, answer: str, formula: str | None, train_cpcv: float | None,
               **extra) -> dict[str, Any]:
    """One kept probe answer, keyed as a rung's (`train_valid`: the train verifier found it valid)."""
    return {"brief_id": brief_id, "step": int(step), "answer": answer, "formula": formula,
            "train_cpcv": None if train_cpcv is None else float(train_cpcv), "train_valid": train_cpcv is not None,
            **extra}


def probe_scores(verifier, formulas: Sequence[str | None]) -> list[float | None]:
    """Train-window CPCV (the R1 channel) of each probe formula, None where invalid: as a rung's probe scoring.

    R1 depends on the formula and the panel only (not on the archive), so any fork of the verifier agrees.
    """
    out = []
    for f in formulas:
        s = verifier.score_formula(f) if f is not None else None
        out.append(s.channels["cpcv"] if s is not None and s.valid else None)
    return out


def checkpoint_row(step: int, train_cpcv: Sequence[float | None], train_panel, holdout_panel, verifier,
                   formulas: Sequence[str | None], run_dir: Path | None, label: str) -> dict[str, Any]:
    """The answers' row of a run's `checkpoints`: train CPCV (what selects), pseudo-holdout (reported only).

    Writes `run_dir/holdout-step-{step}.json` for `alpha-gym report` when run_dir is given, as a rung does.
    """
    from alpha_gym.evaluation.holdout import evaluate_holdout
    report = evaluate_holdout(list(formulas), train_panel, holdout_panel, train_verifier=verifier, label=label,
                              step=step)
    if run_dir is not None:
        report.save(run_dir, name=f"holdout-step-{step}.json")
    s = report.summary()
    valid = [c for c in train_cpcv if c is not None]
    return {"step": int(step), "train_cpcv": float(np.mean(valid)) if valid else None, "train_valid": len(valid),
            "holdout_score": s["mean_score"], "valid": s["n_valid"], "n": s["n_answers"], "families": s["n_families"],
            "book_return": report.book.total_return, "book_sharpe": report.book.sharpe}


def control_numbers(name: str, recipe: str, seed: int, seconds: float, step: int, checkpoint: dict, config: dict,
                    steps: int, **extra) -> dict[str, Any]:
    """A control's `seed-S/NAME.json`: a rung's keys (no training means), one checkpoint, selected by construction."""
    return {"rung": name, "recipe": recipe, "prompts": "none", "seed": int(seed), "n_prompts": 0,
            "train_seconds": round(float(seconds), 1), "selected_step": int(step), "checkpoints": [checkpoint],
            "config": config, **{k: None for k in TRAINING_MEANS}, "steps": int(steps), **extra}


def write_kept(results: Path, seed: int, name: str, rows: Sequence[dict], numbers: dict) -> tuple[Path, Path]:
    """Write results/seed-S/NAME.jsonl and NAME.json (each sealed, by an atomic replace). Returns both paths."""
    folder = Path(results) / f"seed-{seed}"
    jsonl, js = folder / f"{name}.jsonl", folder / f"{name}.json"
    write_rows(jsonl, rows)
    write_object(js, numbers)
    return jsonl, js


# ------------------------------------------------------------------------------ the writer and the reader
def sealed(obj: dict) -> dict:
    """`obj` with its content hash as the last key (a hash it held before is replaced)."""
    body = {k: v for k, v in obj.items() if k != HASH_KEY}
    return {**body, HASH_KEY: content_hash(body)}


def _replace(path: Path, text: str) -> None:
    """Write `text` whole: a temporary file renamed into place (a stopped run leaves the old file or the new)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def write_rows(path: Path, rows: Sequence[dict]) -> None:
    """A kept .jsonl: one sealed JSON object a line."""
    _replace(Path(path), "".join(json_dumps(sealed(r)) + "\n" for r in rows))


def write_object(path: Path, obj: dict) -> None:
    """A kept .json (a run's numbers, its book, settings.json): one sealed JSON object."""
    _replace(Path(path), json_dumps(sealed(obj), indent=1))


def _parse(text: str, path: Path, where: str):
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as err:  # RecursionError: a line nested thousands deep
        why = err.msg if isinstance(err, json.JSONDecodeError) else type(err).__name__
        raise KeptError(f"{path}: {where} is not JSON ({why}): the file is torn or damaged") from None


def _text(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise KeptError(f"{path} is not UTF-8 text (byte {err.start}): damaged") from None


def read_jsonl(path: Path) -> list[dict]:
    """The JSON objects of a .jsonl file, blank lines skipped; a line that is not a JSON object (a file cut
    mid-line) is a KeptError naming the file and line. No hash is checked: `read_rows` reads kept rows."""
    return [row for _n, row in _numbered(Path(path))]


def _numbered(path: Path) -> list[tuple[int, dict]]:
    out = []
    for n, line in enumerate(_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        row = _parse(line, path, f"line {n}")
        if not isinstance(row, dict):
            raise KeptError(f"{path}: line {n} is not a JSON object")
        out.append((n, row))
    return out


def _unsealed(obj: dict, path: Path, where: str) -> dict:
    """`obj` without its hash, once the hash is found to match its content (KeptError naming `where` if not)."""
    folder = path.parent.parent if path.parent.name.startswith("seed-") else path.parent  # the results folder
    if obj.get(HASH_KEY) is None:
        raise KeptError(f"{path}: {where} carries no content hash (\"{HASH_KEY}\"): made by hand or by an older "
                        f"alpha-gym; check it, then seal it with `{REHASH.format(folder=folder)}`")
    if obj[HASH_KEY] != content_hash(obj):
        raise KeptError(f"{path}: {where} was edited after it was written (its \"{HASH_KEY}\" does not match its "
                        f"content); restore it, or after an intentional edit seal it again with "
                        f"`{REHASH.format(folder=folder)}`")
    return {k: v for k, v in obj.items() if k != HASH_KEY}


def read_rows(path: Path) -> list[dict]:
    """The rows of a kept .jsonl, each checked against its hash (KeptError naming the file and line)."""
    path = Path(path)
    rows = [_unsealed(row, path, f"line {n}" + (f" (brief {row['brief_id']})" if isinstance(row.get("brief_id"), str)
                                                else "")) for n, row in _numbered(path)]
    if not rows:
        raise KeptError(f"{path} holds no rows: damaged")
    return rows


def read_json(path: Path) -> dict:
    """One JSON object from a file (a stamp); a damaged one is a KeptError. No hash is checked: see `read_object`."""
    path = Path(path)
    obj = _parse(_text(path), path, "the file")
    if not isinstance(obj, dict):
        raise KeptError(f"{path} is damaged: not a JSON object")
    return obj


def read_object(path: Path) -> dict:
    """A kept .json object, checked against its hash (KeptError naming the file)."""
    return _unsealed(read_json(path), Path(path), "the file")


def kept_files(folder: Path) -> list[Path]:
    """Every sealed kept file under a results folder: settings.json, step-0.jsonl, seed-S/*.jsonl and *.json
    (answers, numbers, books); not the archives' .archive.jsonl, nor the table and page it writes."""
    folder = Path(folder)
    files = [folder / "settings.json", folder / "step-0.jsonl"]
    files += sorted(p for p in folder.glob("seed-*/*.json*") if p.suffix in (".json", ".jsonl")
                    and not p.name.endswith(".archive.jsonl"))
    return [p for p in files if p.is_file()]


#: Keys that mark each kind of kept file, held by every one ever written: a row (`answer_row`), a run's numbers
#: (`control_numbers` and the rungs'), a run's book (`trainers.compare.arms.kept.keep_run_book`) and the comparison's
#: settings.json (`trainers.compare.run`; a compare --out folder's stamp names no probe briefs). `--rehash` seals
#: only files that hold them: a folder may also hold JSON no comparison wrote (an editor's settings.json, notes).
KEPT_KEYS = {"row": frozenset({"brief_id", "formula", "train_valid"}),
             "numbers": frozenset({"rung", "seed", "selected_step", "checkpoints"}),
             "book": frozenset({"rung", "seed", "members"}),
             "settings": frozenset({"scale", "probe_briefs"})}


def _kind(path: Path) -> str:
    if path.suffix == ".jsonl":
        return "row"
    if path.name == "settings.json" and not path.parent.name.startswith("seed-"):
        return "settings"
    return "book" if path.name.endswith(".book.json") else "numbers"


def not_kept(path: Path, content) -> str | None:
    """Why a file's decoded content (a .jsonl's list of rows) is no kept file of its kind (None when it is one):
    not a JSON object, or without the keys its kind always has (`KEPT_KEYS`)."""
    kind = _kind(path)
    objects = content if kind == "row" else [content]
    if not objects:
        return "holds no rows"
    if not all(isinstance(o, dict) for o in objects):
        return "a line is not a JSON object" if kind == "row" else "not a JSON object"
    missing = sorted(set().union(*(KEPT_KEYS[kind] - o.keys() for o in objects)))
    return f"no {', '.join(missing)}" if missing else None


def _decoded(path: Path):
    """A kept file's content: its rows (.jsonl) or its value (.json); a text that is not JSON is a KeptError (a
    torn kept file and a foreign one cannot be told apart: neither is sealed)."""
    if path.suffix == ".jsonl":
        return [_parse(line, path, f"line {n}") for n, line in enumerate(_text(path).splitlines(), start=1)
                if line.strip()]
    return _parse(_text(path), path, "the file")


def rehash(folder: Path) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Seal every kept file under `folder` again (after an intentional edit, or kept before hashes existed).
    Returns (the files sealed, [(a file left as it was, why it is no kept file)]): a JSON file without the keys
    of its kind is none of this command's business and is not touched. A text that is not JSON is refused."""
    sealed_files, left = [], []
    for p in kept_files(folder):
        content = _decoded(p)
        why = not_kept(p, content)
        if why is not None:
            left.append((p, why))
        elif p.suffix == ".jsonl":
            write_rows(p, content)
            sealed_files.append(p)
        else:
            write_object(p, content)
            sealed_files.append(p)
    return sealed_files, left


def main(argv=None) -> int:
    import argparse
    parser = argparse.ArgumentParser(prog="python -m alpha_gym.evaluation.kept",
                                     description="Seal a comparison's kept files again (their content hashes) "
                                                 "after an intentional edit: check the edit first.")
    parser.add_argument("--rehash", required=True, nargs="+", metavar="FOLDER", help="a --results folder")
    args = parser.parse_args(argv)
    for folder in args.rehash:
        if not Path(folder).is_dir():
            print(f"error: {folder} is not a folder", file=sys.stderr)
            return 2
        try:
            files, left = rehash(Path(folder))
        except KeptError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(f"{folder}: sealed {len(files)} kept files"
              + "".join(f"; left {p.relative_to(folder)} as it was (not a kept file: {why})" for p, why in left))
    return 0


if __name__ == "__main__":
    sys.exit(main())
