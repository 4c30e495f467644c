"""A model folder served by llama.cpp and evaluated with `alpha-gym eval` (issue 43.3): the kept baseline.

    python benchmarks/served_eval.py --model-dir runs/sft/model --results benchmarks/results/eval-sft-start \
        --data ../shared/data/us_equities/us_daily_train.csv.gz \
        --universe ../shared/data/us_equities/universe_us46.txt --holdout-start 2024-08-19 \
        --limit 50 --samples 3 --temperature 0.7 --seed 0 \
        --step0 benchmarks/results/compare-long/step-0.jsonl --in-process 10

1. `alpha-gym export-gguf` writes the folder as an f32 GGUF under --work (reused when it is already there);
2. llama-cpp-python's server serves it on 127.0.0.1 (`trainers.export_gguf.serve_gguf`: a free port, stopped
   at the end), with repeat_penalty 1.0 sent on every request (`--extra-body`), so the served model samples
   from its own distribution and answers greedily at temperature 0;
3. `alpha-gym eval` answers the probe briefs (--limit, --samples, --temperature, --seed) into --work/eval,
   scored on the train window and on the pseudo-holdout from --holdout-start;
4. greedy parity (optional): the served model at temperature 0 on the briefs of a comparison's kept step-0
   answers (--step0; its max tokens from the settings.json beside it) must give those answers, and on
   --in-process N briefs the answers transformers gives in this process;
5. into --results, small files to commit: eval.json, answers.jsonl, endpoint.jsonl, holdout.json,
   eval-settings.json and run.json (the export, the eval command, the parity counts, the machine).
   tests/test_kept_eval.py re-scores them.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import time
from pathlib import Path

from alpha_gym.commands.main import main as alpha_gym
from alpha_gym.evaluation.endpoint import read_raw
from alpha_gym.jsonable import json_dumps

GREEDY_BODY = '{"repeat_penalty": 1.0}'
KEPT = ("eval.json", "answers.jsonl", "endpoint.jsonl", "holdout.json", "eval-settings.json")


def cpu_flags() -> str:
    try:
        flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return "unknown"
    return " ".join(f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f in flags) or "none of avx2/avx512"


def run_eval(url: str, alias: str, out: Path, args, *extra: str, real: bool = True) -> list[str]:
    """`alpha-gym eval` against the server; returns the command's arguments (the served URL left out).
    real=False scores on the synthetic market: the parity checks read only the completions."""
    command = ["eval", "--model", alias, "--out", str(out), "--extra-body", GREEDY_BODY, "--no-progress",
               "--concurrency", "1", "--timeout", str(args.timeout), *extra]
    for flag, value in (("--data", args.data), ("--universe", args.universe)):
        if value and real:
            command += [flag, value]
    rc = alpha_gym([command[0], "--base-url", url, *command[1:]])
    if rc != 0:
        sys.exit(f"alpha-gym eval exited {rc} (see {out})")
    return command


def greedy_pairs(url, alias, work, args, briefs_file: Path, n: int, max_tokens: int) -> dict[str, str]:
    """The served model's greedy answers on the first `n` briefs of `briefs_file`, by brief id."""
    out = work / f"greedy-{max_tokens}"
    run_eval(url, alias, out, args, "--briefs", str(briefs_file), "--limit", str(n), "--max-tokens", str(max_tokens),
             "--temperature", "0", real=False)
    return {key.split("#")[0]: row["completion"] for key, row in read_raw(out / "endpoint.jsonl").items()}


def write_briefs(briefs, path: Path) -> Path:
    from alpha_gym.tasks.generator import save_briefs
    save_briefs(briefs, path)
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", required=True, help="the model folder (or sft output, checkpoint, run) to serve")
    p.add_argument("--results", required=True, help="the kept folder (benchmarks/results/NAME)")
    p.add_argument("--work", help="exports and eval folders (default runs/served-eval/NAME)")
    p.add_argument("--alias", default="start-model", help="the model name the server answers to")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--samples", type=int, default=3)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data")
    p.add_argument("--universe")
    p.add_argument("--holdout-start")
    p.add_argument("--step0", help="a comparison's kept step-0 answers: the served greedy answers must equal them")
    p.add_argument("--in-process", type=int, default=0, help="briefs whose served greedy answers are checked "
                                                            "against transformers' in this process")
    p.add_argument("--threads", type=int, default=1, help="the server's threads (on a busy machine one thread: "
                                                          "two spin at every token waiting for each other)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds a request may take (eval --timeout)")
    p.add_argument("--converter", help="llama.cpp's converter (see alpha-gym export-gguf --help)")
    args = p.parse_args()

    from alpha_gym.tasks.sets import brief_set
    from alpha_gym.tasks.task import render_prompt
    from trainers.export_gguf import export_gguf, serve_gguf
    results = Path(args.results)
    work = Path(args.work or Path("runs") / "served-eval" / results.name)
    work.mkdir(parents=True, exist_ok=True)
    gguf = work / "model-f32.gguf"
    t0 = time.perf_counter()
    export = (json.loads((work / "export.json").read_text()) if gguf.is_file() and (work / "export.json").is_file()
              else export_gguf(args.model_dir, gguf, converter=args.converter, overwrite=True))
    (work / "export.json").write_text(json_dumps(export, indent=1))
    run = {"model_dir": args.model_dir, "export": {k: export[k] for k in ("outtype", "bytes", "sha256", "kind",
                                                                           "source_identity", "seconds")},
           "machine": {"platform": platform.platform(), "cpu_flags": cpu_flags(), "server_threads": args.threads},
           "date": time.strftime("%Y-%m-%d", time.gmtime())}
    with serve_gguf(gguf, args.alias, threads=args.threads, log_dir=work) as url:
        t1 = time.perf_counter()
        eval_extra = ["--limit", str(args.limit), "--samples", str(args.samples), "--temperature",
                      str(args.temperature), "--max-tokens", str(args.max_tokens), "--seed", str(args.seed)]
        if args.holdout_start:
            eval_extra += ["--holdout-start", args.holdout_start]
        run["eval_command"] = run_eval(url, args.alias, work / "eval", args, *eval_extra)
        run["eval_seconds"] = round(time.perf_counter() - t1, 1)
        if args.step0:
            step0_file = Path(args.step0)
            kept = [json.loads(x) for x in step0_file.read_text().splitlines() if x.strip()]
            settings = json.loads((step0_file.parent / "settings.json").read_text())
            max_tokens = settings["scale_settings"]["train"]["max_completion_length"]
            by_id = {b.id: b for b in brief_set("probe")}
            briefs = write_briefs([by_id[r["brief_id"]] for r in kept], work / "step0-briefs.jsonl")
            served = greedy_pairs(url, args.alias, work, args, briefs, len(kept), max_tokens)
            same = [r["brief_id"] for r in kept if served.get(r["brief_id"]) == r["answer"]]
            run["step0_parity"] = {"file": str(step0_file), "model_identity": settings.get("model_identity"),
                                   "max_tokens": max_tokens, "briefs": len(kept), "identical": len(same),
                                   "differ": [r["brief_id"] for r in kept if r["brief_id"] not in same]}
        if args.in_process:
            from trainers.answers import load_for_inference
            from trainers.rollout import generate_answers
            briefs = list(brief_set("probe"))[: args.in_process]
            served = greedy_pairs(url, args.alias, work, args, write_briefs(briefs, work / "in-process-briefs.jsonl"),
                                  len(briefs), 64)
            model, tokenizer = load_for_inference(export["source"])
            local = [a[0] for a in generate_answers(model, tokenizer, [render_prompt(b) for b in briefs],
                                                    max_new_tokens=64)]
            same = [b.id for b, a in zip(briefs, local) if served.get(b.id) == a]
            run["in_process_parity"] = {"max_tokens": 64, "briefs": len(briefs), "identical": len(same),
                                        "differ": [b.id for b in briefs if b.id not in same]}
    run["seconds"] = round(time.perf_counter() - t0, 1)
    results.mkdir(parents=True, exist_ok=True)
    for name in KEPT:
        if (work / "eval" / name).is_file():
            shutil.copyfile(work / "eval" / name, results / name)
    (results / "run.json").write_text(json_dumps(run, indent=1))
    print(json_dumps(run, indent=1))


if __name__ == "__main__":
    main()
