"""Print a rich table on a narrow terminal without losing a digit.

``print_table(console, table)``: the table as drawn when it fits the console; when it does not (a 60-column
terminal), one block per row instead, "column: value" a line, so no number is cut to "$2…". May not: change
what the table says, or print anywhere but the console it is given.
"""

from __future__ import annotations

from typing import Any


def _plain(cell: Any) -> str:
    """A cell's text as the table would show it (rich markup rendered away)."""
    text = getattr(cell, "plain", None)
    if isinstance(text, str):
        return text
    from rich.text import Text

    return Text.from_markup(str(cell)).plain


FOLD_MIN = 24  # a column declared overflow="fold" (a list of edges, a path) may wrap down to this width


def _fold_slack(table: Any) -> int:
    """Columns the caller lets wrap (overflow="fold") need not fit at full width: what they may give up."""
    from rich.cells import cell_len

    slack = 0
    for col in table.columns:
        if col.overflow == "fold":
            widest = max([cell_len(line) for v in (col.header, *col.cells) for line in _plain(v).splitlines()]
                         or [0])  # fmt: skip
            slack += max(0, widest - FOLD_MIN)
    return slack


def print_table(con: Any, table: Any) -> None:
    from rich.measure import Measurement
    from rich.padding import Padding
    from rich.text import Text

    need = Measurement.get(con, con.options.update(width=100_000), table).maximum - _fold_slack(table)
    if need <= con.width:
        con.print(table)
        return
    if table.title:
        con.print(_plain(table.title), markup=False, highlight=False, overflow="fold")
    heads = [_plain(c.header) for c in table.columns]
    cols = [[_plain(v) for v in c.cells] for c in table.columns]
    for r in range(table.row_count):
        cells = [col[r] if r < len(col) else "" for col in cols]
        # the first non-empty cells with no header name the row ("candidate 1 x trn1.32xlarge"); without
        # such cells the first column does ("inf2.xlarge", "bucket 1128")
        lead = [v for h, v in zip(heads, cells, strict=True) if not h and v]
        named_by_first = not lead and bool(heads) and bool(cells[0])
        if named_by_first:
            left = table.columns[0].justify in ("left", "default")
            lead = [cells[0] if left else f"{heads[0]} {cells[0]}"]
        con.print("- " + " ".join(lead), markup=False, highlight=False, overflow="fold")
        for i, (h, v) in enumerate(zip(heads, cells, strict=True)):
            if h and v not in ("", "-") and not (named_by_first and i == 0):
                # wrapped lines keep the card's indent
                card_line = Text(f"{h}: {v}", overflow="fold")
                con.print(Padding(card_line, (0, 0, 0, 4), expand=False), highlight=False)
