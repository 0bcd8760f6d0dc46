"""What a benchmark run sends and when: a trace's arrival times and lengths turned into a bounded schedule.

Pure (numpy only): no clock, no network, no files (the caller reads the trace with chipswap.traffic).

- Arrivals: the trace's own inter-arrival times times ``time_scale`` (0.5 = twice as fast), or scaled so the
  mean rate over ``duration_s`` is ``rate`` requests/s; a trace without timestamps needs ``rate`` and gets
  seeded Poisson arrivals (``arrivals="poisson"`` asks for them even when the trace has times: a steady
  load at ``rate``, the usual way to find the rate a server sustains).
- Lengths: prompt tokens (and output tokens for LLM endpoints) from the trace. For an encoder served by
  chipswap, ``length_map`` puts them into the model's range: ``scale`` (the longest request maps to
  ``max_length``, shapes of the distribution kept), ``clip`` (longer ones cut to ``max_length``) or ``none``
  (sent as they are; too-long ones come back as 4xx and count as errors).
- Bounds: at most ``max_requests`` and only arrivals before ``duration_s``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chipswap.errors import ChipswapError

LENGTH_MAPS = ("scale", "clip", "none")
ARRIVALS = ("trace", "poisson")
MAX_REQUESTS = 1_000_000
MAX_OUTPUT_TOKENS = 65_536
MAX_PROMPT_TOKENS = 1_000_000


@dataclass(frozen=True)
class Schedule:
    """Send times (s from the start), prompt and output token counts, one entry per request."""

    at_s: np.ndarray  # float64, non-decreasing, starts at 0
    prompt_tokens: np.ndarray  # int64 >= 1
    output_tokens: np.ndarray  # int64 >= 1 (max_tokens for LLM endpoints; unused for predict)
    time_scale: float
    arrivals: str  # "trace" or "poisson"
    length_map: str
    max_length: int | None

    def __len__(self) -> int:
        return int(self.at_s.size)

    @property
    def offered_rps(self) -> float:
        n = len(self)
        span = float(self.at_s[-1]) if n > 1 else 0.0
        return (n - 1) / span if span > 0 else 0.0


def map_lengths(lengths: np.ndarray, max_length: int | None, how: str) -> np.ndarray:
    """Trace lengths into a model's range (see the module docstring)."""
    if how not in LENGTH_MAPS:
        raise ChipswapError(f"unknown length map {how!r}; use one of {', '.join(LENGTH_MAPS)}")
    lens = np.asarray(lengths, dtype=np.int64)
    if how == "none" or max_length is None:
        return lens
    if how == "clip":
        return np.minimum(lens, max_length)
    top = int(lens.max()) if lens.size else 1
    if top <= max_length:
        return lens
    return np.maximum(1, np.ceil(lens * (max_length / top))).astype(np.int64)


def build_schedule(
    prompt_tokens: np.ndarray,
    output_tokens: np.ndarray | None,
    timestamps_s: np.ndarray | None,
    *,
    max_requests: int,
    duration_s: float,
    time_scale: float | None = None,
    rate: float | None = None,
    length_map: str = "scale",
    max_length: int | None = None,
    seed: int = 0,
    arrivals: str = "trace",
) -> Schedule:
    """The bounded send schedule for a trace (arrays as chipswap.traffic.Trace holds them)."""
    if not 1 <= max_requests <= MAX_REQUESTS:
        raise ChipswapError(f"--requests must be 1..{MAX_REQUESTS:,}, got {max_requests}")
    if not 0 < duration_s <= 86_400:
        raise ChipswapError(f"--duration must be in (0, 86400] seconds, got {duration_s}")
    if time_scale is not None and rate is not None:
        raise ChipswapError("give --time-scale or --rate, not both; --rate sets the time scale for you")
    if time_scale is not None and not 0 < time_scale <= 1e6:
        raise ChipswapError(f"--time-scale must be > 0, got {time_scale}; 0.5 replays twice as fast")
    if rate is not None and not 0 < rate <= 1e6:
        raise ChipswapError(f"--rate must be > 0 requests/s, got {rate}")
    prompts = np.asarray(prompt_tokens, dtype=np.int64)
    n_trace = int(prompts.size)
    if n_trace == 0:
        raise ChipswapError("the trace has no requests; give a trace with at least one row")
    # lengths wrap around the trace when more requests are asked for than it holds
    n = max_requests
    if rate is not None:  # the mean rate holds over the duration window, not over requests cut off by it
        n = min(n, int(rate * duration_s) + 1)
    idx = np.arange(n) % n_trace
    outs = np.asarray(output_tokens, dtype=np.int64) if output_tokens is not None else None
    if arrivals not in ARRIVALS:
        raise ChipswapError(f"unknown arrivals {arrivals!r}; use one of {', '.join(ARRIVALS)}")
    if arrivals == "poisson" and rate is None:
        raise ChipswapError("Poisson arrivals need --rate REQ_PER_S")
    if arrivals == "trace" and timestamps_s is not None and n_trace > 1:
        ts = np.asarray(timestamps_s, dtype=np.float64)
        gaps = np.diff(ts, prepend=ts[0])
        gaps = np.clip(gaps, 0.0, None)
        gaps_n = gaps[idx]
        gaps_n[0] = 0.0
        trace_span = float(gaps_n.sum())
        if rate is not None:
            if trace_span <= 0:
                raise ChipswapError(
                    "the trace's timestamps are all equal; use --arrivals poisson with --rate"
                )
            time_scale = (n - 1) / rate / trace_span if n > 1 else 1.0
        scale = 1.0 if time_scale is None else float(time_scale)
        at = np.cumsum(gaps_n) * scale
    else:
        if rate is None:
            raise ChipswapError(
                "the trace has no timestamps to replay;"
                " pass --rate REQ_PER_S for Poisson arrivals at that rate"
            )
        arrivals = "poisson"
        rng = np.random.default_rng(seed)
        gaps_n = rng.exponential(1.0 / rate, size=n)
        gaps_n[0] = 0.0
        at = np.cumsum(gaps_n)
        scale = 1.0
    keep = at <= duration_s
    at = at[keep]
    idx = idx[keep]
    lengths = map_lengths(prompts, max_length, length_map)[idx]  # mapped over the whole trace: stable
    if outs is not None:
        out = np.clip(outs[idx], 1, MAX_OUTPUT_TOKENS)
    else:
        out = np.full(idx.size, 1, dtype=np.int64)
    return Schedule(
        at_s=at,
        prompt_tokens=np.clip(lengths, 1, MAX_PROMPT_TOKENS),
        output_tokens=out,
        time_scale=float(scale),
        arrivals=arrivals,
        length_map=length_map,
        max_length=max_length,
    )
