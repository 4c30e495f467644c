"""The `alpha-gym` command line, one module per command family, on a floor above every package.

`main` builds the parser (every family registers its sub-commands) and turns errors into one line; `flags`
holds the flags the commands share (--data, --universe, --start/--end, --config/--set). A command reads its
flags, calls the library and prints: what a command computes belongs to the package it is about. Nothing
below imports from here (tests/test_layout.py).
"""
