"""Plain-text tables for the command-line programs."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["format_table"]


def format_table(header: Sequence[object], rows: Sequence[Sequence[object]]) -> str:
    """Right-aligned columns separated by two spaces, the header first."""
    table = [list(map(str, header)), *[list(map(str, r)) for r in rows]]
    for number, row in enumerate(table[1:], start=1):
        if len(row) != len(header):
            raise ValueError(f"row {number} has {len(row)} cells, the header {len(header)}")
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True))
                     for r in table)
