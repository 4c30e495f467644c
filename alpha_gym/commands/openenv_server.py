"""The OpenEnv server (`alpha_gym.integrations.openenv_server`) as a command:

    python -m alpha_gym.commands.openenv_server --port 8001 [--data ... --universe ...] [--briefs train] \
        [--config F --set K=V]

The settings are read before the server listens: a bad file or value is one line and exit status 2.
"""

from __future__ import annotations

import argparse
import sys

from alpha_gym.commands.flags import add_settings_args, port_arg, settings_from_args
from alpha_gym.integrations.openenv_server import create_app


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=port_arg, default=8001)
    ap.add_argument("--briefs", default="train")
    ap.add_argument("--data")
    ap.add_argument("--universe")
    add_settings_args(ap)
    args = ap.parse_args(argv)
    from alpha_gym.errors import InputError
    try:
        config = settings_from_args(args).verifier  # read before listening: a bad file fails at once
    except InputError as err:
        print(f"openenv_server: error: {err}", file=sys.stderr)
        return 2
    import uvicorn

    from alpha_gym.integrations.openenv import AlphaEnvironment  # openenv-core: only once the settings are good
    app = create_app(lambda: AlphaEnvironment(briefs=args.briefs, data=args.data, universe=args.universe,
                                              config=config))
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
