"""Length histograms: the bucket planner's input, built from lengths, (length, count) pairs or decode events.

Pure: numpy and the standard library only; no files, clock, printing or torch. Every allocation sized by input
is bounded first: a length above MAX_LENGTH tokens is one ChipswapError line, never a huge array.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from chipswap.errors import ChipswapError

# ------------------------------------------------------------------------------------------------------------
# Histogram
# ------------------------------------------------------------------------------------------------------------

# The longest request (prompt, output, or prompt + output) chipswap plans for: 2,097,152 tokens, 16x the 128k
# context of Llama 3.1. It bounds every allocation sized by a length (histograms, decode spans, the DP). A
# longer
# value in a trace is an error, never a terabyte-sized array.
MAX_LENGTH = 1 << 21


@dataclass(frozen=True)
class Histogram:
    """Distinct positive integer lengths (ascending) and how often each occurs (weights may be fractional)."""

    lengths: np.ndarray  # int64, strictly ascending, > 0
    counts: np.ndarray  # int64 or float64, >= 0, same shape

    @property
    def total(self) -> float:
        return float(self.counts.sum())

    @property
    def max_length(self) -> int:
        return int(self.lengths[-1]) if self.lengths.size else 0

    def quantile(self, q: float) -> int:
        """Smallest length L with share(length <= L) >= q."""
        cum = np.cumsum(self.counts, dtype=np.float64)
        idx = int(np.searchsorted(cum, q * cum[-1] - 1e-9 * cum[-1], side="left"))
        return int(self.lengths[min(idx, self.lengths.size - 1)])


def check_length_bound(value: int | float, what: str) -> None:
    """Raise unless 1 <= value <= MAX_LENGTH (one line naming `what`)."""
    if not (value <= MAX_LENGTH):
        raise ChipswapError(
            f"{what} = {value!r} exceeds chipswap's limit of {MAX_LENGTH:,} tokens per request; fix or drop "
            "that request (no model serves a context that long)"
        )


def _as_lengths(values: np.ndarray | Sequence[int], what: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ChipswapError(
            f"{what} must be a flat list of lengths, got shape {arr.shape}; pass one length each"
        )
    if arr.dtype == np.bool_:
        raise ChipswapError(f"{what} are booleans, not lengths; pass token counts (integers >= 1)")
    if arr.size and arr.dtype.kind not in "iuf":
        try:
            arr = np.asarray(arr, dtype=np.float64)  # Python ints beyond int64, Decimals, strings of digits
        except (TypeError, ValueError, OverflowError):
            raise ChipswapError(f"{what} hold non-numbers; lengths are positive integers") from None
    if arr.size and arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ChipswapError(
                f"{what}[{i}] = {arr[i]!r} is not a whole number; lengths are positive integers"
            )
    if arr.size:
        low = arr < 1
        if low.any():
            i = int(np.flatnonzero(low)[0])
            raise ChipswapError(f"{what}[{i}] = {arr[i]} is not positive; lengths are integers >= 1")
        i = int(np.argmax(arr))
        check_length_bound(arr[i].item(), f"{what}[{i}]")
    return arr.astype(np.int64)


def histogram_from_lengths(
    lengths: np.ndarray | Sequence[int], weights: np.ndarray | Sequence[float] | None = None
) -> Histogram:
    """Histogram of positive integer lengths, optionally weighted. Fast path: bincount (no sort)."""
    arr = _as_lengths(lengths, "lengths")
    if arr.size == 0:
        raise ChipswapError(
            "no lengths to plan for: the trace is empty; give a trace with at least one request"
        )
    w = None if weights is None else np.asarray(weights, dtype=np.float64)
    if w is not None and (w.shape != arr.shape or np.any(w < 0) or not np.all(np.isfinite(w))):
        raise ChipswapError("weights must be finite, >= 0 and one per length; fix the weights array")
    top = int(arr.max())  # <= MAX_LENGTH, so a dense count is at most 16 MiB
    if top <= max(4 * arr.size, 1 << 16):
        dense = np.bincount(arr, weights=w, minlength=top + 1)
        nz = np.flatnonzero(dense)
        counts = dense[nz]
        return Histogram(nz.astype(np.int64), counts if w is not None else counts.astype(np.int64))
    uniq, inv = np.unique(arr, return_inverse=True)
    counts = np.bincount(inv, weights=w)
    return Histogram(uniq.astype(np.int64), counts if w is not None else counts.astype(np.int64))


def histogram_from_pairs(lengths: Sequence[int], counts: Sequence[float]) -> Histogram:
    """Histogram from (length, count) pairs; lengths may repeat and be unsorted; zero counts are dropped."""
    arr = _as_lengths(np.asarray(lengths), "lengths")
    c = np.asarray(counts, dtype=np.float64)
    if c.shape != arr.shape:
        raise ChipswapError(f"{arr.size} lengths but {c.size} counts; give one count per length")
    if np.any(c < 0) or not np.all(np.isfinite(c)):
        raise ChipswapError("histogram counts must be finite and >= 0; fix the counts")
    keep = c > 0
    if not keep.any():
        raise ChipswapError("the histogram is empty (all counts are zero); give at least one request")
    uniq, inv = np.unique(arr[keep], return_inverse=True)
    summed = np.bincount(inv, weights=c[keep])
    if np.all(summed == np.round(summed)):
        return Histogram(uniq.astype(np.int64), summed.astype(np.int64))
    return Histogram(uniq.astype(np.int64), summed)


def decode_histogram(prompt_tokens: np.ndarray, output_tokens: np.ndarray) -> Histogram:
    """Histogram of the running total length seen by decode steps.

    A request with prompt p and g generated tokens runs g decode steps at total lengths p+1, p+2, ..., p+g;
    each
    step counts once (so long generations weigh in proportion to the decode work they cause). Built with a
    difference array in O(requests + max length); p + g is bounded by MAX_LENGTH before anything is allocated.
    """
    p = _as_lengths(prompt_tokens, "prompt_tokens")
    g = np.asarray(output_tokens)
    if g.shape != p.shape:
        raise ChipswapError(
            "prompt and output token arrays differ in length; give one output count per prompt"
        )
    if g.size and (g.dtype.kind not in "iu" or int(g.min()) < 0):
        bad = int(np.argmin(g)) if g.dtype.kind in "iuf" else 0
        raise ChipswapError(f"output_tokens[{bad}] is negative or not an integer; output counts are >= 0")
    if g.size:
        i = int(np.argmax(g))
        check_length_bound(int(g[i]), f"output_tokens[{i}]")
    g = g.astype(np.int64)
    keep = g > 0
    if not keep.any():
        raise ChipswapError("no decode steps: every request generates 0 tokens; use --mode encoder instead")
    p, g = p[keep], g[keep]
    total = p + g
    i = int(np.argmax(total))
    check_length_bound(int(total[i]), f"prompt + output tokens of request {i}")
    top = int(total[i])
    diff = np.bincount(p + 1, minlength=top + 2) - np.bincount(total + 1, minlength=top + 2)
    dense = np.cumsum(diff)[: top + 1]
    nz = np.flatnonzero(dense)
    return Histogram(nz.astype(np.int64), dense[nz].astype(np.int64))


def decode_histogram_from_events(
    prompt_lengths: np.ndarray,
    generating_counts: np.ndarray,
    end_lengths: np.ndarray,
    end_counts: np.ndarray,
) -> Histogram:
    """The decode histogram from aggregated counts instead of one row per request.

    prompt_lengths / generating_counts: how many requests that generate at least one token have each
    (effective)
    prompt length p; end_lengths / end_counts: how many of them end at each total length p + g. Each such
    request
    adds one decode step at every length p+1..p+g, so the histogram is the running sum of +count at p+1 and
    -count at p+g+1, expanded over the lengths where it is positive. Memory: the number of distinct lengths in
    the result (at most MAX_LENGTH), whatever the number of requests behind the counts. Equals
    decode_histogram() on the requests the counts came from.
    """
    starts = np.asarray(prompt_lengths, dtype=np.int64)
    ends = np.asarray(end_lengths, dtype=np.int64)
    sc = np.asarray(generating_counts, dtype=np.int64)
    ec = np.asarray(end_counts, dtype=np.int64)
    if starts.shape != sc.shape or ends.shape != ec.shape:
        raise ChipswapError("decode events need one count per length; fix the aggregated histogram")
    keep_s, keep_e = sc > 0, ec > 0
    starts, sc, ends, ec = starts[keep_s], sc[keep_s], ends[keep_e], ec[keep_e]
    if starts.size == 0:
        raise ChipswapError("no decode steps: every request generates 0 tokens; use --mode encoder instead")
    if int(sc.sum()) != int(ec.sum()) or (ends.size and int(ends.min()) < 2) or int(starts.min()) < 1:
        raise ChipswapError(
            "decode events do not balance (every generating request needs one start and one end); "
            "aggregate the trace again"
        )
    check_length_bound(int(ends.max()), "longest prompt + output")
    x = np.concatenate([starts + 1, ends + 1])
    d = np.concatenate([sc, -ec])
    order = np.argsort(x, kind="stable")
    x, d = x[order], d[order]
    first = np.flatnonzero(np.r_[True, x[1:] != x[:-1]])
    points = x[first]
    level = np.cumsum(np.add.reduceat(d, first))  # decode steps at each length in [points[i], points[i+1])
    if level[-1] != 0 or (level < 0).any():
        raise ChipswapError(
            "decode events do not balance (an end before its start); aggregate the trace again"
        )
    run_start, run_len, run_level = points[:-1], np.diff(points), level[:-1]
    live = run_level > 0
    run_start, run_len, run_level = run_start[live], run_len[live], run_level[live]
    offsets = np.concatenate([[0], np.cumsum(run_len)[:-1]])
    total = int(run_len.sum())  # <= MAX_LENGTH: the runs lie in [2, longest end]
    lengths = np.arange(total, dtype=np.int64) + np.repeat(run_start - offsets, run_len)
    return Histogram(lengths, np.repeat(run_level, run_len).astype(np.int64))


