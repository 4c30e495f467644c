"""Score a pool of formulas here, on this machine's cores, or on Ray workers, appending records to a resumable JSONL.

Each item is scored alone against the seeded archive (`score_formula` / `score`), never updating it:
a record does not depend on which worker scored it or in which order, so every way gives the same bytes.

- workers 0 or 1: in this process.
- workers N >= 2, no Ray asked for: the scoring pool (`alpha_gym.pool`): N worker processes prepare the
  items (parse, evaluate, book: nearly all the time) and this process scores their channels and writes,
  two chunks in flight; it starts in about a second, where a local Ray cluster took 10-15 s.
- `ray_address` ("local" for a new local cluster, "auto" or "ray://host:10001" for a running one), or a
  Ray this process already started: one Ray actor per worker builds its own Verifier once
  (`pool.shared_verifier`) from the panel, sent through Ray's object store (no worker reads the data file).
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
    """Scores (index, kind, text) items with one verifier; a Ray actor on the cluster, a plain object in this process
    otherwise (scoring serially, or the records of what the worker processes prepared)."""

    def __init__(self, panel, config=None):
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core per worker: BLAS threads would fight each other
        from alpha_gym.pool import config_key, shared_verifier
        self.verifier = shared_verifier(panel, config)
        # stamped where scored: a worker running another alpha-gym says so in its records
        self.stamp = scored_with(panel.fingerprint(), config_key(config))

    def score(self, chunk: list[tuple[int, str, str, str | None]]) -> list[str]:
        from alpha_gym.pool import prepare
        from alpha_gym.threads import blas_threads
        with blas_threads(1):  # set after numpy loaded too (the environment variable only counts before)
            return self.records(chunk, prepare(self.verifier, [(kind, text) for _, kind, text, _ in chunk], workers=1))

    def records(self, chunk: list[tuple[int, str, str, str | None]], prepared: list) -> list[str]:
        """The output lines of `chunk` (index, kind, text, brief id) from its prepared items (`alpha_gym.pool.prepare`):
        each scored alone, with its brief, as `score_formula(text, brief)` or `score(text, brief)` would."""
        from alpha_gym.pool import score_prepared
        from alpha_gym.tasks.sets import brief_by_id
        return [record(i, kind, text, score_prepared(self.verifier, [item], brief_by_id(b)).scores[0], self.stamp, b)
                for (i, kind, text, b), item in zip(chunk, prepared)]


def _progress(total: int, done: int, enabled: bool):
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, initial=done, unit="formula", desc="score-batch", disable=not enabled, smoothing=0.05)


def _alpha_gym_root() -> str:
    import alpha_gym
    return str(Path(alpha_gym.__file__).resolve().parents[1])


def score_batch(panel, formulas, out, *, workers: int | None = None, ray_address: str | None = None, config=None,
                chunk: int = CHUNK, progress: bool = True, limit: int | None = None, restart: bool = False) -> dict:
    """Score every item of the `formulas` file not yet in `out`; returns counts and timings.

    workers 0 or 1 score in this process, N >= 2 on N worker processes of this machine (the scoring pool;
    None: every usable core the memory holds, `alpha_gym.pool.default_workers`), unless Ray is asked for:
    `ray_address` "local" starts (and stops) a local Ray cluster of `workers` CPUs (None: 2), "auto" or
    "ray://host:10001" joins a running one, and a Ray this process has started is used as it is.
    `limit` stops after that many new items (a partial, resumable output). `restart` discards what `out`
    holds and scores everything again.
    """
    from alpha_gym.pool import config_key, default_workers
    if workers is None:
        workers = 2 if ray_address is not None or _ray_running() else default_workers(panel)
    check_counts(panel, workers, chunk, limit, ray_address)
    check_paths(formulas, out)
    items = read_items(formulas, briefs=True)
    if restart:
        discard_output(out)
    key = config_key(config)
    check_meta(out, {"input": str(Path(formulas).resolve()), "items": len(items), "panel": panel.fingerprint(),
                     "config": key})
    done = load_done(out, items, scored_with(panel.fingerprint(), key))
    pending = [(i, kind, text, brief_id) for i, (kind, text, brief_id) in enumerate(items) if i not in done]
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
        if workers >= 1 and (ray_address is not None or _ray_running()):
            ready_s = _score_on_ray(panel, config, chunks, write, workers, ray_address)
        elif workers <= 1:
            scorer = Scorer(panel, config)
            ready_s = time.perf_counter() - t0
            for c in chunks:
                write(scorer.score(c))
        else:
            ready_s = _score_on_pool(panel, config, chunks, write, workers)
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


def _ray_running() -> bool:
    """Whether this process has started or joined a Ray cluster (then score-batch uses it)."""
    import sys
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def _score_on_pool(panel, config, chunks, write, workers: int) -> float:
    """Prepare the chunks on `workers` processes of this machine, two chunks in flight, and write each one's
    records here in order; returns the start-up seconds (the verifier and its archive, the workers)."""
    from collections import deque

    from alpha_gym.pool import scoring_pool
    t0 = time.perf_counter()
    scorer = Scorer(panel, config)
    pool = scoring_pool(scorer.verifier, workers)
    ready_s = time.perf_counter() - t0
    in_flight: deque = deque()
    for c in chunks:
        in_flight.append((c, pool.submit([(kind, text) for _, kind, text, _ in c])))
        if len(in_flight) > 1:  # the workers prepare the next chunk while this one is scored and written
            done, futures = in_flight.popleft()
            write(scorer.records(done, pool.collect(scorer.verifier, futures)))
    while in_flight:
        done, futures = in_flight.popleft()
        write(scorer.records(done, pool.collect(scorer.verifier, futures)))
    return ready_s


def _count_problem(value, lo: int, hi: float) -> bool:
    return isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi


def check_counts(panel, workers, chunk, limit, ray_address) -> None:
    """Every count a user sets, in range and, for workers on this machine, within its cores and memory."""
    from alpha_gym.errors import ConfigError
    from alpha_gym.pool import worker_bytes
    from alpha_gym.ranges import check_workers
    if _count_problem(chunk, 1, MAX_CHUNK):
        raise BatchError(f"--chunk {chunk!r}: must be an integer from 1 to {MAX_CHUNK:,} (items per task)")
    if limit is not None and _count_problem(limit, 1, float("inf")):
        raise BatchError(f"--limit {limit!r}: must be an integer from 1 (new items to score before stopping)")
    local = ray_address is None or ray_address == "local"
    per_worker = worker_bytes(panel) + (RAY_WORKER_BYTES if ray_address == "local" else 0)
    try:  # a running cluster's CPUs are checked once connected (`_score_on_ray`)
        check_workers(workers, "--workers", per_worker if local else None, cores=None if local else 1 << 20)
    except ConfigError as err:
        raise BatchError(str(err)) from None


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
    if ray_address == "local":
        ray_address = None
    if ray_address is None or ray_address.split("://")[-1].startswith(("127.", "localhost")):
        loopback_only()  # a cluster on this machine's loopback: this driver must join it there too
    import ray
    from alpha_gym.batch.reaper import Reaper
    from alpha_gym.pool import panel_bytes
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
                     object_store_memory=max(100, 4 * panel_bytes(panel) >> 20) << 20, runtime_env=runtime_env)
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
