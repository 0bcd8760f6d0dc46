"""Arrivals per window counted in the engine, and request rows for one window or a bounded sample."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chipswap.errors import ChipswapError
from chipswap.traffic import arrival_counts, bundled_trace_path, read_requests, read_trace


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """Two Parquet parts, out of time order, with a burst in the middle (the busiest window)."""
    rng = np.random.default_rng(9)
    t = np.sort(np.concatenate([rng.uniform(0, 600, 3000), rng.uniform(300, 302, 800)])) + 1_700_000_000.0
    p = rng.integers(1, 4000, t.size)
    g = rng.integers(0, 500, t.size)
    d = tmp_path_factory.mktemp("arrivals")
    order = rng.permutation(t.size)
    half = t.size // 2
    for i, idx in enumerate((order[:half], order[half:])):
        cols = {"ts": t[idx], "prompt_tokens": p[idx], "output_tokens": g[idx]}
        pq.write_table(pa.table(cols), d / f"part-{i}.parquet")
    return d, t - t.min(), p, g


def test_counts_per_window_match_numpy(trace):
    d, t, _, _ = trace
    counts = arrival_counts(d, window_s=1.0)
    expect = np.bincount(np.floor(t).astype(int))
    assert counts.counts.tolist() == expect.tolist()
    assert counts.requests == t.size and counts.duration_s == pytest.approx(t.max())
    assert counts.origin_s == pytest.approx(1_700_000_000.0 + 0.0, abs=1.0)
    start, end, n = counts.busiest(2)
    assert 299 <= start <= 301 and end == start + 2 and n == int(((t >= start) & (t < end)).sum())
    assert counts.mean_rps == pytest.approx((t.size - 1) / t.max())


def test_requests_of_the_busiest_window(trace):
    d, t, p, g = trace
    counts = arrival_counts(d, window_s=1.0)
    start, end, _ = counts.busiest(2)
    reqs = read_requests(d, window=(start, end), origin_s=counts.origin_s)
    inside = (t >= start) & (t < end)
    order = np.argsort(t[inside], kind="stable")
    assert reqs.arrival_s.tolist() == pytest.approx(t[inside][order].tolist())
    assert sorted(reqs.prompt_tokens.tolist()) == sorted(p[inside].tolist())
    assert sorted(reqs.output_tokens.tolist()) == sorted(g[inside].tolist())
    assert np.all(np.diff(reqs.arrival_s) >= 0) and reqs.sampled_from is None
    # without origin_s it finds the first arrival itself
    again = read_requests(d, window=(start, end))
    assert again.arrival_s.tolist() == reqs.arrival_s.tolist()


def test_bounded_sample_and_bounds(trace):
    d, t, _, _ = trace
    a = read_requests(d, sample=200, seed=4)
    b = read_requests(d, sample=200, seed=4)
    assert len(a) == 200 and a.sampled_from == t.size
    assert a.arrival_s.tolist() == b.arrival_s.tolist()  # repeatable for a seed
    assert set(np.round(a.arrival_s, 6)) <= set(np.round(t, 6))
    with pytest.raises(ChipswapError, match="holds more than 100 requests; use a shorter window or sample"):
        read_requests(d, max_rows=100)
    with pytest.raises(ChipswapError, match="exceeds the bound"):
        read_requests(d, sample=10, max_rows=5)
    with pytest.raises(ChipswapError, match="is 600 windows, more than 10; use a longer window"):
        arrival_counts(d, window_s=1.0, max_windows=10)
    with pytest.raises(ChipswapError, match="must be a number > 0"):
        arrival_counts(d, window_s=0)
    with pytest.raises(ChipswapError, match="end > start"):
        read_requests(d, window=(5, 5))


def test_bundled_trace_windows_and_bad_times(tmp_path):
    trace = read_trace(bundled_trace_path())
    counts = arrival_counts(bundled_trace_path(), window_s=10.0)
    assert counts.counts.sum() == len(trace)
    assert counts.counts.tolist() == np.bincount((trace.timestamps_s // 10).astype(int)).tolist()
    bad = tmp_path / "bad.csv"
    bad.write_text("ts,prompt_tokens\n1.0,5\nsoon,6\n")
    with pytest.raises(ChipswapError, match="row 2, column ts: 'soon' is not a timestamp"):
        arrival_counts(bad)
    no_time = tmp_path / "no_time.csv"
    no_time.write_text("prompt_tokens\n5\n")
    with pytest.raises(ChipswapError, match="no timestamp column found .* --time-col"):
        arrival_counts(no_time)
