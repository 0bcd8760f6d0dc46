"""Print a rich table on a narrow terminal without losing a digit.

``print_table(console, table)``: the table as drawn when it fits the console; when it does not (a 60-column
terminal), one block per row instead, "column: value" a line, so no number is cut to "$2…". May not: change
what the table says, or print anywhere but the console it is given.
"""

from __future__ import annotations

from typing import Any


def _plain(cell: Any) -> str:
    text = getattr(cell, "plain", None)
    return text if isinstance(text, str) else str(cell)


def print_table(con: Any, table: Any) -> None:
    from rich.measure import Measurement

    need = Measurement.get(con, con.options.update(width=100_000), table).maximum
    if need <= con.width:
        con.print(table)
        return
    if table.title:
        con.print(_plain(table.title), markup=False, highlight=False, overflow="fold")
    heads = [_plain(c.header) for c in table.columns]
    cols = [[_plain(v) for v in c.cells] for c in table.columns]
    for r in range(table.row_count):
        cells = [col[r] if r < len(col) else "" for col in cols]
        # the first non-empty cells with no header name the row ("candidate 1 x trn1.32xlarge")
        lead = [v for h, v in zip(heads, cells, strict=True) if not h and v]
        con.print("- " + (" ".join(lead) or f"row {r + 1}"), markup=False, highlight=False, overflow="fold")
        for h, v in zip(heads, cells, strict=True):
            if h and v not in ("", "-"):
                con.print(f"    {h}: {v}", markup=False, highlight=False, overflow="fold")
