"""Traffic for the simulator: validation (one-line errors), synthetic arrivals, scaling, repeating,
windows."""

from __future__ import annotations

import numpy as np
import pytest

from chipswap.errors import ChipswapError
from chipswap.simulation import simulate as S
from tests.sim_services import Constant


def _one_line(exc: pytest.ExceptionInfo[ChipswapError]) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and ";" in msg  # what is wrong; how to fix it
    return msg


@pytest.mark.parametrize(
    ("arrivals", "prompts", "outputs", "needle"),
    [
        ([], [], None, "empty"),
        ([0.0, float("nan")], [1, 2], None, "arrival time 1"),
        ([1.0, 0.5], [1, 2], None, "not sorted"),
        ([0.0, 1.0], [1, float("nan")], None, "prompt length of request 1"),
        ([0.0, 1.0], [1, -3], None, "prompt length of request 1"),
        ([0.0, 1.0], [1, 0], None, ">= 1"),
        ([0.0, 1.0], [1, 2.5], None, "whole numbers"),
        ([0.0, 1.0], [1, 2], [3, -1], "output length of request 1"),
        ([0.0, 1.0], [1, 2, 3], None, "3 prompt lengths for 2 arrivals"),
        ([0.0, 1.0], ["a", "b"], None, "must be numbers"),
    ],
)
def test_bad_traffic_is_one_line_error(arrivals, prompts, outputs, needle):
    with pytest.raises(ChipswapError) as exc:
        S.make_traffic(arrivals, prompts, outputs)
    assert needle in _one_line(exc)


def test_traffic_arrays_are_frozen_and_zero_outputs_allowed():
    t = S.make_traffic([0.0, 0.0, 2.0], [5, 6, 7], [0, 1, 2])
    assert len(t) == 3 and t.span_s == 2.0
    with pytest.raises(ValueError):
        t.arrivals_s[0] = 1.0
    assert len(t.between(0.0, 1.0)) == 2 and len(t.between(5.0, 6.0)) == 0


@pytest.mark.parametrize("scale", [0, -1.5, float("nan"), float("inf")])
def test_bad_scale_is_error(scale):
    t = S.make_traffic([0.0, 1.0], [1, 2])
    with pytest.raises(ChipswapError) as exc:
        S.scale_traffic(t, scale, np.random.default_rng(0))
    assert "traffic scale" in _one_line(exc)


def test_scale_multiplies_rate_keeps_span_and_burst_shape():
    rng = np.random.default_rng(1)
    # a burst of 200 requests in 10 s, then 100 requests over 990 s
    arrivals = np.sort(np.concatenate([rng.uniform(0, 10, 200), rng.uniform(10, 1000, 100)]))
    t = S.make_traffic(arrivals, rng.integers(1, 100, 300), rng.integers(1, 9, 300))
    for scale in (0.5, 1.0, 3.0, 10.0, 2.4):
        big = S.scale_traffic(t, scale, np.random.default_rng(2))
        assert len(big) == pytest.approx(300 * scale, rel=0.15)
        assert big.arrivals_s[0] >= t.arrivals_s[0] and big.arrivals_s[-1] <= t.arrivals_s[-1] + 10
        burst_share = np.mean(big.arrivals_s < 10.0)
        assert burst_share == pytest.approx(200 / 300, abs=0.08)
        assert set(np.unique(big.prompt_tokens)) <= set(np.unique(t.prompt_tokens))
    assert np.array_equal(S.scale_traffic(t, 1.0, rng).arrivals_s, t.arrivals_s)
    with pytest.raises(ChipswapError):
        S.scale_traffic(t, 1e-9, np.random.default_rng(0))  # keeps nothing


def test_repeat_traffic_tiles_to_duration():
    t = S.make_traffic([0.0, 1.0, 3.0], [1, 2, 3], [4, 5, 6])
    day = S.repeat_traffic(t, 12.0)
    # each copy starts one mean gap (1.5 s) after the previous copy's last request
    assert day.arrivals_s.tolist() == [0.0, 1.0, 3.0, 4.5, 5.5, 7.5, 9.0, 10.0]
    assert day.prompt_tokens.tolist() == [1, 2, 3, 1, 2, 3, 1, 2]
    with pytest.raises(ChipswapError):
        S.repeat_traffic(t, 0)


def test_poisson_and_bursty_generators():
    rng = np.random.default_rng(5)
    a = S.poisson_arrivals(10.0, rng, duration_s=1000.0)
    assert len(a) == pytest.approx(10_000, rel=0.05) and np.all(np.diff(a) >= 0) and a[-1] < 1000
    b = S.poisson_arrivals(10.0, rng, n=5000)
    assert len(b) == 5000 and np.mean(np.diff(b)) == pytest.approx(0.1, rel=0.05)
    bursty = S.bursty_arrivals(10.0, 20_000.0, rng, burst_factor=5.0, burst_share=0.2, mean_burst_s=20.0)
    assert len(bursty) == pytest.approx(200_000, rel=0.1)
    per_10s = np.histogram(bursty, bins=np.arange(0, 20_001, 10))[0]
    assert per_10s.var() / per_10s.mean() > 5  # overdispersed: a Poisson count would have ratio ~1
    with pytest.raises(ChipswapError):
        S.poisson_arrivals(0.0, rng, n=5)
    with pytest.raises(ChipswapError):
        S.poisson_arrivals(1.0, rng)
    with pytest.raises(ChipswapError):
        S.poisson_arrivals(1.0, 42, n=5)  # type: ignore[arg-type]
    with pytest.raises(ChipswapError):
        S.bursty_arrivals(1.0, 10.0, rng, burst_share=1.0)


def test_traffic_with_lengths_draws_pairs():
    rng = np.random.default_rng(0)
    src = S.make_traffic([0.0, 1.0], [10, 20], [1, 2])
    t = S.traffic_with_lengths(S.poisson_arrivals(1.0, rng, n=500), src, rng)
    assert set(zip(t.prompt_tokens.tolist(), t.output_tokens.tolist(), strict=True)) == {(10, 1), (20, 2)}


def test_busiest_window_by_requests_and_tokens():
    arrivals = [0.0, 1.0, 2.0, 50.0, 50.5, 51.0, 51.5, 100.0]
    prompts = [1000, 1000, 1000, 1, 1, 1, 1, 5000]
    t = S.make_traffic(arrivals, prompts, [0] * 8)
    w = S.busiest_window(t, 5.0, by="requests")
    assert (w.start_s, w.end_s, w.requests) == (50.0, 55.0, 4)
    w = S.busiest_window(t, 5.0)
    assert (w.start_s, w.requests, w.tokens) == (100.0, 1, 5000)
    w = S.busiest_window(t, 10_000.0)
    assert w.requests == 8 and w.rate_rps == pytest.approx(8 / 10_000)
    with pytest.raises(ChipswapError):
        S.busiest_window(t, 0.0)
    with pytest.raises(ChipswapError):
        S.busiest_window(t, 5.0, by="bytes")


def test_simulate_rejects_bad_arguments():
    t = S.make_traffic([0.0, 1.0], [1, 2], [1, 1])
    setup = S.ReplicaSetup(max_batch=2)
    for kwargs, needle in (
        ({"mode": "vision"}, "mode"),
        ({"dispatch": "random"}, "dispatch"),
        ({"measure": (10.0, 20.0)}, "no arrivals in the window"),
    ):
        with pytest.raises(ChipswapError) as exc:
            S.simulate(t, Constant(), setup, 1, **kwargs)
        assert needle in _one_line(exc)
    for replicas in (0, 1.5, True):
        with pytest.raises(ChipswapError):
            S.simulate(t, Constant(), setup, replicas)  # type: ignore[arg-type]
    with pytest.raises(ChipswapError) as exc:
        S.simulate(t, Constant(0.0), setup, 1)
    assert "positive" in _one_line(exc)
    with pytest.raises(ChipswapError) as exc:
        S.simulate(t, Constant(float("nan")), setup, 1)
    assert "service time" in _one_line(exc)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_batch": 0},
        {"max_batch": 4, "batch_sizes": (2,)},
        {"max_batch": 4, "prefill_buckets": (64, 32)},
        {"max_batch": 4, "decode_buckets": (0, 32)},
        {"max_batch": 4, "max_length": -1},
        {"max_batch": 4, "context_block": 0},
        {"max_batch": 4, "max_queue_delay_s": -0.1},
    ],
)
def test_bad_setup_is_error(kwargs):
    with pytest.raises(ChipswapError):
        S.ReplicaSetup(**kwargs)


def test_sizes_are_bounded_before_anything_is_allocated():
    t = S.make_traffic([0.0, 1.0], [1, 2])
    rng = np.random.default_rng(0)
    with pytest.raises(ChipswapError) as exc:
        S.scale_traffic(t, S.MAX_REQUESTS, rng)
    assert "smaller scale" in _one_line(exc)
    with pytest.raises(ChipswapError):
        S.repeat_traffic(t, 1e12)
    with pytest.raises(ChipswapError):
        S.poisson_arrivals(1e6, rng, duration_s=1e6)
    with pytest.raises(ChipswapError):
        S.poisson_arrivals(1.0, rng, n=S.MAX_REQUESTS + 1)
    with pytest.raises(ChipswapError):
        S.bursty_arrivals(1e6, 1e6, rng)
