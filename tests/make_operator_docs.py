"""Rewrite the generated operator table of docs/operators.md from the operator registry.

    python tests/make_operator_docs.py           # rewrite the table
    python tests/make_operator_docs.py --check   # exit 1 if the committed page is stale

`tests/test_operator_registry.py` fails while the page differs from what this writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "docs" / "operators.md"


def main(argv: list[str]) -> int:
    from alpha_gym.language.operators import with_operator_table
    text = PAGE.read_text()
    current = with_operator_table(text)
    if "--check" in argv:
        print("docs/operators.md is current" if current == text else "docs/operators.md is stale")
        return 0 if current == text else 1
    PAGE.write_text(current)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
