"""The improve task's warm start (issue 40.4): parseable answers to improve-task prompts before vs after SFT.

    python -m benchmarks.improve_warm_start --run runs/evolve-tree-1600 [--run RUN2 ...] --out runs/improve-warm \\
        --prompts 8 --max-pairs 32 --per-prompt 1 --batch-size 4 --lr 5e-4 \\
        --data ../shared/data/us_equities/us_daily_train.csv.gz --universe ../shared/data/us_equities/universe_us46.txt

1. pairs: `alpha-gym sft-data --task improve --from RUN [--from RUN2 ...]` (`alpha_gym.search.improve_pairs`),
   capped at --max-pairs a run;
2. held-out prompts: the improve prompts of --prompts parent sets of the first run whose child did NOT beat its
   best parent (so no pair trains on them), spread evenly over the run in child order;
3. greedy answers (`trainers.rollout.generate_answers`, --max-new-tokens) of the start model and of the SFT model;
4. for each: parseable (an `<alpha>` block whose formula parses under the run's Limits), a copy (its canonical
   form is a parent's), new parseable (parseable and not a copy), and valid on the train window (the run's
   us46 panel with the last 252 sessions cut off, as `alpha-gym evolve` cut it; skipped without --data).

Writes OUT/pairs.jsonl, OUT/before.json, OUT/sft/ (the model), OUT/after.json, OUT/answers.json and prints the
table's numbers; a rerun into the same OUT reuses the stages already written (delete OUT to start again).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from alpha_gym.jsonable import json_dumps
from alpha_gym.language import AnswerError, FormulaError, canonical, extract, parse
from alpha_gym.search.improve_pairs import build_improve_dataset, load_run
from alpha_gym.tasks.parents import parents_context
from alpha_gym.tasks.task import render_prompt


def held_out(programs, limits, brief, train_sets: set, n: int) -> list[tuple[str, list]]:
    """(prompt, parents) of `n` parent sets whose child did not beat its best parent, none a training set."""
    sets, seen = [], set()
    for child in programs:
        key = tuple(child.parents)
        if not key or key in train_sets or key in seen:
            continue
        parents = [programs[q] for q in key]
        if child.reward > max(p.reward for p in parents):
            continue
        seen.add(key)
        sets.append(parents)
    step = max(1, len(sets) // n)
    picked = sets[::step][:n]
    return [(render_prompt(brief, limits, {"parents": parents_context(ps)}, task="improve"), ps) for ps in picked]


def read(answer: str, parents, limits, verifier) -> dict:
    try:
        node = parse(extract(answer).formula, limits)
    except (AnswerError, FormulaError, RecursionError) as err:
        return {"answer": answer, "parseable": False, "copy": False, "valid": False, "why": type(err).__name__}
    copy = canonical(node) in {canonical(p.tree(limits)) for p in parents}
    valid = None if verifier is None else bool(verifier.score(answer).valid)
    return {"answer": answer, "parseable": True, "copy": copy, "valid": valid}


def answer_all(model_dir, prompts, parent_sets, limits, verifier, max_new_tokens: int) -> tuple[list[dict], float]:
    from trainers.models import load_base
    from trainers.rollout import generate_answers
    model, tokenizer = load_base(model_dir)
    t0 = time.perf_counter()
    answers = [a[0] for a in generate_answers(model, tokenizer, prompts, max_new_tokens=max_new_tokens)]
    return [read(a, ps, limits, verifier) for a, ps in zip(answers, parent_sets)], time.perf_counter() - t0


def _stage(path: Path, compute):
    """A stage's (rows, seconds), kept in `path` so a rerun after a kill does not redo it (CPU hours are scarce)."""
    if path.exists():
        kept = json.loads(path.read_text())
        return kept["rows"], kept["seconds"]
    rows, seconds = compute()
    path.write_text(json_dumps({"rows": rows, "seconds": round(seconds, 1)}, indent=1))
    return rows, seconds


def summary(rows: list[dict]) -> dict:
    parsed = [r for r in rows if r["parseable"]]
    return {"n": len(rows), "parseable": len(parsed), "copies": sum(r["copy"] for r in parsed),
            "new_parseable": sum(not r["copy"] for r in parsed),
            "valid": None if any(r["valid"] is None for r in parsed) else sum(bool(r["valid"]) for r in parsed)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, action="append",
                   help="an evolve run folder (its --out); repeatable: pairs from each, held-out prompts from the first")
    p.add_argument("--out", required=True)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--max-pairs", type=int, default=96)
    p.add_argument("--per-prompt", type=int, default=2)
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--max-length", type=int, default=1100)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--data", help="the run's market data (to score validity on its train window)")
    p.add_argument("--universe")
    p.add_argument("--pseudo-holdout", type=int, default=252)
    args = p.parse_args()
    from trainers.sft import SFTSettings, run_sft
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = args.run if len(args.run) > 1 else args.run[0]
    made = build_improve_dataset(runs, out / "pairs.jsonl", max_pairs=args.max_pairs, per_prompt=args.per_prompt)
    programs, limits, brief = load_run(args.run[0])
    pairs = [json.loads(x) for x in (out / "pairs.jsonl").read_text().splitlines()]
    first = pairs[:made["runs"][0]["rows"]] if "runs" in made else pairs     # the first run's pairs come first
    prompts = held_out(programs, limits, brief, {tuple(r["parents"]) for r in first}, args.prompts)
    verifier = None
    if args.data:
        from alpha_gym.commands.flags import universe_arg
        from alpha_gym.market.resolve import resolve_panel
        from alpha_gym.scoring.verifier import Verifier
        full = resolve_panel(data=args.data, universe=universe_arg(args.universe))   # as `alpha-gym evolve` reads it
        cut = full.n_days - args.pseudo_holdout
        verifier = Verifier(full.window(end=full.dates[cut - 1]))
    texts, sets = [q for q, _ in prompts], [ps for _, ps in prompts]
    before, gen_before = _stage(out / "before.json", lambda: answer_all(None, texts, sets, limits, verifier,
                                                                       args.max_new_tokens))
    settings = SFTSettings(epochs=args.epochs, batch_size=args.batch_size, learning_rate=args.lr,
                           max_length=args.max_length, threads=args.threads)
    summary_path = out / "sft" / "sft_summary.json"
    trained = (json.loads(summary_path.read_text()) if summary_path.exists()
               else run_sft(None, out / "pairs.jsonl", out / "sft", settings))
    after, gen_after = _stage(out / "after.json", lambda: answer_all(trained["model_dir"], texts, sets, limits,
                                                                     verifier, args.max_new_tokens))
    result = {"pairs": made, "sft": {k: trained[k] for k in ("rows", "steps", "seconds", "first_loss", "last_loss",
                                                              "train_loss", "longest_row", "threads")},
              "before": summary(before), "after": summary(after),
              "generate_seconds": {"before": round(gen_before, 1), "after": round(gen_after, 1)},
              "answers": {"before": before, "after": after}}
    (out / "answers.json").write_text(json_dumps(result, indent=1))
    print(json_dumps({k: v for k, v in result.items() if k != "answers"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
