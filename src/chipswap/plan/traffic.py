"""Traffic stage: read the trace (or a histogram of lengths, or the stated steady rate), summarise it, and cut
out the load both fleets are sized for: the busiest `burst_window_s` window with a warm-up before and a
cool-down after, at the workload's scale.

Input: PlanSetup. Output: TrafficStage (summary for the report and verdict, the trace or histogram for the
shape planner, and the Load the simulator replays). Trace files are read through `chipswap.traffic` only;
arrivals are built, scaled and windowed with the simulator's own helpers (chipswap.simulation.simulate /
chipswap.simulation.fleet). Bad traffic (an empty trace, every arrival at one instant, a window longer than
the
trace, no timestamps) is one ChipswapError line naming the key and the fix.
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

# Arrivals in the measured window of one sizing run (each fleet is simulated a few dozen times); a busier
# window is shortened so that it holds this many, which still puts a p99 on hundreds of requests.
MAX_SIM_REQUESTS = 60_000
WARMUP_S = 120.0  # simulated before the window so it does not start on an empty fleet
COOLDOWN_S = 60.0  # after it, so requests at the window's end still share their replicas
SEED = 20240611  # arrivals drawn for a steady rate or a scaled trace are reproducible
HISTOGRAM_SAMPLE = 20_000  # lengths drawn from a histogram file for the projection and the report


@dataclass(frozen=True)
class Load:
    """What a fleet must serve: `traffic` (chipswap.simulation.simulate.Traffic: the window with its warm-up
    and
    cool-down, at scale), the `window` measured within it (start, end seconds), its arrival rate after scale,
    and where it comes from. all_*_tokens: every request's lengths (for the configuration search)."""

    traffic: Any = field(repr=False, compare=False)
    window: tuple[float, float]
    rate_rps: float
    what: str
    all_prompt_tokens: np.ndarray = field(repr=False, compare=False)
    all_output_tokens: np.ndarray = field(repr=False, compare=False)

    @property
    def window_s(self) -> float:
        return self.window[1] - self.window[0]

    @property
    def requests(self) -> int:
        """Requests arriving in the measured window."""
        a = self.traffic.arrivals_s
        return int(((a >= self.window[0]) & (a < self.window[1])).sum())

    @property
    def warmup_s(self) -> float:
        return max(0.0, self.window[0] - float(self.traffic.arrivals_s[0]))

    @property
    def cooldown_s(self) -> float:
        return max(0.0, float(self.traffic.arrivals_s[-1]) - self.window[1])


@dataclass(frozen=True)
class TrafficStage:
    summary: TrafficSummary
    trace: Any  # chipswap.traffic.Trace or TraceHistograms (for the shape planner); None for a steady rate
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


def _shrink(window_s: float, rate_rps: float) -> float:
    """The factor (<= 1) that brings the measured window down to MAX_SIM_REQUESTS arrivals."""
    n = rate_rps * window_s
    return 1.0 if n <= MAX_SIM_REQUESTS else MAX_SIM_REQUESTS / n


def _stated_rate(s: PlanSetup, prompt: np.ndarray, out: np.ndarray, what: str) -> Load:
    """Poisson arrivals at the stated rate over warm-up + window + cool-down, lengths given per request."""
    from chipswap.simulation.simulate import make_traffic, poisson_arrivals

    tr = s.workload.traffic
    assert tr is not None and tr.steady_rps is not None
    k = _shrink(tr.burst_window_s, tr.steady_rps)
    warm, win, cool = WARMUP_S * k, tr.burst_window_s * k, COOLDOWN_S * k
    rng = np.random.default_rng(SEED)
    times = poisson_arrivals(tr.steady_rps, rng, duration_s=warm + win + cool)
    n = times.size
    idx = rng.integers(0, prompt.size, n) if prompt.size > 1 else np.zeros(n, dtype=np.int64)
    traffic = make_traffic(times, prompt[idx], out[idx])
    return Load(traffic, (warm, warm + win), tr.steady_rps, what, prompt, out)


def _stated_summary(
    s: PlanSetup,
    source: str,
    requests: int,
    prompt: np.ndarray,
    out: np.ndarray,
    prompt_p50_p99: tuple[float, float] | None = None,
) -> TrafficSummary:
    """The summary of a stated rate: flat (peak = mean = busiest), lengths from `prompt` / `out`."""
    tr = s.workload.traffic
    assert tr is not None and tr.steady_rps is not None
    p50, p99 = prompt_p50_p99 or (float(np.median(prompt)), float(np.percentile(prompt, 99)))
    return TrafficSummary(
        source,
        requests,
        0.0,
        1.0,
        tr.steady_rps,
        tr.steady_rps,
        1.0,
        tr.burst_window_s,
        (),
        p50,
        p99,
        float(np.median(out)),
        prompt,
        out,
        output_p99=float(np.percentile(out, 99)),
        busiest_rps=tr.steady_rps,
        busiest_start_s=0.0,
    )


def _steady(s: PlanSetup) -> TrafficStage:
    tr = s.workload.traffic
    assert tr is not None and tr.steady_rps is not None
    if tr.histogram is not None:
        return _from_histogram(s)
    prompt = np.array([int(tr.prompt_tokens or 0)], dtype=np.int64)
    out = np.array([int(tr.output_tokens or 0)], dtype=np.int64)
    summary = _stated_summary(s, "steady rate (stated)", 0, prompt, out)
    load = _stated_rate(s, prompt, out, f"Poisson arrivals at the stated {tr.steady_rps:g} requests/s")
    return TrafficStage(summary, None, load)


def _from_histogram(s: PlanSetup) -> TrafficStage:
    """Poisson arrivals at the stated rate, each request's lengths drawn from a histogram file."""
    from chipswap.traffic import read_histogram

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

    def draw(lengths: np.ndarray, counts: np.ndarray) -> np.ndarray:
        c = np.asarray(counts, dtype=float)
        return rng.choice(np.asarray(lengths, dtype=np.int64), size=HISTOGRAM_SAMPLE, p=c / c.sum())

    prompt = draw(h.prompt.lengths, h.prompt.counts)
    out = draw(*h.output) if h.output is not None else np.zeros(HISTOGRAM_SAMPLE, dtype=np.int64)
    summary = _stated_summary(
        s,
        f"{tr.histogram} (a histogram of {len(h):,} requests) at the stated {tr.steady_rps:g} requests/s",
        len(h),
        prompt,
        out,
        (float(h.prompt.quantile(0.5)), float(h.prompt.quantile(0.99))),
    )
    what = (
        f"Poisson arrivals at the stated {tr.steady_rps:g} requests/s, lengths drawn from {tr.histogram} "
        "(prompt and output drawn independently)"
    )
    return TrafficStage(summary, h, _stated_rate(s, prompt, out, what))


def read_trace(path: Path, columns: dict[str, str] | None) -> Any:
    from chipswap.traffic import read_trace as read

    return read(path, columns=columns) if columns else read(path)


def bundled_trace() -> Path:
    from chipswap.traffic import bundled_trace_path

    return Path(bundled_trace_path())


def _from_trace(s: PlanSetup) -> TrafficStage:
    from chipswap.simulation.fleet import window_traffic
    from chipswap.simulation.simulate import make_traffic, scale_traffic

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
    if trace.timestamps_s is None:
        raise ChipswapError(
            f"{wpath}: traffic.trace has no timestamp column, so arrival rates and the fleet size can't be "
            'computed; add [traffic.columns] timestamp = "COLUMN" or give traffic.steady_rps instead'
        )
    prompt = np.asarray(trace.prompt_tokens, dtype=np.int64)
    out = np.asarray(
        trace.output_tokens if trace.output_tokens is not None else np.zeros_like(prompt), dtype=np.int64
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
    order = np.argsort(ts, kind="stable")
    full = make_traffic(ts[order] - ts.min(), prompt[order], out[order])
    by = "tokens" if tr.mode == "llm" else "requests"
    _part, busiest = window_traffic(full, tr.burst_window_s, warmup_s=0, cooldown_s=0, by=by)
    busiest_rps = busiest.requests * tr.scale / tr.burst_window_s
    k = _shrink(tr.burst_window_s, busiest_rps)
    notes: list[str] = []
    part, window = window_traffic(
        full, tr.burst_window_s * k, warmup_s=WARMUP_S * k, cooldown_s=COOLDOWN_S * k, by=by
    )
    if k < 1:
        notes.append(
            f"the busiest window holds {busiest_rps * tr.burst_window_s:,.0f} requests after scale; fleets "
            f"are sized on its busiest {tr.burst_window_s * k:.3g} s ({MAX_SIM_REQUESTS:,} requests)"
        )
    scaled = scale_traffic(part, tr.scale, np.random.default_rng(SEED)) if tr.scale != 1 else part
    name = (
        "bundled Azure LLM code trace (CC-BY 4.0, Patel et al., Splitwise, ISCA 2024)"
        if tr.trace == "bundled"
        else str(tr.trace)
    )
    load = Load(
        scaled,
        (window.start_s, window.end_s),
        window.requests * tr.scale / (window.end_s - window.start_s),
        f"the busiest {window.end_s - window.start_s:g}-second window of the trace by {by} (from t = "
        f"{window.start_s:,.0f} s, with {WARMUP_S * k:g} s before and {COOLDOWN_S * k:g} s after), "
        f"x{tr.scale:g}",
        prompt,
        out,
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
        float(np.median(prompt)),
        float(np.percentile(prompt, 99)),
        float(np.median(out)),
        prompt,
        out,
        output_p99=float(np.percentile(out, 99)),
        busiest_rps=busiest_rps,
        busiest_start_s=busiest.start_s,
    )
    return TrafficStage(summary, trace, load, tuple(notes))


def traffic(s: PlanSetup) -> TrafficStage | None:
    """The traffic stage (serving workloads only; a training job has none)."""
    if s.kind != "serving":
        return None
    tr = s.workload.traffic
    assert tr is not None
    return _steady(s) if tr.steady_rps is not None else _from_trace(s)
