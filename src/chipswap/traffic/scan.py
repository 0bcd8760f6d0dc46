"""A mapped scan of a trace source: which columns feed which fields, their validity in SQL, and the first bad
row.

`open_scan` reads the header (the engine's DESCRIBE), maps columns to the fields the caller needs (an explicit
column always wins over auto-detection), and returns a Scan whose `value`/`ok` SQL is used inside aggregation
queries. `execute` runs such a query and, if the engine's type guess fails on a value, re-reads the needed
columns
as text so the validation sees it. `first_bad_row` finds and explains the first invalid row (file, row,
column),
reading only that file and returning one row.

I/O edge for traces (through the engine only); no planning.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from chipswap.errors import ChipswapError
from chipswap.shapes.histogram import MAX_LENGTH
from chipswap.textsafe import one_line
from chipswap.traffic import checks
from chipswap.traffic.engine import NeedsText, ProgressFn, describe, run_sql, stream_sql
from chipswap.traffic.source import (
    TraceSource,
    ident,
    locate_text_error,
    map_columns,
    relation,
)

INTEGER_FIELDS = ("prompt_tokens", "output_tokens", "count")
_OVERFLOWED = ("inf", "-inf")  # a DOUBLE column's text for a number too large for it


@dataclass(frozen=True)
class Scan:
    """A source with its field -> column mapping and the column types as the engine reads them."""

    source: TraceSource
    mapping: dict[str, str]
    types: dict[str, str]
    text: tuple[str, ...] = ()  # columns read as VARCHAR

    def relation(
        self, files: Sequence[str] | None = None, *, with_filename: bool = False
    ) -> tuple[str, list]:
        return relation(self.source, files, text_columns=self.text, with_filename=with_filename)

    def dtype(self, field: str) -> str:
        col = self.mapping[field]
        return "VARCHAR" if col in self.text else self.types.get(col, "VARCHAR")

    def value(self, field: str) -> str:
        """SQL for the field's cleaned value (BIGINT counts, DOUBLE seconds for the timestamp)."""
        if field == "timestamp":
            return checks.time_sql(self.mapping[field], self.dtype(field))[0]
        return checks.field_sql(field, self.mapping[field], self.dtype(field))[0]

    def valid(self, field: str) -> str:
        if field == "timestamp":
            return checks.time_sql(self.mapping[field], self.dtype(field))[1]
        return checks.field_sql(field, self.mapping[field], self.dtype(field))[1]

    def ok(self) -> str:
        """SQL: every mapped field of the row is valid (and prompt + output fits MAX_LENGTH)."""
        parts = [self.valid(f) for f in self.mapping]
        if "prompt_tokens" in self.mapping and "output_tokens" in self.mapping:
            cap = MAX_LENGTH + 1  # LEAST keeps the sum from overflowing on absurd values
            p, g = self.value("prompt_tokens"), self.value("output_tokens")
            parts.append(f"(LEAST({p}, {cap}) + LEAST({g}, {cap}) <= {MAX_LENGTH})")
        return "COALESCE(" + " AND ".join(parts) + ", false)"

    def as_text(self) -> Scan:
        """The same scan with every mapped column read as text (validated in SQL instead of by the reader)."""
        return replace(self, text=tuple(dict.fromkeys(self.mapping.values())))


def open_scan(
    con: Any,
    source: TraceSource,
    explicit: Mapping[str, str] | None,
    *,
    needed: Sequence[str],
    optional: Sequence[str] = (),
    mode: str | None = None,
) -> Scan:
    """Describe the source and map its columns (explicit names first, then the recognised aliases)."""
    types = describe(con, source)
    try:
        mapping = map_columns(source, list(types), explicit, needed=needed, optional=optional, mode=mode)
    except ChipswapError:
        # a JSONL file whose lines are not all objects is read as one "json" column: name the line instead
        located = locate_text_error(source) if source.fmt == "jsonl" else None
        if located is not None:
            raise located from None
        raise
    scan = Scan(source, mapping, types)
    # JSON values of one key may mix numbers, strings and booleans: always validate them as text; so is an
    # arbitrary-precision column (no trace value needs one, and its parse is quadratic in the digits)
    wide = any(checks._base(types.get(c, "")) in checks.UNBOUNDED_TYPES for c in mapping.values())
    return scan.as_text() if source.fmt in ("jsonl", "json") or wide else scan


def execute(
    con: Any,
    scan: Scan,
    build: Callable[[Scan], tuple[str, list]],
    *,
    progress: ProgressFn | None = None,
    consume: Callable[[Any, Scan], Any] | None = None,
    stream: bool = False,
) -> tuple[Scan, Any]:
    """Run build(scan); return (the scan used, consume(result, scan) or the cursor). If the reader's type
    guess fails on a value, rebuild with the columns as text. stream: hand consume an Arrow batch reader."""
    tries = [scan] if set(scan.text) >= set(scan.mapping.values()) else [scan, scan.as_text()]
    for attempt in tries:
        sql, params = build(attempt)
        try:
            if stream and consume is not None:
                return attempt, stream_sql(con, sql, params, scan.source, lambda r, a=attempt: consume(r, a))
            cursor = run_sql(con, sql, params, scan.source, progress=progress)
            return attempt, cursor if consume is None else consume(cursor, attempt)
        except NeedsText as exc:
            reason = one_line(str(exc).splitlines()[0], 200)
    raise ChipswapError(f"{scan.source.label}: a value could not be read ({reason}); fix that row")


def first_bad_row(con: Any, scan: Scan) -> ChipswapError:
    """The error for the first invalid row: file, row number (1 = first data row), column, value and fix."""
    source = scan.source
    file = source.files[0]
    if len(source.files) > 1:
        sql, params = scan.relation(with_filename=True)
        q = (
            f"SELECT __chipswap_file AS f, count(*) FILTER (WHERE NOT {scan.ok()}) AS bad FROM {sql} "
            "GROUP BY f HAVING bad > 0"
        )
        bad_files = {str(r[0]) for r in _run(con, scan, q, params).fetchall()}
        file = next((f for f in source.files if f in bad_files), file)
        types = describe(con, source, [file])
        missing = [c for c in scan.mapping.values() if c not in types]
        if missing:
            return ChipswapError(
                f"{source.where(file)}: no column {one_line(missing[0])!r}, which other files of "
                f"{source.label} have; give files with the same columns"
            )
        scan = replace(scan, types=types)
    fields = [f for f in (*INTEGER_FIELDS, "timestamp") if f in scan.mapping]
    cols: list[str] = []
    for f in fields:
        col = ident(scan.mapping[f])
        num = checks.number_sql(scan.mapping[f], scan.dtype(f)) if f != "timestamp" else None
        cols += [f"CAST({col} AS VARCHAR)", f"CAST({num or 'NULL'} AS DOUBLE)", scan.valid(f)]
    sql, params = scan.relation([file])
    q = (
        f"SELECT ordinality, {', '.join(cols)} FROM {sql} WITH ORDINALITY "
        f"WHERE NOT {scan.ok()} ORDER BY 1 LIMIT 1"
    )
    try:
        row = _run(con, scan, q, params).fetchone()
    except NeedsText:
        return first_bad_row(con, replace(scan.as_text(), source=source))
    where = source.where(file)
    if row is None:
        return ChipswapError(f"{where}: a row is not valid but could not be located; check the file")
    n = int(row[0])
    for i, f in enumerate(fields):
        raw, number, ok = row[1 + 3 * i], row[2 + 3 * i], row[3 + 3 * i]
        if not ok and raw in _OVERFLOWED and scan.mapping[f] not in scan.text:
            # the reader turned a huge number into inf: quote the value as the file has it
            return first_bad_row(con, replace(scan.as_text(), source=source))
        if not ok:
            reason = checks.explain(f, one_line(scan.mapping[f]), scan.dtype(f), raw, number)
            return ChipswapError(f"{where}: row {n}, {reason}")
    p_raw, g_raw = row[1], row[4]
    return ChipswapError(
        f"{where}: row {n}, columns {one_line(scan.mapping['prompt_tokens'])} + "
        f"{one_line(scan.mapping['output_tokens'])}: {p_raw} + {g_raw} tokens exceed chipswap's limit of "
        f"{MAX_LENGTH:,} tokens per request; fix or drop that row (no model serves a context that long)"
    )


def _run(con: Any, scan: Scan, sql: str, params: list) -> Any:
    return run_sql(con, sql, params, scan.source)
