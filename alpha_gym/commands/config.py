"""`alpha-gym config show`: the settings file, every default or the effective settings with --config/--set."""

from __future__ import annotations

from alpha_gym.commands.flags import add_settings_args, settings_from_args


def cmd_config_show(args) -> int:
    """Print the settings as a TOML file: the defaults, or the effective ones with --config/--set."""
    from alpha_gym import settings as S
    if args.config or args.settings:
        print(settings_from_args(args).toml(), end="")
    else:
        print(S.dumps(S.defaults_tables(), header=S.HEADER), end="")
    return 0


def register(sub) -> None:
    """Add `config` (show) to an argparse sub-parser collection."""
    p = sub.add_parser("config", help="the settings file: every verifier, cost, channel, stress and training setting")
    csub = p.add_subparsers(dest="config_command", required=True)
    c = csub.add_parser("show", help="print the default settings as TOML (with --config/--set: the effective ones)")
    add_settings_args(c)
    c.set_defaults(func=cmd_config_show)
