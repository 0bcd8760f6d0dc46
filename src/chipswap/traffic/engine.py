"""Running one query on the trace engine: progress polling for long scans, and engine errors as one line.

DuckDB's messages are multi-line and speak SQL; users see `file: line N: what is wrong; how to fix it`. A
value
the engine could not convert is reported as NeedsText so the caller can re-read those columns as text and let
its
own validation name the row and column. No planning here, no printing.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

from chipswap.errors import ChipswapError
from chipswap.textsafe import one_line
from chipswap.traffic.source import TraceSource, locate_text_error, relation

ProgressFn = Callable[[float], None]  # called with the share of the scan done, 0..1


class NeedsText(Exception):
    """The engine's type guess failed on a value; read the needed columns as text and validate them in SQL."""


_LINE = re.compile(r"CSV Error on Line: (\d+)")
_FILE = re.compile(r'(?:file|File) "([^"]+)"|file = (\S+)')


def engine_error(exc: Exception, source: Any) -> ChipswapError:
    """One line for an engine error: where (file, line if the engine gives it), what, and a fix."""
    import duckdb

    text = str(exc)
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    first = re.sub(r"^[A-Za-z ]*Error: ", "", first)
    m = _FILE.search(text)
    where = source.where(m.group(1) or m.group(2)) if m else source.label
    line = _LINE.search(text)
    at = f": line {line.group(1)}" if line else ""
    structural = ("sniffing", "dialect", "Expected Number of Columns", "Malformed JSON", "unicode", "UTF-8")
    if any(word in text for word in structural) or "CSV Error" in text:
        located = locate_text_error(source)
        if located is not None:
            return located
    if isinstance(exc, duckdb.OutOfMemoryException):
        return ChipswapError(
            f"{where}: the trace engine ran out of its memory budget ({one_line(first)}); free memory or "
            "aggregate the trace where it lives (see chipswap shapes --histogram)"
        )
    if "Schema mismatch" in text or "schema mismatch" in text:
        return ChipswapError(
            f"{where}: the files do not share one schema ({one_line(first, 200)}); give files with the same "
            "columns"
        )
    if "sniffing file" in text or "dialect" in text:
        return ChipswapError(
            f"{where}: not a readable CSV (rows do not split into the same columns as the header); fix the "
            "file or check the delimiter"
        )
    if "Expected Number of Columns" in text or "Found:" in text and "Columns" in text:
        return ChipswapError(
            f"{where}{at}: the row has a different number of fields than the header; fix that line"
        )
    if "Malformed JSON" in text or "JSON" in first:
        return ChipswapError(
            f"{where}{at}: not valid JSON ({one_line(first, 160)}); one JSON object per line"
        )
    if "parquet" in text.lower() and (
        "magic" in text.lower() or "footer" in text.lower() or "metadata" in text
    ):
        return ChipswapError(f"{where}: not a readable Parquet file ({one_line(first, 160)}); check the file")
    if "Invalid unicode" in text or "UTF-8" in text or "utf-8" in text:
        return ChipswapError(f"{where}{at}: not UTF-8 text; save the file as UTF-8")
    if isinstance(exc, duckdb.IOException):
        return ChipswapError(
            f"{where}: cannot read ({one_line(first, 200)}); check the file and its compression"
        )
    return ChipswapError(f"{where}{at}: cannot read the trace ({one_line(first, 200)}); check the file")


def run_sql(con: Any, sql: str, params: list[Any], source: Any, *, progress: ProgressFn | None = None) -> Any:
    """Execute `sql`; engine errors become ChipswapError (or NeedsText). Returns the connection for fetching.

    With `progress`, the query runs on a worker thread and the engine's own progress is polled every 0.2 s.
    """
    import duckdb

    if progress is None:
        try:
            return con.execute(sql, params)
        except duckdb.ConversionException as exc:
            raise NeedsText(str(exc)) from None
        except duckdb.Error as exc:
            raise engine_error(exc, source) from None
    outcome: dict[str, BaseException] = {}

    def work() -> None:
        try:
            con.execute(sql, params)
        except BaseException as exc:  # handed back to the calling thread
            outcome["error"] = exc

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.2)
            done = con.query_progress()
            if done >= 0:
                progress(min(done / 100.0, 1.0))
    except KeyboardInterrupt:
        con.interrupt()
        worker.join()
        raise
    exc = outcome.get("error")
    if exc is None:
        progress(1.0)
        return con
    if isinstance(exc, duckdb.ConversionException):
        raise NeedsText(str(exc)) from None
    if isinstance(exc, duckdb.Error):
        raise engine_error(exc, source) from None
    raise exc


STREAM_BATCH_ROWS = 1 << 20


def stream_sql(con: Any, sql: str, params: list[Any], source: Any, consume: Callable[[Any], Any]) -> Any:
    """consume(reader) over the result as Arrow record batches of STREAM_BATCH_ROWS rows; errors as in run_sql
    (the engine runs the query while the batches are read, so they surface inside consume)."""
    import duckdb

    try:
        return consume(con.sql(sql, params=params).to_arrow_reader(STREAM_BATCH_ROWS))
    except duckdb.ConversionException as exc:
        raise NeedsText(str(exc)) from None
    except duckdb.Error as exc:
        raise engine_error(exc, source) from None
    except OSError as exc:  # an engine error raised while Arrow reads the batches arrives as a bare OSError
        if str(exc).startswith("Conversion Error"):
            raise NeedsText(str(exc)) from None
        raise engine_error(exc, source) from None


def describe(con: Any, source: TraceSource, files: Sequence[str] | None = None) -> dict[str, str]:
    """Column name -> engine type of the source (or of some of its files)."""
    sql, params = relation(source, files)
    rows = run_sql(con, f"DESCRIBE SELECT * FROM {sql}", params, source).fetchall()
    return {str(r[0]): str(r[1]) for r in rows}
