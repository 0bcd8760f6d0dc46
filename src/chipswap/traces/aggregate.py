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
    outputs: bool = False,
    fmt: str | None = None,
    progress: ProgressFn | None = None,
) -> TraceHistograms:
    """Histograms of a raw trace (file, folder or glob; CSV/TSV/JSONL/JSON/Parquet, .gz/.zst), in one scan.

    max_length: the largest prefill bucket the plan will use, if already known (e.g. --max-length); requests
    above it are rejected or truncated (`policy`) before their decode steps are counted. times: also read the
    arrival column (first/last arrival); outputs: also the output-length histogram (llm). Memory: the
    engine's budget plus the distinct lengths, not the rows.
    """
    return _aggregate(path, "trace", mode, columns, max_length, policy, times, outputs, fmt, progress)


def read_histogram(
    path: str | Path,
    *,
    mode: str = "llm",
    columns: Mapping[str, str] | None = None,
    max_length: int | None = None,
    policy: str = "reject",
    outputs: bool = False,
    fmt: str | None = None,
    progress: ProgressFn | None = None,
) -> TraceHistograms:
    """A pre-aggregated histogram file: columns prompt length and count (encoder), plus output length (llm).

    Rows may repeat a length (they are summed), so the output of several warehouse queries can be
    concatenated.
    The result equals aggregate_trace() on the raw trace the counts came from.
    """
    return _aggregate(path, "histogram", mode, columns, max_length, policy, False, outputs, fmt, progress)


def _aggregate(
    path: str | Path,
    kind: str,
    mode: str,
    columns: Mapping[str, str] | None,
    max_length: int | None,
    policy: str,
    times: bool,
    outputs: bool,
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
        query = _Query(mode, kind, max_length, policy, outputs)
        scan, cursor = execute(con, scan, query.sql, progress=progress)
        raw = fetch_columns(cursor)
        res = {k: np.ma.filled(raw[k], -1) for k in ("s", "k", "n", "n_gen", "t_n")}  # NULL sum: overflowed
        res.update({k: np.ma.filled(np.ma.asarray(raw[k], dtype=np.float64), np.nan) for k in ("t0", "t1")})
        if _Query.has_bad_rows(res, "timestamp" in scan.mapping):
            raise first_bad_row(con, scan)
    return _assemble(source.label, kind, mode, scan, res, max_length, policy)


# The aggregate's rows: (s, k, n, n_gen, t0, t1, t_n). s says which histogram the row belongs to, k is the
# length.
PROMPTS, ENDS, OUTPUTS = 0, 1, 2


@dataclass(frozen=True)
class _Query:
    """The aggregation: prompt lengths, and in llm mode the total length at which each generating request ends
    and, if asked, output lengths, as rows (s, k, n, n_gen, t0, t1, t_n).

    Validity is checked without a per-row predicate where it can be: lengths are clamped into keys
    0..MAX_LENGTH + 1, so an invalid row lands on prompt key 0 (missing, below 1, a bad output or count, or
    prompt
    + output beyond the bound) or MAX_LENGTH + 1 (too long), and a bad arrival time shows as t_n < n; the
    engine
    also sizes its hash tables from those bounds. Parquet is columnar, so each histogram is its own GROUP BY
    over
    a fresh scan of two columns (cheaper than a GROUPING SETS aggregate); text formats are parsed once, with
    GROUPING SETS over that one scan.
    """

    mode: str
    kind: str
    cut: int | None
    policy: str
    outputs: bool

    def _aggregates(self, w: str | None, gen: str | None, t: str | None) -> str:
        """n, n_gen, t0, t1, t_n over the group, given SQL for the weight, the generates flag and the time."""
        n = "count(*)" if w is None else f"TRY_CAST(sum({w}) AS BIGINT)"
        if gen is None:
            n_gen = "0"
        else:
            n_gen = f"sum({gen})" if w is None else f"TRY_CAST(sum({w} * {gen}) AS BIGINT)"
        times = "NULL AS t0, NULL AS t1, 0 AS t_n"
        if t is not None:
            times = f"min({t}) AS t0, max({t}) AS t1, count({t}) AS t_n"
        return f"{n} AS n, {n_gen} AS n_gen, {times}"

    def sql(self, scan: Scan) -> tuple[str, list]:
        rel, params = scan.relation()
        top = B.MAX_LENGTH
        pc = f"COALESCE(LEAST(GREATEST({scan.value('prompt_tokens')}, 0), {top + 1}), 0)"
        conds: list[str] = []
        w = scan.value("count") if self.kind == "histogram" else None
        if w is not None:
            conds.append(f"COALESCE({scan.valid('count')}, false)")
        t = scan.value("timestamp") if "timestamp" in scan.mapping else None
        gc = gen = None
        parts: list[tuple[int, str, str]] = []  # (histogram, key, which rows)
        if self.mode == "llm":
            gc = f"LEAST(GREATEST({scan.value('output_tokens')}, -1), {top + 1})"
            gen = f"CAST({gc} > 0 AS INTEGER)"
            conds += [f"{gc} BETWEEN 0 AND {top}", f"{pc} + {gc} <= {top}"]
            decoding, p_eff = f"{gc} > 0", pc
            if self.cut is not None and self.policy == "reject":
                decoding += f" AND {pc} <= {int(self.cut)}"
            elif self.cut is not None:
                p_eff = f"LEAST({pc}, {int(self.cut)})"
            parts.append((ENDS, f"LEAST({p_eff} + {gc}, {top + 1})", decoding))
            if self.outputs:
                parts.append((OUTPUTS, gc, "true"))
        pk = f"CASE WHEN {' AND '.join(conds)} THEN {pc} ELSE 0 END" if conds else pc
        parts.insert(0, (PROMPTS, pk, "true"))
        if scan.source.fmt == "parquet":
            union = [
                f"SELECT {s} AS s, {key} AS k, "
                f"{self._aggregates(w, gen if s == PROMPTS else None, t if s == PROMPTS else None)} "
                f"FROM {rel} WHERE {rows} GROUP BY k"
                for s, key, rows in parts
            ]
            return " UNION ALL ".join(union), params * len(union)
        # text formats: one parse, one GROUPING SETS aggregate; each histogram's key is NULL outside its rows
        cols = [f"CASE WHEN {rows} THEN {key} END AS k{s}" for s, key, rows in parts]
        cols += [f"{w} AS w"] if w is not None else []
        cols += [f"{gen} AS gen"] if gen is not None else []
        cols += [f"{t} AS t"] if t is not None else []
        aggs = self._aggregates(
            "w" if w is not None else None, "gen" if gen is not None else None, "t" if t is not None else None
        )
        which = " ".join(f"WHEN GROUPING(k{s}) = 0 THEN {s}" for s, _, _ in parts)
        keys = ", ".join(f"k{s}" for s, _, _ in parts)
        sets = ", ".join(f"(k{s})" for s, _, _ in parts)
        sql = (
            f"SELECT * FROM (SELECT CASE {which} END AS s, COALESCE({keys}) AS k, {aggs} "
            f"FROM (SELECT {', '.join(cols)} FROM {rel}) GROUP BY GROUPING SETS ({sets})) WHERE k IS NOT NULL"
        )
        return sql, params

    @staticmethod
    def has_bad_rows(res: dict[str, np.ndarray], times: bool) -> bool:
        """Did any row fail validation? (See the class docstring for how it shows in the result.)"""
        prompt = res["s"] == PROMPTS
        keys = res["k"][prompt]
        if ((keys == 0) | (keys > B.MAX_LENGTH)).any():
            return True
        if times:
            if (res["t_n"][prompt] < res["n"][prompt]).any():
                return True
            return not (np.isfinite(res["t0"][prompt]).all() and np.isfinite(res["t1"][prompt]).all())
        return False


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
    res: dict[str, np.ndarray],
    cut: int | None,
    policy: str,
) -> TraceHistograms:
    if kind == "histogram" and ((res["n"] < 0).any() or (res["n_gen"] < 0).any()):
        raise ChipswapError(
            f"{label}: the counts of one length add up to more than 2^63 requests; check the count column"
        )
    rows = {s: res["s"] == s for s in (PROMPTS, ENDS, OUTPUTS)}
    pk, pn = _summed(res["k"][rows[PROMPTS]], res["n"][rows[PROMPTS]])
    requests = int(pn.sum()) if pn.size else 0
    if requests == 0:
        raise ChipswapError(
            f"{label}: the {'histogram' if kind == 'histogram' else 'trace'} is empty (no requests); give "
            "one with at least one row" + (" with a count above 0" if kind == "histogram" else "")
        )
    if requests > MAX_COUNT:
        raise ChipswapError(
            f"{label}: {requests:,} requests exceed the limit of {MAX_COUNT:,}; check the counts"
        )
    extra: dict[str, Any] = {}
    if mode == "llm":
        starts, gen = res["k"][rows[PROMPTS]], res["n_gen"][rows[PROMPTS]]
        if cut is not None and policy == "reject":
            keep = starts <= cut
            starts, gen = starts[keep], gen[keep]
        elif cut is not None:
            starts = np.minimum(starts, cut)
        extra["decode_starts"] = _summed(starts, gen)
        extra["decode_ends"] = _summed(res["k"][rows[ENDS]], res["n"][rows[ENDS]])
        if rows[OUTPUTS].any():
            extra["output"] = _summed(res["k"][rows[OUTPUTS]], res["n"][rows[OUTPUTS]])
    if "timestamp" in scan.mapping:
        t0 = res["t0"][rows[PROMPTS]].astype(np.float64)
        t1 = res["t1"][rows[PROMPTS]].astype(np.float64)
        if np.isfinite(t0).any():
            extra["first_arrival_s"] = float(np.nanmin(t0))
            extra["last_arrival_s"] = float(np.nanmax(t1))
    return TraceHistograms(
        source=label,
        kind=kind,
        mode=mode,
        requests=requests,
        prompt=B.Histogram(pk, pn),
        columns=dict(scan.mapping),
        cut=None if cut is None else int(cut),
        policy=policy,
        **extra,
    )
