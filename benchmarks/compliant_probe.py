"""A start model's answers to the probe sets, and how far they follow their briefs (issue 55, items 1 and 4).

    # answer-local: answers in this process, as the comparison's probe draws them (greedy, 64 new tokens);
    # --temperature 0.7 for one sampled answer a brief (what the 2026-12-07 figures used)
    python benchmarks/compliant_probe.py answer-local --model-dir runs/compliant/sft16/model --label after \
        --out benchmarks/results/compliant-warm-start [--temperature 0.7 --sets probe]
    # answer: the kept served eval's way (llama.cpp, `alpha-gym eval`, 256 tokens, greedy and 3 samples at 0.7)
    python benchmarks/compliant_probe.py answer --model-dir runs/compliant/sft16/model --label after \
        --out benchmarks/results/compliant-warm-start
    # score: any kept answer files (JSONL rows with brief_id and formula), one table row each
    python benchmarks/compliant_probe.py score benchmarks/results/compliant-warm-start/after-*.jsonl \
        benchmarks/results/eval-sft-start/answers.jsonl benchmarks/results/compare-long/step-0.jsonl \
        --data ../shared/data/us_equities/us_daily_train.csv.gz \
        --universe ../shared/data/us_equities/universe_us46.txt --holdout-start 2024-08-19

`answer-local` answers as `trainers.rollout.generate_answers` does for compare's probe (compare-long's step-0
answers: greedy, 64 tokens), a batch of 8 at a time, each batch's rows kept at once. `answer` runs what the kept
eval of the start model ran (`benchmarks/served_eval.py`: an f32 GGUF served by llama.cpp, one thread, repeat_penalty 1.0, 256 tokens, seed 0): greedy (temperature 0, one answer a brief) and
sampled (temperature 0.7, 3 answers a brief) on `probe` (two families training never shows) and `probe_seen`
(unseen briefs of the training families). The eval scores on the synthetic market only to finish its run: the
kept rows (brief_id, sample, answer, formula: `alpha-gym holdout-formulas --formulas` reads them) are scored by
`score` on the real panel.

`score`, per file, on the training window before --holdout-start (the kept evals' 2012-06-29..2024-08-16):
valid (every validity rule); compliance as R13 pays it (`trainers.compare.report.brief_compliance_of`: the extended
checks on the live tree, an invalid answer meets none): answers meeting every check and the mean share met; the
valid answers' train CPCV (mean, share above 0); distinct formulas; and the effective bets of the valid answers'
pseudo-holdout net P&L (`effective_bets`, as compare's probe column).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from alpha_gym.jsonable import json_dumps

SETS = ("probe", "probe_seen")
#: (mode, eval flags): the kept eval's sampled settings and their greedy twin.
MODES = (("greedy", ("--temperature", "0", "--samples", "1")),
         ("sampled", ("--temperature", "0.7", "--samples", "3")))


def answer(args) -> None:
    from alpha_gym.tasks.generator import save_briefs
    from alpha_gym.tasks.sets import brief_set
    from served_eval import run_eval  # this script's folder
    from trainers.export_gguf import export_gguf, serve_gguf
    work, out = Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    gguf = work / "model-f32.gguf"
    t0 = time.perf_counter()
    export = export_gguf(args.model_dir, gguf, overwrite=True)
    run = {"model_dir": args.model_dir, "export": {k: export[k] for k in ("outtype", "sha256", "source_identity")},
           "date": time.strftime("%Y-%m-%d", time.gmtime()), "evals": {}}
    args.data = args.universe = None  # run_eval's real-data flags: the eval scores on the synthetic market
    with serve_gguf(gguf, "start-model", threads=1, log_dir=work) as url:
        files = {name: save_briefs(brief_set(name), work / f"{name}.jsonl") for name in args.sets}
        for mode, flags in MODES:  # greedy on every set first: the cheaper answers, kept first
            for name, briefs in files.items():
                folder = work / f"{name}-{mode}"
                shutil.rmtree(folder, ignore_errors=True)
                t1 = time.perf_counter()
                command = run_eval(url, "start-model", folder, args, "--briefs", str(briefs), "--max-tokens", "256",
                                   "--seed", "0", "--limit", str(args.limit), *flags, real=False)
                rows = [json.loads(x) for x in (folder / "answers.jsonl").read_text().splitlines() if x.strip()]
                kept = out / f"{args.label}-{name}-{mode}.jsonl"
                kept.write_text("".join(json_dumps({k: r.get(k) for k in ("brief_id", "sample", "answer", "formula")})
                                        + "\n" for r in rows))
                run["evals"][kept.name] = {"command": command, "answers": len(rows),
                                           "seconds": round(time.perf_counter() - t1, 1)}
                print(f"{kept}: {len(rows)} answers in {time.perf_counter() - t1:.0f} s", file=sys.stderr, flush=True)
                run["seconds"] = round(time.perf_counter() - t0, 1)
                (out / f"{args.label}-run.json").write_text(json_dumps(run, indent=1))  # a stopped run keeps its record


def answer_local(args) -> None:
    """Answers in this process (greedy by default: one a brief), as the comparison's probe draws them (`trainers.rollout.generate_answers`:
    transformers, left-padded batches of 8, the write task's prompts under the default limits); a row per brief
    kept after each batch."""
    from alpha_gym.language.answer import AnswerError, extract
    from alpha_gym.tasks.prompts import TaskPrompts
    from alpha_gym.tasks.sets import brief_set
    from trainers.models import load_base
    from trainers.rollout import generate_answers
    import torch
    torch.set_num_threads(1)
    model, tokenizer = load_base(args.model_dir)
    out = Path(args.out)
    for name in args.sets:
        briefs = list(brief_set(name))[: args.limit or None]
        prompts = TaskPrompts().prompts(briefs)
        mode = "greedy" if args.temperature <= 0 else f"sampled-t{args.temperature:g}"
        kept, t0, rows = out / f"{args.label}-{name}-{mode}.jsonl", time.process_time(), []
        for start in range(0, len(briefs), 8):
            texts = [a[0] for a in generate_answers(model, tokenizer, prompts[start:start + 8],
                                                    temperature=args.temperature, seed=args.seed,
                                                    max_new_tokens=args.max_tokens)]
            for brief, text in zip(briefs[start:start + 8], texts):
                try:
                    formula = extract(text).formula
                except AnswerError:
                    formula = None
                rows.append({"brief_id": brief.id, "sample": 0, "answer": text, "formula": formula})
            kept.write_text("".join(json_dumps(r) + "\n" for r in rows))
            print(f"{kept}: {len(rows)} answers, {time.process_time() - t0:.0f} CPU s", file=sys.stderr, flush=True)


def score_file(path: Path, verifier, train, holdout, verdicts: dict) -> dict:
    """One table row for a kept answers file."""
    import numpy as np
    from alpha_gym.evaluation.kept import KeptError, read_rows
    from alpha_gym.evaluation.selection import effective_bets
    from trainers.compare.report import brief_compliance_of, rescore, train_validity
    try:
        rows = read_rows(path)  # kept comparison files carry a seal
    except KeptError:  # an eval's answers.jsonl or this script's files: no seal
        rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    ok = train_validity(rows, verifier, verdicts)
    compliance = brief_compliance_of(rows, ok)
    cpcvs = [verifier.valid_book(r["formula"]).cpcv for r, v in zip(rows, ok) if v]
    _, nets, _, _, _ = rescore(rows, train, holdout, ok)
    return {"file": str(path.relative_to(ROOT) if path.is_absolute() and ROOT in path.parents else path),
            "n": len(rows), "briefs": len({r["brief_id"] for r in rows}),
            "parsed": sum(isinstance(r.get("formula"), str) and bool(r["formula"]) for r in rows),
            "valid": sum(ok), "met_all": compliance["brief_met_all"], "share": compliance["brief_share"],
            "mean_cpcv": float(np.mean(cpcvs)) if cpcvs else None,
            "cpcv_above_0": sum(c > 0 for c in cpcvs),
            "distinct": len({r["formula"] for r, v in zip(rows, ok) if v}),
            "effective_bets": effective_bets(np.array(nets)) if nets else 0.0}


def score(args) -> None:
    from alpha_gym.commands.evaluation import split_at_holdout
    from alpha_gym.market.resolve import resolve_panel
    from alpha_gym.commands.flags import universe_arg
    from alpha_gym.scoring.verifier import Verifier
    full = resolve_panel(data=args.data, universe=universe_arg(args.universe))
    train, holdout = split_at_holdout(full, args.holdout_start)
    verifier = Verifier(train)
    verdicts: dict = {}
    t0 = time.process_time()
    table = [score_file(Path(p), verifier, train, holdout, verdicts) for p in args.files]
    print("| answers | n | <alpha> block | valid | meet every check | mean share met | valid: mean train CPCV | "
          "CPCV > 0 | distinct valid | eff. bets |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in table:
        cpcv = "-" if r["mean_cpcv"] is None else f"{r['mean_cpcv']:+.2f}"
        print(f"| {r['file']} | {r['n']} | {r['parsed']} | {r['valid']} | {r['met_all']} | {r['share']:.3f} | "
              f"{cpcv} | {r['cpcv_above_0']} | {r['distinct']} | {r['effective_bets']:.1f} |")
    print(f"scored in {time.process_time() - t0:.0f} CPU s", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json_dumps(table, indent=1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("answer")
    a.add_argument("--model-dir", required=True)
    a.add_argument("--label", required=True, help="file prefix of the kept answers (before, after)")
    a.add_argument("--out", required=True, help="folder of the kept answers")
    a.add_argument("--work", default="runs/compliant/served", help="the GGUF and the eval folders")
    a.add_argument("--sets", nargs="+", choices=SETS, default=list(SETS))
    a.add_argument("--timeout", type=float, default=600.0)
    a.add_argument("--limit", type=int, default=0, help="only the first N briefs of each set (default 0: all)")
    g = sub.add_parser("answer-local", help="answers in this process (greedy: the comparison's probe)")
    g.add_argument("--model-dir", required=True)
    g.add_argument("--label", required=True)
    g.add_argument("--out", required=True)
    g.add_argument("--sets", nargs="+", choices=SETS, default=list(SETS))
    g.add_argument("--max-tokens", type=int, default=64, help="new tokens (default 64: compare-long's probe)")
    g.add_argument("--limit", type=int, default=0)
    g.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default); above 0: one sample a brief")
    g.add_argument("--seed", type=int, default=0, help="of the sampled answers (generate_answers' seed)")
    s = sub.add_parser("score")
    s.add_argument("files", nargs="+")
    s.add_argument("--data", required=True)
    s.add_argument("--universe")
    s.add_argument("--holdout-start", required=True)
    s.add_argument("--json", help="also write the rows here")
    args = p.parse_args()
    {"answer": answer, "answer-local": answer_local, "score": score}[args.cmd](args)


if __name__ == "__main__":
    main()
