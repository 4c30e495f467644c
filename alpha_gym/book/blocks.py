"""Cache-sized row blocks: the book and its metrics walk days x stocks arrays a block of rows at a time."""

from __future__ import annotations

#: Rows per block hold about this many cells, so every temporary of the book stays in cache (1 MB;
#: measured best of 2^13..2^23 on 496 stocks). Each row's numbers do not depend on the blocking:
#: the results are identical for any block size.
BLOCK_CELLS = 1 << 17


def row_blocks(n_rows: int, n_cols: int, cells: int | None = None):
    """(start, stop) of consecutive row blocks of about `cells` (default BLOCK_CELLS) cells each."""
    rows = max(1, (cells or BLOCK_CELLS) // max(n_cols, 1))
    return [(r0, min(n_rows, r0 + rows)) for r0 in range(0, n_rows, rows)]
