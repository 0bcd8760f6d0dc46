"""Request traces of any size: read through DuckDB, aggregated where the data lives.

- `aggregate_trace(path, mode=...)`: a raw trace (file, folder or glob of CSV/TSV/JSONL/JSON/Parquet,
optionally
  .gz/.zst) as the histograms the shape planner needs, in one GROUP BY inside the engine;
- `read_histogram(path, mode=...)`: the same from a pre-aggregated histogram (a warehouse query's result);
- `arrival_counts(path, window_s=...)` and `read_requests(path, window=... | sample=...)`: arrivals per
window,
  and the requests of one window (or a bounded sample) row by row, for a simulator;
- `read_trace(path)`: a small trace as arrays (refuses more than MAX_TRACE_ROWS rows).

Every bad value is one ChipswapError line naming the file, row and column and what would fix it. This package
is
the I/O edge for traces; the planning math is chipswap.shapes.
"""

from chipswap.shapes.histogram import MAX_LENGTH
from chipswap.traffic.aggregate import TraceHistograms, aggregate_trace, read_histogram
from chipswap.traffic.arrivals import (
    MAX_REQUEST_ROWS,
    MAX_WINDOWS,
    ArrivalCounts,
    Requests,
    arrival_counts,
    read_requests,
)
from chipswap.traffic.checks import MAX_COUNT
from chipswap.traffic.source import (
    BUNDLED_TRACE,
    COLUMN_ALIASES,
    FIELDS,
    FORMATS,
    TraceSource,
    bundled_trace_path,
    resolve_source,
)
from chipswap.traffic.table import MAX_TRACE_ROWS, Trace, read_trace

__all__ = [
    "BUNDLED_TRACE",
    "COLUMN_ALIASES",
    "FIELDS",
    "FORMATS",
    "MAX_COUNT",
    "MAX_LENGTH",
    "MAX_REQUEST_ROWS",
    "MAX_TRACE_ROWS",
    "MAX_WINDOWS",
    "ArrivalCounts",
    "Requests",
    "Trace",
    "TraceHistograms",
    "TraceSource",
    "aggregate_trace",
    "arrival_counts",
    "bundled_trace_path",
    "read_histogram",
    "read_requests",
    "read_trace",
    "resolve_source",
]
