"""`python -m alpha_gym ...`: the `alpha-gym` command (alpha_gym/commands/main.py) without the console script."""

import sys

from alpha_gym.commands.main import main

if __name__ == "__main__":
    sys.exit(main())
