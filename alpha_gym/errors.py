"""The base of every error that means "this input cannot be used" (a file, flag, setting, formula or data).

Each package raises its own subclass (FormulaError, DataError, ConfigError, StressError, ArchiveError,
BatchError). The command line prints these as one line and any other exception, a bug, with its traceback.
They stay ValueErrors, so code that caught ValueError before still does.
"""


class InputError(ValueError):
    """An input that cannot be used; the message says which and what would work."""


class ConfigError(InputError):
    """A configuration value that cannot work (a setting, a settings file, a flag)."""
