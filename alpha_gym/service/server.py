"""Run the scoring service with uvicorn: in the foreground (`alpha-gym serve`) or in a thread (tests).

The foreground server stops cleanly on SIGINT or SIGTERM: uvicorn stops accepting,
finishes the requests in flight, runs the shutdown and `serve` returns 0.
"""

from __future__ import annotations

import signal
import threading
import time

from alpha_gym.service.app import MAX_ANSWERS, MAX_BYTES, create_app


def _config(app, host: str, port: int):
    import uvicorn
    # one event loop, no reload, no access log: scoring dominates and logs would cost more than they say
    return uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="on")


def serve(build_verifier, host: str = "127.0.0.1", port: int = 8000, *, max_bytes: int = MAX_BYTES,
          max_answers: int = MAX_ANSWERS, concurrency: int = 2, workers: int | None = 1) -> int:
    """Serve until SIGINT/SIGTERM; returns 0 after a clean shutdown (the scoring processes stopped too)."""
    from alpha_gym.pool import close_scoring_pool
    app = create_app(build_verifier, max_bytes=max_bytes, max_answers=max_answers, concurrency=concurrency,
                     workers=workers)
    try:
        return run_until_stopped(app, host, port)
    finally:
        close_scoring_pool()


def run_until_stopped(app, host: str, port: int) -> int:
    """Serve `app` in the foreground until SIGINT/SIGTERM (both servers: this one and OpenEnv's); 0 after a clean
    shutdown, 1 when it never started (the port taken)."""
    import uvicorn
    server = uvicorn.Server(_config(app, host, port))
    # uvicorn re-raises the signal it stopped on once it is done (the process would die by it, exit -15 for
    # SIGTERM); these handlers make that a no-op
    stopped: list[int] = []
    previous = {sig: signal.signal(sig, lambda s, f: stopped.append(s)) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0 if server.started or stopped else 1


class BackgroundServer:
    """The service on 127.0.0.1 in a daemon thread, for tests and benchmarks: `with BackgroundServer(...) as url:`."""

    def __init__(self, build_verifier=None, host: str = "127.0.0.1", port: int = 0, *, app=None, **app_options):
        import uvicorn
        self.app = app if app is not None else create_app(build_verifier, **app_options)
        self.server = uvicorn.Server(_config(self.app, host, port))
        self.thread = threading.Thread(target=self.server.run, name="alpha-gym-serve", daemon=True)
        self.url = ""

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the scoring server did not start")
            time.sleep(0.02)
        host, port = self.server.servers[0].sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"
        return self.url

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
