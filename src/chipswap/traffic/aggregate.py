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
they decode. Arrival times are reduced to first/last (per-window counts: chipswap.traffic.arrivals).

I/O edge through the engine; the arithmetic on the aggregated counts is chipswap.shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from chipswap import shapes as B
from chipswap.errors import ChipswapError
from chipswap.traffic.checks import INTEGER_TYPES, MAX_COUNT
from chipswap.traffic.engine import ProgressFn
from chipswap.traffic.scan import Scan, execute, first_bad_row, open_scan
from chipswap.traffic.source import connect, resolve_source

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
        trusted = kind == "trace" and _proven_valid(con, scan)
        query = _Query(mode, kind, max_length, policy, outputs, trusted)
        scan, res = execute(
            con,
            scan,
            query.sql,
            progress=progress,
            consume=lambda cur, s: query.fetch(cur, s, progress, con),
            stream=query.streamed(scan),
        )
        if _Query.has_bad_rows(res, "timestamp" in scan.mapping):
            raise first_bad_row(con, scan)
    return _assemble(source.label, kind, mode, scan, res, max_length, policy)


# The aggregate's rows: (s, k, n, n_gen, t0, t1, t_n). s says which histogram the row belongs to, k is the
# length.
PROMPTS, ENDS, OUTPUTS = 0, 1, 2


@dataclass(frozen=True)
class _Query:
    """The aggregation: prompt lengths, and in llm mode the total length at which each generating request ends
    and, if asked, output lengths, as rows (s, k, n, n_gen, t0, t1, t_n) of a dict of arrays.

    Validity is checked without a per-row predicate where it can be: lengths are clamped into keys
    0..MAX_LENGTH + 1, so an invalid row lands on prompt key 0 (missing, below 1, a bad output or count, or
    prompt + output beyond the bound) or MAX_LENGTH + 1 (too long), and a bad arrival time shows as a count of
    times below the count of rows; the engine also sizes its hash tables from those bounds.

    How the counting runs depends on the input, measured on 10 M rows (docs/benchmarks.md, section traces):
    - Parquet is columnar: each histogram is its own GROUP BY over a fresh scan of two columns (cheaper than
      a GROUPING SETS aggregate);
    - text formats with one histogram (encoder mode) or weighted rows (histogram files): one parse, one
      GROUP BY / GROUPING SETS aggregate;
    - a raw text trace in llm mode: one parse, and the engine streams the clamped keys in 1 M-row Arrow
      batches to np.bincount over dense arrays of MAX_LENGTH + 3 counts (16 MB each), because the
      engine's GROUPING SETS costs as much again as the parse. Memory stays bounded by MAX_LENGTH and the
      batch.
    """

    mode: str
    kind: str
    cut: int | None
    policy: str
    outputs: bool
    trusted: bool = False  # the Parquet statistics already prove every length valid (see _proven_valid)

    def streamed(self, scan: Scan) -> bool:
        return self.kind == "trace" and self.mode == "llm" and scan.source.fmt != "parquet"

    def _rows(self, scan: Scan) -> tuple[dict[str, str], dict[int, tuple[str, str]]]:
        """Per-row SQL (pk, gen, w, t) and, per histogram, (key, which rows)."""
        top = B.MAX_LENGTH
        pc = f"COALESCE(LEAST(GREATEST({scan.value('prompt_tokens')}, 0), {top + 1}), 0)"
        if self.trusted:
            pc = scan.value("prompt_tokens")
        conds: list[str] = []
        cols: dict[str, str] = {}
        if self.kind == "histogram":
            conds.append(f"COALESCE({scan.valid('count')}, false)")
            cols["w"] = scan.value("count")
        if "timestamp" in scan.mapping:
            cols["t"] = scan.value("timestamp")
        parts: dict[int, tuple[str, str]] = {}
        if self.mode == "llm":
            gc = f"LEAST(GREATEST({scan.value('output_tokens')}, -1), {top + 1})"
            if self.trusted:
                gc = scan.value("output_tokens")
            cols["gen"] = f"CAST({gc} > 0 AS INTEGER)"
            if not self.trusted:
                conds += [f"{gc} BETWEEN 0 AND {top}", f"{pc} + {gc} <= {top}"]
            decoding, p_eff = f"{gc} > 0", pc
            if self.cut is not None and self.policy == "reject":
                decoding += f" AND {pc} <= {int(self.cut)}"
            elif self.cut is not None:
                p_eff = f"LEAST({pc}, {int(self.cut)})"
            parts[ENDS] = (f"LEAST({p_eff} + {gc}, {top + 1})", decoding)
            if self.outputs:
                parts[OUTPUTS] = (gc, "true")
        pk = f"CASE WHEN {' AND '.join(conds)} THEN {pc} ELSE 0 END" if conds else pc
        return cols, {PROMPTS: (pk, "true"), **parts}

    @staticmethod
    def _aggregates(w: str | None, gen: str | None, t: str | None) -> str:
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
        cols, parts = self._rows(scan)
        if self.streamed(scan):  # the row keys + 1 (0: not in that histogram), for np.bincount
            keys = [
                f"CAST(COALESCE(CASE WHEN {rows} THEN {key} END, -1) + 1 AS INTEGER) AS k{s}"
                for s, (key, rows) in parts.items()
            ]
            times = [f"{cols['t']} AS t"] if "t" in cols else []
            return f"SELECT {', '.join(keys + times)} FROM {rel}", params
        w, gen, t = cols.get("w"), cols.get("gen"), cols.get("t")
        if scan.source.fmt == "parquet":
            union = [
                f"SELECT {s} AS s, {key} AS k, "
                f"{self._aggregates(w, gen if s == PROMPTS else None, t if s == PROMPTS else None)} "
                f"FROM {rel} WHERE {rows} GROUP BY k"
                for s, (key, rows) in parts.items()
            ]
            return " UNION ALL ".join(union), params * len(union)
        # text formats: one parse, one GROUPING SETS aggregate; each histogram's key is NULL outside its rows
        inner = [f"CASE WHEN {rows} THEN {key} END AS k{s}" for s, (key, rows) in parts.items()]
        inner += [f"{sql} AS {name}" for name, sql in cols.items()]
        aggs = self._aggregates(*(name if name in cols else None for name in ("w", "gen", "t")))
        which = " ".join(f"WHEN GROUPING(k{s}) = 0 THEN {s}" for s in parts)
        keys = ", ".join(f"k{s}" for s in parts)
        sets = ", ".join(f"(k{s})" for s in parts)
        sql = (
            f"SELECT * FROM (SELECT CASE {which} END AS s, COALESCE({keys}) AS k, {aggs} "
            f"FROM (SELECT {', '.join(inner)} FROM {rel}) GROUP BY GROUPING SETS ({sets})) "
            "WHERE k IS NOT NULL"
        )
        return sql, params

    def fetch(self, cursor: Any, scan: Scan, progress: ProgressFn | None, con: Any) -> dict[str, np.ndarray]:
        """The result as arrays (s, k, n, n_gen, t0, t1, t_n) and the flag times_ok."""
        if self.streamed(scan):
            return _count_stream(cursor, "t" in self._rows(scan)[0], progress, con)
        raw = cursor.fetchnumpy()
        res = {k: np.ma.filled(raw[k], -1) for k in ("s", "k", "n", "n_gen", "t_n")}  # NULL sum: overflowed
        res.update({k: np.ma.filled(np.ma.asarray(raw[k], dtype=np.float64), np.nan) for k in ("t0", "t1")})
        prompt = res["s"] == PROMPTS
        res["times_ok"] = np.asarray(
            (res["t_n"][prompt] >= res["n"][prompt]).all()
            and np.isfinite(res["t0"][prompt]).all()
            and np.isfinite(res["t1"][prompt]).all()
        )
        return res

    @staticmethod
    def has_bad_rows(res: dict[str, np.ndarray], times: bool) -> bool:
        """Did any row fail validation? (See the class docstring for how it shows in the result.)"""
        keys = res["k"][res["s"] == PROMPTS]
        return bool(((keys == 0) | (keys > B.MAX_LENGTH)).any()) or (times and not bool(res["times_ok"]))


def _count_stream(cursor: Any, times: bool, progress: ProgressFn | None, con: Any) -> dict[str, np.ndarray]:
    """np.bincount over the engine's row keys + 1 (k0 prompt, k1 end, k2 output; 0 = none), batch by batch.

    A request that decodes has an end key; one with a kept prompt that generates always decodes, so the
    generating count per prompt length is the prompt keys of the rows with an end key."""
    size = B.MAX_LENGTH + 3
    dense: dict[int, np.ndarray] = {}
    generating = np.zeros(size, dtype=np.int64)
    t0, t1, times_ok = np.inf, -np.inf, True
    for batch in cursor:
        cols = {
            name: batch.column(i).to_numpy(zero_copy_only=False) for i, name in enumerate(batch.schema.names)
        }
        for name, keys in cols.items():
            if name.startswith("k"):
                s = int(name[1:])
                counts = np.bincount(keys, minlength=size)
                dense[s] = dense[s] + counts if s in dense else counts
        if ENDS in dense:
            generating += np.bincount(cols["k0"][cols[f"k{ENDS}"] > 0], minlength=size)
        if times:
            t = np.asarray(cols["t"], dtype=np.float64)
            finite = np.isfinite(t)
            times_ok = times_ok and bool(finite.all())
            if finite.any():
                t0, t1 = min(t0, float(t[finite].min())), max(t1, float(t[finite].max()))
        if progress is not None and con.query_progress() >= 0:
            progress(min(con.query_progress() / 100.0, 1.0))
    if progress is not None:
        progress(1.0)
    parts = {s: np.flatnonzero(c[1:]) + 1 for s, c in dense.items()}  # index 0: rows outside the histogram
    none = [np.zeros(0, dtype=np.int64)]  # no batches at all: a header-only file
    res = {
        "s": np.concatenate(none + [np.full(k.size, s) for s, k in parts.items()]),
        "k": np.concatenate(none + [k - 1 for k in parts.values()]),
        "n": np.concatenate(none + [dense[s][k] for s, k in parts.items()]),
        "n_gen": np.concatenate(none + [generating[k] if s == PROMPTS else 0 * k for s, k in parts.items()]),
    }
    res["t0"] = np.full(res["k"].size, t0 if t0 <= t1 else np.nan)
    res["t1"] = np.full(res["k"].size, t1 if t0 <= t1 else np.nan)
    res["t_n"] = res["n"]
    res["times_ok"] = np.asarray(times_ok)
    return res


def _proven_valid(con: Any, scan: Scan) -> bool:
    """Do the Parquet files' own statistics (min, max, nulls of every row group) prove every prompt and output
    length valid? Then the aggregation needs no per-row check. False whenever anything is missing."""
    lengths = [f for f in ("prompt_tokens", "output_tokens") if f in scan.mapping]
    cols = {scan.mapping[f]: f for f in lengths}
    if (
        scan.source.fmt != "parquet"
        or scan.text
        or any(scan.dtype(f).split("(")[0] not in INTEGER_TYPES for f in lengths)
    ):
        return False
    rows = con.execute(
        "SELECT path_in_schema, min(TRY_CAST(stats_min_value AS HUGEINT)), "
        "max(TRY_CAST(stats_max_value AS HUGEINT)), sum(stats_null_count), count(DISTINCT file_name), "
        "count(*) FILTER (WHERE TRY_CAST(stats_min_value AS HUGEINT) IS NULL "
        "OR TRY_CAST(stats_max_value AS HUGEINT) IS NULL OR stats_null_count IS NULL) "
        "FROM parquet_metadata(?) WHERE path_in_schema IN (SELECT unnest(?)) GROUP BY 1",
        [list(scan.source.files), list(cols)],
    ).fetchall()
    stats = {cols[r[0]]: r[1:] for r in rows if r[0] in cols}
    if set(stats) != set(lengths):
        return False
    for lo, hi, nulls, files, missing in stats.values():
        if missing or nulls or files != len(scan.source.files) or lo is None or hi is None:
            return False
    lo_p, hi_p = stats["prompt_tokens"][:2]
    if lo_p < 1 or hi_p > B.MAX_LENGTH:
        return False
    if "output_tokens" in stats:
        lo_g, hi_g = stats["output_tokens"][:2]
        if lo_g < 0 or hi_p + hi_g > B.MAX_LENGTH:
            return False
    return True


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
