"""The language-model mutator in process (transformers) vs behind llama.cpp's server, on the same seed.

    # one arm a process, pinned; interleave them (A B A B) on a loaded machine
    PYTHONPATH=. OMP_NUM_THREADS=1 taskset -c 1 python -m benchmarks.llama_cpp_mutator inprocess --budget 20
    PYTHONPATH=. OMP_NUM_THREADS=1 taskset -c 1 python -m benchmarks.llama_cpp_mutator endpoint --budget 20 \\
        --server-cpus 0 --answers 4

Both arms: the start model SmolLM2-135M-Instruct (in process: `trainers.mutator.ModelMutator`, the packaged
Q4_1 GGUF dequantised to fp32, one torch thread; endpoint: the same GGUF served by llama-cpp-python's server,
one thread, pinned to --server-cpus, `alpha_gym.search.endpoint_mutator` with concurrency 1), the default
synthetic market (`Verifier(synthetic_panel())`), SEEDS as the seed formulas, one island, group size 8,
--tokens per answer, temperature 1, the run's seed --seed, and `max_rounds` --rounds: the places a round leaves
empty (an answer that does not parse, a repeat) go to random formulas after it. The model is the only mutator.

Prints one JSON line: calls, seconds of the run (server start excluded), calls/s, CPU seconds of this process
(cpu_s) and of the server (server_cpu_s; figures a loaded machine does not inflate), the mutator's answers,
answers/s, how many of its answers were scored, refused as unparseable, refused as repeats, and the random
fill's calls.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from alpha_gym.jsonable import json_dumps

#: Four Alpha101-style seeds: the mutators' phase starts after four calls.
SEEDS = ("rank(-ts_delta(close, 5))", "-ts_corr(rank(open), rank(volume), 10)", "rank(ts_std(returns, 20))",
         "rank(close / ts_mean(close, 20))")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("arm", choices=("inprocess", "endpoint"))
    p.add_argument("--budget", type=int, default=20, help="verifier calls, the seeds' four among them (default 20)")
    p.add_argument("--seed", type=int, default=0, help="the run's seed (default 0)")
    p.add_argument("--tokens", type=int, default=64, help="the longest answer (default 64)")
    p.add_argument("--rounds", type=int, default=1, help="max_rounds of the run (default 1)")
    p.add_argument("--answers", type=int, default=1, help="endpoint: answers to each parent set (default 1)")
    p.add_argument("--server-cpus", default=None, help="endpoint: taskset -c for the server (default: unpinned)")
    args = p.parse_args(argv)

    from alpha_gym import Verifier
    from alpha_gym.market import synthetic_panel
    from alpha_gym.search.database import DatabaseConfig
    from alpha_gym.search.evolution import evolve
    verifier = Verifier(synthetic_panel())
    with tempfile.TemporaryDirectory(prefix="llama-mutator-") as tmp:
        tmp = Path(tmp)
        if args.arm == "inprocess":
            import torch
            torch.set_num_threads(1)
            from trainers.mutator import ModelMutator
            mutator = ModelMutator(None, limits=verifier.config.limits, max_new_tokens=args.tokens, batch_size=8)
            numbers = _run(evolve, verifier, mutator, args, tmp, DatabaseConfig)
        else:
            from trainers.export_gguf import free_port, start_server, stop_server, wait_until_serving
            from trainers.models import smollm2_gguf
            from alpha_gym.search.endpoint_mutator import endpoint_mutator
            port = free_port()
            server = start_server(smollm2_gguf(), "smollm2", port=port, log_path=tmp / "server.log",
                                  cpus=args.server_cpus)
            try:
                url = wait_until_serving(server, port, 180, f"the server did not start (see {tmp / 'server.log'})")
                mutator = endpoint_mutator(url, "smollm2", f"answers={args.answers},concurrency=1,tokens={args.tokens}",
                                           limits=verifier.config.limits, seed=args.seed)
                server_cpu0 = _cpu_s(server.pid)
                numbers = _run(evolve, verifier, mutator, args, tmp, DatabaseConfig)
                numbers["server_cpu_s"] = round(_cpu_s(server.pid) - server_cpu0, 1)
            finally:
                stop_server(server)
            numbers.update(prompt_evals((tmp / "server.log").read_text(errors="replace")))
    print(json_dumps({"arm": args.arm, **vars(args), **numbers}))
    return 0


def prompt_evals(log: str) -> dict:
    """The prompt tokens the server evaluated a request (its log's `prompt eval time` lines; the first one
    evaluates the whole prompt): the cache's effect, against the improve prompt's ~700 tokens."""
    evals = [int(n) for n in re.findall(r"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens", log)]
    return {"requests": len(evals), "prompt_tokens_evaluated": sum(evals),
            "prompt_tokens_evaluated_max": max(evals, default=0),
            "prompt_tokens_evaluated_median": sorted(evals)[len(evals) // 2] if evals else 0}


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process `pid` has used: a figure a loaded machine does not inflate."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run(evolve, verifier, mutator, args, tmp: Path, DatabaseConfig) -> dict:
    t0, cpu0 = time.perf_counter(), time.process_time()
    result = evolve(verifier, mutator, DatabaseConfig(n_islands=1), budget=args.budget, seed=args.seed,
                    out_dir=tmp / "run", seed_formulas=list(SEEDS), group_size=8, max_rounds=args.rounds,
                    progress=None, say=None, workers=1, checkpoint_every=1000)
    seconds, cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
    rows = [json.loads(line) for line in (tmp / "run" / "proposals.jsonl").read_text().splitlines()]
    mine = [r for r in rows if r["origin"] == mutator.name]
    reasons = Counter(("scored" if r["status"] == "scored" else
                       "unparseable" if str(r.get("reason", "")).startswith("unparseable") else "repeat")
                      for r in mine)
    calls = result.history[-1]["calls"] if result.history else 0
    answers = len(mine)
    model_s = mutator.stats["seconds"]
    return {"calls": calls, "seconds": round(seconds, 1), "cpu_s": round(cpu_s, 1), "calls_per_s": round(calls / seconds, 3),
            "model_answers": answers, "model_seconds": round(model_s, 1),
            "answers_per_s": round(answers / model_s, 3) if model_s else None,
            "scored": reasons["scored"], "unparseable": reasons["unparseable"], "repeats": reasons["repeat"],
            "random_fill": sum(r["origin"] == "random" and r["status"] == "scored" for r in rows)}


if __name__ == "__main__":
    sys.exit(main())
