"""Traffic for the fleet simulator: validated requests, synthetic arrivals (Poisson, bursty), scaling to more
traffic (superposition of time-shifted copies by default, thinning below 1x, copy-in-place only by name),
repeating a sample, and the busiest window.

Pure: numpy and the standard library; no files, clock, printing or torch. Bad input raises ChipswapError.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from chipswap.errors import ChipswapError

MAX_REQUESTS = 10_000_000  # largest traffic built or simulated (about 400 bytes a request while simulating)


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


SCALE_METHODS = ("superpose", "copy-in-place")
DEFAULT_SCALE_METHOD = "superpose"
SCALE_METHOD_WORDS = {
    "superpose": "superposition of independent time-shifted copies (each copy shifted by its own uniform "
    "offset, wrapping round; a fraction of a copy by thinning)",
    "copy-in-place": "copy in place (each request copied next to itself: every burst multiplied by the "
    "scale)",
}


def scale_traffic(
    traffic: Traffic, scale: float, rng: np.random.Generator, method: str = DEFAULT_SCALE_METHOD
) -> Traffic:
    """The same traffic at `scale` times the request rate, over the same time span.

    "superpose" (the default) adds independent users: the result is the original (scale >= 1) plus
    floor(scale) - 1 copies each shifted in time by its own uniform offset (wrapping round the trace's
    period), plus one more shifted copy thinned to the fractional part; below 1x it thins the trace. The mean
    rate is multiplied by `scale`; a burst is not (it lands where its copy's offset puts it), as when more
    independent users send the same kind of traffic. "copy-in-place" copies each request next to itself, so
    every burst is multiplied by the scale too; it is used only when asked for by name."""
    if method not in SCALE_METHODS:
        raise ChipswapError(
            f"traffic scaling method {method!r} is not known; use one of {', '.join(SCALE_METHODS)}"
        )
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
    if method == "copy-in-place":
        return _copy_in_place(traffic, s, g)
    return _superpose(traffic, s, g)


def _superpose(traffic: Traffic, s: float, g: np.random.Generator) -> Traffic:
    n = len(traffic)
    arr = traffic.arrivals_s
    t0 = float(arr[0])
    period = traffic.span_s + (traffic.span_s / (n - 1) if n > 1 else 1.0)
    whole = math.floor(s)
    frac = s - whole
    parts_t: list[np.ndarray] = []
    parts_i: list[np.ndarray] = []
    base = arr - t0
    if whole >= 1:
        parts_t.append(arr)
        parts_i.append(np.arange(n))
    for k in range(max(whole, 1) - 1 + (1 if frac > 0 else 0)):
        keep = np.arange(n) if k < whole - 1 else np.flatnonzero(g.random(n) < frac)
        if whole == 0:  # below 1x: thin the trace in place
            parts_t.append(arr[keep])
        else:
            parts_t.append(np.mod(base[keep] + g.uniform(0.0, period), period) + t0)
        parts_i.append(keep)
    times = np.concatenate(parts_t)
    src = np.concatenate(parts_i)
    if src.size == 0:
        raise ChipswapError(f"traffic scale {s:g} keeps no request of {n}; use a larger scale")
    order = np.argsort(times, kind="stable")
    src = src[order]
    return make_traffic(times[order], traffic.prompt_tokens[src], traffic.output_tokens[src])


def _copy_in_place(traffic: Traffic, s: float, g: np.random.Generator) -> Traffic:
    """The same traffic pattern at `scale` times the request rate, over the same time span.

    Each request is kept (scale < 1: with probability `scale`) or copied floor(scale) or ceil(scale) times
    (the fractional part decides, at random); the copies arrive uniformly between the request and the next
    one, so bursts stay bursts and the local rate is multiplied by `scale`. Lengths are copied with the
    request."""
    n = len(traffic)
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
