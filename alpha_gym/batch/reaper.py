"""A watchdog that takes a local Ray cluster down with the process that started it, however that process ends.

`ray.init` ties the GCS server and the raylet to the driver (PR_SET_PDEATHSIG), but not the raylet's
own children: after a `kill -9` of the driver the dashboard and runtime-env agents live on, orphaned.
`Reaper.start(before)` runs this file as a script (standard library only, so it starts fast and imports
no alpha_gym) with the new Ray processes' ids; it follows their descendants and, when its stdin closes
(the driver exited, or called `stop`), kills whatever of them is left. Linux only (/proc); elsewhere a no-op.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

POLL_S = 0.5  # how often the watchdog looks for new Ray processes (workers start after the cluster)


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) of a running process, None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    fields = raw[raw.rindex(b")") + 2:].split()  # the name in parentheses may hold spaces
    return int(fields[1]), int(fields[19])


def _all() -> dict[int, tuple[int, int]]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                out[int(name)] = st
    return out


def children(pid: int) -> dict[int, int]:
    """{pid: start time} of the direct children of `pid`."""
    return {p: start for p, (ppid, start) in _all().items() if ppid == pid}


def descendants(roots) -> dict[int, int]:
    """{pid: start time} of `roots` (those still running) and all their descendants."""
    table = _all()
    found = {p: table[p][1] for p in roots if p in table}
    frontier = list(found)
    while frontier:
        parent = frontier.pop()
        for p, (ppid, start) in table.items():
            if ppid == parent and p not in found:
                found[p] = start
                frontier.append(p)
    return found


def kill_all(known: dict[int, int]) -> int:
    """SIGKILL each process of `known` still running as the same process (same start time); how many."""
    killed = 0
    for pid, start in known.items():
        st = _stat(pid)
        if st is not None and st[1] == start and pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
    return killed


def watch(known: dict[int, int]) -> None:
    """Until stdin closes, add the descendants of the processes in `known`; then kill them all."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the driver, which shuts Ray down itself
    while True:
        ready, _, _ = select.select([0], [], [], POLL_S)
        if ready and not os.read(0, 4096):
            break
        known.update({p: s for p, s in descendants(known).items() if p not in known})
    known.update({p: s for p, s in descendants(known).items() if p not in known})
    kill_all(known)
    time.sleep(POLL_S)  # anything a dying process started in the meantime
    kill_all({p: s for p, s in descendants(known).items() if p not in known})


class Reaper:
    """The driver's handle on the watchdog: `Reaper.start(before)` after `ray.init`, `stop()` after shutdown."""

    def __init__(self, proc: subprocess.Popen | None):
        self.proc = proc

    @classmethod
    def snapshot(cls) -> dict[int, int]:
        """This process's children now (call before `ray.init`: they are not Ray's)."""
        return children(os.getpid()) if sys.platform.startswith("linux") else {}

    @classmethod
    def start(cls, before: dict[int, int]) -> "Reaper":
        if not sys.platform.startswith("linux"):
            return cls(None)
        new = {p: s for p, s in children(os.getpid()).items() if before.get(p) != s}
        args = [sys.executable, "-I", os.path.abspath(__file__)] + [f"{p}:{s}" for p, s in new.items()]
        # a session of its own: a terminal's Ctrl-C or hang-up for the driver's group does not stop it
        proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True)
        return cls(proc)

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None:
            return
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    watch({int(p): int(s) for p, s in (arg.split(":") for arg in sys.argv[1:])})
