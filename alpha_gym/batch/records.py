"""Input items and output records of batch scoring.

Input: a text file with one formula per line (blank lines skipped), or JSONL whose
objects hold "formula" (scored with `Verifier.score_formula`) or "answer" (a raw model
answer, scored with `Verifier.score`) — the rows of `alpha-gym sft-data` work as they are. A row's
"brief_id", where it names a seeded or fixed brief, is the brief the item is scored with, and its record
carries it (any other id is ignored, as other keys are).

Output: JSONL, one record per input item, `{"index", "kind", "input", "score", "scored_with",
"sha256"}`, where "score" is exactly the object `alpha-gym score --json` prints, "scored_with"
the fingerprint of the panel, verifier config and alpha-gym version it was scored with, and
"sha256" a hash of the rest of the record. A finished output is sorted by index, so the same
input gives the same bytes however it was scored. A sidecar `OUT.meta.json` names the input,
panel and config; resuming into an output made with others is refused, and so is resuming
into one whose records (checked one by one, so a lost sidecar changes nothing) were scored
with something else or edited since.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from alpha_gym.jsonable import content_hash, json_dumps
from alpha_gym.errors import InputError
from alpha_gym.folder_stamp import claim_stamp
from alpha_gym.tasks.sets import brief_by_id


class BatchError(InputError):
    """Batch input or output that cannot be used (with what is wrong and where)."""


def read_items(path, briefs: bool = False) -> list[tuple]:
    """[(kind, text)] with kind "formula" or "answer", in file order; with `briefs`, [(kind, text, brief_id)]: the
    JSONL row's brief id where it names a seeded or fixed brief, else None (the item is scored without one)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"formula file not found: {path}")
    items: list[tuple[str, str, str | None]] = []
    jsonl = path.suffix.lower() in (".jsonl", ".json")
    with open(path, encoding="utf-8-sig") as fh:  # -sig: an editor's byte-order mark is not part of item 1
        for n, line in enumerate(_text_lines(fh, path), start=1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            if not jsonl:
                items.append(("formula", line.strip(), None))
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise BatchError(f"{path}: line {n} is not JSON: {err}") from None
            kinds = [k for k in ("formula", "answer") if isinstance(row, dict) and isinstance(row.get(k), str)]
            if not kinds:
                raise BatchError(f'{path}: line {n} has no "formula" or "answer" text')
            brief_id = row.get("brief_id")  # kept only where it names a brief: other ids are ignored, as ever
            items.append((kinds[0], row[kinds[0]], brief_id if brief_by_id(brief_id) is not None else None))
    if not items:
        raise BatchError(f"{path} holds no formulas")
    return items if briefs else [(kind, text) for kind, text, _ in items]


def _text_lines(fh, path):
    """The lines of a text file; a file that is not UTF-8 text (a binary file, Latin-1) is a BatchError."""
    try:
        yield from fh
    except UnicodeDecodeError as err:
        raise BatchError(f"{path} is not UTF-8 text (byte 0x{err.object[err.start]:02x} is not valid UTF-8); give "
                         "one formula per line, or JSONL") from None


def _read_meta(path: Path) -> dict:
    """The sidecar's JSON object; one that is damaged or not ours is a BatchError saying what to remove."""
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        old = err
    if not isinstance(old, dict):
        raise BatchError(f"{path} is damaged (not a JSON object: {str(old)[:120]}); remove it and the output "
                         "beside it, or choose another --out")
    return old


RESTART_HINT = "choose another --out, or rerun with --restart to score it again from scratch"


def scored_with(panel_fingerprint: str, config_key: str) -> str:
    """What a record was scored with: the panel, the verifier config and the alpha-gym version, as one hash."""
    from alpha_gym._version import __version__
    text = json_dumps({"panel": panel_fingerprint, "config": config_key, "alpha_gym": __version__}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def record(index: int, kind: str, text: str, score, stamp: str, brief_id: str | None = None) -> str:
    """One output line (no newline); `stamp` is `scored_with(...)` of the run; "brief_id" only where one was given."""
    rec = {"index": index, "kind": kind, "input": text, **({} if brief_id is None else {"brief_id": brief_id}),
           "score": score.to_dict(), "scored_with": stamp}
    rec["sha256"] = content_hash(rec)
    return json_dumps(rec)


def check_paths(formulas, out) -> None:
    """Refuse an --out that is the --formulas file (or would replace it: its sidecar, its sorting temp file)."""
    src = Path(formulas)
    for target in (Path(out), meta_path(out), Path(out).with_name(Path(out).name + ".tmp")):
        same = target.resolve() == src.resolve()
        if not same and target.exists() and src.exists():
            same = os.path.samefile(target, src)  # a hard link or a bind mount: another name, the same file
        if same:
            raise BatchError(f"--out {out} would overwrite the --formulas file {formulas}; choose another --out")


def discard_output(out) -> None:
    """Remove an output and its sidecar (--restart): the next run scores everything again."""
    for path in (Path(out), meta_path(out)):
        path.unlink(missing_ok=True)


#: How a refusal names each key of the sidecar.
_META_WORDS = {"input": "formulas file", "items": "number of items", "panel": "panel", "config": "verifier config"}


def meta_path(out) -> Path:
    return Path(str(out) + ".meta.json")


def check_meta(out, meta: dict) -> None:
    """Write the sidecar for a new output, or refuse an output made with another input, panel or config."""
    path = meta_path(out)

    def refusal(path: Path):
        old = _read_meta(path)
        diff = sorted(k for k in set(old) | set(meta) if old.get(k) != meta.get(k))
        if not diff:
            return None
        what = ", ".join(f"{_META_WORDS.get(k, k)}" + (f" ({old.get(k)}, now {meta.get(k)})" if k == "items" else "")
                         for k in diff)
        return BatchError(f"{out} was made with a different {what}; {RESTART_HINT} (it removes {Path(out).name} "
                          f"and {path.name})")
    claim_stamp(path, json_dumps(meta, indent=1), refusal, check=Path(out).exists())


def load_done(out, items: list[tuple[str, str]], stamp: str) -> set[int]:
    """The indices already in `out`; a torn last line (an interrupted run) is cut off first.

    Every record must be for this input, scored with `stamp` and unedited (its "sha256"):
    the sidecar alone can be lost, so each record carries what it was scored with.
    """
    path = Path(out)
    if not path.exists():
        return set()
    done: set[int] = set()
    good_end = 0
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, start=1):
            if not raw.endswith(b"\n"):
                break  # only the last line can lack its newline: the run stopped while writing it
            rec = _parse(out, n, raw)
            index = rec["index"]
            if not (0 <= index < len(items)) or (rec.get("kind"), rec.get("input"), rec.get("brief_id")) != \
                    (*items[index][:2], items[index][2] if len(items[index]) > 2 else None):
                raise BatchError(f"{out}: the record for item {index} is not for this input file; {RESTART_HINT}")
            if rec.get("sha256") != content_hash(rec):
                raise BatchError(f"{out}: line {n} (item {index}) was edited after it was scored, or written by an "
                                 f"older alpha-gym; {RESTART_HINT}")
            if rec.get("scored_with") != stamp:
                raise BatchError(f"{out}: item {index} was scored with another panel, verifier config or alpha-gym "
                                 f"version than this run's; {RESTART_HINT}")
            if index in done:
                raise BatchError(f"{out}: item {index} appears twice; {RESTART_HINT}")
            done.add(index)
            good_end += len(raw)
    if good_end < path.stat().st_size:
        with open(path, "r+b") as fh:
            fh.truncate(good_end)
    return done


def _parse(out, n: int, raw: bytes) -> dict:
    """One complete line of an output as a record (BatchError when it is not one)."""
    try:
        rec = json.loads(raw)
    except ValueError:
        rec = None
    if not isinstance(rec, dict) or type(rec.get("index")) is not int:
        raise BatchError(f"{out}: line {n} is not a score-batch record; {RESTART_HINT}")
    return rec


def finish(out) -> int:
    """Sort a complete output by index (atomic replace): the same bytes whatever the order of scoring.
    Returns how many distinct records it holds."""
    path = Path(out)
    lines = path.read_bytes().splitlines(keepends=True)
    lines.sort(key=lambda raw: json.loads(raw)["index"])
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(b"".join(lines))
    os.replace(tmp, path)
    return len({json.loads(raw)["index"] for raw in lines})
