"""Traces of any size as histograms: one GROUP BY inside the engine, memory bounded by distinct lengths.

`aggregate_trace` streams a raw trace (one row per request) and `read_histogram` a pre-aggregated one (one row
per
length, or per (prompt, output) pair in llm mode, with a count column, e.g. the result of the warehouse query
in
docs/shapes.md). Both run the same query, the raw trace with weight 1 per row, so a plan from the histogram
equals
the plan from the raw trace. Only the columns the mode needs are read.

What comes back, TraceHistograms, is what the shape planner needs: the prompt-length histogram and, in llm
mode,
the decode events (how many generating requests start at each effective prompt length and end at each total
length), built for one max length and overflow policy because requests above it are rejected or truncated
before
they decode. Arrival times are reduced to first/last (per-window counts: chipswap.traces.arrivals).

I/O edge through the engine; the arithmetic on the aggregated counts is chipswap.core.buckets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from chipswap.core import buckets as B
from chipswap.errors import ChipswapError
from chipswap.traces.checks import MAX_COUNT
from chipswap.traces.engine import ProgressFn
from chipswap.traces.scan import Scan, execute, fetch_columns, first_bad_row, open_scan
from chipswap.traces.source import connect, resolve_source

MODES = ("encoder", "llm")


@dataclass(frozen=True)
class TraceHistograms:
    """A trace reduced to what the planner needs. Counts are int64 numbers of requests.

    prompt: prompt lengths of every request. decode_starts / decode_ends (llm): (lengths, counts) of the
    effective prompt length of each request that generates at least one token, and of its total length; built
    for max length `cut` under `policy` (cut None: nothing cut). output: (lengths >= 0, counts) of generated
    tokens (llm). first_arrival_s / last_arrival_s: in the time column's seconds (None without times).
    """

    source: str
    kind: str  # "trace" (one row per request) or "histogram" (pre-aggregated)
    mode: str
    requests: int
    prompt: B.Histogram
    columns: dict[str, str] = field(default_factory=dict)
    cut: int | None = None
    policy: str = "reject"
    decode_starts: tuple[np.ndarray, np.ndarray] | None = None
    decode_ends: tuple[np.ndarray, np.ndarray] | None = None
    output: tuple[np.ndarray, np.ndarray] | None = None
    first_arrival_s: float | None = None
    last_arrival_s: float | None = None

    def __len__(self) -> int:
        return self.requests

    @property
    def path(self) -> str:
        return self.source

    @property
    def duration_s(self) -> float | None:
        if self.first_arrival_s is None or self.last_arrival_s is None or self.requests < 2:
            return None
        return self.last_arrival_s - self.first_arrival_s

    @property
    def arrival_rate_rps(self) -> float | None:
        d = self.duration_s
        return (self.requests - 1) / d if d else None

    def prompt_histogram(self) -> B.Histogram:
        return self.prompt

    def output_quantile(self, q: float) -> int | None:
        """Smallest output length with a share >= q of requests at or below it (None without outputs)."""
        if self.output is None:
            return None
        lengths, counts = self.output
        cum = np.cumsum(counts)
        return int(lengths[min(int(np.searchsorted(cum, q * cum[-1], side="left")), lengths.size - 1)])

    def decode_histogram(self, top: int, policy: str) -> B.Histogram:
        """Decode-step histogram when prompts above `top` are rejected or truncated (`policy`)."""
        if self.decode_starts is None or self.decode_ends is None:
            raise ChipswapError(
                f"{self.source}: llm mode needs generated-token counts but these histograms were read "
                f"in {self.mode} mode; read the trace with mode='llm'"
            )
        longest = self.prompt.max_length
        untouched = self.cut is None or longest <= self.cut
        if not ((longest <= top and untouched) or (self.cut == top and self.policy == policy)):
            raise ChipswapError(
                f"{self.source}: the decode counts were aggregated for max length {self.cut} "
                f"({self.policy}); "
                f"aggregate again with max_length={top}, policy={policy!r}"
            )
        (sl, sc), (el, ec) = self.decode_starts, self.decode_ends
        return B.decode_histogram_from_events(sl, sc, el, ec)


def aggregate_trace(
    path: str | Path,
    *,
    mode: str = "llm",
    columns: Mapping[str, str] | None = None,
    max_length: int | None = None,
    policy: str = "reject",
    times: bool = False,
    fmt: str | None = None,
    progress: ProgressFn | None = None,
) -> TraceHistograms:
    """Histograms of a raw trace (file, folder or glob; CSV/TSV/JSONL/JSON/Parquet, .gz/.zst), in one scan.

    max_length: the largest prefill bucket the plan will use, if already known (e.g. --max-length); requests
    above it are rejected or truncated (`policy`) before their decode steps are counted. times: also read the
    arrival column (first/last arrival). Memory: the engine's budget plus the distinct lengths, not the rows.
    """
    return _aggregate(path, "trace", mode, columns, max_length, policy, times, fmt, progress)


def read_histogram(
    path: str | Path,
    *,
    mode: str = "llm",
    columns: Mapping[str, str] | None = None,
    max_length: int | None = None,
    policy: str = "reject",
    fmt: str | None = None,
    progress: ProgressFn | None = None,
) -> TraceHistograms:
    """A pre-aggregated histogram file: columns prompt length and count (encoder), plus output length (llm).

    Rows may repeat a length (they are summed), so the output of several warehouse queries can be
    concatenated.
    The result equals aggregate_trace() on the raw trace the counts came from.
    """
    return _aggregate(path, "histogram", mode, columns, max_length, policy, False, fmt, progress)


def _aggregate(
    path: str | Path,
    kind: str,
    mode: str,
    columns: Mapping[str, str] | None,
    max_length: int | None,
    policy: str,
    times: bool,
    fmt: str | None,
    progress: ProgressFn | None,
) -> TraceHistograms:
    if mode not in MODES:
        raise ChipswapError(f"mode {mode!r} is unknown; use --mode encoder or --mode llm")
    if policy not in B.POLICIES:
        raise ChipswapError(f"overflow policy {policy!r} is unknown; use one of {', '.join(B.POLICIES)}")
    if max_length is not None:
        if isinstance(max_length, bool) or not isinstance(max_length, int | np.integer) or max_length < 1:
            raise ChipswapError(
                f"max length {max_length!r} must be a positive integer; e.g. --max-length 4096"
            )
        B.check_length_bound(int(max_length), "max length")
    what = "histogram" if kind == "histogram" else "trace"
    source = resolve_source(path, fmt=fmt, what=what)
    needed = ["prompt_tokens"] + (["output_tokens"] if mode == "llm" else [])
    if kind == "histogram":
        needed.append("count")
    with connect(source) as con:
        scan = open_scan(
            con, source, columns, needed=needed, optional=["timestamp"] if times else [], mode=mode
        )
        scan, cursor = execute(
            con, scan, lambda s: _query(s, mode, kind, max_length, policy), progress=progress
        )
        res = fetch_columns(cursor)
        in_prompt_set = np.asarray(res["gp"]) == 0
        keys = np.ma.getdata(res["pk"])[in_prompt_set]
        if (keys == -1).any():
            raise first_bad_row(con, scan)
    return _assemble(source.label, kind, mode, scan, res, max_length, policy)


def _query(scan: Scan, mode: str, kind: str, cut: int | None, policy: str) -> tuple[str, list]:
    rel, params = scan.relation()
    ok = scan.ok()
    p = scan.value("prompt_tokens")
    cols = [f"CASE WHEN {ok} THEN {p} ELSE -1 END AS pk"]
    sets = ["(pk)"]
    if mode == "llm":
        g = scan.value("output_tokens")
        keep, p_eff = "", p
        if cut is not None and policy == "reject":
            keep = f" AND {p} <= {int(cut)}"
        elif cut is not None:
            p_eff = f"LEAST({p}, {int(cut)})"
        cols += [
            f"CASE WHEN {ok} THEN {g} END AS gk",
            f"CASE WHEN {ok} AND {g} > 0{keep} THEN {p_eff} + {g} END AS ek",
        ]
        sets += ["(ek)", "(gk)"]
    if kind == "histogram":
        cols.append(f"CASE WHEN {ok} THEN {scan.value('count')} ELSE 0 END AS w")
        n, n_gen = "TRY_CAST(sum(w) AS BIGINT)", "TRY_CAST(sum(w) FILTER (WHERE gk > 0) AS BIGINT)"
    else:
        n, n_gen = "count(*)", "count(*) FILTER (WHERE gk > 0)"
    if "timestamp" in scan.mapping:
        cols.append(f"CASE WHEN {ok} THEN {scan.value('timestamp')} END AS t")
    aggs = [f"{n} AS n"]
    if mode == "llm":
        aggs.append(f"{n_gen} AS n_gen")
    if "timestamp" in scan.mapping:
        aggs += ["min(t) AS t0", "max(t) AS t1"]
    group_cols = ["pk"] + (["ek", "gk"] if mode == "llm" else [])
    grouping = ", ".join(f"GROUPING({c}) AS g{c[0]}" for c in group_cols)
    sql = (
        f"SELECT {grouping}, {', '.join(group_cols)}, {', '.join(aggs)} "
        f"FROM (SELECT {', '.join(cols)} FROM {rel}) GROUP BY GROUPING SETS ({', '.join(sets)})"
    )
    return sql, params


def _summed(keys: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct keys with their summed counts (exact int64), zero counts dropped."""
    order = np.argsort(keys, kind="stable")
    keys, counts = keys[order].astype(np.int64), counts[order].astype(np.int64)
    if keys.size == 0:
        return keys, counts
    first = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    k, c = keys[first], np.add.reduceat(counts, first)
    live = c > 0
    return k[live], c[live]


def _assemble(
    label: str,
    kind: str,
    mode: str,
    scan: Scan,
    res: dict[str, Any],
    cut: int | None,
    policy: str,
) -> TraceHistograms:
    def column(name: str, rows: np.ndarray) -> np.ndarray:
        return np.ma.getdata(res[name])[rows]

    n_all = res["n"]
    if np.ma.is_masked(n_all) and kind == "histogram":
        if np.ma.getmaskarray(n_all).any():
            raise ChipswapError(
                f"{label}: the counts of one length add up to more than 2^63 requests; check the count column"
            )
    prompt_rows = np.asarray(res["gp"]) == 0
    pk, pn = _summed(column("pk", prompt_rows), column("n", prompt_rows))
    requests = int(pn.sum()) if pn.size else 0
    if requests == 0:
        raise ChipswapError(
            f"{label}: the {'histogram' if kind == 'histogram' else 'trace'} is empty (no requests); "
            "give one "
            "with at least one row" + (" with a count above 0" if kind == "histogram" else "")
        )
    if requests > MAX_COUNT:
        raise ChipswapError(
            f"{label}: {requests:,} requests exceed the limit of {MAX_COUNT:,}; check the counts"
        )
    out = TraceHistograms(
        source=label,
        kind=kind,
        mode=mode,
        requests=requests,
        prompt=B.Histogram(pk, pn),
        columns=dict(scan.mapping),
        cut=None if cut is None else int(cut),
        policy=policy,
    )
    extra: dict[str, Any] = {}
    if mode == "llm":
        gen = np.ma.filled(res["n_gen"], 0)[prompt_rows]
        starts = column("pk", prompt_rows)
        if cut is not None and policy == "reject":
            keep = starts <= cut
            starts, gen = starts[keep], gen[keep]
        elif cut is not None:
            starts = np.minimum(starts, cut)
        end_rows = (np.asarray(res["ge"]) == 0) & ~np.ma.getmaskarray(res["ek"])
        out_rows = (np.asarray(res["gg"]) == 0) & ~np.ma.getmaskarray(res["gk"])
        extra["decode_starts"] = _summed(starts, gen)
        extra["decode_ends"] = _summed(column("ek", end_rows), column("n", end_rows))
        extra["output"] = _summed(column("gk", out_rows), column("n", out_rows))
    if "timestamp" in scan.mapping:
        t0, t1 = np.ma.masked_invalid(res["t0"][prompt_rows]), np.ma.masked_invalid(res["t1"][prompt_rows])
        if t0.count():
            extra["first_arrival_s"] = float(t0.min())
            extra["last_arrival_s"] = float(t1.max())
    if extra:
        from dataclasses import replace

        out = replace(out, **extra)
    return out
