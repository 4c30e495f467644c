"""The OpenEnv server (`alpha_gym.integrations.openenv_server`) as a command:

    python -m alpha_gym.commands.openenv_server --port 8001 [--data ... --universe ...] [--briefs train] \
        [--config F --set K=V]

The settings are read before the server listens: a bad file or value is one line and exit status 2, as is a
missing module (openenv-core, starlette, uvicorn: the line says how to install them). SIGINT and SIGTERM stop
it cleanly with exit status 0, as they stop `alpha-gym serve`.
"""

from __future__ import annotations

import argparse
import sys

from alpha_gym.commands.flags import add_settings_args, port_arg, settings_from_args

#: What the server needs beyond the base install (OpenEnv's core without its gradio web interface).
OPENENV_INSTALL = ("pip install starlette uvicorn fastapi websockets fastmcp && "
                   "pip install --no-deps openenv-core==0.3.0")
#: The top-level modules that command installs (openenv-core is imported as `openenv`).
OPENENV_MODULES = {"openenv": "openenv-core", "starlette": "starlette", "uvicorn": "uvicorn", "fastapi": "fastapi",
                   "websockets": "websockets", "fastmcp": "fastmcp", "pydantic": "pydantic", "anyio": "anyio"}


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
    try:  # openenv-core, starlette and uvicorn: only once the settings are good
        from alpha_gym.integrations.openenv import AlphaEnvironment
        from alpha_gym.integrations.openenv_server import create_app
        from alpha_gym.service.server import run_until_stopped
        app = create_app(lambda: AlphaEnvironment(briefs=args.briefs, data=args.data, universe=args.universe,
                                                  config=config))
    except ImportError as err:  # one missing module often surfaces inside another (uvicorn's inside openenv-core)
        top = (err.name or "").split(".")[0]
        if top == "alpha_gym":
            raise  # our own module: a bug, not a missing install
        what = f"{OPENENV_MODULES[top]}, which" if top in OPENENV_MODULES else "a module that"
        print(f"openenv_server: error: this server needs {what} cannot be imported "
              f"({type(err).__name__}: {' '.join(str(err).split())}); install what it needs: {OPENENV_INSTALL}",
              file=sys.stderr)
        return 2
    return run_until_stopped(app, args.host, args.port)


if __name__ == "__main__":
    sys.exit(main())
