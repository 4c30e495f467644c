"""`alpha-gym score-batch`: score a formula pool on a local Ray cluster (or an existing one), resumably."""

from __future__ import annotations

import argparse
import sys

from alpha_gym.jsonable import json_dumps


def cmd_score_batch(args) -> int:
    from alpha_gym.batch.records import BatchError
    from alpha_gym.batch.runner import score_batch
    from alpha_gym.commands.flags import panel_from_args, settings_from_args
    config = settings_from_args(args).verifier
    try:
        summary = score_batch(panel_from_args(args), args.formulas, args.out, config=config, workers=args.workers,
                              ray_address=args.ray_address, chunk=args.chunk, progress=not args.quiet,
                              limit=args.limit, restart=args.restart)
    except BatchError as err:
        print(f"alpha-gym score-batch: {err}", file=sys.stderr)
        return 2
    print(json_dumps(summary))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    from alpha_gym.batch.runner import CHUNK, MAX_CHUNK
    from alpha_gym.ranges import flag, ints
    from alpha_gym.commands.flags import add_data_args, add_settings_args
    p = sub.add_parser("score-batch", help="score a pool of formulas on this machine's cores (or on Ray) into a "
                                          "resumable JSONL")
    p.add_argument("--formulas", required=True,
                   help='one formula per line, or JSONL with "formula" or "answer" (e.g. alpha-gym sft-data rows)')
    p.add_argument("--out", required=True, help="output JSONL; rerun the same command to resume it")
    p.add_argument("--workers", type=flag(ints(0)),
                   help="worker processes, at most this machine's usable cores (0 or 1: score in this process; "
                        "default: every usable core the memory holds); with --ray-address, Ray workers (default 2)")
    p.add_argument("--ray-address", help='score on Ray: "local" starts a local cluster, "auto" or "ray://HEAD:10001" '
                                         "joins a running one (default: no Ray, this machine's worker processes)")
    p.add_argument("--chunk", type=flag(ints(1, MAX_CHUNK)), default=CHUNK,
                   help="items per task (a Ray task, or a round of the worker processes)")
    p.add_argument("--limit", type=flag(ints(1)), help="stop after this many new items (the output stays resumable)")
    p.add_argument("--restart", action="store_true",
                   help="discard what --out holds (made with other data, settings or alpha-gym) and score it all again")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_data_args(p)
    add_settings_args(p)
    p.set_defaults(func=cmd_score_batch)
