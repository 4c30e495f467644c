"""Load test of the scoring service (`alpha-gym serve`) on 127.0.0.1 only, with bounded traffic.

    python benchmarks/serve_load.py [--data ../shared/data/us_equities] [--clients 8] [--requests 240]
                                    [--groups 24] [--max-seconds 300]

Starts `alpha-gym serve` in a child process on a free port of 127.0.0.1, waits for
GET /health, then `--clients` threads send `--requests` single-answer requests and
`--groups` group requests (12 answers each), stopping early after `--max-seconds`.
Every response is compared with a direct `Verifier` call in this process. Reports
throughput, p50/p99 latency and the number of mismatches, then stops the server with
SIGTERM and checks that it exits 0. Uses us46 of the real panel when present,
else the embedded synthetic market.
"""

from __future__ import annotations

import argparse
import json
import platform
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from verifier_speed import FORMULAS  # noqa: E402  (this script's folder: the same 22 formulas as the verifier benchmark)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "us_equities"))
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=240)
    ap.add_argument("--groups", type=int, default=24)
    ap.add_argument("--concurrency", type=int, default=2, help="the server's --concurrency")
    ap.add_argument("--max-seconds", type=float, default=300.0)
    args = ap.parse_args()

    from alpha_gym.pool import shared_verifier
    from alpha_gym.service.client import ScoringClient

    data = Path(args.data) / "us_daily_train.csv.gz"
    data_args = ["--data", str(data), "--universe", str(Path(args.data) / "universe_us46.txt")] if data.exists() else []
    port = _free_port()
    cmd = [sys.executable, "-m", "alpha_gym", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--concurrency", str(args.concurrency)] + data_args
    server = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        client = ScoringClient(f"http://127.0.0.1:{port}", timeout=120)
        t0 = time.perf_counter()
        health = client.wait_ready(600)
        ready_s = time.perf_counter() - t0
        print(f"server ready in {ready_s:.1f} s: {health['panel']}")

        verifier = shared_verifier(data=str(data) if data_args else None,
                                   universe=data_args[3] if data_args else None)
        assert verifier.panel.fingerprint() == health["fingerprint"], "the server scores other data"
        answers = [f"<alpha>{f}</alpha>" for f in FORMULAS] + ["<alpha>rank(close -)</alpha>", "no tag"]
        groups = [[answers[(g + k) % len(answers)] for k in range(12)] for g in range(4)]
        expected = {a: json.loads(json.dumps(verifier.score(a).to_dict())) for a in answers}
        expected_groups = [json.loads(json.dumps([s.to_dict() for s in verifier.score_group(g).scores]))
                           for g in groups]

        jobs = [("one", k % len(answers)) for k in range(args.requests)] + \
               [("group", k % len(groups)) for k in range(args.groups)]
        lock = threading.Lock()
        latencies = {"one": [], "group": []}
        mismatches, errors, done = [0], [], [0]
        deadline = time.perf_counter() + args.max_seconds

        def worker(my_jobs):
            for kind, i in my_jobs:
                if time.perf_counter() > deadline:
                    return
                t = time.perf_counter()
                try:
                    got = client.score(answers[i]) if kind == "one" else client.score_group(groups[i])
                except Exception as err:  # counted and reported
                    with lock:
                        errors.append(repr(err))
                    continue
                dt = time.perf_counter() - t
                want = expected[answers[i]] if kind == "one" else expected_groups[i]
                with lock:
                    latencies[kind].append(dt)
                    done[0] += 1
                    mismatches[0] += got != want

        shards = [jobs[c::args.clients] for c in range(args.clients)]
        threads = [threading.Thread(target=worker, args=(s,)) for s in shards]
        t1 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t1
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            code = "killed after 60 s"
    scored = len(latencies["one"]) + 12 * len(latencies["group"])
    print(f"machine: {platform.machine()}, {platform.python_version()}; clients {args.clients}, "
          f"server concurrency {args.concurrency}; {done[0]} of {len(jobs)} requests in {wall:.1f} s")
    print(f"throughput: {done[0] / wall:.1f} requests/s, {scored / wall:.1f} answers/s")
    for kind in ("one", "group"):
        if latencies[kind]:
            ms = [1000 * x for x in latencies[kind]]
            print(f"  {kind:5s} n={len(ms):4d}  p50 {statistics.median(ms):7.1f} ms  p99 {_percentile(ms, 0.99):7.1f} ms")
    print(f"responses equal to a direct Verifier call: {done[0] - mismatches[0]} of {done[0]}; errors: {len(errors)}")
    print(f"server exit code after SIGTERM: {code}")
    for e in errors[:5]:
        print("  error:", e)
    return 0 if mismatches[0] == 0 and not errors and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
