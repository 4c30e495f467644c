"""`alpha-gym serve`: the scoring service on the command line."""

from __future__ import annotations

import argparse
import os
import sys


def cmd_serve(args) -> int:
    from alpha_gym.commands.flags import settings_from_args, universe_arg
    from alpha_gym.pool import shared_verifier
    from alpha_gym.service.server import serve
    universe = universe_arg(args.universe)
    config = settings_from_args(args).verifier  # read before listening: a bad file fails at once

    def build():
        return shared_verifier(data=args.data, universe=universe, start=args.start, end=args.end, config=config)

    print(f"alpha-gym serve: http://{args.host}:{args.port} (POST /score, GET /health; Ctrl-C stops)",
          file=sys.stderr, flush=True)
    return serve(build, args.host, args.port, max_bytes=args.max_bytes, max_answers=args.max_answers,
                 concurrency=args.concurrency, workers=args.workers)


def _serve_ranges():
    from alpha_gym.ranges import ints
    return {"port": ints(1, 65535), "max_bytes": ints(1, 2**31 - 1), "max_answers": ints(1, 1_000_000),
            "concurrency": ints(1, 1024)}


#: The allowed range of each numeric `serve` flag .
SERVE_RANGES = _serve_ranges()
#: --workers: scoring processes (checked against this machine's usable cores as well).
WORKERS_RANGE = SERVE_RANGES["concurrency"]


def _workers_flag(text: str) -> int:
    """--workers: an integer in its range, and no more than this machine's usable cores."""
    from alpha_gym.errors import ConfigError
    from alpha_gym.ranges import check_workers, flag
    value = flag(WORKERS_RANGE)(text)
    try:
        return check_workers(value, "--workers", None, allow_zero=False)  # memory: once the panel is known
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix(f"--workers {value}: ")) from None


def register(sub: argparse._SubParsersAction) -> None:
    from alpha_gym.commands.flags import add_data_args, add_settings_args, port_arg
    from alpha_gym.ranges import flag
    from alpha_gym.service import MAX_ANSWERS, MAX_BYTES
    p = sub.add_parser("serve", help="score answers over HTTP for many rollout workers (needs starlette, uvicorn)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=port_arg, default=8000, help="TCP port, 1-65535 (default 8000)")
    p.add_argument("--max-bytes", type=flag(SERVE_RANGES["max_bytes"]), default=MAX_BYTES,
                   help=f"largest request body accepted, in bytes (413 above; default {MAX_BYTES:,})")
    p.add_argument("--max-answers", type=flag(SERVE_RANGES["max_answers"]), default=MAX_ANSWERS,
                   help=f"most answers in one group request (default {MAX_ANSWERS})")
    p.add_argument("--concurrency", type=flag(SERVE_RANGES["concurrency"]), default=min(4, os.cpu_count() or 1),
                   help="requests scored at the same time (threads; default %(default)s: this machine's cores, at "
                        "most 4)")
    p.add_argument("--workers", type=_workers_flag,
                   help="scoring processes, at most this machine's usable cores (default: every usable core the "
                        "memory holds; 1 scores in the server's threads)")
    add_data_args(p)
    add_settings_args(p)
    p.set_defaults(func=cmd_serve)
