"""Trace-driven discrete-event simulation of a serving fleet: continuous batching for LLMs, dynamic batching
for fixed-shape encoders, Neuron padding to buckets, round-robin or least-loaded dispatch across replicas.

Every call a replica makes is timed by a `ServiceTimes` (projected or measured); this module never decides how
fast a chip is. It is fast because it does not step through tokens: between two events (an arrival that can
join, a completion) the batch on a replica is fixed and its representative context grows by one token per
step, so the time of m decode steps is a difference of a cumulative step-time table (built once per batch
size, over context intervals on which the step time is constant). A request that runs alone on its replica
(idle when it arrives, done before the next one comes) is computed in closed form with the same arithmetic.
`tests.simulate_reference` steps through every call and is the oracle the tests compare this module
against.

Pure: numpy and the standard library. It may not read files, the clock or the network, print, or import torch.
Bad input raises ChipswapError (one line: what is wrong and how to fix it).

Serving rules (the naive reference implements the same rules independently):
- LLM, per replica: FIFO queue; at every call boundary, if a request is waiting and fewer than `max_batch`
  requests are running, the head of the queue is prefilled alone (batch 1, prompt padded to its prefill bucket
  on Neuron); its first token is out when the prefill ends (TTFT). Otherwise one decode step runs for all
  running requests. A request with `o` output tokens needs `o - 1` decode steps after its prefill; the j-th
  one attends over `prompt + j` positions. A step is timed at `decode_step_s(batch, context)`, where batch is
  the running count (padded up to the next compiled batch size when `batch_sizes` is set) and context is the
  batch's mean context rounded up to a `context_block` (GPU, paged KV cache) or, with `decode_buckets`
  (Neuron), the bucket that holds the batch's longest context.
- Encoder, per replica: FIFO queue; when the replica is free, a batch of up to `max_batch` waiting requests
  starts as soon as `max_batch` are waiting or the oldest has waited `max_queue_delay_s`; it runs at the next
  compiled batch size and at the sequence bucket (Neuron) or length (GPU) of its longest member.
- Dispatch: round robin (each arrival to the next replica in turn; the default), or least loaded (the replica
  with the fewest outstanding requests, waiting + running, the lowest-numbered one on ties).
- A request that cannot fit (prompt beyond the largest prefill bucket, prompt + output beyond the largest
  decode bucket or `max_length`) is rejected and counted, never truncated or resized.
"""

from __future__ import annotations

import heapq
import math
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field

import numpy as np

from chipswap.errors import ChipswapError
from chipswap.simulation.servicetime import ServiceTimes, ServingConfig

MODES = ("llm", "encoder")
DISPATCH = ("least_loaded", "round_robin")
# Round robin is the default of most load balancers (and the faster to simulate: replicas run independently);
# least-loaded (fewest outstanding requests) is what a smarter balancer does, and shortens the tail a little.
DEFAULT_DISPATCH = "round_robin"
# largest traffic this module builds or simulates (about 400 bytes a request while simulating: 4 GB here)
MAX_REQUESTS = 10_000_000
MAX_REPLICAS = 100_000
MAX_TABLE_COLUMNS = 2048  # context intervals per step-time table row (the block is widened to stay under it)
DENSE_TABLE_ENTRIES = 8_000_000  # per-token cumulative tables up to this size (64 MB); on-demand beyond
DEFAULT_CONTEXT_BLOCK = 16  # tokens per KV-cache block on GPUs (vLLM's default block size)
DEFAULT_MAX_QUEUE_DELAY_S = 0.005
LOOKUP_MAX_LENGTH = 4_000_000  # prefill times by a table indexed by length up to this length (32 MB)
CDF_POINTS = 201  # quantiles kept for latency-distribution plots (bounded, whatever the traffic size)


# ------------------------------------------------------------------------------------------------------------
# Traffic
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Traffic:
    """Requests in arrival order. Build it with `make_traffic` (which validates), never directly.

    arrivals_s: float64 seconds, non-decreasing. prompt_tokens: int64 >= 1. output_tokens: int64 >= 0 (tokens
    generated; encoders ignore it)."""

    arrivals_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    def __len__(self) -> int:
        return int(self.arrivals_s.size)

    @property
    def span_s(self) -> float:
        """Time from the first to the last arrival."""
        return float(self.arrivals_s[-1] - self.arrivals_s[0]) if len(self) else 0.0

    def between(self, start_s: float, end_s: float) -> Traffic:
        """The requests arriving in [start_s, end_s) (may be empty: check len before simulating)."""
        lo, hi = np.searchsorted(self.arrivals_s, [start_s, end_s], side="left")
        return Traffic(self.arrivals_s[lo:hi], self.prompt_tokens[lo:hi], self.output_tokens[lo:hi])


def make_traffic(
    arrivals_s: np.ndarray | Sequence[float],
    prompt_tokens: np.ndarray | Sequence[int],
    output_tokens: np.ndarray | Sequence[int] | None = None,
) -> Traffic:
    """Validate and freeze traffic. Output tokens default to 1 (prefill only; right for encoders)."""
    arr = np.asarray(arrivals_s, dtype=np.float64).ravel()
    n = arr.size
    if n == 0:
        raise ChipswapError(
            "the trace is empty: no requests to simulate; give a trace with at least one request"
        )
    if n > MAX_REQUESTS:
        raise ChipswapError(
            f"too many requests to simulate: {n:,}; simulate at most {MAX_REQUESTS:,} (use a shorter window)"
        )
    if not np.all(np.isfinite(arr)):
        bad = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise ChipswapError(f"arrival time {bad} is {arr[bad]!r}; arrival times must be finite seconds")
    if n > 1 and np.any(np.diff(arr) < 0):
        bad = int(np.flatnonzero(np.diff(arr) < 0)[0]) + 1
        raise ChipswapError(
            f"arrival times are not sorted: request {bad} arrives at {arr[bad]} before the one before it; "
            "sort the requests by arrival time"
        )
    prompt = _lengths(prompt_tokens, n, "prompt length", minimum=1)
    out = (
        np.ones(n, dtype=np.int64)
        if output_tokens is None
        else _lengths(output_tokens, n, "output length", 0)
    )
    for a in (arr, prompt, out):
        a.setflags(write=False)
    return Traffic(arr, prompt, out)


def _lengths(values: np.ndarray | Sequence[int], n: int, what: str, minimum: int) -> np.ndarray:
    raw = np.asarray(values).ravel()
    if raw.size != n:
        raise ChipswapError(f"{raw.size} {what}s for {n} arrivals; give one {what} per request")
    if raw.dtype.kind not in "iuf":
        raise ChipswapError(f"{what}s must be numbers, got dtype {raw.dtype}; give integer token counts")
    f = raw.astype(np.float64)
    bad_mask = ~np.isfinite(f) | (f < minimum) | (f != np.round(f))
    if np.any(bad_mask):
        bad = int(np.flatnonzero(bad_mask)[0])
        raise ChipswapError(
            f"{what} of request {bad} is {raw[bad]!r}; {what}s must be whole numbers >= {minimum} (no NaN)"
        )
    return raw.astype(np.int64)


def _check_rng(rng: object) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise ChipswapError(
            f"random source must be a numpy Generator, got {type(rng).__name__}; "
            "pass np.random.default_rng(seed)"
        )
    return rng


def _positive(value: float, what: str, fix: str) -> float:
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise ChipswapError(f"{what} must be a positive number, got {value!r}; {fix}")
    return v


def poisson_arrivals(
    rate_rps: float, rng: np.random.Generator, *, duration_s: float | None = None, n: int | None = None
) -> np.ndarray:
    """Sorted Poisson arrival times from 0: `n` of them, or all within `duration_s`."""
    rate = _positive(rate_rps, "arrival rate (requests/s)", "give a rate above 0")
    g = _check_rng(rng)
    if (duration_s is None) == (n is None):
        raise ChipswapError("give exactly one of duration_s or n for synthetic arrivals; pass one of them")
    if n is None:
        dur = _positive(
            duration_s if duration_s is not None else 0.0, "duration", "give a duration above 0 s"
        )
        mean = rate * dur
        if mean > MAX_REQUESTS:
            raise ChipswapError(
                f"{mean:,.0f} expected requests at {rate} requests/s for {dur} s; "
                f"keep it under {MAX_REQUESTS:,}"
            )
        count = int(g.poisson(mean))
        return np.sort(g.uniform(0.0, dur, count))
    if not 0 < n <= MAX_REQUESTS:
        raise ChipswapError(f"request count {n} is out of range; give 1 .. {MAX_REQUESTS:,}")
    return np.cumsum(g.exponential(1.0 / rate, int(n)))


def bursty_arrivals(
    rate_rps: float,
    duration_s: float,
    rng: np.random.Generator,
    *,
    burst_factor: float = 4.0,
    burst_share: float = 0.1,
    mean_burst_s: float = 30.0,
) -> np.ndarray:
    """Sorted arrivals from a two-state Markov-modulated Poisson process whose long-run mean rate is
    `rate_rps`.

    A share `burst_share` of the time is spent in bursts (exponential, mean `mean_burst_s`) whose rate is
    `burst_factor` times the calm rate."""
    rate = _positive(rate_rps, "arrival rate (requests/s)", "give a rate above 0")
    dur = _positive(duration_s, "duration", "give a duration above 0 s")
    g = _check_rng(rng)
    factor = _positive(burst_factor, "burst factor", "give a factor >= 1")
    if factor < 1:
        raise ChipswapError(
            f"burst factor must be >= 1, got {burst_factor}; bursts are faster than calm periods"
        )
    share = float(burst_share)
    if not 0 < share < 1:
        raise ChipswapError(
            f"burst share must be between 0 and 1, got {burst_share}; e.g. 0.1 for 10% of the time"
        )
    burst_len = _positive(mean_burst_s, "mean burst length", "give seconds above 0")
    if rate * dur * factor > MAX_REQUESTS:
        raise ChipswapError(
            f"too many requests for {rate} requests/s over {dur} s; keep it under {MAX_REQUESTS:,}"
        )
    calm_rate = rate / ((1 - share) + share * factor)
    calm_len = burst_len * (1 - share) / share
    if dur / min(calm_len, burst_len) > 10 * MAX_REQUESTS:
        raise ChipswapError("bursts are too short for this duration; give a longer mean_burst_s")
    pieces: list[np.ndarray] = []
    t = 0.0
    burst = bool(g.random() < share)
    while t < dur:
        length = float(g.exponential(burst_len if burst else calm_len))
        end = min(dur, t + length)
        count = int(g.poisson((calm_rate * factor if burst else calm_rate) * (end - t)))
        pieces.append(g.uniform(t, end, count))
        t, burst = end, not burst
    return np.sort(np.concatenate(pieces)) if pieces else np.empty(0)


def traffic_with_lengths(arrivals_s: np.ndarray, lengths_from: Traffic, rng: np.random.Generator) -> Traffic:
    """Synthetic arrivals with (prompt, output) pairs drawn together, with replacement, from real traffic."""
    g = _check_rng(rng)
    arr = np.asarray(arrivals_s, dtype=np.float64)
    idx = g.integers(0, len(lengths_from), arr.size)
    return make_traffic(arr, lengths_from.prompt_tokens[idx], lengths_from.output_tokens[idx])


def scale_traffic(traffic: Traffic, scale: float, rng: np.random.Generator) -> Traffic:
    """The same traffic pattern at `scale` times the request rate, over the same time span.

    Each request is kept (scale < 1: with probability `scale`) or copied floor(scale) or ceil(scale) times
    (the fractional part decides, at random); the copies arrive uniformly between the request and the next
    one, so bursts stay bursts and the local rate is multiplied by `scale`. Lengths are copied with the
    request."""
    s = float(scale)
    if not math.isfinite(s) or s <= 0:
        raise ChipswapError(
            f"traffic scale must be above 0, got {scale!r}; e.g. scale = 10 for ten times the trace"
        )
    g = _check_rng(rng)
    n = len(traffic)
    if n * s > MAX_REQUESTS:
        raise ChipswapError(
            f"scaling {n:,} requests by {s:g} gives more than {MAX_REQUESTS:,}; use a smaller scale or window"
        )
    whole = math.floor(s)
    copies = np.full(n, whole, dtype=np.int64) + (g.random(n) < s - whole)
    arr = traffic.arrivals_s
    gaps = np.empty(n)
    gaps[:-1] = np.diff(arr)
    gaps[-1] = traffic.span_s / (n - 1) if n > 1 else 0.0
    src = np.repeat(np.arange(n), copies)
    if src.size == 0:
        raise ChipswapError(f"traffic scale {s:g} keeps no request of {n}; use a larger scale")
    first = np.ones(src.size, dtype=bool)  # the first copy of each request keeps its own arrival time
    first[1:] = src[1:] != src[:-1]
    jitter = np.where(first, 0.0, g.random(src.size))
    times = arr[src] + jitter * gaps[src]
    order = np.argsort(times, kind="stable")
    src = src[order]
    return make_traffic(times[order], traffic.prompt_tokens[src], traffic.output_tokens[src])


def repeat_traffic(traffic: Traffic, duration_s: float) -> Traffic:
    """The traffic played back to back until `duration_s` (e.g. a one-hour sample as a day); each copy starts
    one mean inter-arrival gap after the previous one ends."""
    dur = _positive(duration_s, "duration", "give a duration above 0 s")
    n = len(traffic)
    gap = traffic.span_s / (n - 1) if n > 1 else 1.0
    period = traffic.span_s + gap
    copies = math.ceil(dur / period)
    if copies * n > MAX_REQUESTS:
        raise ChipswapError(
            f"{dur:g} s of this traffic is {copies * n:,} requests; "
            f"keep it under {MAX_REQUESTS:,} (shorter duration)"
        )
    base = traffic.arrivals_s - traffic.arrivals_s[0]
    times = (base[None, :] + period * np.arange(copies)[:, None]).ravel()
    keep = times < dur
    return make_traffic(
        times[keep] + traffic.arrivals_s[0],
        np.tile(traffic.prompt_tokens, copies)[keep],
        np.tile(traffic.output_tokens, copies)[keep],
    )


@dataclass(frozen=True)
class Window:
    """A stretch of traffic: [start_s, end_s), how many requests and tokens (prompt + output) arrive in it."""

    start_s: float
    end_s: float
    requests: int
    tokens: int

    @property
    def rate_rps(self) -> float:
        return self.requests / (self.end_s - self.start_s)


def busiest_window(traffic: Traffic, window_s: float, *, by: str = "tokens") -> Window:
    """The `window_s`-long stretch with the most requests (`by="requests"`) or the most prompt + output tokens
    (`by="tokens"`). Windows start at an arrival; if the trace is shorter than the window, the whole trace."""
    w = _positive(window_s, "window length", "give a window in seconds above 0, e.g. 300")
    if by not in ("tokens", "requests"):
        raise ChipswapError(f"busiest window by {by!r} is not known; use 'tokens' or 'requests'")
    arr = traffic.arrivals_s
    if arr.size == 0:
        raise ChipswapError("the trace is empty: there is no busiest window; give a trace with requests")
    ends = np.searchsorted(arr, arr + w, side="left")
    if by == "requests":
        amount = ends - np.arange(arr.size)
    else:
        tokens = traffic.prompt_tokens + traffic.output_tokens
        csum = np.concatenate(([0], np.cumsum(tokens)))
        amount = csum[ends] - csum[: arr.size]
    i = int(np.argmax(amount))
    j = int(ends[i])
    tok = int((traffic.prompt_tokens[i:j] + traffic.output_tokens[i:j]).sum())
    return Window(float(arr[i]), float(arr[i]) + w, j - i, tok)


# ------------------------------------------------------------------------------------------------------------
# Replica setup
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplicaSetup:
    """How one replica serves: batching limits, compiled shapes, length limits. Identical for every
    replica."""

    max_batch: int  # continuous-batching slots (LLM) or largest batch (encoder)
    batch_sizes: tuple[
        int, ...
    ] = ()  # compiled batch sizes a batch is padded up to; () = run at its own size
    prefill_buckets: tuple[int, ...] = ()  # prompt (or encoder sequence) buckets; () = no padding (GPU)
    decode_buckets: tuple[
        int, ...
    ] = ()  # decode context buckets (Neuron); () = mean context in KV blocks (GPU)
    max_length: int = 0  # longest prompt + output accepted; 0 = only the buckets limit it
    context_block: int = DEFAULT_CONTEXT_BLOCK  # GPU decode context granularity (tokens)
    max_queue_delay_s: float = (
        DEFAULT_MAX_QUEUE_DELAY_S  # encoder dynamic batching: longest wait to fill a batch
    )

    def __post_init__(self) -> None:
        if not isinstance(self.max_batch, int) or not 1 <= self.max_batch <= 1 << 16:
            raise ChipswapError(
                f"max batch must be an integer 1 .. 65536, got {self.max_batch!r}; fix max_batch"
            )
        for name in ("batch_sizes", "prefill_buckets", "decode_buckets"):
            vals = getattr(self, name)
            if any(not isinstance(v, int) or v < 1 for v in vals) or list(vals) != sorted(set(vals)):
                raise ChipswapError(
                    f"{name} must be ascending distinct integers >= 1, got {vals!r}; fix {name}"
                )
        if self.batch_sizes and self.batch_sizes[-1] < self.max_batch:
            raise ChipswapError(
                f"largest compiled batch size {self.batch_sizes[-1]} is below max batch {self.max_batch}; "
                "compile a batch size >= max_batch or lower max_batch"
            )
        if not isinstance(self.max_length, int) or self.max_length < 0:
            raise ChipswapError(
                f"max length must be an integer >= 0, got {self.max_length!r}; 0 means no limit"
            )
        if not isinstance(self.context_block, int) or self.context_block < 1:
            raise ChipswapError(f"context block must be an integer >= 1, got {self.context_block!r}; e.g. 16")
        d = self.max_queue_delay_s
        if not (isinstance(d, int | float) and math.isfinite(d) and d >= 0):
            raise ChipswapError(f"max queue delay must be >= 0 seconds, got {d!r}; e.g. 0.005")

    @property
    def padded(self) -> bool:
        return bool(self.prefill_buckets)

    def padded_batch(self, n: int) -> int:
        """The batch size a batch of `n` requests runs at."""
        if not self.batch_sizes:
            return n
        return self.batch_sizes[bisect_left(self.batch_sizes, n)]


def setup_from_serving(
    config: ServingConfig,
    *,
    mode: str = "llm",
    prefill_buckets: Sequence[int] = (),
    decode_buckets: Sequence[int] = (),
    max_queue_delay_s: float = DEFAULT_MAX_QUEUE_DELAY_S,
) -> ReplicaSetup:
    """The replica setup of a chosen serving configuration. On Neuron (`config.padded`) an LLM decodes at its
    compiled batch sizes (the max batch when none are listed) and buckets must be given."""
    if mode not in MODES:
        raise ChipswapError(f"simulation mode {mode!r} is not known; use one of {', '.join(MODES)}")
    batch_sizes = tuple(config.batch_sizes)
    if config.padded:
        if not prefill_buckets:
            raise ChipswapError(
                f"{config.instance} pads requests to buckets but none were given; "
                "pass the shape plan's buckets"
            )
        if mode == "llm" and not decode_buckets:
            decode_buckets = prefill_buckets
        if not batch_sizes:
            batch_sizes = (config.max_batch,)
    return ReplicaSetup(
        max_batch=config.max_batch,
        batch_sizes=batch_sizes,
        prefill_buckets=tuple(int(b) for b in prefill_buckets) if config.padded else (),
        decode_buckets=tuple(int(b) for b in decode_buckets) if config.padded and mode == "llm" else (),
        max_length=config.max_length,
        max_queue_delay_s=max_queue_delay_s,
    )


# ------------------------------------------------------------------------------------------------------------
# Results
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LatencyStats:
    """Percentiles of one latency over the measured, served requests (seconds; NaN when none were served).
    Percentiles are observed values (numpy's "higher" method), so a p99 is a latency some request really
    had."""

    p50: float
    p90: float
    p99: float
    mean: float
    max: float

    @staticmethod
    def of(values: np.ndarray) -> LatencyStats:
        if values.size == 0:
            nan = float("nan")
            return LatencyStats(nan, nan, nan, nan, nan)
        p50, p90, p99 = (float(x) for x in np.percentile(values, [50, 90, 99], method="higher"))
        return LatencyStats(p50, p90, p99, float(values.mean()), float(values.max()))


@dataclass(frozen=True)
class BucketLatency:
    """Latency of the requests whose prompt falls in (previous edge, edge]."""

    edge: int
    requests: int
    ttft: LatencyStats
    e2e: LatencyStats


@dataclass(frozen=True)
class Padding:
    """Work computed vs work needed. Prefill and encoder: tokens; decode: KV positions attended (batch x
    context summed over steps) and batch slots (a padded batch runs empty slots)."""

    prefill_tokens: int
    prefill_padded_tokens: int
    decode_positions: int
    decode_padded_positions: int
    batch_slots: int
    batch_padded_slots: int

    @property
    def prefill_waste(self) -> float:
        """Share of computed prefill (or encoder) tokens that were padding."""
        return 1 - self.prefill_tokens / self.prefill_padded_tokens if self.prefill_padded_tokens else 0.0

    @property
    def decode_waste(self) -> float:
        """Share of computed decode positions that were padding (context and batch)."""
        return (
            1 - self.decode_positions / self.decode_padded_positions if self.decode_padded_positions else 0.0
        )


@dataclass(frozen=True)
class SimResult:
    """What one simulation produced. Statistics cover the measured requests (all, unless a measurement window
    was given); the per-request arrays cover every simulated request (NaN where rejected)."""

    mode: str
    replicas: int
    requests: int  # measured requests, served or rejected
    rejected: int  # measured requests rejected as too long
    reject_reasons: tuple[tuple[str, int], ...]
    ttft: LatencyStats  # arrival to first token (LLM) or to the result (encoder)
    e2e: LatencyStats  # arrival to the last token
    wait: LatencyStats  # arrival to the start of the request's first call (queueing)
    throughput_rps: float  # measured requests served per second of the measured span
    output_tokens_per_s: float
    utilization: float  # mean over replicas of busy time / simulated span
    replica_utilization: np.ndarray
    mean_batch: float  # running requests per decode step (LLM) or requests per batch (encoder)
    calls: int  # decode steps (LLM) or encoder batches run by the whole fleet
    mean_in_system: float  # time-average requests in the fleet (arrived, last token not out), whole run
    mean_waiting: float  # time-average requests waiting for their first call, whole run
    max_waiting: int  # most requests waiting at once across the fleet
    span_s: float  # first arrival to last completion of the whole run
    padding: Padding
    per_bucket: tuple[BucketLatency, ...]
    arrivals_s: np.ndarray = field(repr=False)
    ttft_s: np.ndarray = field(repr=False)
    e2e_s: np.ndarray = field(repr=False)
    start_s: np.ndarray = field(repr=False)  # start of each request's first call
    replica_of: np.ndarray = field(repr=False)  # -1 where rejected
    measured: np.ndarray = field(repr=False)  # bool: counted in the statistics

    def latency_cdf(self, which: str = "e2e", points: int = CDF_POINTS) -> tuple[np.ndarray, np.ndarray]:
        """(quantile levels, latency seconds) of the measured served requests: a bounded-size distribution for
        plots. `which` is "ttft", "e2e" or "wait"."""
        if which not in ("ttft", "e2e", "wait"):
            raise ChipswapError(f"latency {which!r} is not known; use ttft, e2e or wait")
        values = {"ttft": self.ttft_s, "e2e": self.e2e_s, "wait": self.start_s - self.arrivals_s}[which]
        v = values[self.measured & ~np.isnan(values)]
        q = np.linspace(0.0, 1.0, max(2, min(points, 10_001)))
        if v.size == 0:
            return q, np.full(q.size, np.nan)
        return q, np.quantile(v, q, method="higher")


# ------------------------------------------------------------------------------------------------------------
# Step-time tables
# ------------------------------------------------------------------------------------------------------------


def _table_edges(setup: ReplicaSetup, top_context: int) -> list[int]:
    """Upper edges of the context intervals on which a decode step costs the same; the value charged for a
    context c is the first edge >= c."""
    if setup.decode_buckets:
        return list(setup.decode_buckets)
    block = setup.context_block
    if top_context / block > MAX_TABLE_COLUMNS:
        # long contexts: coarser blocks keep the number of service calls bounded
        block = block * math.ceil(top_context / block / MAX_TABLE_COLUMNS)
    return list(range(block, block * math.ceil(max(top_context, 1) / block) + 1, block))


class _Piecewise:
    """A cumulative table F[c] computed on demand from interval values (for contexts too long to tabulate):
    same indexing as the dense table, so the simulation loop and `bisect` use either."""

    def __init__(self, edges: list[int], values: list[float], length: int) -> None:
        widths = np.diff(np.asarray([0, *edges], dtype=np.float64))
        self.edges = [0, *edges]
        self.cum = np.concatenate(([0.0], np.cumsum(widths * np.asarray(values)))).tolist()
        self.values = [0.0, *values]
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, c: int) -> float:
        y = c - 1
        if y <= 0:
            return 0.0
        k = bisect_left(self.edges, y)
        return float(self.cum[k - 1] + (y - self.edges[k - 1]) * self.values[k])

    def take(self, c: np.ndarray) -> np.ndarray:
        """F at many contexts at once."""
        y = np.maximum(np.asarray(c, dtype=np.int64) - 1, 0)
        edges = np.asarray(self.edges)
        k = np.maximum(np.searchsorted(edges, y, side="left"), 1)
        out = np.asarray(self.cum)[k - 1] + (y - edges[k - 1]) * np.asarray(self.values)[k]
        return np.where(y > 0, out, 0.0)


def _take(table: Cumulative, c: np.ndarray) -> np.ndarray:
    if isinstance(table, _Piecewise):
        return table.take(c)
    return np.frombuffer(table, dtype=np.float64)[c]


Cumulative = array | _Piecewise


def _cumulative(edges: list[int], values: list[float], top_context: int, dense: bool) -> Cumulative:
    """F[c] = sum of the per-step value over contexts 1 .. c-1, for c = 0 .. top_context + 1."""
    length = top_context + 2
    if not dense:
        return _Piecewise(edges, values, length)
    widths = np.diff(np.asarray([0, *edges]))
    per_context = np.repeat(np.asarray(values, dtype=np.float64), widths)[: length - 1]
    cum = np.zeros(length)
    cum[2:] = np.cumsum(per_context[: length - 2])
    return array("d", cum.tobytes())


def _service_value(value: float, what: str) -> float:
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise ChipswapError(f"service time for {what} is {value!r}; service times must be positive seconds")
    return v


class _DecodeTables:
    """Cumulative step-time tables per padded batch size (built on first use), and the cumulative context
    charged per sequence (for padding accounting)."""

    def __init__(self, service: ServiceTimes, setup: ReplicaSetup, top_context: int) -> None:
        self.service = service
        self.setup = setup
        self.top = top_context
        self.edges = _table_edges(setup, top_context)
        cap = setup.max_length if setup.max_length and not setup.decode_buckets else 0
        self.charged = [min(e, cap) if cap else e for e in self.edges]  # context passed to the service
        rows = len(setup.batch_sizes) if setup.batch_sizes else setup.max_batch
        self.dense = (top_context + 2) * (rows + 1) <= DENSE_TABLE_ENTRIES
        self.positions = _cumulative(self.edges, [float(c) for c in self.charged], top_context, self.dense)
        self._by_padded: dict[int, Cumulative] = {}
        self.by_batch: list[Cumulative | None] = [None] * (setup.max_batch + 1)

    def row(self, n: int) -> Cumulative:
        t = self.by_batch[n]
        if t is None:
            pb = self.setup.padded_batch(n)
            t = self._by_padded.get(pb)
            if t is None:
                vals = [
                    _service_value(
                        self.service.decode_step_s(pb, c), f"a decode step at batch {pb}, context {c}"
                    )
                    for c in self.charged
                ]
                t = self._by_padded[pb] = _cumulative(self.edges, vals, self.top, self.dense)
            self.by_batch[n] = t
        return t


# ------------------------------------------------------------------------------------------------------------
# Simulation
# ------------------------------------------------------------------------------------------------------------


def reject_mask(
    traffic: Traffic, setup: ReplicaSetup, mode: str
) -> tuple[np.ndarray, tuple[tuple[str, int], ...]]:
    """Which requests cannot be served by this setup, and why (reason, count)."""
    p, o = traffic.prompt_tokens, traffic.output_tokens
    total = p + o if mode == "llm" else p
    rules: list[tuple[str, np.ndarray]] = []
    if setup.prefill_buckets:
        rules.append(("prompt longer than the largest prefill bucket", p > setup.prefill_buckets[-1]))
    if mode == "llm" and setup.decode_buckets:
        rules.append(
            ("prompt + output longer than the largest decode bucket", total > setup.decode_buckets[-1])
        )
    if setup.max_length:
        rules.append(("longer than the replica's max length", total > setup.max_length))
    mask = np.zeros(len(traffic), dtype=bool)
    reasons: list[tuple[str, int]] = []
    for reason, hit in rules:
        new = hit & ~mask
        if new.any():
            reasons.append((reason, int(new.sum())))
        mask |= hit
    return mask, tuple(reasons)


def padded_lengths(lengths: np.ndarray, buckets: Sequence[int]) -> np.ndarray:
    """Each length padded up to the first bucket that holds it (buckets empty: unchanged). Lengths beyond the
    largest bucket map to it (callers reject those first)."""
    if not buckets:
        return lengths
    b = np.asarray(buckets, dtype=np.int64)
    return b[np.minimum(np.searchsorted(b, lengths, side="left"), b.size - 1)]


def prefill_times(service: ServiceTimes, lengths: np.ndarray) -> np.ndarray:
    """prefill_s(1, length) per request, calling the service once per distinct length."""
    if lengths.size == 0:
        return np.zeros(0)
    if int(lengths.max()) > LOOKUP_MAX_LENGTH:  # very long prompts: sort instead of a table by length
        present, inverse = np.unique(lengths, return_inverse=True)
    else:
        present, inverse = np.flatnonzero(np.bincount(lengths)), None
    times = np.array(
        [_service_value(service.prefill_s(1, int(L)), f"a prefill of {int(L)} tokens") for L in present]
    )
    if inverse is not None:
        return times[inverse]
    table = np.zeros(int(present[-1]) + 1)
    table[present] = times
    return table[lengths]


def request_work(
    traffic: Traffic, service: ServiceTimes, setup: ReplicaSetup, mode: str = "llm"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-request bounds that need no simulation, for the requests this setup accepts (NaN where rejected):

    - alone: latency on an otherwise idle replica (TTFT, end-to-end): the prefill, then every decode step at
      batch 1 (padded batch on Neuron) and the request's own context (the floor no fleet size can beat);
    - work: replica-seconds the request costs at best, with every decode step shared by a full batch; the
      sum over a window divided by its length bounds the number of replicas from below.
    Encoders: alone = one call at batch 1 (padded), work = its share of a full batch call."""
    if mode not in MODES:
        raise ChipswapError(f"simulation mode {mode!r} is not known; use one of {', '.join(MODES)}")
    rejected, _ = reject_mask(traffic, setup, mode)
    ok = ~rejected
    p = traffic.prompt_tokens[ok]
    ttft = np.full(len(traffic), np.nan)
    e2e = np.full(len(traffic), np.nan)
    work = np.full(len(traffic), np.nan)
    if not ok.any():
        return ttft, e2e, work
    B = setup.max_batch
    if mode == "encoder":
        length = padded_lengths(p, setup.prefill_buckets)
        uniq, inv = np.unique(length, return_inverse=True)
        alone = np.array(
            [
                _service_value(service.encoder_s(setup.padded_batch(1), int(L)), "an encoder call")
                for L in uniq
            ]
        )
        full = np.array(
            [
                _service_value(service.encoder_s(setup.padded_batch(B), int(L)), "an encoder call")
                for L in uniq
            ]
        )
        ttft[ok] = e2e[ok] = alone[inv]
        work[ok] = full[inv] / B
        return ttft, e2e, work
    o = traffic.output_tokens[ok]
    pre = prefill_times(service, padded_lengths(p, setup.prefill_buckets))
    tables = _DecodeTables(service, setup, int((p + o).max()))
    lo, hi = p + 1, p + np.maximum(o, 1)  # decode step j of o - 1 runs at context p + j
    ttft[ok] = pre
    e2e[ok] = pre + (_take(tables.row(1), hi) - _take(tables.row(1), lo))
    work[ok] = pre + (_take(tables.row(B), hi) - _take(tables.row(B), lo)) / B
    return ttft, e2e, work


def simulate(
    traffic: Traffic,
    service: ServiceTimes,
    setup: ReplicaSetup,
    replicas: int,
    *,
    mode: str = "llm",
    dispatch: str = DEFAULT_DISPATCH,
    measure: tuple[float, float] | None = None,
    report_buckets: Sequence[int] = (),
) -> SimResult:
    """Replay `traffic` on `replicas` identical replicas. `measure=(start_s, end_s)` counts only requests
    arriving in that window in the statistics (the rest warm the fleet up or keep it busy); `report_buckets`
    are the prompt-length edges of the per-bucket latency table (default: the prefill buckets, or powers of
    2)."""
    if mode not in MODES:
        raise ChipswapError(f"simulation mode {mode!r} is not known; use one of {', '.join(MODES)}")
    if dispatch not in DISPATCH:
        raise ChipswapError(f"dispatch {dispatch!r} is not known; use one of {', '.join(DISPATCH)}")
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= MAX_REPLICAS:
        raise ChipswapError(f"replica count must be an integer 1 .. {MAX_REPLICAS:,}, got {replicas!r}")
    n = len(traffic)
    if n == 0:
        raise ChipswapError("no requests to simulate (empty traffic or window); give traffic with arrivals")
    measured = np.ones(n, dtype=bool)
    if measure is not None:
        a = traffic.arrivals_s
        measured = (a >= measure[0]) & (a < measure[1])
        if not measured.any():
            raise ChipswapError(
                f"no arrivals in the window {measure[0]:g} .. {measure[1]:g} s; "
                "pick a window inside the trace"
            )
    rejected, _ = reject_mask(traffic, setup, mode)
    accepted = np.flatnonzero(~rejected)
    raw = _simulate_llm if mode == "llm" else _simulate_encoder
    run = raw(traffic, service, setup, replicas, accepted, dispatch == "least_loaded")
    return _summarize(traffic, setup, mode, replicas, run, rejected, measured, report_buckets)


@dataclass
class _Run:
    """Raw output of a simulation loop (per-request absolute times over all requests; NaN where not
    served)."""

    ttft: np.ndarray  # time of the first token (LLM) or of the result (encoder)
    e2e: np.ndarray  # time of the last token
    start: np.ndarray  # start of the request's first call
    replica_of: np.ndarray
    busy: np.ndarray  # per replica, seconds spent in calls
    calls: int  # decode steps (LLM) or encoder batches
    prefill_tokens: int  # real prompt tokens prefilled (or encoded)
    prefill_padded: int  # tokens computed for them (buckets, padded batches)
    decode_positions: int  # real KV positions attended over all decode steps
    decode_padded: int  # positions computed (padded batch x charged context)
    slots: int  # running requests summed over decode steps (or requests over encoder batches)
    padded_slots: int  # padded batch size summed over the same calls


class _LlmFleet:
    """Everything the LLM replica loops share: per-request inputs as Python lists (fast scalar access), the
    step-time tables, and the per-request outputs they fill in."""

    def __init__(
        self, traffic: Traffic, service: ServiceTimes, setup: ReplicaSetup, accepted: np.ndarray
    ) -> None:
        n = len(traffic)
        self.setup = setup
        self.accepted = accepted
        self.prompts_np = traffic.prompt_tokens
        self.outs_np = traffic.output_tokens
        self.prefill_len = padded_lengths(self.prompts_np[accepted], setup.prefill_buckets)
        self.pre_np = np.zeros(n)
        if accepted.size:
            self.pre_np[accepted] = prefill_times(service, self.prefill_len)
        top = int((self.prompts_np[accepted] + self.outs_np[accepted]).max()) if accepted.size else 1
        self.tables = _DecodeTables(service, setup, top)
        self.arrivals_np = traffic.arrivals_s
        self.arrive = traffic.arrivals_s.tolist() + [float("inf")]
        self.sentinel = n  # the index of a request that never arrives: ends every inbox
        self.nreq = n + 1  # heap keys pack (value, request) into one int: value * nreq + request
        self.prompt = self.prompts_np.tolist()
        self.pre = self.pre_np.tolist()
        steps = self.outs_np - 1  # decode steps each request needs
        # finish key: (decode steps) * nreq + request, -1 for one-token requests (no decode step)
        self.finish_key = np.where(steps > 0, steps * self.nreq + np.arange(n), -1).tolist()
        self.retire_key = (self.prompts_np + steps).tolist()  # prompt - admit step = this - finish step
        # a request alone on a replica decodes at batch 1 from context prompt + 1 to prompt + output - 1:
        # its decode time is read from the same table, with the same arithmetic, as the loop's (bit for bit)
        row1 = self.tables.row(1)
        decodes = accepted[steps[accepted] > 0]
        self.alone_np = np.zeros(n)  # (one-token and rejected requests: 0.0, and adding 0.0 is exact)
        self.alone_np[decodes] = _take(row1, self.prompts_np[decodes] + steps[decodes] + 1) - _take(
            row1, self.prompts_np[decodes] + 1
        )
        self.alone_decode = self.alone_np.tolist()
        self.alone = bytearray(n + 1)  # requests that ran alone (their steps are counted afterwards)
        self.jumped: list[tuple[np.ndarray, np.ndarray]] = []  # (requests, last-token times) jumped over
        # outputs as C doubles: set one at a time by the loops, handed to numpy without a copy
        self.e2e = array("d", [float("nan")]) * (n + 1)
        self.start = array("d", [float("nan")]) * (n + 1)
        self.running_flag = bytearray(n + 1)  # Neuron: whether a request is still in its replica's batch

    def alone_done(self, requests: np.ndarray) -> np.ndarray:
        """When each request would be done if it ran alone from its arrival (the loop's own arithmetic)."""
        return self.arrivals_np[requests] + self.pre_np[requests] + self.alone_np[requests]

    def ran_alone(self, requests: np.ndarray, done: np.ndarray) -> None:
        """A replica jumped over these requests: each ran alone from its arrival to `done`."""
        self.jumped.append((requests, done))

    def replica(
        self,
        r: int,
        inbox: list[int],
        loads: list[int] | None,
        totals: list[tuple[int, float, int]],
        alone_until: list[int] | None = None,
        skipped: list[int] | None = None,
    ) -> Generator[float, float, None]:
        """One replica as a coroutine. `inbox` holds the requests dispatched to it, in arrival order, and ends
        with the sentinel request `self.sentinel` (arriving at infinity); the caller inserts before it. Each
        `send(horizon)` promises that no other request will arrive before `horizon`. The replica then runs
        every call boundary before the horizon and yields the time of its next event (the end of its decode
        run, or a one-token request's completion; inf when idle). Completions decrement loads[r] at their
        time (when loads are tracked). When it is idle with an infinite horizon it writes its totals (decode
        steps, padded decode positions, padded batch slots) to totals[r].

        When the whole inbox is known in advance (round robin), `alone_until[j]` is the first inbox position
        from j on whose request is not done before the next one arrives: a replica idle when request j
        arrives runs requests j .. alone_until[j] - 1 alone, one after the other, so it jumps over them (their
        times are filled in afterwards from the same arithmetic) and notes the positions in `skipped`."""
        arrive, prompt, pre, start, e2e = self.arrive, self.prompt, self.pre, self.start, self.e2e
        finish_key, retire_key, running_flag = self.finish_key, self.retire_key, self.running_flag
        alone_decode = self.alone_decode
        tables = self.tables
        positions = tables.positions
        by_batch = tables.by_batch
        row_of = tables.row
        B = self.setup.max_batch
        max_mode = bool(self.setup.decode_buckets)
        account = max_mode or bool(self.setup.batch_sizes)  # padding exists only with compiled shapes
        padded_of = [self.setup.padded_batch(k) if k else 0 for k in range(B + 1)]
        push, pop = heapq.heappush, heapq.heappop
        inf = float("inf")
        NREQ = self.nreq
        finish: list[int] = []  # finish iteration * NREQ + request
        longest: list[int] = []  # Neuron: -(prompt - admit iteration) * NREQ + request
        pending: deque[float] = deque()  # one-token requests done at a future prefill end (load tracking)
        # batch size, decode steps done (and that x NREQ), sum over the batch of (prompt - admit step)
        nr = it = itN = key_sum = 0
        head = 0  # next request in the inbox not yet admitted
        decode_pad = 0.0
        pad_slots = 0
        t = 0.0
        horizon = yield inf
        while True:
            # call boundary at t: prefill the requests that have arrived, while slots are free
            while nr < B:
                i = inbox[head]
                if arrive[i] > t:
                    break  # (the sentinel at the end of the inbox arrives at infinity)
                head += 1
                start[i] = t
                t += pre[i]
                key = finish_key[i]
                if key < 0:  # one token: done when its prefill ends
                    e2e[i] = t
                    if loads is not None:
                        if t < horizon:
                            loads[r] -= 1
                        else:
                            pending.append(t)
                    continue
                push(finish, itN + key)
                key = prompt[i] - it
                key_sum += key
                if max_mode:
                    push(longest, -key * NREQ + i)
                    running_flag[i] = 1
                nr += 1
            if not nr:
                i = inbox[head]
                a = arrive[i]
                if a < inf:
                    if a >= t and alone_until is not None:
                        k = alone_until[head]
                        if k > head:
                            skipped.append(head)  # type: ignore[union-attr]
                            skipped.append(k)  # type: ignore[union-attr]
                            head = k
                            j = inbox[k - 1]
                            t = arrive[j] + pre[j] + alone_decode[j]
                            continue
                        t = a
                        continue
                    if a > t:
                        t = a
                    continue  # (if it arrived while one-token prefills ran, it is prefilled next, at t)
                if horizon == inf and not pending:
                    totals[r] = (it, decode_pad, pad_slots)
                horizon = yield pending[0] if pending else inf
                while pending and pending[0] < horizon:
                    pending.popleft()
                    loads[r] -= 1  # type: ignore[index]
                continue
            # decode until the next completion, or until the first step boundary after the next arrival
            m = (finish[0] - itN) // NREQ
            if max_mode:
                while not running_flag[longest[0] % NREQ]:
                    pop(longest)
                c0 = it + 1 - longest[0] // NREQ
            else:
                c0 = -(-(key_sum + nr * (it + 1)) // nr)
            row = by_batch[nr] or row_of(nr)
            base = row[c0]
            end = t + (row[c0 + m] - base)
            while True:
                a = arrive[inbox[head]]
                if a < end and nr < B:
                    if a <= t:
                        m = 0  # it arrived during the prefills: it is prefilled right after them
                        end = t
                    else:
                        c_cut = bisect_left(row, base + (a - t), c0 + 1, c0 + m)
                        if c_cut < c0 + m:
                            m = c_cut - c0
                            end = t + (row[c_cut] - base)
                if end < horizon:
                    break
                horizon = yield min(end, pending[0]) if pending else end
                while pending and pending[0] < horizon:
                    pending.popleft()
                    loads[r] -= 1  # type: ignore[index]
            if not m:
                continue
            t = end
            if account:
                pb = padded_of[nr]
                decode_pad += pb * (positions[c0 + m] - positions[c0])
                pad_slots += pb * m
            it += m
            itN += m * NREQ
            lim = itN + NREQ
            if finish[0] < lim:
                done = 0
                while finish and finish[0] < lim:
                    i = pop(finish) % NREQ
                    e2e[i] = t
                    key_sum -= retire_key[i] - it
                    done += 1
                    if max_mode:
                        running_flag[i] = 0
                nr -= done
                if loads is not None:
                    loads[r] -= done

    def result(self, replica_of: np.ndarray, totals: list[tuple[int, float, int]]) -> _Run:
        accepted = self.accepted
        e2e = np.frombuffer(self.e2e, dtype=np.float64)[:-1].copy()
        start = np.frombuffer(self.start, dtype=np.float64)[:-1].copy()
        alone = np.frombuffer(self.alone, dtype=np.uint8)[:-1].astype(bool)
        for requests, done in self.jumped:
            e2e[requests] = done
            start[requests] = self.arrivals_np[requests]
            alone[requests] = True
        served = accepted[~np.isnan(e2e[accepted])]
        decode_counts = np.maximum(self.outs_np[served] - 1, 0)
        real_positions = int(
            (decode_counts * self.prompts_np[served] + decode_counts * (decode_counts + 1) // 2).sum()
        )
        slots = int(decode_counts.sum())
        # requests that ran alone skipped the per-call path: count their steps and padding here
        steps_alone = np.maximum(self.outs_np[alone] - 1, 0)
        p_alone = self.prompts_np[alone]
        pb1 = self.setup.padded_batch(1)
        positions = self.tables.positions
        pad_alone = pb1 * float(
            np.sum(_take(positions, p_alone + steps_alone + 1) - _take(positions, p_alone + 1))
        )
        padded = self.setup.decode_buckets or self.setup.batch_sizes
        ttft = start + self.pre_np
        ttft[np.isnan(start)] = np.nan
        return _Run(
            ttft=ttft,
            e2e=e2e,
            start=start,
            replica_of=replica_of,
            busy=_busy_time(replica_of[accepted], start[accepted], e2e[accepted], len(totals)),
            calls=sum(tot[0] for tot in totals) + int(steps_alone.sum()),
            prefill_tokens=int(self.prompts_np[accepted].sum()),
            prefill_padded=int(self.prefill_len.sum()),
            decode_positions=real_positions,
            decode_padded=int(round(sum(tot[1] for tot in totals) + pad_alone)) if padded else real_positions,
            slots=slots,
            padded_slots=sum(tot[2] for tot in totals) + pb1 * int(steps_alone.sum()) if padded else slots,
        )


def _busy_time(replica: np.ndarray, start: np.ndarray, end: np.ndarray, R: int) -> np.ndarray:
    """Per replica, the length of the union of its requests' [first call, last token] intervals: a replica
    runs calls back to back whenever it holds a request, so this is its busy time."""
    busy = np.zeros(R)
    if start.size == 0:
        return busy
    offset = (
        float(np.max(end) - np.min(start)) + 1.0
    )  # replicas' timelines laid end to end, never overlapping
    small = replica.astype(np.int16) if R <= np.iinfo(np.int16).max else replica  # (radix sort)
    order = np.argsort(small, kind="stable")  # FIFO: a replica's requests start in arrival order
    rep = replica[order]
    s = start[order] - start.min() + rep * offset
    e = end[order] - start.min() + rep * offset
    covered = np.maximum.accumulate(e)
    prev = np.concatenate(([-np.inf], covered[:-1]))
    np.add.at(busy, rep, np.maximum(0.0, e - np.maximum(s, prev)))
    return busy


class _LeastLoaded:
    """The lowest-numbered replica among the least loaded, for large fleets (a scan of every load per arrival
    costs too much there): a min-heap of replica numbers per load level, stale entries dropped lazily."""

    def __init__(self, loads: list[int]) -> None:
        self.loads = loads
        self.levels: list[list[int]] = [list(range(len(loads)))]
        self.low = 0

    def pick(self) -> int:
        loads, levels = self.loads, self.levels
        while True:
            h = levels[self.low]
            while h and loads[h[0]] != self.low:
                heapq.heappop(h)
            if h:
                return h[0]
            self.low += 1

    def moved(self, r: int) -> None:
        """Replica r's load changed."""
        level = self.loads[r]
        while len(self.levels) <= level:
            self.levels.append([])
        heapq.heappush(self.levels[level], r)
        self.low = min(self.low, level)


SCAN_REPLICAS = 64  # up to this many replicas, finding the least loaded by a scan is faster than heaps


def _simulate_llm(
    traffic: Traffic, service: ServiceTimes, setup: ReplicaSetup, R: int, accepted: np.ndarray, jsq: bool
) -> _Run:
    """Continuous batching on R replicas, each a `_LlmFleet.replica` coroutine.

    Round robin: replicas never interact, so each one is given all its requests and run to the end at once.
    Least loaded: arrivals are dispatched in time order; before each one, every replica whose next event comes
    earlier is run up to it (an event list orders them), so the loads the dispatcher compares are exact. A
    request arriving at the same instant as an event is dispatched first."""
    fleet = _LlmFleet(traffic, service, setup, accepted)
    loads = [0] * R
    totals: list[tuple[int, float, int]] = [(0, 0.0, 0)] * R
    inboxes: list[list[int]] = [[fleet.sentinel] for _ in range(R)]
    replica_of = np.full(len(traffic), -1, dtype=np.int64)
    inf = float("inf")
    if not jsq:
        replica_of[accepted] = np.arange(accepted.size) % R
        for r in range(R):
            mine = accepted[r::R]
            inboxes[r] = mine.tolist() + [fleet.sentinel]
            done = fleet.alone_done(mine)
            # position j runs alone if idle on arrival and done before j + 1 arrives; alone_until[j] = first
            # position >= j that does not
            runs_alone = np.append(traffic.arrivals_s[mine[1:]] >= done[:-1], True)
            blockers = np.flatnonzero(~runs_alone)
            alone_until = np.append(blockers, mine.size)[np.searchsorted(blockers, np.arange(mine.size))]
            skipped: list[int] = []
            g = fleet.replica(r, inboxes[r], None, totals, alone_until.tolist() + [mine.size], skipped)
            next(g)
            g.send(inf)
            if skipped:
                cover = np.zeros(mine.size + 1, dtype=np.int64)
                np.add.at(cover, skipped[0::2], 1)
                np.add.at(cover, skipped[1::2], -1)
                ran_alone = np.cumsum(cover[:-1]) > 0
                fleet.ran_alone(mine[ran_alone], done[ran_alone])
        return fleet.result(replica_of, totals)

    gens = [fleet.replica(r, inboxes[r], loads, totals) for r in range(R)]
    for g in gens:
        next(g)
    resume = [g.send for g in gens]
    sentinel = fleet.sentinel
    scheduled = [inf] * R  # each replica's next event; heap entries with another time are stale
    events: list[tuple[float, int]] = []
    push, pop = heapq.heappush, heapq.heappop
    order = accepted.tolist()
    times = traffic.arrivals_s[accepted].tolist()
    nexts = times[1:] + [inf] if times else []
    least = _LeastLoaded(loads) if R > SCAN_REPLICAS else None
    times_of = fleet.arrive
    # A request sent to an idle replica runs alone until another one joins it: it is done at alone_done
    # unless the dispatcher sends that replica a second request first (only when every replica is busy).
    # Until then the replica's coroutine does not see it; `solo[r]` holds it.
    solo = [-1] * R
    where = [-1] * len(traffic)
    pre, alone_decode, start, e2e, alone = fleet.pre, fleet.alone_decode, fleet.start, fleet.e2e, fleet.alone
    for i, a, a_next in zip(order, times, nexts, strict=True):
        while events and events[0][0] < a:
            te, r = pop(events)
            if te == scheduled[r]:
                j = solo[r]
                if j >= 0:  # it ran alone to the end
                    start[j] = times_of[j]
                    e2e[j] = te
                    alone[j] = 1
                    solo[r] = -1
                    scheduled[r] = inf
                    loads[r] -= 1
                    if least is not None:
                        least.moved(r)
                    continue
                before = loads[r]
                nt = scheduled[r] = resume[r](a)
                if nt < inf:
                    push(events, (nt, r))
                if least is not None and loads[r] != before:
                    least.moved(r)
        if least is None:
            r = loads.index(min(loads))
        else:
            r = least.pick()
        loads[r] += 1
        where[i] = r
        if least is not None:
            least.moved(r)
        if loads[r] == 1:
            solo[r] = i
            nt = scheduled[r] = a + pre[i] + alone_decode[i]
            push(events, (nt, r))
            continue
        inbox = inboxes[r]
        j = solo[r]
        if j >= 0:  # a second request joins: the replica's coroutine takes over the first from its arrival
            solo[r] = -1
            inbox[-1] = j
            inbox.append(sentinel)
        inbox[-1] = i
        inbox.append(sentinel)
        nt = resume[r](a_next)
        if nt != scheduled[r]:
            scheduled[r] = nt
            if nt < inf:
                push(events, (nt, r))
    for r, g in enumerate(gens):
        j = solo[r]
        if j >= 0:  # nobody else came
            start[j] = times_of[j]
            e2e[j] = scheduled[r]
            alone[j] = 1
        g.send(inf)
    replica_of[accepted] = np.asarray(where)[accepted]
    return fleet.result(replica_of, totals)


def _simulate_encoder(
    traffic: Traffic, service: ServiceTimes, setup: ReplicaSetup, R: int, accepted: np.ndarray, jsq: bool
) -> _Run:
    """Dynamic batching on R replicas: same event list and dispatch as the LLM loop; a replica with a short
    queue waits for the oldest request's queue delay to expire (a timer event) unless the batch fills
    first."""
    n_all = len(traffic)
    arrive = traffic.arrivals_s.tolist()
    prompt = traffic.prompt_tokens.tolist()
    buckets = list(setup.prefill_buckets)
    B = setup.max_batch
    delay = float(setup.max_queue_delay_s)
    padded_of = [setup.padded_batch(k) if k else 0 for k in range(B + 1)]
    call_cache: dict[tuple[int, int], float] = {}
    nan = float("nan")
    done = [nan] * n_all
    start = [nan] * n_all
    replica_of = [-1] * n_all

    queues: list[deque[int]] = [deque() for _ in range(R)]
    state = [0] * R  # 0 idle, 1 running a batch, 2 waiting for the queue delay to expire
    version = [0] * R
    in_batch: list[list[int]] = [[] for _ in range(R)]
    busy = [0.0] * R
    loads = [0] * R
    events: list[tuple[float, int, int]] = []
    push, pop = heapq.heappush, heapq.heappop
    batches = padded_tokens = padded_slots = 0
    order = accepted.tolist()
    na = len(order)
    ai = 0
    rr = R - 1
    inf = float("inf")
    next_a = arrive[order[0]] if na else inf
    while True:
        if events and events[0][0] < next_a:
            t, ver, r = pop(events)
            if ver != version[r]:
                continue
            if state[r] == 1:
                members = in_batch[r]
                for i in members:
                    done[i] = t
                loads[r] -= len(members)
        elif ai < na:
            i = order[ai]
            t = next_a
            ai += 1
            next_a = arrive[order[ai]] if ai < na else inf
            if jsq:
                r = loads.index(min(loads))
            else:
                r = rr = rr + 1 if rr + 1 < R else 0
            replica_of[i] = r
            loads[r] += 1
            queues[r].append(i)
            if state[r] == 1 or (state[r] == 2 and len(queues[r]) < B):
                continue
        else:
            break
        # replica r is free at t (its batch ended, its timer expired, or it is idle / waiting and a request
        # came)
        q = queues[r]
        if not q:
            state[r] = 0
            continue
        if len(q) < B and t < arrive[q[0]] + delay:
            if state[r] != 2:
                state[r] = 2
                version[r] += 1
                push(events, (arrive[q[0]] + delay, version[r], r))
            continue
        k = min(B, len(q))
        members = [q.popleft() for _ in range(k)]
        longest = max([prompt[i] for i in members])
        length = buckets[bisect_left(buckets, longest)] if buckets else longest
        pb = padded_of[k]
        dt = call_cache.get((pb, length))
        if dt is None:
            dt = call_cache[(pb, length)] = _service_value(
                service.encoder_s(pb, length), f"an encoder call at batch {pb}, length {length}"
            )
        for i in members:
            start[i] = t
        batches += 1
        padded_tokens += pb * length
        padded_slots += pb
        busy[r] += dt
        in_batch[r] = members
        state[r] = 1
        version[r] += 1
        push(events, (t + dt, version[r], r))

    done_np = np.asarray(done)
    return _Run(
        ttft=done_np,
        e2e=done_np,
        start=np.asarray(start),
        replica_of=np.asarray(replica_of, dtype=np.int64),
        busy=np.asarray(busy),
        calls=batches,
        prefill_tokens=int(traffic.prompt_tokens[accepted].sum()),
        prefill_padded=padded_tokens,
        decode_positions=0,
        decode_padded=0,
        slots=int(accepted.size),
        padded_slots=padded_slots,
    )


def _report_edges(traffic: Traffic, setup: ReplicaSetup, report_buckets: Sequence[int]) -> np.ndarray:
    if report_buckets:
        edges = sorted({int(b) for b in report_buckets})
    elif setup.prefill_buckets:
        edges = list(setup.prefill_buckets)
    else:
        top = int(traffic.prompt_tokens.max())
        edges = [1 << k for k in range(max(1, top - 1).bit_length() + 1)]
    top = int(traffic.prompt_tokens.max())
    if edges[-1] < top:
        edges.append(top)  # requests past the last edge get their own row
    return np.asarray(edges, dtype=np.int64)


def _max_waiting(arrivals: np.ndarray, starts: np.ndarray) -> int:
    """Most requests waiting for their first call at once: just after each arrival, the arrivals so far minus
    the first calls started by then (a start at the same instant counts as done)."""
    if arrivals.size == 0:
        return 0
    started = np.searchsorted(np.sort(starts), arrivals, side="right")
    return int(max(0, (np.arange(1, arrivals.size + 1) - started).max()))


def _summarize(
    traffic: Traffic,
    setup: ReplicaSetup,
    mode: str,
    replicas: int,
    run: _Run,
    rejected: np.ndarray,
    measured: np.ndarray,
    report_buckets: Sequence[int],
) -> SimResult:
    arr = traffic.arrivals_s
    ttft = run.ttft - arr
    e2e = run.e2e - arr
    wait = run.start - arr
    served = measured & ~rejected
    done_times = run.e2e[~np.isnan(run.e2e)]
    last = float(done_times.max()) if done_times.size else float(arr[-1])
    span = max(last - float(arr[0]), 1e-12)
    if served.any():
        m_span = max(float(run.e2e[served].max()) - float(arr[measured].min()), 1e-12)
        throughput = float(served.sum()) / m_span
        tokens_s = float(traffic.output_tokens[served].sum()) / m_span if mode == "llm" else 0.0
    else:
        throughput = tokens_s = 0.0
    edges = _report_edges(traffic, setup, report_buckets)
    idx = np.flatnonzero(served)
    which = np.searchsorted(edges, traffic.prompt_tokens[idx], side="left")
    which = which.astype(np.int16 if edges.size < np.iinfo(np.int16).max else np.int64)  # (int16: radix sort)
    idx = idx[np.argsort(which, kind="stable")]
    bounds = np.concatenate(([0], np.cumsum(np.bincount(which, minlength=edges.size))))
    per_bucket = [
        BucketLatency(edge, int(hi - lo), LatencyStats.of(ttft[idx[lo:hi]]), LatencyStats.of(e2e[idx[lo:hi]]))
        for edge, lo, hi in zip(edges.tolist(), bounds[:-1], bounds[1:], strict=True)
        if hi > lo
    ]
    _, reasons = reject_mask(
        Traffic(arr[measured], traffic.prompt_tokens[measured], traffic.output_tokens[measured]), setup, mode
    )
    util = run.busy / span
    # time averages over the whole run by Little's law (the run starts and ends empty, so it holds exactly)
    mean_in_system = float(np.nansum(run.e2e - arr)) / span
    mean_waiting = float(np.nansum(run.start - arr)) / span
    max_waiting = _max_waiting(arr[~rejected], run.start[~rejected])
    return SimResult(
        mode=mode,
        replicas=replicas,
        requests=int(measured.sum()),
        rejected=int((measured & rejected).sum()),
        reject_reasons=reasons,
        ttft=LatencyStats.of(ttft[served]),
        e2e=LatencyStats.of(e2e[served]),
        wait=LatencyStats.of(wait[served]),
        throughput_rps=throughput,
        output_tokens_per_s=tokens_s,
        utilization=float(util.mean()),
        replica_utilization=util,
        mean_batch=run.slots / run.calls if run.calls else 0.0,
        calls=run.calls,
        mean_in_system=mean_in_system,
        mean_waiting=mean_waiting,
        max_waiting=max_waiting,
        span_s=span,
        padding=Padding(
            run.prefill_tokens,
            run.prefill_padded,
            run.decode_positions,
            run.decode_padded,
            run.slots,
            run.padded_slots,
        ),
        per_bucket=tuple(per_bucket),
        arrivals_s=arr,
        ttft_s=ttft,
        e2e_s=e2e,
        start_s=run.start,
        replica_of=run.replica_of,
        measured=measured,
    )
