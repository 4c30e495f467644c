"""The verifier pool: one process-wide Verifier per (panel fingerprint, config), and the scoring pool: worker
processes that prepare answers for it on every core (`score_group`, `score_groups`, `prepare`; see
"scoring on several cores" below).

Building a Verifier is cheap, but its first score seeds the novelty archive with
the Alpha101-style books (4-44 s by panel). RL libraries that build one env per
episode or per trajectory (skyrl-gym, OpenEnv, textarena-style `make`) would pay
that every time; `shared_verifier` pays it once per process and data.

Every integration takes its settings through `resolve_config`: a `VerifierConfig`, a settings TOML
(`alpha-gym config show`), a mapping of its tables, and `--set` items, so a changed priority or
threshold gives the same reward through verl, skyrl, OpenEnv, verifiers, the service and the CLI.

It sits beside the scoring package rather than in it because it reads the settings file, which
itself builds on `scoring.config`; the integrations, the service and batch scoring all draw from it.

The cached verifier's archive is warmed under a lock before it is handed out, so
concurrent callers only read it. A caller that calls `update_archive` changes it
for every user of the same key: use `fresh=True` for a private one.
"""

from __future__ import annotations

import atexit
import os
import threading
from dataclasses import asdict
from typing import Any, Mapping, Sequence

from alpha_gym.jsonable import json_dumps
from alpha_gym.market.panel import Panel
from alpha_gym.scoring.config import VerifierConfig
from alpha_gym.scoring.verifier import Verifier

_LOCK = threading.Lock()
_VERIFIERS: dict[tuple[str, str], Verifier] = {}
_PANELS: dict[tuple, Panel] = {}


def config_key(config: VerifierConfig | None) -> str:
    """A canonical text of every config field: equal configs give equal keys."""
    return json_dumps(asdict(config or VerifierConfig()), sort_keys=True, default=str)


def _plain(x):
    """Nested mappings and sequences (an OmegaConf DictConfig from verl or skyrl-train) as dicts and lists."""
    if isinstance(x, Mapping):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)) or type(x).__name__ == "ListConfig":
        return [_plain(v) for v in x]
    return x


def resolve_config(config: Any = None, settings: Sequence[str] | str = ()) -> VerifierConfig:
    """The VerifierConfig an integration was given, then each `--set` item of `settings` applied to it.

    `config`: None (the defaults), a `VerifierConfig`, the path of a settings TOML (its [verifier]
    table), or a mapping: of settings tables ({"verifier": {...}}) or of [verifier] keys alone
    ({"priorities": {"cpcv": 1.0}}). `settings`: items such as "verifier.priorities.cpcv=1" (one
    string or a list), as `alpha-gym ... --set`. A bad key or value raises ConfigError naming it.
    """
    from alpha_gym import settings as S
    sets = [settings] if isinstance(settings, str) else [str(s) for s in _plain(settings or [])]
    if isinstance(config, (str, os.PathLike)):
        return S.load(config, sets).verifier
    if config is None and not sets:
        return VerifierConfig()
    if isinstance(config, VerifierConfig):
        if not sets:
            return config
        tables = {"verifier": S.to_dict(config)}
    elif config is None:
        tables = {}
    elif isinstance(config, Mapping):
        plain = _plain(config)
        sections = set(S.defaults_tables()) | set(S.OPTIONAL_SECTIONS)
        tables = plain if plain and set(plain) <= sections else {"verifier": plain}
    else:
        raise TypeError(f"config must be a VerifierConfig, a settings file's path or a mapping, not "
                        f"{type(config).__name__}")
    for item in sets:  # after the given config, as --set comes after --config
        keys, value = S.parse_set(item)
        node = tables
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise S.ConfigError(f"--set {item!r}: {k} is a value, not a table")
        node[keys[-1]] = value
    return S.load(None, (), tables).verifier


def cached_panel(data: Any = None, universe=None, start=None, end=None) -> Panel:
    """`resolve_panel` for file paths (or the synthetic default), loaded once per process per arguments."""
    from alpha_gym.market.resolve import resolve_panel
    key = (None if data is None else str(data), None if universe is None else json_dumps(universe, default=str),
           None if start is None else str(start), None if end is None else str(end))
    with _LOCK:
        panel = _PANELS.get(key)
        if panel is None:
            panel = _PANELS[key] = resolve_panel(data=None if data is None else str(data), universe=universe,
                                                 train_start=start, train_end=end)
        return panel


def shared_verifier(panel: Panel | None = None, config: Any = None, *, data: Any = None,
                    universe=None, start=None, end=None, fresh: bool = False, settings: Sequence[str] = ()) -> Verifier:
    """The process's Verifier for this panel and config, built and warmed once.

    Give a `panel`, or the `data`/`universe`/`start`/`end` of `resolve_panel`
    (nothing: the embedded synthetic market). `config` and `settings`: anything `resolve_config`
    takes (a VerifierConfig, a settings TOML, a mapping, --set items). `fresh=True` builds a new, uncached one.
    """
    if panel is None:
        panel = cached_panel(data, universe, start, end)
    elif data is not None:
        raise ValueError("pass either panel= or data=, not both")
    config = resolve_config(config, settings)
    key = (panel.fingerprint(), config_key(config))
    with _LOCK:
        verifier = None if fresh else _VERIFIERS.get(key)
        if verifier is None:
            verifier = Verifier(panel, config)
            _ = verifier.archive, verifier.factors  # the lazy state, built now so later scores only read it
            if not fresh:
                _VERIFIERS[key] = verifier
        return verifier


def clear() -> None:
    """Forget every cached verifier and panel (tests; freeing memory)."""
    with _LOCK:
        _VERIFIERS.clear()
        _PANELS.clear()


# ------------------------------------------------------------------------------ scoring on several cores
#
# A score is two parts. Preparing an answer (parse, evaluate, book, CPCV slices: `Verifier._prepare_answer`)
# is nearly all of its time and reads only the panel and the config; the channels (`Verifier._score_items`)
# read the archive and the other answers of the group, and take a few ms. So the preparing runs on worker
# processes, each holding a verifier of the same panel and config, and the channels here, in order: results
# are bit for bit those of `verifier.score_group`, whatever the number of workers (tests/test_scoring_pool.py).
#
# A worker is a fresh interpreter (`python -m alpha_gym.pool`), not a multiprocessing child: it never
# re-runs the caller's script (an unguarded script would start workers from its workers), is safe beside the
# threads of a server or of torch, and starts with one BLAS/OpenMP thread before numpy loads. It reads
# length-prefixed pickles on stdin (the panel and config once, then batches of items) and answers on stdout;
# it exits when its stdin closes, so it never outlives its parent.

#: What a worker holds besides its panel (the interpreter, numpy, alpha_gym), and a formula's intermediate
#: (days x stocks) arrays while it is scored (measured on 496 stocks x 3,304 days: 66 MB of fields, a worker
#: peaks near 250 MB).
WORKER_BASE_BYTES = 128 << 20


def panel_bytes(panel: Panel) -> int:
    return sum(a.nbytes for a in panel.data.values())


def worker_bytes(panel: Panel) -> int:
    """About the memory one scoring worker takes for `panel`: `WORKER_BASE_BYTES` and two panels' worth."""
    return WORKER_BASE_BYTES + 2 * panel_bytes(panel)


def default_workers(panel: Panel | None = None) -> int:
    """The scoring workers a process uses unless told: `$ALPHA_GYM_SCORING_WORKERS` (checked like a flag), else
    every usable core, as many as the available memory holds (at least 1)."""
    from alpha_gym.ranges import available_memory, check_workers, usable_cores
    per_worker = worker_bytes(panel) if panel is not None else WORKER_BASE_BYTES
    given = os.environ.get("ALPHA_GYM_SCORING_WORKERS", "").strip()
    if given:
        try:
            value = int(given)
        except ValueError:
            value = given
        return check_workers(value, "ALPHA_GYM_SCORING_WORKERS", per_worker, allow_zero=False)
    free = available_memory()
    fit = usable_cores() if free is None else free // per_worker
    return max(1, min(usable_cores(), fit))


def _prepare_item(verifier: Verifier, item: tuple[str, str]):
    """("answer" | "formula", text) -> an `Evaluated` or an invalid `Score`, as `score_group`/`score_formula` make."""
    kind, text = item
    return verifier._prepare_answer(text) if kind == "answer" else verifier.admit(text)


class ScoringError(RuntimeError):
    """A scoring worker process failed (killed, out of memory, or a bug it reports); the pool is closed and the
    next call starts a new one."""


def _send(fh, obj) -> None:
    import pickle
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    fh.write(len(data).to_bytes(8, "little"))
    fh.write(data)
    fh.flush()


def _receive(fh):
    """The next pickle on `fh`; EOFError when the other side has gone."""
    import pickle
    head = fh.read(8)
    if len(head) < 8:
        raise EOFError
    size = int.from_bytes(head, "little")
    data = fh.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


def _worker_main() -> int:
    """A worker's loop: (panel, config), then batches of items until stdin closes (`ScoringPool`)."""
    import signal
    import sys
    from dataclasses import replace

    from alpha_gym.scoring.verifier import Evaluated
    from alpha_gym.threads import one_thread_per_process
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C reaches the parent, which closes our stdin
    one_thread_per_process()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing printed may corrupt the replies
    try:
        panel, config = _receive(stdin)
        verifier = Verifier(panel, config)
    except EOFError:
        return 0
    _send(stdout, "ready")
    while True:
        try:
            items = _receive(stdin)
        except EOFError:
            return 0
        try:
            out = []
            for item in items:
                it = _prepare_item(verifier, item)
                if isinstance(it, Evaluated):  # the (days x stocks) returns are the parent's own: not sent back
                    it = replace(it, book=replace(it.book, returns=None))
                out.append(it)
            _send(stdout, ("ok", out))
        except Exception as err:  # a bug: reported to the caller, which raises it
            _send(stdout, ("error", f"{type(err).__name__}: {err}"))


class ScoringPool:
    """`workers` processes preparing answers for one (panel, config), each on one BLAS/OpenMP thread.

    `prepare(verifier, items)` returns, in input order, what `verifier` itself would (an invalid answer's
    `world_model` stamped with the caller's: the workers never load the world model, which only the channels
    use). Safe to call from several threads at once: batches go to whichever worker is free.
    """

    def __init__(self, panel: Panel, config: VerifierConfig, workers: int):
        import queue
        import subprocess
        import sys
        from pathlib import Path
        import alpha_gym
        from alpha_gym.threads import THREAD_VARIABLES
        root = str(Path(alpha_gym.__file__).resolve().parents[1])  # a source checkout need not be installed
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
        env.update({name: "1" for name in THREAD_VARIABLES})  # one thread from the start, before numpy loads
        self.workers = workers
        self.key = (panel.fingerprint(), _worker_config_key(config), workers)
        self.panel_bytes = worker_bytes(panel)
        self.broken: str | None = None
        self._tasks: queue.Queue = queue.Queue()
        self._procs = [subprocess.Popen([sys.executable, "-m", "alpha_gym.pool"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, env=env) for _ in range(workers)]
        self._feeders: list[threading.Thread] = []
        try:
            for proc in self._procs:  # the panel once each; the workers import while the first one is sent
                _send(proc.stdin, (panel, config.with_(stress_checkpoint=None)))
            for proc in self._procs:
                if _receive(proc.stdout) != "ready":
                    raise EOFError
        except (EOFError, OSError):
            self.close()
            raise ScoringError(f"a scoring worker did not start (exit code {self._procs[0].poll()}; its error is "
                               "above)") from None
        for proc in self._procs:
            feeder = threading.Thread(target=self._feed, args=(proc,), name="alpha-gym-scoring", daemon=True)
            feeder.start()
            self._feeders.append(feeder)

    def _feed(self, proc) -> None:
        """Send batches to one worker, one at a time, until told to stop; a dead worker fails what it is given."""
        while True:
            task = self._tasks.get()
            if task is None:
                return
            batch, future = task
            if self.broken is not None:
                future.set_exception(ScoringError(self.broken))
                continue
            try:
                _send(proc.stdin, batch)
                status, payload = _receive(proc.stdout)
            except (EOFError, OSError):
                self.broken = (f"a scoring worker process died (exit code {proc.poll()}: killed, or out of memory; "
                               f"each of the {self.workers} takes about {self.panel_bytes >> 20} MiB); the pool "
                               "is closed and the next call starts a new one")
                future.set_exception(ScoringError(self.broken))
                continue
            if status == "ok":
                future.set_result(payload)
            else:
                future.set_exception(ScoringError(f"a scoring worker failed: {payload}"))

    def submit(self, items: Sequence[tuple[str, str]]) -> list:
        """Queue `items` for the workers at once; the futures of their batches, for `collect`."""
        from concurrent.futures import Future
        if self.broken is not None:
            raise ScoringError(self.broken)
        items = list(items)
        # two batches per worker (at most 16 items each): enough to balance uneven formulas, few enough that the
        # round trips (each a wake-up of a feeder and a worker, slow on a busy machine) cost nothing
        size = max(1, min(16, -(-len(items) // (2 * self.workers))))
        futures = []
        for k in range(0, len(items), size):
            futures.append(Future())
            self._tasks.put((items[k:k + size], futures[-1]))
        return futures

    def collect(self, verifier: Verifier, futures: list) -> list:
        """The prepared items of `submit`'s futures, in order, as `verifier` would have made them."""
        from dataclasses import replace

        from alpha_gym.scoring.verifier import Evaluated, Score
        try:
            done = [it for f in futures for it in f.result()]
        except ScoringError:
            if self.broken is not None:
                self.close()
            raise
        out = []
        for it in done:
            if isinstance(it, Evaluated):
                it = replace(it, book=replace(it.book, returns=verifier._returns))
            elif isinstance(it, Score) and it.world_model != verifier.world_model:
                it = replace(it, world_model=verifier.world_model)
            out.append(it)
        return out

    def prepare(self, verifier: Verifier, items: Sequence[tuple[str, str]]) -> list:
        return self.collect(verifier, self.submit(items))

    def cpu_seconds(self) -> float:
        """User and system CPU seconds the workers have used so far (Linux; 0.0 where /proc cannot tell)."""
        total = 0
        for proc in self._procs:
            try:
                with open(f"/proc/{proc.pid}/stat", "rb") as fh:
                    fields = fh.read().rsplit(b")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
            except (OSError, IndexError, ValueError):
                pass
        return total / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.0

    def close(self) -> None:
        """Stop the workers (their stdin closes and they exit; one that does not within 10 s is killed). Work
        still queued fails with ScoringError: no caller waits for ever."""
        import queue
        with _POOL_LOCK:
            if self.broken is None:
                self.broken = "the scoring pool was closed (another panel or config took its place, or the process " \
                              "is ending)"
        for _ in self._feeders:
            self._tasks.put(None)
        for feeder in self._feeders:
            feeder.join(timeout=60)
        while True:  # what a feeder did not take: fail it
            try:
                task = self._tasks.get_nowait()
            except queue.Empty:
                break
            if task is not None:
                task[1].set_exception(ScoringError(self.broken))
        for proc in self._procs:
            try:
                proc.stdin.close()
            except OSError:
                pass
        for proc in self._procs:
            try:
                proc.wait(timeout=10)
            except Exception:  # noqa: BLE001 - a worker that will not stop is killed
                proc.kill()
                proc.wait()
            proc.stdout.close()
        with _POOL_LOCK:
            if _POOL.get("pool") is self:
                _POOL.clear()


_POOL: dict[str, ScoringPool] = {}  # the process's one live pool (a new panel or config replaces it)
_POOL_LOCK = threading.RLock()      # held while a pool is looked up, replaced or started: one start at a time


def _worker_config_key(config: VerifierConfig) -> str:
    return config_key(config.with_(stress_checkpoint=None))


def scoring_pool(verifier: Verifier, workers: int | None = None) -> ScoringPool | None:
    """The process's pool for `verifier`'s panel and config with `workers` processes (None: `default_workers`),
    started on first use and kept; None where one worker is asked for (score in this process)."""
    from alpha_gym.ranges import check_workers
    panel = verifier.panel
    if workers is None:
        workers = default_workers(panel)
    else:
        workers = check_workers(workers, "workers", worker_bytes(panel), allow_zero=False)
    if workers == 1:
        return None
    key = (panel.fingerprint(), _worker_config_key(verifier.config), workers)
    with _POOL_LOCK:
        pool = _POOL.get("pool")
        if pool is not None and pool.key == key and pool.broken is None:
            return pool
        if pool is not None:
            pool.close()  # one pool at a time: its workers hold a panel each
        pool = _POOL["pool"] = ScoringPool(panel, verifier.config, workers)
        return pool


def close_scoring_pool() -> None:
    """Stop the process's scoring workers (also done at exit)."""
    pool = _POOL.get("pool")
    if pool is not None:
        pool.close()


def prepare(verifier: Verifier, items: Sequence[tuple[str, str]], workers: int | None = None) -> list:
    """Each ("answer" | "formula", text) item prepared as `verifier` would, on the scoring pool (or here, with one
    worker), in input order."""
    pool = scoring_pool(verifier, workers)
    if pool is None:
        return [_prepare_item(verifier, item) for item in items]
    return pool.prepare(verifier, items)


def score_prepared(verifier: Verifier, items: list, brief=None):
    """The GroupScore of prepared items (`prepare`) as one group, against `verifier`'s archive, here."""
    return verifier._score_items(items, brief)


def score_group(verifier: Verifier, answers: Sequence[str], brief=None, workers: int | None = None):
    """`verifier.score_group(answers, brief)` with the answers prepared on the scoring pool: the same GroupScore,
    bit for bit, in a fraction of the time on several cores. The archive is read here and never updated."""
    if isinstance(answers, (str, bytes)) or scoring_pool(verifier, workers) is None:
        return verifier.score_group(answers, brief=brief)  # a string: its TypeError
    return score_prepared(verifier, prepare(verifier, [("answer", a) for a in answers], workers), brief)


def score_groups(verifier: Verifier, groups: Sequence[Sequence[str]], update_archive: bool = True,
                 workers: int | None = None) -> list:
    """Score groups one after another as training does (each group's valid books offered to the archive before
    the next group is scored, with `update_archive`), with every answer of every group prepared at once on the
    scoring pool: the GroupScores of the serial loop, bit for bit."""
    sizes = [len(g) for g in groups]
    items = prepare(verifier, [("answer", a) for g in groups for a in g], workers)
    out, start = [], 0
    for n in sizes:
        group = score_prepared(verifier, items[start:start + n])
        start += n
        if update_archive:
            verifier.update_archive(group)
        out.append(group)
    return out


atexit.register(close_scoring_pool)

if __name__ == "__main__":
    raise SystemExit(_worker_main())
