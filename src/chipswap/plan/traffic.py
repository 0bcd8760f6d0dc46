"""Traffic stage: read the trace (or the stated steady rate), summarise it, and cut out the load fleets are
sized for: the busiest `burst_window_s` window, at the workload's scale.

Input: PlanSetup. Output: TrafficStage (summary for the report and verdict, the trace for the shape planner,
and
the Load the simulator replays). Trace files are read through `chipswap.traces.read_trace` only. Bad traffic
(an empty trace, every arrival at one instant, a window longer than the trace, a window too large to simulate)
is one ChipswapError line naming the key and the fix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from chipswap.errors import ChipswapError
from chipswap.plan.result import TrafficSummary
from chipswap.plan.setup import PlanSetup

# arrivals replayed per sizing run (each fleet is simulated a few dozen times); a busier window is cut to its
# first MAX_SIM_REQUESTS arrivals, which still puts a p99 on hundreds of requests
MAX_SIM_REQUESTS = 60_000
SEED = 20240611  # arrivals drawn for a steady rate or a scaled trace are reproducible


@dataclass(frozen=True)
class Load:
    """The arrivals a fleet must serve: sorted times (s from the window start) with each request's lengths.

    rate_rps is the window's arrival rate after scale; `what` says where the arrivals come from."""

    times_s: np.ndarray = field(repr=False, compare=False)
    prompt_tokens: np.ndarray = field(repr=False, compare=False)
    output_tokens: np.ndarray = field(repr=False, compare=False)
    window_s: float
    rate_rps: float
    what: str
    all_prompt_tokens: np.ndarray = field(
        repr=False, compare=False, default_factory=lambda: np.zeros(0, dtype=np.int64)
    )
    all_output_tokens: np.ndarray = field(
        repr=False, compare=False, default_factory=lambda: np.zeros(0, dtype=np.int64)
    )

    @property
    def requests(self) -> int:
        return int(self.times_s.size)


@dataclass(frozen=True)
class TrafficStage:
    summary: TrafficSummary
    trace: Any  # chipswap.traces.Trace, or None for a steady rate
    load: Load
    notes: tuple[str, ...] = ()


def traffic_stats(
    timestamps_s: np.ndarray, window_s: float, scale: float
) -> tuple[float, float | None, float | None, tuple[int, ...]]:
    """Mean rate, 95th-percentile window rate, their ratio, and the per-window counts (full windows only)."""
    t = np.sort(np.asarray(timestamps_s, dtype=float))
    t = t - t[0]
    duration = float(t[-1]) if len(t) > 1 else 0.0
    mean = (len(t) / duration * scale) if duration > 0 else float("nan")
    n_full = int(duration // window_s)
    if n_full < 1:
        return mean, None, None, ()
    counts = np.bincount((t[t < n_full * window_s] // window_s).astype(int), minlength=n_full)
    rates = counts / window_s * scale
    peak = float(np.percentile(rates, 95))
    wmean = float(rates.mean())
    return mean, peak, (peak / wmean if wmean > 0 else None), tuple(int(c) for c in counts)


def scaled_arrivals(
    times_s: np.ndarray, window_s: float, scale: float, seed: int = SEED
) -> tuple[np.ndarray, np.ndarray]:
    """`scale` times the arrivals of one window: floor(scale) copies plus a random share of one more, each
    copy shifted circularly by a random offset (independent streams with the same pattern). Returns the sorted
    times and, for each, the index of the original request it copies (its lengths)."""
    rng = np.random.default_rng(seed)
    n = times_s.size
    whole = int(math.floor(scale))
    frac = scale - whole
    parts_t: list[np.ndarray] = []
    parts_i: list[np.ndarray] = []
    for k in range(whole + (1 if frac > 0 else 0)):
        idx = np.arange(n)
        if k == whole:  # the fractional copy: keep each request with probability frac
            idx = idx[rng.random(n) < frac]
        shift = 0.0 if k == 0 else float(rng.uniform(0, window_s))
        parts_t.append(np.mod(times_s[idx] + shift, window_s))
        parts_i.append(idx)
    t = np.concatenate(parts_t) if parts_t else np.zeros(0)
    i = np.concatenate(parts_i) if parts_i else np.zeros(0, dtype=np.int64)
    order = np.argsort(t, kind="stable")
    return t[order], i[order]


def poisson_arrivals(rate_rps: float, window_s: float, seed: int = SEED) -> np.ndarray:
    """Poisson arrival times at `rate_rps` over `window_s` seconds (a steady stated rate)."""
    rng = np.random.default_rng(seed)
    n = int(rng.poisson(rate_rps * window_s))
    return np.sort(rng.uniform(0.0, window_s, size=n))


def _cap(window_s: float, rate: float) -> float:
    """The simulated window: the whole window, or its first part when it would hold too many arrivals."""
    return min(window_s, MAX_SIM_REQUESTS / rate) if rate > 0 else window_s


HISTOGRAM_SAMPLE = 20_000  # lengths drawn from a histogram file for the projection and the report


def _from_histogram(s: PlanSetup) -> TrafficStage:
    """Poisson arrivals at the stated rate, each request's lengths drawn from a histogram file."""
    from chipswap.traces import read_histogram

    tr = s.workload.traffic
    assert tr is not None and tr.histogram is not None and tr.steady_rps is not None
    path = s.base_dir / tr.histogram
    if not path.exists():
        raise ChipswapError(
            f"{s.path}: traffic.histogram: file not found: {path}; expected a path relative to the "
            "workload file"
        )
    cols = tr.columns.model_dump(exclude_none=True) if tr.columns else None
    h = read_histogram(path, mode=tr.mode, columns=cols, outputs=tr.mode == "llm")
    rng = np.random.default_rng(SEED)

    def draw(lengths: np.ndarray, counts: np.ndarray, n: int) -> np.ndarray:
        c = np.asarray(counts, dtype=float)
        return rng.choice(np.asarray(lengths, dtype=np.int64), size=n, p=c / c.sum())

    window = _cap(tr.burst_window_s, tr.steady_rps)
    times = poisson_arrivals(tr.steady_rps, window)
    n = times.size
    prompt = draw(h.prompt.lengths, h.prompt.counts, n)
    out = draw(*h.output, n) if h.output is not None else np.zeros(n, dtype=np.int64)
    sp, so = prompt[:HISTOGRAM_SAMPLE], out[:HISTOGRAM_SAMPLE]
    summary = TrafficSummary(
        f"{tr.histogram} (a histogram of {len(h):,} requests) at the stated {tr.steady_rps:g} requests/s",
        len(h),
        0.0,
        1.0,
        tr.steady_rps,
        tr.steady_rps,
        1.0,
        tr.burst_window_s,
        (),
        float(h.prompt.quantile(0.5)),
        float(h.prompt.quantile(0.99)),
        float(np.median(so)) if so.size else None,
        sp,
        so,
        output_p99=float(np.percentile(so, 99)) if so.size else None,
        busiest_rps=tr.steady_rps,
        busiest_start_s=0.0,
    )
    load = Load(
        times,
        prompt,
        out,
        window,
        tr.steady_rps,
        f"Poisson arrivals at the stated {tr.steady_rps:g} requests/s, lengths drawn from {tr.histogram} "
        "(prompt and output drawn independently)",
        sp,
        so,
    )
    return TrafficStage(summary, h, load)


def _steady(s: PlanSetup) -> TrafficStage:
    tr = s.workload.traffic
    assert tr is not None and tr.steady_rps is not None
    if tr.histogram is not None:
        return _from_histogram(s)
    prompt = int(tr.prompt_tokens or 0)
    out = int(tr.output_tokens or 0)
    summary = TrafficSummary(
        "steady rate (stated)",
        0,
        0.0,
        1.0,
        tr.steady_rps,
        tr.steady_rps,
        1.0,
        tr.burst_window_s,
        (),
        float(prompt),
        float(prompt),
        float(out),
        np.array([prompt], dtype=np.int64),
        np.array([out], dtype=np.int64),
        output_p99=float(out),
        busiest_rps=tr.steady_rps,
        busiest_start_s=0.0,
    )
    window = _cap(tr.burst_window_s, tr.steady_rps)
    times = poisson_arrivals(tr.steady_rps, window)
    n = times.size
    load = Load(
        times,
        np.full(n, prompt, dtype=np.int64),
        np.full(n, out, dtype=np.int64),
        window,
        tr.steady_rps,
        f"Poisson arrivals at the stated {tr.steady_rps:g} requests/s",
    )
    return TrafficStage(summary, None, load)


def _busiest(ts: np.ndarray, window_s: float) -> tuple[float, np.ndarray]:
    """Start and index mask of the window of `window_s` seconds holding the most arrivals (sliding)."""
    t = np.sort(ts)
    ends = np.searchsorted(t, t + window_s, side="left")
    counts = ends - np.arange(t.size)
    best = int(np.argmax(counts))
    start = float(t[best])
    return start, (ts >= start) & (ts < start + window_s)


def read_trace(path: Path, columns: dict[str, str] | None) -> Any:
    from chipswap.traces import read_trace as read

    return read(path, columns=columns) if columns else read(path)


def bundled_trace() -> Path:
    from chipswap.traces import bundled_trace_path

    return Path(bundled_trace_path())


def _from_trace(s: PlanSetup) -> TrafficStage:
    tr = s.workload.traffic
    wpath = s.path
    assert tr is not None and tr.trace is not None
    path = bundled_trace() if tr.trace == "bundled" else (s.base_dir / tr.trace)
    if not path.exists():
        raise ChipswapError(
            f"{wpath}: traffic.trace: file not found: {path}; expected a CSV/JSONL/Parquet path "
            'relative to the workload file, or "bundled"'
        )
    cols = tr.columns.model_dump(exclude_none=True) if tr.columns else None
    trace = read_trace(path, cols)
    prompt = np.asarray(trace.prompt_tokens)
    out = np.asarray(trace.output_tokens if trace.output_tokens is not None else np.zeros_like(prompt))
    name = (
        "bundled Azure LLM code trace (CC-BY 4.0, Patel et al., Splitwise, ISCA 2024)"
        if tr.trace == "bundled"
        else str(tr.trace)
    )
    common = dict(
        prompt_p50=float(np.median(prompt)),
        prompt_p99=float(np.percentile(prompt, 99)),
        output_p50=float(np.median(out)),
    )
    if trace.timestamps_s is None:
        raise ChipswapError(
            f"{wpath}: traffic.trace has no timestamp column, so arrival rates and the fleet size can't be "
            'computed; add [traffic.columns] timestamp = "COLUMN" or give traffic.steady_rps instead'
        )
    ts = np.asarray(trace.timestamps_s, dtype=float)
    duration = float(ts.max() - ts.min())
    if duration <= 0:
        raise ChipswapError(
            f"{wpath}: traffic.trace: all {len(ts):,} requests arrive at the same instant, so there is no "
            "arrival rate to size a fleet for; give a trace with real arrival times or use traffic.steady_rps"
        )
    if duration < tr.burst_window_s:
        raise ChipswapError(
            f"{wpath}: traffic.burst_window_s: {tr.burst_window_s:g} s is longer than the trace's "
            f"{duration:.4g} s of arrivals, so no window is full; set traffic.burst_window_s = "
            f"{math.floor(duration * 1000) / 1000:g} or less, or give a longer trace"
        )
    mean, peak, ratio, counts = traffic_stats(ts, tr.burst_window_s, tr.scale)
    start, in_window = _busiest(ts, tr.burst_window_s)
    w_times = ts[in_window] - start
    busiest_rps = w_times.size / tr.burst_window_s * tr.scale
    window = _cap(tr.burst_window_s, busiest_rps)
    notes: list[str] = []
    if window < tr.burst_window_s:
        notes.append(
            f"the busiest window holds {busiest_rps * tr.burst_window_s:,.0f} requests after scale; fleets "
            "are "
            f"sized on its first {window:.3g} s ({MAX_SIM_REQUESTS:,} requests)"
        )
    keep = w_times < window
    # scale: more (or fewer) independent streams with the window's own pattern, over the same window
    t, idx = scaled_arrivals(w_times[keep], window, tr.scale)
    src_prompt = prompt[in_window][keep]
    src_out = out[in_window][keep]
    if t.size == 0:
        raise ChipswapError(
            f"{wpath}: traffic.scale: {tr.scale:g} leaves no arrivals in the busiest "
            f"{tr.burst_window_s:g}-second window; raise traffic.scale or lengthen traffic.burst_window_s"
        )
    load = Load(
        t,
        src_prompt[idx].astype(np.int64),
        src_out[idx].astype(np.int64),
        window,
        t.size / window,
        f"the busiest {tr.burst_window_s:g}-second window of the trace (from t = {start:,.0f} s), "
        f"x{tr.scale:g}",
        prompt.astype(np.int64),
        out.astype(np.int64),
    )
    summary = TrafficSummary(
        name,
        len(prompt),
        duration,
        tr.scale,
        mean if math.isfinite(mean) else None,
        peak,
        ratio,
        tr.burst_window_s,
        counts,
        **common,
        prompt_tokens=prompt,
        output_tokens=out,
        output_p99=float(np.percentile(out, 99)),
        busiest_rps=busiest_rps,
        busiest_start_s=start,
    )
    return TrafficStage(summary, trace, load, tuple(notes))


def traffic(s: PlanSetup) -> TrafficStage | None:
    """The traffic stage (serving workloads only; a training job has none)."""
    if s.kind != "serving":
        return None
    tr = s.workload.traffic
    assert tr is not None
    return _steady(s) if tr.steady_rps is not None else _from_trace(s)
