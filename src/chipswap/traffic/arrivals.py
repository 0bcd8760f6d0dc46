"""Arrivals of a trace of any size: requests per time window (counted in the engine), and the requests of one
window or a bounded sample, row by row, for a simulator.

`arrival_counts` finds the first and last arrival, checks that the window count is bounded (MAX_WINDOWS), then
counts arrivals per window with one GROUP BY: memory is the window count, not the rows. `read_requests`
returns
(arrival seconds, prompt tokens, output tokens) of the requests in [start, end) of one window (error above
max_rows; default MAX_REQUEST_ROWS) or a seeded reservoir sample of n of them: memory is bounded by max_rows
or n.

I/O edge through the engine; no planning, no simulation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chipswap.errors import ChipswapError
from chipswap.traffic.engine import ProgressFn
from chipswap.traffic.scan import execute, first_bad_row, open_scan
from chipswap.traffic.source import connect, resolve_source

MAX_WINDOWS = 1 << 22  # per-window counts: 32 MiB of int64 at most
MAX_REQUEST_ROWS = 2_000_000  # rows one read_requests call may return (peak RSS under 400 MB, measured)


@dataclass(frozen=True)
class ArrivalCounts:
    """Arrivals per window. counts[i] = requests arriving in [i * window_s, (i + 1) * window_s) seconds after
    the
    first arrival (windows with none included; the last window may be partial: see full_windows).
    origin_s: the first arrival in the time column's own seconds (epoch seconds for dates), for read_requests.
    """

    source: str
    window_s: float
    counts: np.ndarray
    requests: int
    duration_s: float
    origin_s: float

    @property
    def full_windows(self) -> int:
        return int(self.duration_s // self.window_s)

    @property
    def mean_rps(self) -> float | None:
        return (self.requests - 1) / self.duration_s if self.duration_s > 0 else None

    def busiest(self, windows: int = 1) -> tuple[float, float, int]:
        """(start s, end s, arrivals) of the busiest `windows` consecutive windows (earliest on ties)."""
        if windows < 1:
            raise ChipswapError(f"busiest window length {windows} must be >= 1 window")
        c = np.concatenate([[0], np.cumsum(self.counts)])
        w = min(windows, self.counts.size)
        sums = c[w:] - c[:-w]
        i = int(np.argmax(sums))
        return i * self.window_s, (i + w) * self.window_s, int(sums[i])


@dataclass(frozen=True)
class Requests:
    """Request rows in arrival order. arrival_s: seconds after the trace's first arrival."""

    source: str
    arrival_s: np.ndarray  # float64, ascending
    prompt_tokens: np.ndarray  # int64 >= 1
    output_tokens: np.ndarray | None  # int64 >= 0, None when the trace has no output column
    window: tuple[float, float] | None
    sampled_from: int | None = None  # rows the sample was drawn from (None: every row in the window)

    def __len__(self) -> int:
        return int(self.prompt_tokens.size)


def _check_window_s(window_s: float) -> float:
    if isinstance(window_s, bool) or not isinstance(window_s, int | float) or not (window_s > 0):
        raise ChipswapError(f"window {window_s!r} s must be a number > 0; e.g. 1.0")
    if not math.isfinite(window_s):
        raise ChipswapError(f"window {window_s!r} s must be finite; e.g. 1.0")
    return float(window_s)


def arrival_counts(
    path: str | Path,
    *,
    window_s: float = 1.0,
    columns: Mapping[str, str] | None = None,
    fmt: str | None = None,
    max_windows: int = MAX_WINDOWS,
    progress: ProgressFn | None = None,
) -> ArrivalCounts:
    """Requests per `window_s` window over the whole trace, counted by the engine (two scans of the time
    column).
    """
    window_s = _check_window_s(window_s)
    source = resolve_source(path, fmt=fmt)
    with connect(source) as con:
        scan = open_scan(con, source, columns, needed=["timestamp"])

        def bounds(s):  # noqa: ANN001, ANN202
            rel, params = s.relation()
            ok = s.valid("timestamp")
            return (
                f"SELECT count(*) FILTER (WHERE NOT {ok}), count(*), min({s.value('timestamp')}), "
                f"max({s.value('timestamp')}) FROM {rel}",
                params,
            )

        scan, cur = execute(con, scan, bounds, progress=progress)
        bad, n, t0, t1 = cur.fetchone()
        if bad:
            raise first_bad_row(con, scan)
        if not n:
            raise ChipswapError(f"{source.label}: the trace is empty (no requests); give at least one row")
        span = float(t1) - float(t0)
        windows = int(span // window_s) + 1
        if windows > max_windows:
            raise ChipswapError(
                f"{source.label}: {span:,.0f} s of arrivals in {window_s:g} s windows is {windows:,} "
                "windows, "
                f"more than {max_windows:,}; use a longer window (>= {span / max_windows:.3g} s)"
            )
        rel, params = scan.relation()
        q = (
            f"SELECT CAST(floor(({scan.value('timestamp')} - ?) / ?) AS BIGINT) AS w, count(*) AS n "
            f"FROM {rel} GROUP BY w"
        )
        rows = execute(con, scan, lambda s: (q, [float(t0), window_s, *params]), progress=progress)[1]
        res = rows.fetchnumpy()
    counts = np.zeros(windows, dtype=np.int64)
    idx = np.clip(np.asarray(res["w"], dtype=np.int64), 0, windows - 1)  # float rounding at the last edge
    np.add.at(counts, idx, np.asarray(res["n"], dtype=np.int64))
    return ArrivalCounts(source.label, window_s, counts, int(n), span, float(t0))


def read_requests(
    path: str | Path,
    *,
    window: tuple[float, float] | None = None,
    sample: int | None = None,
    seed: int = 0,
    origin_s: float | None = None,
    columns: Mapping[str, str] | None = None,
    fmt: str | None = None,
    max_rows: int = MAX_REQUEST_ROWS,
    progress: ProgressFn | None = None,
) -> Requests:
    """Requests (arrival, prompt, output) in `window` = (start, end) seconds after the first arrival, or the
    whole trace; `sample` = n returns a reservoir sample of n of them (seeded, repeatable) instead of all.

    Memory is bounded by max_rows (or n): more rows in the window than that is an error naming both. origin_s
    (ArrivalCounts.origin_s) saves the scan that finds the first arrival.
    """
    if sample is not None and (isinstance(sample, bool) or not isinstance(sample, int) or sample < 1):
        raise ChipswapError(f"sample size {sample!r} must be a positive integer")
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or not 1 <= max_rows <= MAX_REQUEST_ROWS:
        raise ChipswapError(f"max_rows {max_rows!r} must be an integer in 1..{MAX_REQUEST_ROWS:,}")
    if sample is not None and sample > max_rows:
        raise ChipswapError(f"sample size {sample:,} exceeds the bound of {max_rows:,} rows; sample fewer")
    if window is not None:
        start, end = (float(x) for x in window)
        if not (math.isfinite(start) and math.isfinite(end) and end > start):
            raise ChipswapError(f"window {window!r} must be (start, end) seconds with end > start")
    source = resolve_source(path, fmt=fmt)
    with connect(source, ordered=True) as con:
        scan = open_scan(
            con, source, columns, needed=["timestamp", "prompt_tokens"], optional=["output_tokens"]
        )
        if origin_s is None:
            scan, cur = execute(
                con,
                scan,
                lambda s: (
                    f"SELECT min({s.value('timestamp')}) FILTER (WHERE {s.ok()}) FROM {s.relation()[0]}",
                    s.relation()[1],
                ),
                progress=progress,
            )
            origin_s = float(cur.fetchone()[0] or 0.0)
        has_out = "output_tokens" in scan.mapping
        scan, cur = execute(
            con,
            scan,
            lambda s: _rows_query(s, origin_s, window, sample, seed, max_rows, has_out),
            progress=progress,
        )
        res = cur.fetchnumpy()
        if (~np.asarray(res["ok"], dtype=bool)).any():
            raise first_bad_row(con, scan)
        if sample is not None:
            total_cur = execute(con, scan, lambda s: _count_query(s, origin_s, window))[1]
            sampled_from = int(total_cur.fetchone()[0])
        else:
            sampled_from = None
    if sample is None and len(res["t"]) > max_rows:
        where = f"window {window[0]:g}..{window[1]:g} s" if window else "the trace"
        raise ChipswapError(
            f"{source.label}: {where} holds more than {max_rows:,} requests; use a shorter window or "
            f"sample=N (at most {max_rows:,})"
        )
    return Requests(
        source=source.label,
        arrival_s=np.asarray(res["t"], dtype=np.float64),
        prompt_tokens=np.asarray(res["p"], dtype=np.int64),
        output_tokens=np.asarray(res["g"], dtype=np.int64) if has_out else None,
        window=None if window is None else (float(window[0]), float(window[1])),
        sampled_from=sampled_from,
    )


def _window_filter(scan, origin_s: float, window: tuple[float, float] | None) -> tuple[str, list]:  # noqa: ANN001
    if window is None:
        return "", []
    t = f"({scan.value('timestamp')} - ?)"
    return f" WHERE {t} >= ? AND {t} < ?", [origin_s, float(window[0]), origin_s, float(window[1])]


def _count_query(scan, origin_s: float, window: tuple[float, float] | None) -> tuple[str, list]:  # noqa: ANN001
    rel, params = scan.relation()
    where, wp = _window_filter(scan, origin_s, window)
    return f"SELECT count(*) FROM {rel}{where}", [*params, *wp]


def _rows_query(
    scan,  # noqa: ANN001
    origin_s: float,
    window: tuple[float, float] | None,
    sample: int | None,
    seed: int,
    max_rows: int,
    has_out: bool,
) -> tuple[str, list]:
    rel, params = scan.relation()
    where, wp = _window_filter(scan, origin_s, window)
    out = scan.value("output_tokens") if has_out else "0"
    inner = (
        f"SELECT {scan.value('timestamp')} - ? AS t, {scan.value('prompt_tokens')} AS p, {out} AS g, "
        f"{scan.ok()} AS ok FROM {rel}{where}"
    )
    args = [origin_s, *params, *wp]
    if sample is not None:
        inner = f"SELECT * FROM ({inner}) USING SAMPLE reservoir({int(sample)} ROWS) REPEATABLE ({int(seed)})"
        return f"SELECT * FROM ({inner}) ORDER BY t", args
    return f"SELECT * FROM ({inner}) ORDER BY t LIMIT {int(max_rows) + 1}", args
