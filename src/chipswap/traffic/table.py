"""A whole trace in memory, one array entry per request: for small traces and tests (`read_trace`).

Large traces go through chipswap.traffic.aggregate (histograms in the engine) or chipswap.traffic.arrivals
(one
window); read_trace refuses more than max_rows rows (MAX_TRACE_ROWS by default) instead of filling memory.
Reading,
validation and error messages are the engine's, shared with those modules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chipswap import shapes as B
from chipswap.errors import ChipswapError
from chipswap.traffic.scan import execute, first_bad_row, open_scan
from chipswap.traffic.source import connect, resolve_source

MAX_TRACE_ROWS = 10_000_000  # about 240 MB of arrays


@dataclass(frozen=True)
class Trace:
    """A validated request trace.

    timestamps_s: float64 seconds since the first request (in file order; None if the trace has no time
    column).
    prompt_tokens: int64 >= 1. output_tokens: int64 >= 0, or None if the trace has no output column.
    """

    path: str
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray | None
    timestamps_s: np.ndarray | None
    columns: dict[str, str]

    def __len__(self) -> int:
        return int(self.prompt_tokens.size)

    @property
    def requests(self) -> int:
        return len(self)

    @property
    def duration_s(self) -> float | None:
        if self.timestamps_s is None or self.timestamps_s.size < 2:
            return None
        return float(self.timestamps_s.max() - self.timestamps_s.min())

    @property
    def arrival_rate_rps(self) -> float | None:
        d = self.duration_s
        return (len(self) - 1) / d if d else None

    def prompt_histogram(self) -> B.Histogram:
        return B.histogram_from_lengths(self.prompt_tokens)

    def decode_histogram(self, top: int, policy: str) -> B.Histogram:
        """Decode-step histogram when prompts above `top` are rejected (never decode) or cut to `top`."""
        if self.output_tokens is None:
            raise ChipswapError(
                f"{self.path}: llm mode needs generated-token counts but the trace has no output column; "
                "pass --output-col COLUMN or use --mode encoder"
            )
        prompt, out = self.prompt_tokens, self.output_tokens
        if policy == "reject":
            keep = prompt <= top
            prompt, out = prompt[keep], out[keep]
        else:
            prompt = np.minimum(prompt, top)
        return B.decode_histogram(prompt, out)


def read_trace(
    path: str | Path,
    *,
    columns: Mapping[str, str] | None = None,
    fmt: str | None = None,
    max_rows: int = MAX_TRACE_ROWS,
) -> Trace:
    """Read and validate a whole trace (file, folder or glob) into arrays, in file order.

    `columns` maps fields (timestamp, prompt_tokens, output_tokens) to file columns; the output and time
    columns are read when present. More than max_rows rows is an error pointing at the streaming readers.
    """
    source = resolve_source(path, fmt=fmt)
    with connect(source, ordered=True) as con:
        scan = open_scan(
            con, source, columns, needed=["prompt_tokens"], optional=["output_tokens", "timestamp"]
        )
        fields = [f for f in ("prompt_tokens", "output_tokens", "timestamp") if f in scan.mapping]

        def rows(s):  # noqa: ANN001, ANN202
            rel, params = s.relation()
            values = ", ".join(f"{s.value(f)} AS {f}" for f in fields)
            return f"SELECT {values}, {s.ok()} AS ok FROM {rel} LIMIT {int(max_rows) + 1}", params

        scan, cur = execute(con, scan, rows)
        res = cur.fetchnumpy()
        if (~np.asarray(res["ok"], dtype=bool)).any():
            raise first_bad_row(con, scan)
    n = len(res["ok"])
    if n == 0:
        raise ChipswapError(
            f"{source.label}: the trace is empty (no requests); give a trace with at least one row"
        )
    if n > max_rows:
        raise ChipswapError(
            f"{source.label}: more than {max_rows:,} requests to hold in memory; plan it with chipswap "
            "shapes "
            "(it aggregates in the engine) or chipswap.traffic.aggregate_trace"
        )
    ts = None
    if "timestamp" in res:
        t = np.asarray(res["timestamp"], dtype=np.float64)
        ts = t - float(t.min())
    return Trace(
        path=source.label,
        prompt_tokens=np.asarray(res["prompt_tokens"], dtype=np.int64),
        output_tokens=np.asarray(res["output_tokens"], dtype=np.int64) if "output_tokens" in res else None,
        timestamps_s=ts,
        columns=dict(scan.mapping),
    )
