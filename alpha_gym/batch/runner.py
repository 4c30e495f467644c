"""Score a pool of formulas serially or on Ray workers, appending records to a resumable JSONL.

Every worker builds its own Verifier once (`cache.shared_verifier`) from the same panel,
sent through Ray's object store (no worker reads the data file), and scores each item alone
against the seeded archive (`score_formula` / `score`), never updating it: a record does not
depend on which worker scored it or in which order, so Ray output equals serial output.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from alpha_gym.batch.records import (RESTART_HINT, BatchError, check_meta, check_paths, discard_output, finish,
                                     load_done, read_items, record, scored_with)

CHUNK = 64  # items per Ray task: large enough to hide scheduling, small enough to resume with little loss
MAX_CHUNK = 1_000_000  # items per task: a chunk's records are held in memory until it is written
#: What a local Ray worker process costs besides its verifier (the raylet's worker, its object store client).
RAY_WORKER_BYTES = 300 << 20


class Scorer:
    """Scores (index, kind, text) items with one verifier; a Ray actor on the cluster, a plain object in serial runs."""

    def __init__(self, panel, config=None):
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core per worker: BLAS threads would fight each other
        from alpha_gym.pool import config_key, shared_verifier
        self.verifier = shared_verifier(panel, config)
        # stamped where scored: a worker running another alpha-gym says so in its records
        self.stamp = scored_with(panel.fingerprint(), config_key(config))

    def score(self, chunk: list[tuple[int, str, str]]) -> list[str]:
        from alpha_gym.threads import blas_threads
        v = self.verifier
        with blas_threads(1):  # set after numpy loaded too (the environment variable only counts before)
            return [record(i, kind, text, v.score_formula(text) if kind == "formula" else v.score(text), self.stamp)
                    for i, kind, text in chunk]


def _progress(total: int, done: int, enabled: bool):
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, initial=done, unit="formula", desc="score-batch", disable=not enabled, smoothing=0.05)


def _alpha_gym_root() -> str:
    import alpha_gym
    return str(Path(alpha_gym.__file__).resolve().parents[1])


def score_batch(panel, formulas, out, *, workers: int = 2, ray_address: str | None = None, config=None,
                chunk: int = CHUNK, progress: bool = True, limit: int | None = None, restart: bool = False) -> dict:
    """Score every item of the `formulas` file not yet in `out`; returns counts and timings.

    workers=0 scores in this process (no Ray). Otherwise a local Ray cluster of `workers`
    CPUs is started (and stopped) unless `ray_address` names a running one ("auto" or
    "ray://host:10001"). `limit` stops after that many new items (a partial, resumable output).
    `restart` discards what `out` holds and scores everything again.
    """
    from alpha_gym.pool import config_key
    check_counts(panel, workers, chunk, limit, ray_address)
    check_paths(formulas, out)
    items = read_items(formulas)
    if restart:
        discard_output(out)
    key = config_key(config)
    check_meta(out, {"input": str(Path(formulas).resolve()), "items": len(items), "panel": panel.fingerprint(),
                     "config": key})
    done = load_done(out, items, scored_with(panel.fingerprint(), key))
    pending = [(i, kind, text) for i, (kind, text) in enumerate(items) if i not in done]
    if limit is not None:
        pending = pending[:limit]
    bar = _progress(len(items), len(done), progress)
    t0 = time.perf_counter()
    written = 0
    with open(out, "a", encoding="utf-8") as fh:
        def write(lines):
            nonlocal written
            fh.write("".join(line + "\n" for line in lines))
            fh.flush()
            written += len(lines)
            if bar is not None:
                bar.update(len(lines))

        chunks = [pending[k:k + chunk] for k in range(0, len(pending), chunk)]
        if workers <= 0:
            scorer = Scorer(panel, config)
            ready_s = time.perf_counter() - t0
            for c in chunks:
                write(scorer.score(c))
        else:
            ready_s = _score_on_ray(panel, config, chunks, write, workers, ray_address)
    if bar is not None:
        bar.close()
    if written != len(pending):  # never a summary of work that was not written
        raise BatchError(f"{out}: {written} of the {len(pending)} pending records were written; rerun the same "
                         "command to resume")
    complete = len(done) + written == len(items)
    if complete and finish(out) != len(items):
        raise BatchError(f"{out} holds other than the {len(items)} records of the input after sorting; {RESTART_HINT}")
    return {"items": len(items), "already_done": len(done), "scored": written, "complete": complete,
            "workers": workers, "seconds": round(time.perf_counter() - t0, 2), "startup_seconds": round(ready_s, 2)}


def _count_problem(value, lo: int, hi: float) -> bool:
    return isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi


def check_counts(panel, workers, chunk, limit, ray_address) -> None:
    """Every count a user sets, in range and, for workers on this machine, within its cores and memory."""
    from alpha_gym.errors import ConfigError
    from alpha_gym.ranges import check_workers
    if _count_problem(chunk, 1, MAX_CHUNK):
        raise BatchError(f"--chunk {chunk!r}: must be an integer from 1 to {MAX_CHUNK:,} (items per task)")
    if limit is not None and _count_problem(limit, 1, float("inf")):
        raise BatchError(f"--limit {limit!r}: must be an integer from 1 (new items to score before stopping)")
    local = ray_address is None
    try:  # a running cluster's CPUs are checked once connected (`_score_on_ray`)
        check_workers(workers, "--workers", worker_bytes(panel) + RAY_WORKER_BYTES if local else None,
                      cores=None if local else 1 << 20)
    except ConfigError as err:
        raise BatchError(str(err)) from None


def worker_bytes(panel) -> int:
    """About what one scoring worker holds: the interpreter and numpy, its copy of the panel, and a formula's
    intermediate (days x stocks) arrays while it scores (measured: 496 stocks x 3,304 days, 66 MB of fields,
    a worker peaks near 250 MB)."""
    return (128 << 20) + 2 * _nbytes(panel)


def loopback_only() -> None:
    """Make a local Ray cluster started from this process listen on 127.0.0.1 only.

    Ray binds the machine's outward address unless clusters are "disabled" (its switch for
    laptops): then the head, raylet and workers all use the loopback address.
    """
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import sys
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:  # ray was imported before the variable was set: it read the old value
        constants.ENABLE_RAY_CLUSTER = False


def _score_on_ray(panel, config, chunks, write, workers: int, ray_address: str | None) -> float:
    if ray_address is None or ray_address.split("://")[-1].startswith(("127.", "localhost")):
        loopback_only()  # a cluster on this machine's loopback: this driver must join it there too
    import ray
    from alpha_gym.batch.reaper import Reaper
    t0 = time.perf_counter()
    started_here = not ray.is_initialized()
    reaper = Reaper(None)
    if started_here:
        # workers import the same alpha_gym as this process (a source checkout need not be installed on them)
        runtime_env = {"env_vars": {"OMP_NUM_THREADS": "1"}}
        if ray_address is None:
            runtime_env["env_vars"]["PYTHONPATH"] = os.pathsep.join(
                p for p in (_alpha_gym_root(), os.environ.get("PYTHONPATH")) if p)
            before = Reaper.snapshot()
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False,
                     object_store_memory=max(100, 4 * _nbytes(panel) >> 20) << 20, runtime_env=runtime_env)
            reaper = Reaper.start(before)  # the local cluster dies with this process, even on kill -9
        else:
            import alpha_gym
            runtime_env["py_modules"] = [str(Path(alpha_gym.__file__).resolve().parent)]
            ray.init(address=ray_address, log_to_driver=False, runtime_env=runtime_env)
    try:
        cpus = int(ray.cluster_resources().get("CPU", 0))
        if workers > cpus:  # actors beyond the cluster's CPUs would wait for ever
            raise BatchError(f"--workers {workers}: the Ray cluster has {cpus} CPUs; give at most {cpus}")
        panel_ref = ray.put(panel)
        actor = ray.remote(num_cpus=1)(Scorer)
        pool = [actor.remote(panel_ref, config) for _ in range(workers)]
        ray.get([a.score.remote([]) for a in pool])  # every worker has built its verifier
        ready_s = time.perf_counter() - t0
        queue = list(reversed(chunks))
        in_flight = {}
        for a in pool:  # two chunks per worker in flight: no worker waits on the driver
            for _ in range(2):
                if queue:
                    in_flight[a.score.remote(queue.pop())] = a
        while in_flight:
            [ref], _ = ray.wait(list(in_flight), num_returns=1)
            a = in_flight.pop(ref)
            write(ray.get(ref))
            if queue:
                in_flight[a.score.remote(queue.pop())] = a
        return ready_s
    finally:
        if started_here:
            ray.shutdown()
            reaper.stop()


def _nbytes(panel) -> int:
    return sum(a.nbytes for a in panel.data.values())
